// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend: store__write(). Samples go into blocks and rollups in one
 * transaction; windows that closed are compacted after it.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "sqlite_int.h"

/* A compaction never builds a block larger than this. */
#define MAX_BLOCK	(1u << 20)
#define OPEN_WINDOWS_MAX (1u << 20)

static const int64_t _ru_unit[RU_NTABLES] = { STORE_NS_MIN, STORE_NS_HOUR };

/* ---- writing: samples and rollups ----------------------------------------- */

struct wsample {
	int64_t ts, value;
	int64_t window;		/* ts's block window, worked out once, not per comparison */
	uint32_t series, type, stack, tid, cpu;
};

static int _by_block(const void *pa, const void *pb)
{
	const struct wsample *a = pa, *b = pb;

	if (a->series != b->series)
		return a->series < b->series ? -1 : 1;
	if (a->type != b->type)
		return a->type < b->type ? -1 : 1;
	if (a->window != b->window)
		return a->window < b->window ? -1 : 1;
	return (a->ts > b->ts) - (a->ts < b->ts);
}

static int _insert_block(struct sqlite_store *st, uint32_t series, uint32_t type,
			 const struct block_sample *bs, uint32_t n)
{
	sqlite3_stmt *s = st->st[ST_BLOCK_INS];
	int64_t t_min = INT64_MAX, t_max = INT64_MIN;
	const uint8_t *enc;
	size_t len;
	int rc = SQLITE_DONE, err;

	for (uint32_t i = 0; i < n; i++) {
		if (bs[i].ts_ns < t_min)
			t_min = bs[i].ts_ns;
		if (bs[i].ts_ns > t_max)
			t_max = bs[i].ts_ns;
	}
	err = blockcodec__encode(st->codec, bs, n, &enc, &len);
	if (err)
		return err;
	sqlite3_bind_int64(s, 1, series);
	sqlite3_bind_int64(s, 2, type);
	sqlite3_bind_int64(s, 3, t_min);
	sqlite3_bind_int64(s, 4, t_max);
	sqlite3_bind_int64(s, 5, n);
	rc = sqlite3_bind_blob(s, 6, enc, (int)len, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	if (rc != SQLITE_DONE)
		return sqlite__fail(st, rc, "sample_blocks");
	return 0;
}

int sqlite__due_add(struct due **due, uint32_t *n, uint32_t *cap, int64_t series,
		    uint32_t type, int64_t window)
{
	if (window < 0)
		return 0;
	if (*n == *cap) {
		uint32_t ncap = *cap ? *cap * 2 : 16;
		struct due *d = realloc(*due, ncap * sizeof(*d));

		if (!d)
			return -ENOMEM;
		*due = d;
		*cap = ncap;
	}
	(*due)[(*n)++] = (struct due){ series, window, type };
	return 0;
}

/*
 * Which windows of this (series, type) have closed, now that a block went
 * into window w: the one that was open before, or w itself when it is
 * older than the open one (late data). The first write after open also
 * checks the window before w, which a restart may have left unmerged.
 */
static int _note_window(struct sqlite_store *st, uint32_t series, uint32_t type, int64_t w,
			struct due **due, uint32_t *ndue, uint32_t *cap_due)
{
	uint64_t key = (uint64_t)series << 32 | type;
	bool added;
	uint64_t *open;
	int64_t cur;

	/* Series come and go with processes: forgetting costs one check each. */
	if (st->open_window.count > OPEN_WINDOWS_MAX)
		u64map__free(&st->open_window);
	open = u64map__upsert(&st->open_window, key, &added);

	if (!open)
		return -ENOMEM;
	if (added) {
		*open = (uint64_t)w;
		return sqlite__due_add(due, ndue, cap_due, series, type, w - SPAN);
	}
	cur = (int64_t)*open;
	if (w > cur) {
		*open = (uint64_t)w;
		return sqlite__due_add(due, ndue, cap_due, series, type, cur);
	}
	if (w < cur)
		return sqlite__due_add(due, ndue, cap_due, series, type, w);
	return 0;
}

static int _write_blocks(struct sqlite_store *st, struct wsample *ws, uint32_t n,
			 struct due **due, uint32_t *ndue, uint32_t *cap_due)
{
	struct block_sample *bs = malloc((n ? n : 1) * sizeof(*bs));
	int err = 0;

	if (!bs)
		return -ENOMEM;
	qsort(ws, n, sizeof(*ws), _by_block);
	for (uint32_t i = 0, j; i < n; i = j) {
		int64_t w = ws[i].window;
		uint32_t m = 0;

		for (j = i; j < n && ws[j].series == ws[i].series && ws[j].type == ws[i].type &&
			    ws[j].window == w && m < MAX_BLOCK; j++, m++)
			bs[m] = (struct block_sample){
				.ts_ns = ws[j].ts, .value = ws[j].value, .stack = ws[j].stack,
				.tid = ws[j].tid, .cpu = ws[j].cpu, .type = ws[j].type,
			};
		err = _insert_block(st, ws[i].series, ws[i].type, bs, m);
		if (!err)
			err = _note_window(st, ws[i].series, ws[i].type, w, due, ndue, cap_due);
		if (err)
			break;
	}
	free(bs);
	return err;
}

int sqlite__by_rollup(const void *pa, const void *pb)
{
	const struct rsample *a = pa, *b = pb;

	if (a->series != b->series)
		return a->series < b->series ? -1 : 1;
	if (a->bucket != b->bucket)
		return a->bucket < b->bucket ? -1 : 1;
	if (a->type != b->type)
		return a->type < b->type ? -1 : 1;
	return (a->stack > b->stack) - (a->stack < b->stack);
}

/* Merges two runs sorted by (type, stack) into out (room for na + nb); returns its length. */
static uint32_t _merge_entries(const struct rollup_entry *a, uint32_t na,
			       const struct rollup_entry *b, uint32_t nb, struct rollup_entry *out)
{
	uint32_t n = 0, i = 0, j = 0;

	while (i < na || j < nb) {
		int c;

		if (i == na)
			c = 1;
		else if (j == nb)
			c = -1;
		else if (a[i].type != b[j].type)
			c = a[i].type < b[j].type ? -1 : 1;
		else
			c = (a[i].stack > b[j].stack) - (a[i].stack < b[j].stack);
		if (c < 0) {
			out[n++] = a[i++];
		} else if (c > 0) {
			out[n++] = b[j++];
		} else {
			out[n] = a[i++];
			out[n++].sum += b[j++].sum;
		}
	}
	return n;
}

/* Room for n entries and as many per-type totals after them in st->merge. */
static int _merge_reserve(struct sqlite_store *st, size_t n)
{
	if (2 * n > st->cap_merge) {
		struct rollup_entry *m = realloc(st->merge, 2 * n * sizeof(*m));

		if (!m)
			return -ENOMEM;
		st->merge = m;
		st->cap_merge = 2 * n;
	}
	return 0;
}

/*
 * Writes the rollup row (table, bucket, series) as the n entries e (sorted
 * by type, stack), replacing any row there. tot has room for n totals.
 */
static int _rollup_put(struct sqlite_store *st, int table, int64_t bucket, uint32_t series,
		       const struct rollup_entry *e, uint32_t n, struct rollup_entry *tot)
{
	sqlite3_stmt *s = st->st[table == RU_MIN ? ST_RU_PUT_M : ST_RU_PUT_H];
	const uint8_t *enc;
	uint32_t nt = 0;
	size_t len;
	int rc, err;

	sqlite3_bind_int64(s, 1, bucket);
	sqlite3_bind_int64(s, 2, series);
	/*
	 * Per-type totals in a column of their own: series queries over long
	 * windows need only them, not every stack of every minute.
	 */
	for (uint32_t k = 0; k < n; k++) {
		if (nt && tot[nt - 1].type == e[k].type)
			tot[nt - 1].sum += e[k].sum;
		else
			tot[nt++] = (struct rollup_entry){ 0, e[k].type, e[k].sum };
	}
	err = blockcodec__encode_rollup(st->codec, tot, nt, &enc, &len);
	if (err)
		return err;
	rc = sqlite3_bind_blob(s, 3, enc, (int)len, SQLITE_TRANSIENT);
	err = blockcodec__encode_rollup(st->codec, e, n, &enc, &len);
	if (err) {
		sqlite3_clear_bindings(s);
		return err;
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_blob(s, 4, enc, (int)len, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	if (rc != SQLITE_DONE)
		return sqlite__fail(st, rc, "rollup");
	return 0;
}

/* Adds entries (sorted by type, stack) into the rollup row (table, bucket, series). */
int sqlite__rollup_merge(struct sqlite_store *st, int table, int64_t bucket, uint32_t series,
			 const struct rollup_entry *add, uint32_t nadd)
{
	sqlite3_stmt *s = st->st[table == RU_MIN ? ST_RU_GET_M : ST_RU_GET_H];
	const struct rollup_entry *old = NULL;
	uint32_t nold = 0, n;
	int rc = SQLITE_DONE, err = 0;

	sqlite3_bind_int64(s, 1, bucket);
	sqlite3_bind_int64(s, 2, series);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		err = blockcodec__decode_rollup(st->codec, sqlite3_column_blob(s, 0),
						sqlite3_column_bytes(s, 0), &old, &nold);
		if (err) {
			pr_warn("store: sqlite: corrupt rollup (table %d, bucket %lld, series %u): %s\n",
				table, (long long)bucket, series, strerror(-err));
			err = err == -ENOMEM ? err : -EIO;
		}
	} else if (rc != SQLITE_DONE) {
		err = sqlite__fail(st, rc, "rollup");
	}
	sqlite3_reset(s);
	if (err)
		return err;
	err = _merge_reserve(st, (size_t)nold + nadd);
	if (err)
		return err;
	n = _merge_entries(old, nold, add, nadd, st->merge);
	return _rollup_put(st, table, bucket, series, st->merge, n, st->merge + n);
}

/*
 * Sums the batch by (series, minute, type, stack) and merges each minute
 * into rollup_1m. Samples of hours already built (older than
 * hours_through: late ones) are re-bucketed by hour and merged into
 * rollup_1h too; the others reach it through sqlite__roll_hours().
 */
static int _write_rollups(struct sqlite_store *st, const struct wsample *ws, uint32_t n)
{
	struct rsample *rs = malloc((n ? n : 1) * sizeof(*rs));
	struct rollup_entry *e = malloc((n ? n : 1) * sizeof(*e));
	uint32_t m = n;
	int err = -ENOMEM;

	if (!rs || !e)
		goto out;
	for (uint32_t i = 0; i < n; i++)
		rs[i] = (struct rsample){ sqlite__floor_to(ws[i].ts, STORE_NS_MIN), ws[i].series,
					  ws[i].type, ws[i].stack, ws[i].value };
	for (int table = RU_MIN; table < RU_NTABLES; table++) {
		uint32_t k = 0;

		if (table == RU_HOUR) {
			for (uint32_t i = 0; i < m; i++)
				if (rs[i].bucket < st->hours_through)
					rs[k++] = rs[i];
			m = k;
			k = 0;
		}
		for (uint32_t i = 0; i < m; i++)
			rs[i].bucket = sqlite__floor_to(rs[i].bucket, _ru_unit[table]);
		qsort(rs, m, sizeof(*rs), sqlite__by_rollup);
		/* Reduce equal (series, bucket, type, stack) in place. */
		for (uint32_t i = 0; i < m; i++) {
			if (k && !sqlite__by_rollup(&rs[k - 1], &rs[i]))
				rs[k - 1].sum += rs[i].sum;
			else
				rs[k++] = rs[i];
		}
		m = k;
		for (uint32_t i = 0, j; i < m; i = j) {
			uint32_t ne = 0;

			for (j = i; j < m && rs[j].series == rs[i].series && rs[j].bucket == rs[i].bucket; j++)
				e[ne++] = (struct rollup_entry){ rs[j].stack, rs[j].type, rs[j].sum };
			err = sqlite__rollup_merge(st, table, rs[i].bucket, rs[i].series, e, ne);
			if (err)
				goto out;
		}
	}
	err = 0;
out:
	free(rs);
	free(e);
	return err;
}

int sqlite__meta_add(struct sqlite_store *st, const char *key, int64_t v)
{
	sqlite3_stmt *s = st->st[ST_META_ADD];

	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, v);
	return sqlite__exec(st, ST_META_ADD);
}

int sqlite__meta_get(struct sqlite_store *st, const char *key, int64_t dflt, int64_t *v)
{
	sqlite3_bind_text(st->st[ST_META_GET], 1, key, -1, SQLITE_STATIC);
	return sqlite__exec_int(st, ST_META_GET, dflt, v);
}

/*
 * How long after an hour's end its hour rows wait: batches of other agents
 * for that hour still arrive for a while, and each one after the build
 * costs a merge into an hour row. Queries read the waiting hour as minutes.
 */
#define HOUR_GRACE	(2 * STORE_NS_MIN)

/* One series' hour being summed from its minute rows. */
struct hacc {
	struct rollup_entry *e;
	uint32_t n, cap;
	int64_t series;
};

struct hroll {
	struct u64map idx;		/* series -> index in acc */
	struct hacc *acc;
	uint32_t nacc, cap_acc;
	struct rollup_entry *tmp;
	size_t cap_tmp;
};

static void _hroll_free(struct hroll *h)
{
	for (uint32_t i = 0; i < h->nacc; i++)
		free(h->acc[i].e);
	free(h->acc);
	free(h->tmp);
	u64map__free(&h->idx);
}

/* Adds one minute row's entries to its series' sum for the hour. */
static int _hroll_add(struct hroll *h, int64_t series, const struct rollup_entry *e, uint32_t n)
{
	bool added;
	uint64_t *slot = u64map__upsert(&h->idx, (uint64_t)series, &added);
	struct hacc *a;
	size_t need;

	if (!slot)
		return -ENOMEM;
	if (added) {
		if (h->nacc == h->cap_acc) {
			uint32_t ncap = h->cap_acc ? h->cap_acc * 2 : 64;
			struct hacc *na = realloc(h->acc, ncap * sizeof(*na));

			if (!na)
				return -ENOMEM;
			h->acc = na;
			h->cap_acc = ncap;
		}
		h->acc[h->nacc] = (struct hacc){ .series = series };
		*slot = h->nacc++;
	}
	a = &h->acc[*slot];
	need = (size_t)a->n + n;
	if (need > h->cap_tmp) {
		struct rollup_entry *t = realloc(h->tmp, need * 2 * sizeof(*t));

		if (!t)
			return -ENOMEM;
		h->tmp = t;
		h->cap_tmp = need * 2;
	}
	/* The merged sum goes to tmp, which then trades places with the series' array. */
	{
		uint32_t m = _merge_entries(a->e, a->n, e, n, h->tmp);
		struct rollup_entry *old = a->e;
		size_t cap = a->cap;

		a->e = h->tmp;
		a->n = m;
		a->cap = (uint32_t)h->cap_tmp;
		h->tmp = old;
		h->cap_tmp = cap;
	}
	return 0;
}

/* Writes every series' sum for hour and empties them. */
static int _hroll_flush(struct sqlite_store *st, struct hroll *h, int64_t hour)
{
	int err = 0;

	for (uint32_t i = 0; !err && i < h->nacc; i++) {
		struct hacc *a = &h->acc[i];

		if (!a->n)
			continue;
		err = _merge_reserve(st, a->n);
		if (!err)
			err = _rollup_put(st, RU_HOUR, hour, (uint32_t)a->series, a->e, a->n, st->merge);
		a->n = 0;
	}
	return err;
}

void sqlite__roll_hours(struct sqlite_store *st, int64_t newest)
{
	sqlite3_stmt *s = st->st[ST_RU_ROLL_M];
	struct hroll h = { 0 };
	struct timespec now;
	int64_t to, hour = -1;
	int rc = SQLITE_DONE, err;

	/* A clock far ahead on one agent must not close the hours of the rest. */
	if (!clock_gettime(CLOCK_REALTIME, &now) &&
	    (int64_t)now.tv_sec * 1000000000 + now.tv_nsec < newest)
		newest = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
	if (newest < HOUR_GRACE)
		return;
	to = sqlite__floor_to(newest - HOUR_GRACE, STORE_NS_HOUR);
	if (to <= st->hours_through)
		return;
	err = sqlite__exec(st, ST_BEGIN);
	if (err)
		goto fail;
	/* Rows come in bucket order: an hour is complete when the next begins. */
	sqlite3_bind_int64(s, 1, st->hours_through);
	sqlite3_bind_int64(s, 2, to);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t h1 = sqlite__floor_to(sqlite3_column_int64(s, 0), STORE_NS_HOUR);
		const struct rollup_entry *e;
		uint32_t n;

		if (h1 != hour) {
			if (hour >= 0)
				err = _hroll_flush(st, &h, hour);
			hour = h1;
		}
		if (!err)
			err = blockcodec__decode_rollup(st->codec, sqlite3_column_blob(s, 2),
							sqlite3_column_bytes(s, 2), &e, &n);
		if (err == -EINVAL) {
			pr_warn("store: sqlite: corrupt rollup_1m row (bucket %lld, series %lld)\n",
				(long long)sqlite3_column_int64(s, 0),
				(long long)sqlite3_column_int64(s, 1));
			err = -EIO;
		}
		if (!err)
			err = _hroll_add(&h, sqlite3_column_int64(s, 1), e, n);
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "rollup_1m");
	if (!err && hour >= 0)
		err = _hroll_flush(st, &h, hour);
	if (!err) {
		sqlite3_bind_text(st->st[ST_META_SET], 1, "hours_through", -1, SQLITE_STATIC);
		sqlite3_bind_int64(st->st[ST_META_SET], 2, to);
		err = sqlite__exec(st, ST_META_SET);
	}
	if (!err)
		err = sqlite__exec(st, ST_COMMIT);
	if (!err) {
		st->hours_through = to;
		_hroll_free(&h);
		return;
	}
	sqlite__exec(st, ST_ROLLBACK);
fail:
	pr_warn("store: sqlite: building hour rollups before %lld: %s\n", (long long)to,
		strerror(-err));
	_hroll_free(&h);
}

static int _by_due(const void *pa, const void *pb)
{
	const struct due *a = pa, *b = pb;

	if (a->series != b->series)
		return a->series < b->series ? -1 : 1;
	if (a->type != b->type)
		return a->type < b->type ? -1 : 1;
	return (a->window > b->window) - (a->window < b->window);
}

static int _by_ts(const void *pa, const void *pb)
{
	const struct block_sample *a = pa, *b = pb;

	return (a->ts_ns > b->ts_ns) - (a->ts_ns < b->ts_ns);
}

/*
 * Merges the blocks of one (series, type, window) into one. A window whose
 * blocks would exceed MAX_BLOCK samples, or holds a corrupt block, is left
 * alone (and logged): compaction only saves space.
 */
static int _compact_window(struct sqlite_store *st, const struct due *d)
{
	sqlite3_stmt *s = st->st[ST_BLOCKS_WINDOW];
	struct block_sample *all = NULL;
	int64_t *ids = NULL;
	uint32_t nall = 0, cap = 0, nids = 0, capids = 0;
	int rc = SQLITE_DONE, err = 0;

	sqlite3_bind_int64(s, 1, d->series);
	sqlite3_bind_int64(s, 2, d->window);
	sqlite3_bind_int64(s, 3, d->window + SPAN);
	sqlite3_bind_int64(s, 4, d->type);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const struct block_sample *bs;
		uint32_t n;

		if (nall + (uint64_t)sqlite3_column_int64(s, 1) > MAX_BLOCK) {
			err = 1;
			break;
		}
		err = blockcodec__decode(st->codec, sqlite3_column_blob(s, 2),
					 sqlite3_column_bytes(s, 2), &bs, &n);
		if (err) {
			pr_warn("store: sqlite: corrupt sample block %lld: not compacting its window\n",
				(long long)sqlite3_column_int64(s, 0));
			break;
		}
		if (nall + n > cap || nids == capids) {
			uint32_t ncap = (nall + n) * 2, ncapids = capids ? capids * 2 : 16;
			struct block_sample *a = realloc(all, ncap * sizeof(*a));
			int64_t *ni;

			if (!a) {
				err = -ENOMEM;
				break;
			}
			all = a;
			cap = ncap;
			ni = realloc(ids, ncapids * sizeof(*ni));
			if (!ni) {
				err = -ENOMEM;
				break;
			}
			ids = ni;
			capids = ncapids;
		}
		memcpy(all + nall, bs, n * sizeof(*bs));
		nall += n;
		ids[nids++] = sqlite3_column_int64(s, 0);
	}
	sqlite3_reset(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "compaction");
	if (err || nids < 2)
		goto out;
	/* Blocks come in the order they were written: sorted already, unless data came late. */
	for (uint32_t i = 1; i < nall; i++) {
		if (all[i].ts_ns < all[i - 1].ts_ns) {
			qsort(all, nall, sizeof(*all), _by_ts);
			break;
		}
	}
	err = _insert_block(st, (uint32_t)d->series, d->type, all, nall);
	for (uint32_t i = 0; !err && i < nids; i++) {
		sqlite3_bind_int64(st->st[ST_BLOCK_DEL], 1, ids[i]);
		err = sqlite__exec(st, ST_BLOCK_DEL);
	}
out:
	free(all);
	free(ids);
	return err < 0 ? err : 0;
}

/* Compacts the due windows in a transaction of their own. */
void sqlite__compact(struct sqlite_store *st, struct due *due, uint32_t n)
{
	int err;

	if (!n)
		return;
	qsort(due, n, sizeof(*due), _by_due);
	err = sqlite__exec(st, ST_BEGIN);
	for (uint32_t i = 0; !err && i < n; i++) {
		if (i && !_by_due(&due[i - 1], &due[i]))
			continue;
		err = _compact_window(st, &due[i]);
	}
	if (!err)
		err = sqlite__exec(st, ST_COMMIT);
	if (err) {
		sqlite__exec(st, ST_ROLLBACK);
		pr_warn("store: sqlite: compaction failed: %s\n", strerror(-err));
	}
}

/* Grows one translation table to n entries, the new ones untranslated. */
static int _dx_grow(struct sqlite_store *st, struct dxlate *d, int k, uint32_t n)
{
	uint32_t cap = d->ids[k].cap;

	if (dict_ids__grow(&d->ids[k], n))
		return -ENOMEM;
	st->dx_bytes += (uint64_t)(d->ids[k].cap - cap) * sizeof(uint32_t);
	return 0;
}

/*
 * The kept translation of dictionary dict_id written under node, grown to
 * the dictionary's current size, in x; or NULL for ENOMEM. Least recently
 * used ones go past DXLATE_MAX or DXLATE_BYTES: forgetting one costs its
 * session one content lookup per entry, as for a batch of its own.
 */
static struct dxlate *_dx_get(struct sqlite_store *st, uint64_t dict_id, const char *node,
			      struct xlate *x)
{
	struct dxlate *d = NULL;

	for (uint32_t i = 0; i < st->ndx; i++) {
		if (st->dx[i]->dict_id == dict_id && st->dx[i]->period_ns == x->b->period_ns &&
		    !strcmp(st->dx[i]->node, node)) {
			d = st->dx[i];
			break;
		}
	}
	if (!d) {
		while (st->ndx && (st->ndx >= DXLATE_MAX || st->dx_bytes > DXLATE_BYTES)) {
			uint32_t old = 0;

			for (uint32_t i = 1; i < st->ndx; i++)
				if (st->dx[i]->used < st->dx[old]->used)
					old = i;
			sqlite__dx_remove(st, old);
		}
		if (!st->dx) {
			st->dx = calloc(DXLATE_MAX, sizeof(*st->dx));
			if (!st->dx)
				return NULL;
		}
		d = calloc(1, sizeof(*d));
		if (!d || !(d->node = strdup(node))) {
			free(d);
			return NULL;
		}
		d->dict_id = dict_id;
		d->period_ns = x->b->period_ns;
		st->dx[st->ndx++] = d;
		st->dx_bytes += sizeof(*d);
	}
	d->used = ++st->dx_clock;
	for (int k = 0; k < DICT_NKINDS; k++)
		if (_dx_grow(st, d, k, x->dx.n[k] + 1))
			return NULL;
	x->dx.ids = d->ids;
	return d;
}

/* Inside the write's transaction; ids go through the same translation as samples'. */
static int _write_gpu_intervals(struct sqlite_store *st, struct xlate *x, const struct batch *b)
{
	sqlite3_stmt *s = st->st[ST_GPU_INS];

	for (uint32_t i = 0; i < b->ngpu_intervals; i++) {
		const struct batch_gpu_interval *g = &b->gpu_intervals[i];
		int64_t series = dict_xlate__id(&x->dx, DICT_SERIES, g->series);
		int64_t name = series < 0 ? series : dict_xlate__id(&x->dx, DICT_STRING, g->name);
		int64_t stack = g->stack == BATCH_NO_STACK || name < 0 ? name :
				dict_xlate__id(&x->dx, DICT_STACK, g->stack);
		int rc;

		if (series < 0 || name < 0 || stack < 0)
			return (int)(series < 0 ? series : name < 0 ? name : stack);
		sqlite3_bind_int64(s, 1, g->start_ns);
		sqlite3_bind_int64(s, 2, g->end_ns);
		sqlite3_bind_int64(s, 3, series);
		sqlite3_bind_int64(s, 4, g->device);
		sqlite3_bind_int64(s, 5, g->stream);
		sqlite3_bind_int64(s, 6, g->kind);
		sqlite3_bind_int64(s, 7, name);
		if (g->stack == BATCH_NO_STACK)
			sqlite3_bind_null(s, 8);
		else
			sqlite3_bind_int64(s, 8, stack);
		sqlite3_bind_int64(s, 9, (int64_t)g->correlation);
		sqlite3_bind_int64(s, 10, (int64_t)g->bytes);
		sqlite3_bind_int64(s, 11, g->weight);
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE)
			return sqlite__fail(st, rc, "gpu_intervals");
	}
	return 0;
}

int sqlite__write(void *impl, const char *node, const struct batch *b)
{
	struct sqlite_store *st = impl;
	const struct profile *d = b->dict;
	uint32_t nstacks = profile__nstacks(d), nseries = batch__nseries(b);
	struct xlate x;
	struct dxlate *dx = NULL;
	struct wsample *ws = NULL;
	struct due *due = NULL;
	uint32_t ndue = 0, cap_due = 0;
	bool in_txn = false;
	int err = -EINVAL;

	/* Everything that can be checked without the database, first. */
	for (uint32_t i = 0; i < b->nsamples; i++) {
		const struct batch_sample *bs = &b->samples[i];

		if (bs->stack >= nstacks || bs->series >= nseries || bs->ts_ns < 0 ||
		    bs->ts_ns >= STORE_TS_LIMIT) {
			pr_warn("store: sqlite: batch from %s: sample %u has stack %u/%u, series %u/%u, ts %lld\n",
				node, i, bs->stack, nstacks, bs->series, nseries, (long long)bs->ts_ns);
			return -EINVAL;
		}
	}
	err = sqlite__civ_check(node, b);
	if (err)
		return err;
	for (uint32_t i = 0; i < b->ngpu_intervals; i++) {
		const struct batch_gpu_interval *g = &b->gpu_intervals[i];

		if ((g->stack != BATCH_NO_STACK && g->stack >= nstacks) || g->series >= nseries ||
		    g->name >= intern__count(d->strings) || g->start_ns < 0 ||
		    g->start_ns >= STORE_TS_LIMIT || g->end_ns < g->start_ns) {
			pr_warn("store: sqlite: batch from %s: GPU interval %u has stack %u/%u, "
				"series %u/%u, name %u, start %lld, end %lld\n", node, i, g->stack,
				nstacks, g->series, nseries, g->name, (long long)g->start_ns,
				(long long)g->end_ns);
			return -EINVAL;
		}
	}
	if (!b->nsamples && !b->ncpu_intervals && !b->ngpu_intervals)
		return 0;
	err = -ENOMEM;
	sqlite__x_init(st, &x, b, node);
	if (b->dict_id) {
		dx = _dx_get(st, b->dict_id, node, &x);
		if (!dx)
			goto out;
	} else if (sqlite__x_own(&x, ~0u)) {
		goto out;
	}
	ws = malloc((b->nsamples + 1) * sizeof(*ws));
	if (!ws)
		goto out;

	err = sqlite__exec(st, ST_BEGIN);
	if (err)
		goto out;
	in_txn = true;
	for (uint32_t i = 0; i < b->nsamples; i++) {
		const struct batch_sample *bs = &b->samples[i];
		int64_t series = dict_xlate__id(&x.dx, DICT_SERIES, bs->series);
		int64_t stack = series < 0 ? series : dict_xlate__id(&x.dx, DICT_STACK, bs->stack);
		int64_t ts;

		if (series < 0 || stack < 0) {
			err = (int)(series < 0 ? series : stack);
			goto out;
		}
		ts = store__sample_ts(bs->ts_ns);
		ws[i] = (struct wsample){
			.ts = ts, .value = bs->value, .window = sqlite__floor_to(ts, SPAN),
			.series = (uint32_t)series,
			.type = bs->type, .stack = (uint32_t)stack, .tid = bs->tid, .cpu = bs->cpu,
		};
	}
	err = sqlite__civ_write(st, &x, b);
	if (!err)
		err = _write_blocks(st, ws, b->nsamples, &due, &ndue, &cap_due);
	if (!err)
		err = _write_rollups(st, ws, b->nsamples);
	if (!err)
		err = _write_gpu_intervals(st, &x, b);
	if (!err)
		err = sqlite__meta_add(st, "samples", b->nsamples);
	if (!err)
		err = sqlite__meta_add(st, "batches", 1);
	if (!err)
		err = sqlite__exec(st, ST_COMMIT);
	if (!err) {
		int64_t newest = 0;

		in_txn = false;
		sqlite__compact(st, due, ndue);
		for (uint32_t i = 0; i < b->nsamples; i++)
			if (ws[i].ts > newest)
				newest = ws[i].ts;
		sqlite__roll_hours(st, newest);
	}
out:
	if (err && in_txn) {
		sqlite__exec(st, ST_ROLLBACK);
		/*
		 * Rows the caches learned in this transaction are gone, and
		 * their ids may be handed out again. (The windows noted for
		 * compaction may stay: at worst they cost a check.)
		 */
		sqlite__drop_caches(st);
	}
	sqlite__x_release(&x);
	free(ws);
	free(due);
	return err;
}
