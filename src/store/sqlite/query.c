// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend: the summing queries, store__profile() and store__series(),
 * and the label names and values of the series with samples in a window.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/flametree.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "sqlite_int.h"

/* ---- store__profile -------------------------------------------------------- */

/* What a profile query sums by besides the stack: comm, and for CPU the period. */
struct ptag {
	uint32_t comm, pad;
	uint64_t period_ns;
};

static int _tag_comm(struct query *q, struct qseries *s)
{
	int64_t id = profile__intern_string(q->out, s->info->comm);
	struct ptag t = { 0 };

	if (id < 0)
		return (int)id;
	t.comm = (uint32_t)id;
	if (q->type == SAMPLE_CPU)
		t.period_ns = s->info->period_ns ? s->info->period_ns : q->fallback_period;
	if (!q->ptags && !(q->ptags = intern__new()))
		return -ENOMEM;
	id = intern__add(q->ptags, &t, sizeof(t), NULL);
	if (id < 0)
		return (int)id;
	s->tag = (uint32_t)id;
	return 0;
}

static const struct ptag *_ptag(const struct query *q, uint32_t tag)
{
	size_t len;

	return intern__key(q->ptags, tag, &len);
}

static int _agg_add(struct query *q, uint64_t key, int64_t v)
{
	uint64_t *slot = u64map__upsert(&q->agg, key, NULL);

	if (!slot)
		return -ENOMEM;
	*slot += (uint64_t)v;
	return 0;
}

/*
 * A profile sums by (stack, tag). A day's window adds a rollup entry per
 * stack, series and hour, and one hash table over every (stack, tag) took
 * a cache miss for each. While they fit sqlite__profile_dense_bytes, each tag gets an array
 * indexed by stack id instead: the entries of one rollup row, all of one
 * series and so of one tag, then land in one tag's array. A window with
 * more tags than fit falls back to the table (the arrays are moved in).
 */
size_t sqlite__profile_dense_bytes = 64u << 20;

/* Moves the arrays into q->agg and stops using them. */
static int _dense_spill(struct query *q)
{
	int err = 0;

	for (uint32_t t = 0; t < q->ndense; t++) {
		for (uint32_t k = 0; !err && q->dense[t] && k < q->dense_stacks; k++) {
			uint64_t *slot;

			if (!q->dense[t][k])
				continue;
			slot = u64map__upsert(&q->agg, (uint64_t)k << 32 | t, NULL);
			if (!slot)
				err = -ENOMEM;
			else
				*slot += q->dense[t][k];
		}
		free(q->dense[t]);
	}
	free(q->dense);
	q->dense = NULL;
	q->ndense = 0;
	q->use_dense = false;
	return err;
}

/* Makes tag's array, or spills when it would not fit. */
static int _dense_tag(struct query *q, uint32_t tag)
{
	size_t bytes = (size_t)q->dense_stacks * sizeof(**q->dense);

	if (tag >= q->ndense) {
		uint32_t n = tag + 1 > q->ndense * 2 ? tag + 1 : q->ndense * 2;
		uint64_t **d;

		if ((uint64_t)n * bytes > sqlite__profile_dense_bytes)
			n = tag + 1;
		if ((uint64_t)n * bytes > sqlite__profile_dense_bytes)
			return _dense_spill(q);
		d = realloc(q->dense, n * sizeof(*d));
		if (!d)
			return -ENOMEM;
		memset(d + q->ndense, 0, (n - q->ndense) * sizeof(*d));
		q->dense = d;
		q->ndense = n;
	}
	if ((uint64_t)(tag + 1) * bytes > sqlite__profile_dense_bytes)
		return _dense_spill(q);
	q->dense[tag] = calloc(q->dense_stacks, sizeof(**q->dense));
	return q->dense[tag] ? 0 : -ENOMEM;
}

static int _profile_add(struct query *q, uint32_t stack, uint32_t tag, int64_t v)
{
	if (q->use_dense) {
		int err;

		/* The window was read in one transaction: no stack is newer than the largest. */
		if (stack >= q->dense_stacks) {
			pr_warn("store: sqlite: stack %u is beyond the table's largest\n", stack);
			return -EIO;
		}
		if (tag >= q->ndense || !q->dense[tag]) {
			err = _dense_tag(q, tag);
			if (err)
				return err;
		}
		if (q->use_dense) {
			q->dense[tag][stack] += (uint64_t)v;
			return 0;
		}
	}
	return _agg_add(q, (uint64_t)stack << 32 | tag, v);
}

static int _profile_rollup(struct query *q, struct qseries *s, int64_t bucket,
			   const struct rollup_entry *e, uint32_t n)
{
	uint32_t lo = 0, hi;

	/*
	 * Rows come sorted by (type, stack): the decoder refuses any other
	 * order. So the entries of q->type are one run, whose last stack
	 * bounds them all, summed in a tight loop.
	 */
	while (lo < n && e[lo].type < q->type)
		lo++;
	for (hi = lo; hi < n && e[hi].type == q->type; hi++)
		;
	if (q->use_dense && lo < hi && e[hi - 1].stack < q->dense_stacks &&
	    s->tag < q->ndense && q->dense[s->tag]) {
		uint64_t *sums = q->dense[s->tag];

		for (uint32_t i = lo; i < hi; i++)
			sums[e[i].stack] += (uint64_t)e[i].sum;
		return 0;
	}
	for (uint32_t i = 0; i < n; i++) {
		int err;

		if (e[i].type != q->type)
			continue;
		err = _profile_add(q, e[i].stack, s->tag, e[i].sum);
		if (err)
			return err;
	}
	return 0;
}

static int _profile_sample(struct query *q, struct qseries *s, const struct block_sample *bs)
{
	return _profile_add(q, bs->stack, s->tag, bs->value);
}

/*
 * Sums the window into q->agg by (stack, tag). CPU values are sample
 * counts when every sum found has one period (*period), else nanoseconds
 * (*mixed; see _value()).
 */
static int _profile_agg(struct query *q, int64_t from, int64_t to, bool *any, bool *mixed,
			uint64_t *period)
{
	static const struct visitor v = { .rollup = _profile_rollup, .sample = _profile_sample };
	struct plan p = { 0 };
	int64_t max_stack = 0;
	int err;

	*any = *mixed = false;
	*period = 0;
	err = sqlite__exec_int(q->st, ST_MAX_STACK, 0, &max_stack);
	if (!err && max_stack >= 0 && max_stack < UINT32_MAX) {
		q->dense_stacks = (uint32_t)max_stack + 1;
		q->use_dense = true;
	}
	if (!err)
		err = sqlite__plan_init(q->st, &p);
	if (!err)
		err = sqlite__plan_bucket(&p, from, to);
	if (!err)
		err = sqlite__scan_plan(q, &p, &v);
	sqlite__plan_free(&p);
	if (q->use_dense) {
		int e = _dense_spill(q);

		err = err ?: e;
	}
	for (uint32_t i = 0; !err && i < q->agg.cap; i++) {
		const struct u64slot *slot = &q->agg.slots[i];
		uint64_t per;

		if (!slot->used || !slot->val)
			continue;
		per = _ptag(q, (uint32_t)slot->key)->period_ns;
		if (!*any) {
			*period = per;
			*any = true;
		} else if (per != *period) {
			*mixed = true;
			break;
		}
	}
	return err;
}

static uint64_t _value(const struct query *q, const struct u64slot *slot, bool mixed)
{
	uint64_t v = slot->val;

	if (mixed && __builtin_mul_overflow(v, _ptag(q, (uint32_t)slot->key)->period_ns, &v))
		v = UINT64_MAX;
	return v;
}

int sqlite__profile(void *impl, int64_t from, int64_t to, const struct selector *sel,
		    uint32_t type, struct profile *out)
{
	struct sqlite_store *st = impl;
	struct query q = { .st = st, .sel = sel, .type = type, .tag = _tag_comm, .out = out,
			   .fallback_period = out->period_ns };
	struct exporter ex = { .st = st, .out = out };
	uint64_t period;
	bool any, mixed;
	int err;

	if (!sqlite__clamp(&from, &to))
		return 0;
	sqlite__query_begin(st);
	err = sqlite__begin_read(st);
	if (err)
		goto out;
	err = _profile_agg(&q, from, to, &any, &mixed, &period);
	for (uint32_t i = 0; !err && i < q.agg.cap; i++) {
		const struct u64slot *slot = &q.agg.slots[i];
		int64_t stack;

		if (!slot->used || !slot->val)
			continue;
		stack = sqlite__ex_stack(&ex, (uint32_t)(slot->key >> 32));
		if (stack < 0)
			err = (int)stack;
		else
			err = profile__add_sample(out, (uint32_t)stack, 0, 0, 0,
						  _ptag(&q, (uint32_t)slot->key)->comm,
						  _value(&q, slot, mixed));
	}
	if (!err && type == SAMPLE_CPU && any)
		out->period_ns = mixed ? 1 : period;
	err = sqlite__end_read(st, err);
out:
	sqlite__query_free(&q);
	sqlite__exporter_free(&ex);
	return err;
}

/*
 * The flame graph is cut before anything is named: the paths are store
 * stack ids summed by process, their frames merged by store ids (a
 * function's name and a binary's path are each one string id), all held
 * in st->shapes; only the frames of kept nodes are copied into out.
 * Naming every frame of a window first was most of a query where nodes
 * run many distinct stacks.
 */
int sqlite__flamegraph(void *impl, int64_t from, int64_t to, const struct selector *sel,
		       uint32_t type, size_t max_nodes, struct profile *out, struct flametree *t)
{
	struct sqlite_store *st = impl;
	struct query q = { .st = st, .sel = sel, .type = type, .tag = _tag_comm, .out = out,
			   .fallback_period = out->period_ns };
	struct exporter ex = { .st = st, .out = out };
	struct flametree_path *paths = NULL;
	uint64_t *at = NULL, period;
	uint32_t *ids = NULL, npaths = 0;
	bool any = false, mixed = false;
	int err;

	memset(t, 0, sizeof(*t));
	if (!sqlite__clamp(&from, &to))
		return flametree__build(t, NULL, 0, NULL, max_nodes);
	sqlite__query_begin(st);
	err = sqlite__begin_read(st);
	if (err)
		goto out;
	err = _profile_agg(&q, from, to, &any, &mixed, &period);
	if (!err) {
		paths = malloc(((size_t)q.agg.count + 1) * sizeof(*paths));
		at = malloc(((size_t)q.agg.count + 1) * sizeof(*at));
		ids = malloc(((size_t)q.agg.count + 1) * sizeof(*ids));
		if (!paths || !at || !ids)
			err = -ENOMEM;
	}
	for (uint32_t i = 0; !err && i < q.agg.cap; i++) {
		const struct u64slot *slot = &q.agg.slots[i];

		if (!slot->used || !slot->val)
			continue;
		ids[npaths] = (uint32_t)(slot->key >> 32);
		paths[npaths].comm = _ptag(&q, (uint32_t)slot->key)->comm;
		paths[npaths++].count = _value(&q, slot, mixed);
	}
	if (!err)
		err = sqlite__shape_stacks(st, ids, npaths, at);
	if (!err)
		err = sqlite__shape_keys(st, at, npaths);
	/* Loading stacks can move the arena: frames are found once all are in. */
	for (uint32_t i = 0; !err && i < npaths; i++)
		paths[i].frames = sqlite__shape_frames(&st->shapes, at[i], &paths[i].n);
	if (!err)
		err = flametree__build(t, paths, npaths, st->shapes.fkey, max_nodes);
	for (uint32_t i = 1; !err && i < t->n; i++) {
		int64_t f;

		if (t->nodes[i].depth < 2)
			continue;
		f = sqlite__ex_frame(&ex, t->nodes[i].ref);
		if (f < 0)
			err = (int)f;
		else
			t->nodes[i].ref = (uint32_t)f;
	}
	if (!err && type == SAMPLE_CPU && any)
		out->period_ns = mixed ? 1 : period;
	err = sqlite__end_read(st, err);
	if (err)
		flametree__release(t);
out:
	free(paths);
	free(at);
	free(ids);
	sqlite__query_free(&q);
	sqlite__exporter_free(&ex);
	return err;
}

/* ---- store__series --------------------------------------------------------- */

static int _tag_group(struct query *q, struct qseries *s)
{
	const char *v = q->by ? sqlite__info_get((void *)s->info, q->by) : NULL;
	int64_t id;

	if (!v)
		v = "";
	id = intern__add(q->groups, v, strlen(v) + 1, NULL);
	if (id < 0)
		return (int)id;
	s->tag = (uint32_t)id;
	return 0;
}

static inline uint64_t _bucket_of(const struct query *q, int64_t t)
{
	return (uint64_t)((t - q->from) / q->step);
}

static int _series_rollup(struct query *q, struct qseries *s, int64_t bucket,
			  const struct rollup_entry *e, uint32_t n)
{
	int64_t sum = 0;

	for (uint32_t i = 0; i < n; i++)
		if (e[i].type == q->type)
			sum += e[i].sum;
	if (!sum)
		return 0;
	return _agg_add(q, (uint64_t)s->tag << 32 | _bucket_of(q, bucket), sum);
}

static int _series_sample(struct query *q, struct qseries *s, const struct block_sample *bs)
{
	return _agg_add(q, (uint64_t)s->tag << 32 | _bucket_of(q, bs->ts_ns), bs->value);
}

struct series_out {
	const char *group;
	uint64_t bucket;
	int64_t sum;
};

static int _by_group_bucket(const void *pa, const void *pb)
{
	const struct series_out *a = pa, *b = pb;
	int c = strcmp(a->group, b->group);

	if (c)
		return c;
	return (a->bucket > b->bucket) - (a->bucket < b->bucket);
}

int sqlite__series(void *impl, int64_t from, int64_t to, int64_t step,
		   const struct selector *sel, uint32_t type, const char *by,
		   int (*cb)(void *ctx, const char *group, int64_t bucket_start, int64_t sum),
		   void *ctx)
{
	static const struct visitor v = { .rollup = _series_rollup, .totals = true,
					  .sample = _series_sample };
	struct sqlite_store *st = impl;
	struct query q = { .st = st, .sel = sel, .type = type, .tag = _tag_group,
			   .from = from, .step = step, .by = by };
	struct series_out *res = NULL;
	struct plan p = { 0 };
	int64_t cfrom = from, cto = to;
	uint32_t nres = 0;
	int err = -ENOMEM;

	if (!sqlite__clamp(&cfrom, &cto))
		return 0;
	sqlite__query_begin(st);
	q.groups = intern__new();
	if (!q.groups)
		goto out;
	err = sqlite__begin_read(st);
	if (err)
		goto out;
	err = sqlite__plan_init(st, &p);
	/* Buckets keep their places relative to from; only their reading is clamped. */
	for (int64_t a = from; !err && a < to; a = sqlite__sat_add(a, step)) {
		int64_t b = sqlite__sat_add(a, step) < to ? sqlite__sat_add(a, step) : to;

		if (b <= cfrom || a >= cto)
			continue;
		err = sqlite__plan_bucket(&p, a > cfrom ? a : cfrom, b < cto ? b : cto);
		if (b == INT64_MAX)
			break;
	}
	err = err ?: sqlite__scan_plan(&q, &p, &v);
	err = sqlite__end_read(st, err);
	if (err)
		goto out;
	res = malloc((q.agg.count + 1) * sizeof(*res));
	if (!res) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < q.agg.cap; i++) {
		const struct u64slot *slot = &q.agg.slots[i];

		if (!slot->used || !slot->val)
			continue;
		res[nres++] = (struct series_out){
			.group = intern__key(q.groups, (uint32_t)(slot->key >> 32), NULL),
			.bucket = (uint32_t)slot->key,
			.sum = (int64_t)slot->val,
		};
	}
	qsort(res, nres, sizeof(*res), _by_group_bucket);
	for (uint32_t i = 0; !err && i < nres; i++)
		err = cb(ctx, res[i].group, from + (int64_t)res[i].bucket * step, res[i].sum);
out:
	free(res);
	sqlite__plan_free(&p);
	sqlite__query_free(&q);
	return err;
}

/* ---- labels ---------------------------------------------------------------- */

/* The series with at least one sample (any type) in [from, to), into active. */
static int _active_series(struct sqlite_store *st, int64_t from, int64_t to, struct u64map *active)
{
	sqlite3_stmt *s = st->st[ST_BLOCKS_RANGE];
	int rc = SQLITE_DONE, err = 0;

	sqlite3_bind_int64(s, 1, from);
	sqlite3_bind_int64(s, 2, to);
	sqlite3_bind_int64(s, 3, sqlite__sat_add(to, SPAN));
	sqlite3_bind_int64(s, 4, -1);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		uint64_t series = (uint64_t)sqlite3_column_int64(s, 1);
		const struct block_sample *bs;
		bool inside = false;
		uint32_t n;

		if (u64map__get(active, series))
			continue;
		if (sqlite3_column_int64(s, 2) >= from && sqlite3_column_int64(s, 3) < to) {
			inside = true;
		} else {
			err = sqlite__decode_row(st, s, 5, sqlite3_column_int64(s, 0), &bs, &n);
			for (uint32_t i = 0; !err && i < n && !inside; i++)
				inside = bs[i].ts_ns >= from && bs[i].ts_ns < to;
		}
		if (inside && !u64map__upsert(active, series, NULL))
			err = -ENOMEM;
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "sample_blocks");
	return err;
}

static int _by_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Label names (name == NULL) or the values of label name over active series. */
static int _labels(struct sqlite_store *st, const char *name, int64_t from, int64_t to,
		   int (*cb)(void *ctx, const char *s), void *ctx)
{
	struct u64map active = { 0 };
	struct intern *set = intern__new();
	const char **sorted = NULL;
	uint32_t n;
	int err;

	if (!set)
		return -ENOMEM;
	if (!sqlite__clamp(&from, &to)) {
		intern__free(set);
		return 0;
	}
	sqlite__query_begin(st);
	err = sqlite__begin_read(st);
	if (err)
		goto out;
	err = _active_series(st, from, to, &active);
	for (uint32_t i = 0; !err && i < active.cap; i++) {
		const struct series_info *si;

		if (!active.slots[i].used)
			continue;
		err = sqlite__series_info(st, (int64_t)active.slots[i].key, &si);
		for (uint32_t j = 0; !err && j < si->nlabels; j++) {
			const char *t = name ? (strcmp(si->names[j], name) ? NULL : si->values[j])
					     : si->names[j];

			if (t && intern__add(set, t, strlen(t) + 1, NULL) < 0)
				err = -ENOMEM;
		}
	}
	err = sqlite__end_read(st, err);
	if (err)
		goto out;
	n = intern__count(set);
	sorted = malloc((n + 1) * sizeof(*sorted));
	if (!sorted) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		sorted[i] = intern__key(set, i, NULL);
	qsort(sorted, n, sizeof(*sorted), _by_str);
	for (uint32_t i = 0; !err && i < n; i++)
		err = cb(ctx, sorted[i]);
out:
	free(sorted);
	intern__free(set);
	u64map__free(&active);
	return err;
}

int sqlite__label_names(void *impl, int64_t from, int64_t to,
			int (*cb)(void *ctx, const char *name), void *ctx)
{
	return _labels(impl, NULL, from, to, cb, ctx);
}

int sqlite__label_values(void *impl, const char *name, int64_t from, int64_t to,
			 int (*cb)(void *ctx, const char *value), void *ctx)
{
	return _labels(impl, name, from, to, cb, ctx);
}
