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
};

/* Appends a node under parent (UINT32_MAX: the root). Returns its id or -ENOMEM. */
static int64_t _add(struct tree *t, uint32_t parent, uint32_t name, uint32_t binary,
		    int32_t kind, uint32_t depth, uint64_t total)
{
	uint32_t id = t->n;

	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 1024;
		struct node *nn = realloc(t->nodes, (size_t)cap * sizeof(*nn));

		if (!nn)
			return -ENOMEM;
		t->nodes = nn;
		t->cap = cap;
	}
	t->nodes[id] = (struct node){
		.parent = parent, .name = name, .binary = binary, .kind = kind, .depth = depth,
		.total = total, .first_child = UINT32_MAX, .next_sibling = UINT32_MAX,
	};
	if (parent != UINT32_MAX) {
		t->nodes[id].next_sibling = t->nodes[parent].first_child;
		t->nodes[parent].first_child = id;
	}
	t->n++;
	return id;
}

/*
 * The tree is not built whole. A 50k-stack profile of deep stacks merges
 * into about a million nodes, most of them cut again by max_nodes; hashing
 * each into a table to find it was most of a query's time. Instead the
 * samples are sorted by process and then by their frames' merge keys, so
 * that every node of the merged tree is one run of consecutive samples
 * sharing a prefix: a first sweep sums each node's total (a number per
 * node, in the order nodes open), the cut follows from those totals, and a
 * second sweep, opening nodes in the same order, makes only those kept.
 *
 * Level 0 of a sample is its process, level l its frame l - 1.
 */
struct item {
	uint32_t comm;
	uint32_t n;			/* frames */
	const uint32_t *frames;		/* profile frame ids, root first */
	uint64_t count;
};

struct sweep {
	const struct profile *p;
	uint32_t *fkey;			/* per frame id: its (function, binary, kind) */
	struct item *items;
	uint32_t nitems, levels;	/* most levels of a sample */
	uint64_t *totals;		/* per node but the root, in opening order */
	uint64_t ntotals, root;
	uint64_t *open_total;		/* per level: the open node's sum so far */
	uint64_t *open_idx;		/* per level: its opening index */
	uint32_t *open_keep;		/* per level: its kept node, or UINT32_MAX */
};

static uint32_t _frame_binary(const struct profile *p, uint32_t frame)
{
	const struct profile_frame *fr = &p->frames[frame];

	return fr->mapping == PROFILE_NO_MAPPING ? 0 : p->mappings[fr->mapping].path;
}

static inline uint32_t _level_key(const struct sweep *w, const struct item *it, uint32_t l)
{
	return l ? w->fkey[it->frames[l - 1]] : it->comm;
}

static int _by_path(const void *a, const void *b, void *arg)
{
	const struct item *x = a, *y = b;
	const struct sweep *w = arg;
	uint32_t n = x->n < y->n ? x->n : y->n;

	if (x->comm != y->comm)
		return x->comm < y->comm ? -1 : 1;
	for (uint32_t l = 1; l <= n; l++) {
		uint32_t kx = _level_key(w, x, l), ky = _level_key(w, y, l);

		if (kx != ky)
			return kx < ky ? -1 : 1;
	}
	return x->n < y->n ? -1 : x->n > y->n;
}

/* Levels the sample shares with the one before it. */
static uint32_t _common(const struct sweep *w, const struct item *prev, const struct item *it)
{
	uint32_t n, l;

	if (!prev || prev->comm != it->comm)
		return 0;
	n = prev->n < it->n ? prev->n : it->n;
	for (l = 1; l <= n && _level_key(w, prev, l) == _level_key(w, it, l); l++)
		;
	return l;
}

static int _sweep_prepare(struct sweep *w, const struct profile *p)
{
	struct intern *keys = intern__new();
	int err = -ENOMEM;

	w->p = p;
	w->fkey = malloc(((size_t)p->nframes + 1) * sizeof(*w->fkey));
	w->items = malloc(((size_t)p->nsamples + 1) * sizeof(*w->items));
	if (!keys || !w->fkey || !w->items)
		goto out;
	for (uint32_t f = 0; f < p->nframes; f++) {
		struct { uint32_t name, binary; int32_t kind; } key = {
			p->frames[f].function, _frame_binary(p, f), (int32_t)p->frames[f].kind,
		};
		bool added;
		int64_t id = intern__add(keys, &key, sizeof(key), &added);

		if (id < 0)
			goto out;
		w->fkey[f] = (uint32_t)id;
	}
	for (uint32_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		struct item *it = &w->items[w->nitems++];

		it->frames = profile__stack(p, s->stack, &it->n);
		it->comm = s->comm;
		it->count = s->count;
		if (it->n + 1 > w->levels)
			w->levels = it->n + 1;
	}
	qsort_r(w->items, w->nitems, sizeof(*w->items), _by_path, w);
	w->open_total = calloc((size_t)w->levels + 1, sizeof(*w->open_total));
	w->open_idx = calloc((size_t)w->levels + 1, sizeof(*w->open_idx));
	w->open_keep = calloc((size_t)w->levels + 1, sizeof(*w->open_keep));
	err = w->open_total && w->open_idx && w->open_keep ? 0 : -ENOMEM;
out:
	intern__free(keys);
	return err;
}

static void _sweep_release(struct sweep *w)
{
	free(w->fkey);
	free(w->items);
	free(w->totals);
	free(w->open_total);
	free(w->open_idx);
	free(w->open_keep);
}

/* First sweep: every node's total, in the order nodes open. */
static int _sweep_totals(struct sweep *w)
{
	uint64_t cap = 0;
	uint32_t open = 0;

	for (uint32_t i = 0; i < w->nitems; i++) {
		const struct item *it = &w->items[i];
		uint32_t len = it->n + 1, l = _common(w, i ? &w->items[i - 1] : NULL, it);

		while (open > l) {
			open--;
			w->totals[w->open_idx[open]] = w->open_total[open];
		}
		for (; open < len; open++) {
			if (w->ntotals == cap) {
				uint64_t *t;

				cap = cap ? cap * 2 : 4096;
				t = realloc(w->totals, cap * sizeof(*t));
				if (!t)
					return -ENOMEM;
				w->totals = t;
			}
			w->open_idx[open] = w->ntotals++;
			w->open_total[open] = 0;
		}
		for (l = 0; l < len; l++)
			w->open_total[l] += it->count;
		w->root += it->count;
	}
	while (open > 0) {
		open--;
		w->totals[w->open_idx[open]] = w->open_total[open];
	}
	return 0;
}

/* The k-th largest of a[0..n) (k from 0), reordering a: quickselect. */
static uint64_t _kth_largest(uint64_t *a, int64_t n, int64_t k)
{
	int64_t lo = 0, hi = n - 1;

	while (lo < hi) {
		uint64_t pivot = a[lo + (hi - lo) / 2], t;
		int64_t i = lo, j = hi;

		while (i <= j) {
			while (a[i] > pivot)
				i++;
			while (a[j] < pivot)
				j--;
			if (i <= j) {
				t = a[i];
				a[i++] = a[j];
				a[j--] = t;
			}
		}
		/* a[lo..j] >= pivot >= a[i..hi], and what lies between is the pivot. */
		if (k <= j)
			hi = j;
		else if (k >= i)
			lo = i;
		else
			return a[k];
	}
	return a[k];
}

/*
 * The smallest total a node needs to be kept so that at most max nodes are
 * (the root counts as one). Ties at the cut would overflow max: the cut
 * moves above them.
 */
static int _threshold(const struct sweep *w, size_t max, uint64_t *th)
{
	uint64_t n = w->ntotals + 1, *a, v, above = 0;

	*th = 0;
	if (n <= max)
		return 0;
	a = malloc(n * sizeof(*a));
	if (!a)
		return -ENOMEM;
	memcpy(a, w->totals, w->ntotals * sizeof(*a));
	a[w->ntotals] = w->root;
	v = _kth_largest(a, (int64_t)n, (int64_t)max - 1);
	for (uint64_t i = 0; i < n; i++)
		above += a[i] >= v;
	*th = above > max ? v + 1 : v;
	free(a);
	return 0;
}

/* Second sweep: the nodes at or above th, and what the cut left out. */
static int _sweep_build(struct sweep *w, struct tree *t, uint64_t th, uint64_t *trimmed_value)
{
	uint64_t next = 0;
	uint32_t open = 0;

	if (_add(t, UINT32_MAX, 0, 0, KIND_ROOT, 0, w->root) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < w->nitems; i++) {
		const struct item *it = &w->items[i];
		uint32_t len = it->n + 1, l = _common(w, i ? &w->items[i - 1] : NULL, it);
		uint32_t deepest;

		if (open > l)
			open = l;
		for (; open < len; open++) {
			uint32_t parent = open ? w->open_keep[open - 1] : 0;
			uint64_t total = w->totals[next++];
			int64_t id;

			w->open_keep[open] = UINT32_MAX;
			if (parent == UINT32_MAX)
				continue;
			if (total < th) {
				*trimmed_value += total;
				continue;
			}
			if (open) {
				uint32_t f = it->frames[open - 1];

				id = _add(t, parent, w->p->frames[f].function, _frame_binary(w->p, f),
					  (int32_t)w->p->frames[f].kind, open + 1, total);
			} else {
				id = _add(t, parent, it->comm, 0, KIND_PROCESS, 1, total);
			}
			if (id < 0)
				return -ENOMEM;
			w->open_keep[open] = (uint32_t)id;
		}
		deepest = w->open_keep[len - 1];
		if (deepest != UINT32_MAX)
			t->nodes[deepest].self += it->count;
	}
	return 0;
}

struct writer {
	const struct tree *t;
	struct strbuf names, binaries;
	struct intern *name_ids, *binary_ids;
	struct strbuf n, b, k, v, s, d;
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
		for (uint32_t c = nd->first_child; c != UINT32_MAX; c = w->t->nodes[c].next_sibling)
			todo[ntodo + nkids++] = c;
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
	struct sweep sw = { 0 };
	uint64_t th;
	int err = -ENOMEM;

	if (max_nodes < 1)
		max_nodes = 1;
	w.name_ids = intern__new();
	w.binary_ids = intern__new();
	if (!w.name_ids || !w.binary_ids)
		goto out;
	err = _sweep_prepare(&sw, p);
	if (!err)
		err = _sweep_totals(&sw);
	if (!err)
		err = _threshold(&sw, max_nodes, &th);
	if (!err)
		err = _sweep_build(&sw, &t, th, &w.trimmed_value);
	if (!err)
		err = _walk(&w);
	if (err)
		goto out;
	w.trimmed_nodes = sw.ntotals + 1 - w.written;

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
	_sweep_release(&sw);
	free(t.nodes);
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
