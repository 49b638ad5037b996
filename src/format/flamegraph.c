// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "format/flamegraph.h"

#define KIND_ROOT (-1)
#define KIND_PROCESS (-2)

struct node {
	uint32_t parent;
	uint32_t name;		/* profile string id */
	uint32_t binary;	/* profile string id of the mapping path, 0 if none */
	int32_t kind;
	uint32_t depth;
	uint64_t total, self;
	uint32_t first_child, next_sibling;	/* UINT32_MAX: none */
};

struct tree {
	struct node *nodes;
	uint32_t n, cap;
	struct intern *index;	/* (parent, name, binary, kind) -> node */
};

static int64_t _child(struct tree *t, uint32_t parent, uint32_t name, uint32_t binary,
		      int32_t kind)
{
	struct { uint32_t parent, name, binary; int32_t kind; } key = { parent, name, binary, kind };
	bool added;
	int64_t id;

	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 1024;
		struct node *nn = realloc(t->nodes, (size_t)cap * sizeof(*nn));

		if (!nn)
			return -ENOMEM;
		t->nodes = nn;
		t->cap = cap;
	}
	id = intern__add(t->index, &key, sizeof(key), &added);
	if (id < 0 || !added)
		return id;
	t->nodes[id] = (struct node){
		.parent = parent, .name = name, .binary = binary, .kind = kind,
		.depth = parent == UINT32_MAX ? 0 : t->nodes[parent].depth + 1,
		.first_child = UINT32_MAX, .next_sibling = UINT32_MAX,
	};
	if (parent != UINT32_MAX) {
		t->nodes[id].next_sibling = t->nodes[parent].first_child;
		t->nodes[parent].first_child = id;
	}
	t->n++;
	return id;
}

static int _build(struct tree *t, const struct profile *p)
{
	int64_t root = _child(t, UINT32_MAX, 0, 0, KIND_ROOT);

	if (root < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		const uint32_t *frames;
		uint32_t nframes;
		int64_t cur;

		frames = profile__stack(p, s->stack, &nframes);
		t->nodes[root].total += s->count;
		cur = _child(t, root, s->comm, 0, KIND_PROCESS);
		if (cur < 0)
			return -ENOMEM;
		t->nodes[cur].total += s->count;
		for (uint32_t f = 0; f < nframes; f++) {
			const struct profile_frame *fr = &p->frames[frames[f]];
			uint32_t bin = fr->mapping == PROFILE_NO_MAPPING ? 0 :
				       p->mappings[fr->mapping].path;

			cur = _child(t, cur, fr->function, bin, fr->kind);
			if (cur < 0)
				return -ENOMEM;
			t->nodes[cur].total += s->count;
		}
		t->nodes[cur].self += s->count;
	}
	return 0;
}

static int _by_total_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/* The smallest total a node needs to be kept so that at most max nodes are. */
static uint64_t _threshold(const struct tree *t, size_t max)
{
	uint64_t *totals, th;
	size_t keep;

	if (t->n <= max)
		return 0;
	totals = malloc((size_t)t->n * sizeof(*totals));
	if (!totals)
		return UINT64_MAX;
	for (uint32_t i = 0; i < t->n; i++)
		totals[i] = t->nodes[i].total;
	qsort(totals, t->n, sizeof(*totals), _by_total_desc);
	/* Ties at the cut would overflow max: the cut moves above them. */
	keep = max;
	th = totals[keep - 1];
	if (totals[keep] == th)
		th++;
	free(totals);
	return th;
}

struct writer {
	const struct tree *t;
	struct strbuf names, binaries;
	struct intern *name_ids, *binary_ids;
	struct strbuf n, b, k, v, s, d;
	uint64_t threshold;
	uint64_t written, trimmed_nodes, trimmed_value;
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
	const struct node *nd = &w->t->nodes[id];
	const char *sep = w->written ? "," : "";
	const char *text = nd->kind == KIND_ROOT ? "all" : profile__string(w->p, nd->name);
	uint32_t name = _intern_out(w->name_ids, &w->names, text[0] ? text : "[unknown]");
	uint32_t bin = _intern_out(w->binary_ids, &w->binaries, profile__string(w->p, nd->binary));

	strbuf__printf(&w->n, "%s%u", sep, name);
	strbuf__printf(&w->b, "%s%u", sep, bin);
	strbuf__printf(&w->k, "%s%d", sep, nd->kind);
	strbuf__printf(&w->v, "%s%llu", sep, (unsigned long long)nd->total);
	strbuf__printf(&w->s, "%s%llu", sep, (unsigned long long)nd->self);
	strbuf__printf(&w->d, "%s%u", sep, nd->depth);
	w->written++;
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
		const struct node *nd = &w->t->nodes[id];
		uint32_t nkids = 0;

		_emit(w, id);
		/* Children heaviest first, pushed in reverse so they pop in order. */
		for (uint32_t c = nd->first_child; c != UINT32_MAX; c = w->t->nodes[c].next_sibling) {
			if (w->t->nodes[c].total < w->threshold) {
				w->trimmed_value += w->t->nodes[c].total;
				continue;
			}
			todo[ntodo + nkids++] = c;
		}
		/* Sort the pushed children by total ascending (so the heaviest pops first). */
		for (uint32_t i = 1; i < nkids; i++) {
			uint32_t x = todo[ntodo + i], j = i;

			while (j > 0 && w->t->nodes[todo[ntodo + j - 1]].total > w->t->nodes[x].total) {
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

int flamegraph__write_json(const struct profile *p, const char *unit, size_t max_nodes,
			   struct strbuf *out)
{
	struct tree t = { 0 };
	struct writer w = { .t = &t, .p = p };
	int err = -ENOMEM;

	if (max_nodes < 1)
		max_nodes = 1;
	t.index = intern__new();
	w.name_ids = intern__new();
	w.binary_ids = intern__new();
	if (!t.index || !w.name_ids || !w.binary_ids)
		goto out;
	err = _build(&t, p);
	if (err)
		goto out;
	w.threshold = _threshold(&t, max_nodes);
	if (w.threshold == UINT64_MAX && t.n > max_nodes) {
		err = -ENOMEM;
		goto out;
	}
	err = _walk(&w);
	if (err)
		goto out;
	w.trimmed_nodes = t.n - w.written;

	strbuf__printf(out, "{\"version\":1,\"unit\":");
	strbuf__json_string(out, unit);
	strbuf__printf(out, ",\"total\":%llu,\"names\":[%s],\"binaries\":[%s],\"nodes\":{",
		       (unsigned long long)t.nodes[0].total, w.names.buf ? w.names.buf : "",
		       w.binaries.buf ? w.binaries.buf : "");
	strbuf__printf(out, "\"n\":[%s],\"b\":[%s],\"k\":[%s],\"v\":[%s],\"s\":[%s],\"d\":[%s]},",
		       w.n.buf, w.b.buf, w.k.buf, w.v.buf, w.s.buf, w.d.buf);
	strbuf__printf(out, "\"trimmed\":{\"nodes\":%llu,\"value\":%llu}}",
		       (unsigned long long)w.trimmed_nodes, (unsigned long long)w.trimmed_value);
	err = out->oom || w.names.oom || w.binaries.oom || w.n.oom || w.v.oom ? -ENOMEM : 0;
out:
	free(t.nodes);
	intern__free(t.index);
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
