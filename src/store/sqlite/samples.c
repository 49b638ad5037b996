// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend: store__samples(), every sample of a window in time order
 * (flame charts), one 5-minute window of blocks at a time.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "sqlite_int.h"

/* ---- store__samples -------------------------------------------------------- */

struct srec {
	int64_t ts, value;
	uint32_t stack, tid, cpu;
	uint32_t qs;		/* index in query.qs */
	int64_t series;
};

static int _by_srec(const void *pa, const void *pb)
{
	const struct srec *a = pa, *b = pb;

	if (a->ts != b->ts)
		return a->ts < b->ts ? -1 : 1;
	if (a->series != b->series)
		return a->series < b->series ? -1 : 1;
	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	if (a->cpu != b->cpu)
		return a->cpu < b->cpu ? -1 : 1;
	if (a->stack != b->stack)
		return a->stack < b->stack ? -1 : 1;
	return (a->value > b->value) - (a->value < b->value);
}

/* Exact count of the matching samples in [from, to): decodes only edge blocks. */
static int _count_samples(struct query *q, int64_t from, int64_t to, uint64_t *count)
{
	struct sqlite_store *st = q->st;
	sqlite3_stmt *s = st->st[ST_BLOCKS_RANGE];
	int rc = SQLITE_DONE, err = 0;

	*count = 0;
	sqlite3_bind_int64(s, 1, from);
	sqlite3_bind_int64(s, 2, to);
	sqlite3_bind_int64(s, 3, sqlite__sat_add(to, SPAN));
	sqlite3_bind_int64(s, 4, q->type);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct qseries *qs = sqlite__qseries(q, sqlite3_column_int64(s, 1), &err);
		const struct block_sample *bs;
		uint32_t n;

		if (!qs)
			continue;
		if (sqlite3_column_int64(s, 2) >= from && sqlite3_column_int64(s, 3) < to) {
			*count += (uint64_t)sqlite3_column_int64(s, 4);
			continue;
		}
		err = sqlite__decode_row(st, s, 5, sqlite3_column_int64(s, 0), &bs, &n);
		for (uint32_t i = 0; !err && i < n; i++)
			*count += bs[i].ts_ns >= from && bs[i].ts_ns < to && bs[i].type == q->type;
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "sample_blocks");
	return err;
}

/* Appends the samples of one window's blocks that fall in [from, to). */
/* A run of records from one block, sorted. */
struct run {
	uint32_t pos, end;
};

struct runs {
	struct run *r;
	uint32_t n, cap;
	uint32_t live;		/* runs in the merge heap */
};

static int _collect_window(struct query *q, int64_t w, int64_t from, int64_t to,
			   struct srec **recs, uint32_t *n, uint32_t *cap, struct runs *runs)
{
	struct sqlite_store *st = q->st;
	sqlite3_stmt *s = st->st[ST_BLOCKS_RANGE];
	int rc = SQLITE_DONE, err = 0;

	/* Blocks of window w: t_max in [w, w + SPAN), and t_max >= from, t_min < to. */
	sqlite3_bind_int64(s, 1, w > from ? w : from);
	sqlite3_bind_int64(s, 2, to);
	sqlite3_bind_int64(s, 3, w + SPAN);
	sqlite3_bind_int64(s, 4, q->type);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t series = sqlite3_column_int64(s, 1);
		struct qseries *qs = sqlite__qseries(q, series, &err);
		const struct block_sample *bs;
		uint32_t nb;

		if (!qs)
			continue;
		err = sqlite__decode_row(st, s, 5, sqlite3_column_int64(s, 0), &bs, &nb);
		if (!err && *n + (uint64_t)nb > *cap) {
			uint64_t ncap = (*n + (uint64_t)nb) * 2;
			struct srec *r;

			if (ncap > UINT32_MAX) {
				err = -E2BIG;
				break;
			}
			r = realloc(*recs, ncap * sizeof(*r));
			if (!r) {
				err = -ENOMEM;
				break;
			}
			*recs = r;
			*cap = (uint32_t)ncap;
		}
		if (!err && runs->n == runs->cap) {
			uint32_t ncap = runs->cap ? runs->cap * 2 : 256;
			struct run *r = realloc(runs->r, ncap * sizeof(*r));

			if (!r) {
				err = -ENOMEM;
				break;
			}
			runs->r = r;
			runs->cap = ncap;
		}
		if (err)
			break;
		runs->r[runs->n].pos = *n;
		for (uint32_t i = 0; i < nb; i++) {
			if (bs[i].ts_ns < from || bs[i].ts_ns >= to || bs[i].type != q->type)
				continue;
			(*recs)[(*n)++] = (struct srec){
				.ts = bs[i].ts_ns, .value = bs[i].value, .stack = bs[i].stack,
				.tid = bs[i].tid, .cpu = bs[i].cpu, .qs = (uint32_t)(qs - q->qs),
				.series = series,
			};
		}
		runs->r[runs->n].end = *n;
		if (runs->r[runs->n].end > runs->r[runs->n].pos)
			runs->n++;
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "sample_blocks");
	return err;
}

static inline bool _srec_less(const struct srec *a, const struct srec *b)
{
	if (a->ts != b->ts)
		return a->ts < b->ts;
	return _by_srec(a, b) < 0;
}

/* Heap entries carry their run's head timestamp: most comparisons stop there. */
struct head {
	int64_t ts;
	uint32_t run;
};

static inline bool _head_less(const struct srec *recs, const struct runs *runs,
			      const struct head *a, const struct head *b)
{
	if (a->ts != b->ts)
		return a->ts < b->ts;
	return _by_srec(&recs[runs->r[a->run].pos], &recs[runs->r[b->run].pos]) < 0;
}

static void _sift_down(const struct srec *recs, const struct runs *runs, struct head *heap,
		       uint32_t i)
{
	struct head h = heap[i];

	for (;;) {
		uint32_t l = 2 * i + 1, m;

		if (l >= runs->live)
			break;
		m = l + 1 < runs->live && _head_less(recs, runs, &heap[l + 1], &heap[l]) ? l + 1 : l;
		if (!_head_less(recs, runs, &heap[m], &h))
			break;
		heap[i] = heap[m];
		i = m;
	}
	heap[i] = h;
}

/*
 * Blocks come sorted by time (writes and compactions sort them), so a
 * window is a k-way merge of its blocks rather than a sort of everything:
 * much cheaper for a whole fleet. Runs out of order are sorted
 * first, so the result never depends on that.
 */
static int _merge_runs(struct srec *recs, struct runs *runs, struct head **heap, uint32_t *cap)
{
	if (runs->n > *cap) {
		struct head *h = realloc(*heap, runs->n * sizeof(*h));

		if (!h)
			return -ENOMEM;
		*heap = h;
		*cap = runs->n;
	}
	for (uint32_t i = 0; i < runs->n; i++) {
		struct run *r = &runs->r[i];

		for (uint32_t j = r->pos + 1; j < r->end; j++) {
			if (_srec_less(&recs[j], &recs[j - 1])) {
				qsort(recs + r->pos, r->end - r->pos, sizeof(*recs), _by_srec);
				break;
			}
		}
		(*heap)[i] = (struct head){ recs[r->pos].ts, i };
	}
	runs->live = runs->n;
	for (uint32_t i = runs->n / 2; i-- > 0;)
		_sift_down(recs, runs, *heap, i);
	return 0;
}

/* Advances the run at the top of the heap; a run that ends leaves the heap. */
static void _merge_next(const struct srec *recs, struct runs *runs, struct head *heap)
{
	struct run *top = &runs->r[heap[0].run];

	if (++top->pos == top->end)
		heap[0] = heap[--runs->live];
	else
		heap[0].ts = recs[top->pos].ts;
	if (runs->live)
		_sift_down(recs, runs, heap, 0);
}

int sqlite__samples(void *impl, int64_t from, int64_t to, const struct selector *sel,
		    uint32_t type, uint32_t max_samples, struct profile *dict,
		    int (*cb)(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
			      int64_t value, const char *comm, uint32_t pid),
		    void *ctx, uint32_t *stride)
{
	struct sqlite_store *st = impl;
	struct query q = { .st = st, .sel = sel, .type = type };
	struct exporter ex = { .st = st, .out = dict };
	struct srec *recs = NULL;
	struct runs runs = { 0 };
	struct head *heap = NULL;
	uint32_t cap = 0, cap_heap = 0;
	uint64_t count, k = 1, idx = 0;
	int64_t w;
	int err;

	if (!sqlite__clamp(&from, &to))
		return 0;
	sqlite__query_begin(st);
	err = sqlite__begin_read(st);
	if (err)
		return err;
	err = _count_samples(&q, from, to, &count);
	if (err)
		goto out;
	if (max_samples && count > max_samples)
		k = (count + max_samples - 1) / max_samples;
	if (k > UINT32_MAX)
		k = UINT32_MAX;
	*stride = (uint32_t)k;
	/*
	 * Blocks never cross a window, so window by window the samples can
	 * be sorted and passed on in order, holding one window at a time.
	 * Empty windows are skipped through the t_max index.
	 */
	for (w = sqlite__floor_to(from, SPAN); !err && w < to; w += SPAN) {
		sqlite3_stmt *s = st->st[ST_NEXT_T_MAX];
		int64_t next;
		uint32_t n = 0;

		sqlite3_bind_int64(s, 1, w);
		err = sqlite__exec_int(st, ST_NEXT_T_MAX, -1, &next);
		if (err || next < 0 || sqlite__floor_to(next, SPAN) >= to)
			break;
		w = sqlite__floor_to(next, SPAN);
		runs.n = 0;
		err = _collect_window(&q, w, from, to, &recs, &n, &cap, &runs);
		if (err)
			break;
		err = _merge_runs(recs, &runs, &heap, &cap_heap);
		while (!err && runs.live) {
			const struct srec *r = &recs[runs.r[heap[0].run].pos];
			const struct series_info *si;
			int64_t stack;

			if (!(idx++ % k)) {
				stack = sqlite__ex_stack(&ex, r->stack);
				if (stack < 0) {
					err = (int)stack;
					break;
				}
				si = q.qs[r->qs].info;
				err = cb(ctx, r->ts, (uint32_t)stack, r->tid, r->cpu, r->value,
					 si->comm, si->pid);
			}
			_merge_next(recs, &runs, heap);
		}
	}
out:
	err = sqlite__end_read(st, err);
	free(recs);
	free(runs.r);
	free(heap);
	sqlite__query_free(&q);
	sqlite__exporter_free(&ex);
	return err;
}
