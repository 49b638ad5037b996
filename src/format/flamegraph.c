// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/flametree.h"
#include "common/intern.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "format/flamegraph.h"

#define KIND_ROOT (-1)
#define KIND_PROCESS (-2)

static uint32_t _frame_binary(const struct profile *p, uint32_t frame)
{
	const struct profile_frame *fr = &p->frames[frame];

	return fr->mapping == PROFILE_NO_MAPPING ? 0 : p->mappings[fr->mapping].path;
}

struct writer {
	const struct flametree *t;
	struct strbuf names, binaries;
	struct intern *name_ids, *binary_ids;
	struct strbuf n, b, k, v, s, d;
	uint64_t written;
	const struct profile *p;
};

static uint32_t _intern_out(struct intern *ids, struct strbuf *list, const char *text)
{
	bool added;
	int64_t id = intern__add(ids, text, strlen(text), &added);

	if (id < 0)
		return 0;
	if (added) {
		if (id)
			strbuf__putc(list, ',');
		strbuf__json_string(list, text);
	}
	return id;
}

static void _emit(struct writer *w, uint32_t id)
{
	const struct flametree_node *nd = &w->t->nodes[id];
	const struct profile_frame *fr = nd->depth > 1 ? &w->p->frames[nd->ref] : NULL;
	const char *sep = w->written ? "," : "";
	const char *text = !nd->depth ? "all" :
			   profile__string(w->p, fr ? fr->function : nd->ref);
	int32_t kind = !nd->depth ? KIND_ROOT : fr ? (int32_t)fr->kind : KIND_PROCESS;
	uint32_t name = _intern_out(w->name_ids, &w->names, text[0] ? text : "[unknown]");
	uint32_t bin = _intern_out(w->binary_ids, &w->binaries,
				   profile__string(w->p, fr ? _frame_binary(w->p, nd->ref) : 0));

	strbuf__printf(&w->n, "%s%u", sep, name);
	strbuf__printf(&w->b, "%s%u", sep, bin);
	strbuf__printf(&w->k, "%s%d", sep, kind);
	strbuf__printf(&w->v, "%s%llu", sep, (unsigned long long)nd->total);
	strbuf__printf(&w->s, "%s%llu", sep, (unsigned long long)nd->self);
	strbuf__printf(&w->d, "%s%u", sep, nd->depth);
	w->written++;
}

static const char *_text(const struct writer *w, const struct flametree_node *nd)
{
	return profile__string(w->p, nd->depth > 1 ? w->p->frames[nd->ref].function : nd->ref);
}

/*
 * Whether sibling a is written before sibling b: heavier first, and among
 * equal totals by name, so that the order does not depend on the ids a
 * store happened to give (two stores answer the same text).
 */
static bool _pops_first(const struct writer *w, uint32_t a, uint32_t b)
{
	const struct flametree_node *x = &w->t->nodes[a], *y = &w->t->nodes[b];

	if (x->total != y->total)
		return x->total > y->total;
	return strcmp(_text(w, x), _text(w, y)) < 0;
}

/* Preorder without recursion: stacks can be deeper than a C stack likes. */
static int _walk(struct writer *w)
{
	uint32_t *todo, ntodo = 0;

	todo = malloc(((size_t)w->t->n + 1) * sizeof(*todo));
	if (!todo)
		return -ENOMEM;
	todo[ntodo++] = 0;
	while (ntodo) {
		uint32_t id = todo[--ntodo];
		const struct flametree_node *nd = &w->t->nodes[id];
		uint32_t nkids = 0;

		_emit(w, id);
		/* Children heaviest first, pushed in reverse so they pop in order. */
		for (uint32_t c = nd->first_child; c != FLAMETREE_NONE; c = w->t->nodes[c].next_sibling)
			todo[ntodo + nkids++] = c;
		/* Sort the pushed children by total ascending (so the heaviest pops first). */
		for (uint32_t i = 1; i < nkids; i++) {
			uint32_t x = todo[ntodo + i], j = i;

			while (j > 0 && _pops_first(w, todo[ntodo + j - 1], x)) {
				todo[ntodo + j] = todo[ntodo + j - 1];
				j--;
			}
			todo[ntodo + j] = x;
		}
		ntodo += nkids;
	}
	free(todo);
	return 0;
}

int flamegraph__write_tree_json(const struct profile *p, const struct flametree *t,
				const char *unit, struct strbuf *out)
{
	struct writer w = { .t = t, .p = p };
	int err = -ENOMEM;

	if (!t->n)
		return -EINVAL;
	w.name_ids = intern__new();
	w.binary_ids = intern__new();
	if (!w.name_ids || !w.binary_ids)
		goto out;
	err = _walk(&w);
	if (err)
		goto out;
	strbuf__printf(out, "{\"version\":1,\"unit\":");
	strbuf__json_string(out, unit);
	strbuf__printf(out, ",\"total\":%llu,\"names\":[%s],\"binaries\":[%s],\"nodes\":{",
		       (unsigned long long)t->nodes[0].total, w.names.buf ? w.names.buf : "",
		       w.binaries.buf ? w.binaries.buf : "");
	strbuf__printf(out, "\"n\":[%s],\"b\":[%s],\"k\":[%s],\"v\":[%s],\"s\":[%s],\"d\":[%s]},",
		       w.n.buf, w.b.buf, w.k.buf, w.v.buf, w.s.buf, w.d.buf);
	strbuf__printf(out, "\"trimmed\":{\"nodes\":%llu,\"value\":%llu}}",
		       (unsigned long long)(t->nodes_all - w.written),
		       (unsigned long long)t->trimmed_value);
	err = out->oom || w.names.oom || w.binaries.oom || w.n.oom || w.v.oom ? -ENOMEM : 0;
out:
	intern__free(w.name_ids);
	intern__free(w.binary_ids);
	strbuf__release(&w.names);
	strbuf__release(&w.binaries);
	strbuf__release(&w.n);
	strbuf__release(&w.b);
	strbuf__release(&w.k);
	strbuf__release(&w.v);
	strbuf__release(&w.s);
	strbuf__release(&w.d);
	return err;
}

int flamegraph__write_json(const struct profile *p, const char *unit, size_t max_nodes,
			   struct strbuf *out)
{
	struct flametree t = { 0 };
	int err = flametree__build_profile(&t, p, max_nodes);

	if (!err)
		err = flamegraph__write_tree_json(p, &t, unit, out);
	flametree__release(&t);
	return err;
}
