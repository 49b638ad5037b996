// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "flametree.h"
#include "intern.h"
#include "profile.h"

/*
 * The tree is not built whole. A profile of many distinct deep stacks
 * merges into far more nodes than max_nodes keeps; hashing each into a
 * table to find it was most of a query's time. Instead the
 * paths are sorted by process and then by their frames' merge keys, so
 * that every node of the merged tree is one run of consecutive paths
 * sharing a prefix: a first sweep sums each node's total (a number per
 * node, in the order nodes open), the cut follows from those totals, and a
 * second sweep, opening nodes in the same order, makes only those kept.
 *
 * Level 0 of a path is its process, level l its frame l - 1 (one less
 * than the node's depth: the root is not a level).
 */
struct sweep {
	struct flametree_path *paths;
	const uint32_t *common;		/* per path: levels shared with the one before */
	uint32_t npaths, levels;	/* most levels of a path */
	uint64_t *totals;		/* per node but the root, in opening order */
	uint64_t ntotals, root;
	uint64_t *open_total;		/* per level: the open node's sum so far */
	uint64_t *open_idx;		/* per level: its opening index */
	uint32_t *open_keep;		/* per level: its kept node, or FLAMETREE_NONE */
};

/*
 * A path as it is sorted: its merge keys copied out, level by level, so
 * that comparisons read one array instead of looking every frame up.
 */
struct spath {
	const uint32_t *keys;		/* frame levels' keys, root first */
	uint32_t comm, n, idx;
};

static int _by_path(const void *a, const void *b)
{
	const struct spath *x = a, *y = b;
	uint32_t n = x->n < y->n ? x->n : y->n;

	if (x->comm != y->comm)
		return x->comm < y->comm ? -1 : 1;
	for (uint32_t l = 0; l < n; l++)
		if (x->keys[l] != y->keys[l])
			return x->keys[l] < y->keys[l] ? -1 : 1;
	return x->n < y->n ? -1 : x->n > y->n;
}

/* Levels the path shares with the one before it. */
static uint32_t _common(const struct spath *prev, const struct spath *it)
{
	uint32_t n, l;

	if (!prev || prev->comm != it->comm)
		return 0;
	n = prev->n < it->n ? prev->n : it->n;
	for (l = 0; l < n && prev->keys[l] == it->keys[l]; l++)
		;
	return l + 1;
}

/* First sweep: every node's total, in the order nodes open. */
static int _sweep_totals(struct sweep *w)
{
	uint64_t cap = 0;
	uint32_t open = 0;

	for (uint32_t i = 0; i < w->npaths; i++) {
		const struct flametree_path *it = &w->paths[i];
		uint32_t len = it->n + 1, l = w->common[i];

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

/* Appends a node under parent (FLAMETREE_NONE: the root). Returns its id or -ENOMEM. */
static int64_t _add(struct flametree *t, uint32_t parent, uint32_t ref, uint32_t depth,
		    uint64_t total)
{
	uint32_t id = t->n;

	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 1024;
		struct flametree_node *nn = realloc(t->nodes, (size_t)cap * sizeof(*nn));

		if (!nn)
			return -ENOMEM;
		t->nodes = nn;
		t->cap = cap;
	}
	t->nodes[id] = (struct flametree_node){
		.parent = parent, .ref = ref, .depth = depth, .total = total,
		.first_child = FLAMETREE_NONE, .next_sibling = FLAMETREE_NONE,
	};
	if (parent != FLAMETREE_NONE) {
		t->nodes[id].next_sibling = t->nodes[parent].first_child;
		t->nodes[parent].first_child = id;
	}
	t->n++;
	return id;
}

/* Second sweep: the nodes at or above th, and what the cut left out. */
static int _sweep_build(struct sweep *w, struct flametree *t, uint64_t th)
{
	uint64_t next = 0;
	uint32_t open = 0;

	if (_add(t, FLAMETREE_NONE, 0, 0, w->root) < 0)
		return -ENOMEM;
	for (uint32_t i = 0; i < w->npaths; i++) {
		const struct flametree_path *it = &w->paths[i];
		uint32_t len = it->n + 1, l = w->common[i];
		uint32_t deepest;

		if (open > l)
			open = l;
		for (; open < len; open++) {
			uint32_t parent = open ? w->open_keep[open - 1] : 0;
			uint64_t total = w->totals[next++];
			int64_t id;

			w->open_keep[open] = FLAMETREE_NONE;
			if (parent == FLAMETREE_NONE)
				continue;
			if (total < th) {
				t->trimmed_value += total;
				continue;
			}
			id = _add(t, parent, open ? it->frames[open - 1] : it->comm, open + 1, total);
			if (id < 0)
				return -ENOMEM;
			w->open_keep[open] = (uint32_t)id;
		}
		deepest = w->open_keep[len - 1];
		if (deepest != FLAMETREE_NONE)
			t->nodes[deepest].self += it->count;
	}
	return 0;
}

/*
 * Sorts paths by process and then by their frames' keys (see the top),
 * and notes in common[i] how many levels path i shares with path i - 1.
 */
static int _sort(struct flametree_path *paths, uint32_t npaths, const uint32_t *fkey,
		 uint32_t *common)
{
	struct spath *sp = malloc(((size_t)npaths + 1) * sizeof(*sp));
	struct flametree_path *copy = malloc(((size_t)npaths + 1) * sizeof(*copy));
	uint32_t *keys = NULL, *k;
	size_t nkeys = 0;
	int err = -ENOMEM;

	for (uint32_t i = 0; i < npaths; i++)
		nkeys += paths[i].n;
	keys = malloc((nkeys + 1) * sizeof(*keys));
	if (!sp || !copy || !keys)
		goto out;
	k = keys;
	for (uint32_t i = 0; i < npaths; i++) {
		const uint32_t *f = paths[i].frames;

		sp[i] = (struct spath){ .keys = k, .comm = paths[i].comm, .n = paths[i].n, .idx = i };
		for (uint32_t l = 0; l < paths[i].n; l++)
			*k++ = fkey[f[l]];
	}
	qsort(sp, npaths, sizeof(*sp), _by_path);
	memcpy(copy, paths, (size_t)npaths * sizeof(*copy));
	for (uint32_t i = 0; i < npaths; i++) {
		paths[i] = copy[sp[i].idx];
		common[i] = _common(i ? &sp[i - 1] : NULL, &sp[i]);
	}
	err = 0;
out:
	free(sp);
	free(copy);
	free(keys);
	return err;
}

int flametree__build(struct flametree *t, struct flametree_path *paths, uint32_t npaths,
		     const uint32_t *fkey, size_t max_nodes)
{
	struct sweep w = { .paths = paths, .npaths = npaths };
	uint32_t *common = malloc(((size_t)npaths + 1) * sizeof(*common));
	uint64_t th;
	int err = -ENOMEM;

	memset(t, 0, sizeof(*t));
	if (max_nodes < 1)
		max_nodes = 1;
	if (!common)
		goto out;
	for (uint32_t i = 0; i < npaths; i++)
		if (paths[i].n + 1 > w.levels)
			w.levels = paths[i].n + 1;
	err = _sort(paths, npaths, fkey, common);
	if (err)
		goto out;
	err = -ENOMEM;
	w.common = common;
	w.open_total = calloc((size_t)w.levels + 1, sizeof(*w.open_total));
	w.open_idx = calloc((size_t)w.levels + 1, sizeof(*w.open_idx));
	w.open_keep = calloc((size_t)w.levels + 1, sizeof(*w.open_keep));
	if (!w.open_total || !w.open_idx || !w.open_keep)
		goto out;
	err = _sweep_totals(&w);
	if (!err)
		err = _threshold(&w, max_nodes, &th);
	if (!err)
		err = _sweep_build(&w, t, th);
	t->nodes_all = w.ntotals + 1;
out:
	if (err)
		flametree__release(t);
	free(common);
	free(w.totals);
	free(w.open_total);
	free(w.open_idx);
	free(w.open_keep);
	return err;
}

void flametree__release(struct flametree *t)
{
	free(t->nodes);
	memset(t, 0, sizeof(*t));
}

static uint32_t _frame_binary(const struct profile *p, uint32_t frame)
{
	const struct profile_frame *fr = &p->frames[frame];

	return fr->mapping == PROFILE_NO_MAPPING ? 0 : p->mappings[fr->mapping].path;
}

/* fkey: per frame id, the id of its (function, binary, kind). */
int flametree__build_profile(struct flametree *t, const struct profile *p, size_t max_nodes)
{
	struct intern *keys = intern__new();
	struct flametree_path *paths;
	uint32_t *fkey;
	int err = -ENOMEM;

	memset(t, 0, sizeof(*t));
	fkey = malloc(((size_t)p->nframes + 1) * sizeof(*fkey));
	paths = malloc(((size_t)p->nsamples + 1) * sizeof(*paths));
	if (!keys || !fkey || !paths)
		goto out;
	for (uint32_t f = 0; f < p->nframes; f++) {
		struct { uint32_t name, binary; int32_t kind; } key = {
			p->frames[f].function, _frame_binary(p, f), (int32_t)p->frames[f].kind,
		};
		int64_t id = intern__add(keys, &key, sizeof(key), NULL);

		if (id < 0)
			goto out;
		fkey[f] = (uint32_t)id;
	}
	for (uint32_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];

		paths[i].frames = profile__stack(p, s->stack, &paths[i].n);
		paths[i].comm = s->comm;
		paths[i].count = s->count;
	}
	err = flametree__build(t, paths, p->nsamples, fkey, max_nodes);
out:
	intern__free(keys);
	free(fkey);
	free(paths);
	return err;
}
