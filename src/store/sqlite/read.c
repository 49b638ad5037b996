// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend: what every query uses. Series labels and the selection
 * of series, store dictionary entries copied into a caller's profile, and
 * the time plan: which rollups and raw blocks answer a window.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "store/selector.h"
#include "sqlite_int.h"

#define SERIES_CACHE_MAX 100000

/* ---- reading: series, selection, dictionaries ----------------------------- */

const char *sqlite__info_get(void *ctx, const char *name)
{
	const struct series_info *si = ctx;

	for (uint32_t i = 0; i < si->nlabels; i++)
		if (!strcmp(si->names[i], name))
			return si->values[i];
	return NULL;
}

/* Borrowed series labels, loaded on first use. */
int sqlite__series_info(struct sqlite_store *st, int64_t series, const struct series_info **out)
{
	sqlite3_stmt *s = st->st[ST_SERIES_LABELS];
	struct series_info *si = NULL;
	uint64_t *slot;
	size_t bytes = 0, nl = 0;
	bool added;
	char *p;
	int rc = SQLITE_DONE, err = 0;

	slot = u64map__get(&st->series_info, (uint64_t)series);
	if (slot) {
		*out = st->infos[*slot];
		return 0;
	}
	/* Two passes over a handful of labels: sizes, then copies. */
	sqlite3_bind_int64(s, 1, series);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		bytes += sqlite3_column_bytes(s, 0) + sqlite3_column_bytes(s, 1) + 2;
		nl++;
	}
	sqlite3_reset(s);
	if (rc != SQLITE_DONE)
		return sqlite__fail(st, rc, "series_labels");
	si = calloc(1, sizeof(*si) + 2 * nl * sizeof(char *) + bytes);
	if (!si)
		return -ENOMEM;
	si->names = (const char **)(si + 1);
	si->values = si->names + nl;
	p = (char *)(si->values + nl);
	si->comm = "";
	while ((rc = sqlite3_step(s)) == SQLITE_ROW && si->nlabels < nl) {
		for (int c = 0; c < 2; c++) {
			size_t len = sqlite3_column_bytes(s, c);
			const unsigned char *t = sqlite3_column_text(s, c);

			if (!t)
				t = (const unsigned char *)"";
			memcpy(p, t, len);
			p[len] = '\0';
			(c ? si->values : si->names)[si->nlabels] = p;
			p += len + 1;
		}
		if (!strcmp(si->names[si->nlabels], "comm"))
			si->comm = si->values[si->nlabels];
		else if (!strcmp(si->names[si->nlabels], "pid"))
			si->pid = (uint32_t)strtoul(si->values[si->nlabels], NULL, 10);
		si->nlabels++;
	}
	sqlite3_reset(s);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
		err = sqlite__fail(st, rc, "series_labels");
		goto err;
	}
	{
		int64_t period;

		sqlite3_bind_int64(st->st[ST_SERIES_PERIOD], 1, series);
		err = sqlite__exec_int(st, ST_SERIES_PERIOD, 0, &period);
		if (err)
			goto err;
		si->period_ns = period > 0 ? (uint64_t)period : 0;
	}
	if (st->ninfos == st->cap_infos) {
		uint32_t cap = st->cap_infos ? st->cap_infos * 2 : 256;
		struct series_info **a = realloc(st->infos, cap * sizeof(*a));

		if (!a) {
			err = -ENOMEM;
			goto err;
		}
		st->infos = a;
		st->cap_infos = cap;
	}
	slot = u64map__upsert(&st->series_info, (uint64_t)series, &added);
	if (!slot) {
		err = -ENOMEM;
		goto err;
	}
	*slot = st->ninfos;
	st->infos[st->ninfos++] = si;
	*out = si;
	return 0;
err:
	free(si);
	return err;
}

void sqlite__query_free(struct query *q)
{
	u64map__free(&q->smap);
	u64map__free(&q->agg);
	for (uint32_t t = 0; t < q->ndense; t++)
		free(q->dense[t]);
	free(q->dense);
	intern__free(q->ptags);
	free(q->qs);
	intern__free(q->groups);
}

/*
 * Returns the query's view of series (NULL when it does not match), or an
 * error through *err.
 */
struct qseries *sqlite__qseries(struct query *q, int64_t series, int *err)
{
	bool added;
	uint64_t *slot = u64map__upsert(&q->smap, (uint64_t)series, &added);
	struct qseries *qs;

	*err = 0;
	if (!slot) {
		*err = -ENOMEM;
		return NULL;
	}
	if (!added) {
		qs = &q->qs[*slot];
		return qs->match ? qs : NULL;
	}
	if (q->nqs == q->cap_qs) {
		uint32_t cap = q->cap_qs ? q->cap_qs * 2 : 64;
		struct qseries *a = realloc(q->qs, cap * sizeof(*a));

		if (!a) {
			*err = -ENOMEM;
			return NULL;
		}
		q->qs = a;
		q->cap_qs = cap;
	}
	qs = &q->qs[q->nqs];
	memset(qs, 0, sizeof(*qs));
	/* On error the query ends, so the half-made entry does not matter. */
	*err = sqlite__series_info(q->st, series, &qs->info);
	if (*err)
		return NULL;
	qs->match = !q->sel || selector__matches(q->sel, sqlite__info_get, (void *)qs->info);
	if (qs->match && q->tag) {
		*err = q->tag(q, qs);
		if (*err)
			return NULL;
	}
	*slot = q->nqs++;
	return qs->match ? qs : NULL;
}

void sqlite__exporter_free(struct exporter *ex)
{
	u64map__free(&ex->strings);
	u64map__free(&ex->mappings);
	u64map__free(&ex->frames);
	u64map__free(&ex->stacks);
}

/* Fetches the text of a store string into the output profile. */
static int64_t _ex_string(struct exporter *ex, int64_t id)
{
	sqlite3_stmt *s = ex->st->st[ST_STR_TEXT];
	uint64_t *slot = u64map__get(&ex->strings, (uint64_t)id);
	int64_t out;
	int rc;

	if (slot)
		return (int64_t)*slot;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(s, 0);

		out = profile__intern_string(ex->out, t ? t : "");
	} else {
		out = rc == SQLITE_DONE ? -EIO : sqlite__fail(ex->st, rc, "strings");
		if (rc == SQLITE_DONE)
			pr_warn("store: sqlite: string %lld is missing\n", (long long)id);
	}
	sqlite3_reset(s);
	if (out >= 0) {
		slot = u64map__upsert(&ex->strings, (uint64_t)id, NULL);
		if (!slot)
			return -ENOMEM;
		*slot = (uint64_t)out;
	}
	return out;
}

static int64_t _ex_mapping(struct exporter *ex, int64_t id)
{
	sqlite3_stmt *s = ex->st->st[ST_MAP_ROW];
	uint64_t *slot;
	int64_t path, bid, out;
	int rc;

	if (!id)
		return PROFILE_NO_MAPPING;
	slot = u64map__get(&ex->mappings, (uint64_t)id);
	if (slot)
		return (int64_t)*slot;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	path = sqlite3_column_int64(s, 0);
	bid = sqlite3_column_int64(s, 1);
	sqlite3_reset(s);
	if (rc != SQLITE_ROW) {
		pr_warn("store: sqlite: mapping %lld is missing\n", (long long)id);
		return rc == SQLITE_DONE ? -EIO : sqlite__fail(ex->st, rc, "mappings");
	}
	if ((path = _ex_string(ex, path)) < 0)
		return path;
	if ((bid = _ex_string(ex, bid)) < 0)
		return bid;
	out = profile__intern_mapping(ex->out, profile__string(ex->out, (uint32_t)path),
				      profile__string(ex->out, (uint32_t)bid));
	if (out >= 0) {
		slot = u64map__upsert(&ex->mappings, (uint64_t)id, NULL);
		if (!slot)
			return -ENOMEM;
		*slot = (uint64_t)out;
	}
	return out;
}

int64_t sqlite__ex_frame(struct exporter *ex, int64_t id)
{
	sqlite3_stmt *s = ex->st->st[ST_FRAME_ROW];
	uint64_t *slot = u64map__get(&ex->frames, (uint64_t)id);
	int64_t kind, mapping, addr, fn, file, line, out;
	int rc = SQLITE_DONE;

	if (slot)
		return (int64_t)*slot;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	kind = sqlite3_column_int64(s, 0);
	mapping = sqlite3_column_int64(s, 1);
	addr = sqlite3_column_int64(s, 2);
	fn = sqlite3_column_int64(s, 3);
	file = sqlite3_column_int64(s, 4);
	line = sqlite3_column_int64(s, 5);
	sqlite3_reset(s);
	if (rc != SQLITE_ROW) {
		pr_warn("store: sqlite: frame %lld is missing\n", (long long)id);
		return rc == SQLITE_DONE ? -EIO : sqlite__fail(ex->st, rc, "frames");
	}
	if ((mapping = _ex_mapping(ex, mapping)) < 0)
		return mapping;
	if ((fn = _ex_string(ex, fn)) < 0)
		return fn;
	if ((file = _ex_string(ex, file)) < 0)
		return file;
	out = profile__intern_named_frame(ex->out, (enum frame_kind)kind, (uint32_t)mapping,
					  (uint64_t)addr, profile__string(ex->out, (uint32_t)fn),
					  profile__string(ex->out, (uint32_t)file), (uint32_t)line);
	if (out < 0)
		return out;
	slot = u64map__upsert(&ex->frames, (uint64_t)id, NULL);
	if (!slot)
		return -ENOMEM;
	*slot = (uint64_t)out;
	return out;
}

int64_t sqlite__ex_stack(struct exporter *ex, uint32_t id)
{
	struct sqlite_store *st = ex->st;
	sqlite3_stmt *s = st->st[ST_STACK_ROW];
	uint64_t *slot = u64map__get(&ex->stacks, id);
	int64_t n, out;
	int rc;

	if (slot)
		return (int64_t)*slot;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		size_t len = sqlite3_column_bytes(s, 0);

		n = sqlite__fbuf_reserve(st, len + 1);
		if (!n)
			n = sqlite__stack_decode(sqlite3_column_blob(s, 0), len, st->fbuf, len + 1);
	} else {
		n = rc == SQLITE_DONE ? -EIO : sqlite__fail(st, rc, "stacks");
	}
	sqlite3_reset(s);
	if (n < 0) {
		pr_warn("store: sqlite: stack %u is missing or corrupt\n", id);
		return n;
	}
	/*
	 * sqlite__ex_frame() does not touch fbuf, so the frame ids can be rewritten
	 * in place into output ids.
	 */
	for (int64_t i = 0; i < n; i++) {
		int64_t f = sqlite__ex_frame(ex, st->fbuf[i]);

		if (f < 0)
			return f;
		st->fbuf[i] = (uint32_t)f;
	}
	out = profile__intern_stack(ex->out, st->fbuf, (uint32_t)n);
	if (out < 0)
		return out;
	slot = u64map__upsert(&ex->stacks, id, NULL);
	if (!slot)
		return -ENOMEM;
	*slot = (uint64_t)out;
	return out;
}

/* ---- reading: the time plan ----------------------------------------------- */

void sqlite__plan_free(struct plan *p)
{
	free(p->hours.r);
	free(p->minutes.r);
	free(p->raw.r);
}

int sqlite__plan_init(struct sqlite_store *st, struct plan *p)
{
	return sqlite__meta_get(st, "hours_through", 0, &p->hours_through);
}

int sqlite__plan_bucket(struct plan *p, int64_t a, int64_t b)
{
	int64_t m0 = sqlite__ceil_to(a, STORE_NS_MIN), m1 = sqlite__floor_to(b, STORE_NS_MIN);
	int64_t h0 = sqlite__ceil_to(a, STORE_NS_HOUR), h1 = sqlite__floor_to(b, STORE_NS_HOUR);
	int err;

	if (m0 >= m1)
		return sqlite__ranges_add(&p->raw, a, b);
	/* Hours not built yet are read as their minutes. */
	if (h1 > p->hours_through)
		h1 = p->hours_through;
	if (h0 >= h1)
		h0 = h1 = m1;
	err = sqlite__ranges_add(&p->raw, a, m0);
	err = err ?: sqlite__ranges_add(&p->minutes, m0, h0);
	err = err ?: sqlite__ranges_add(&p->hours, h0, h1);
	err = err ?: sqlite__ranges_add(&p->minutes, h1, m1);
	err = err ?: sqlite__ranges_add(&p->raw, m1, b);
	return err;
}

static int _scan_rollups(struct query *q, int table, const struct ranges *rs,
			 const struct visitor *v)
{
	struct sqlite_store *st = q->st;
	sqlite3_stmt *s = st->st[table == RU_MIN ? ST_RU_RANGE_M : ST_RU_RANGE_H];
	int col = v->totals ? 2 : 3;
	int rc = SQLITE_DONE, err = 0;

	for (uint32_t i = 0; !err && i < rs->n; i++) {
		sqlite3_bind_int64(s, 1, rs->r[i].a);
		sqlite3_bind_int64(s, 2, rs->r[i].b);
		while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
			int64_t bucket = sqlite3_column_int64(s, 0);
			int64_t series = sqlite3_column_int64(s, 1);
			struct qseries *qs = sqlite__qseries(q, series, &err);
			const struct rollup_entry *e;
			uint32_t n;

			if (!qs)
				continue;
			err = blockcodec__decode_rollup(st->codec, sqlite3_column_blob(s, col),
							sqlite3_column_bytes(s, col), &e, &n);
			if (err) {
				pr_warn("store: sqlite: corrupt %s row (bucket %lld, series %lld)\n",
					table == RU_MIN ? "rollup_1m" : "rollup_1h",
					(long long)bucket, (long long)series);
				err = err == -ENOMEM ? err : -EIO;
				break;
			}
			err = v->rollup(q, qs, bucket, e, n);
		}
		sqlite3_reset(s);
		if (!err && rc != SQLITE_DONE)
			err = sqlite__fail(st, rc, "rollup");
	}
	return err;
}

int sqlite__decode_row(struct sqlite_store *st, sqlite3_stmt *s, int col, int64_t id,
		       const struct block_sample **bs, uint32_t *n)
{
	int err = blockcodec__decode(st->codec, sqlite3_column_blob(s, col),
				     sqlite3_column_bytes(s, col), bs, n);

	if (err) {
		pr_warn("store: sqlite: corrupt sample block %lld\n", (long long)id);
		return err == -ENOMEM ? err : -EIO;
	}
	return 0;
}

/* Every sample of type in [a, b) of matched series, block by block, unordered. */
static int _scan_raw(struct query *q, int64_t a, int64_t b, const struct visitor *v)
{
	struct sqlite_store *st = q->st;
	sqlite3_stmt *s = st->st[ST_BLOCKS_RANGE];
	int rc = SQLITE_DONE, err = 0;

	sqlite3_bind_int64(s, 1, a);
	sqlite3_bind_int64(s, 2, b);
	sqlite3_bind_int64(s, 3, sqlite__sat_add(b, SPAN));
	sqlite3_bind_int64(s, 4, q->type);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct qseries *qs = sqlite__qseries(q, sqlite3_column_int64(s, 1), &err);
		const struct block_sample *bs;
		uint32_t n;

		if (!qs)
			continue;
		err = sqlite__decode_row(st, s, 5, sqlite3_column_int64(s, 0), &bs, &n);
		for (uint32_t i = 0; !err && i < n; i++)
			if (bs[i].ts_ns >= a && bs[i].ts_ns < b && bs[i].type == q->type)
				err = v->sample(q, qs, &bs[i]);
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "sample_blocks");
	return err;
}

int sqlite__scan_plan(struct query *q, const struct plan *p, const struct visitor *v)
{
	int err = _scan_rollups(q, RU_HOUR, &p->hours, v);

	err = err ?: _scan_rollups(q, RU_MIN, &p->minutes, v);
	for (uint32_t i = 0; !err && i < p->raw.n; i++)
		err = _scan_raw(q, p->raw.r[i].a, p->raw.r[i].b, v);
	return err;
}

int sqlite__begin_read(struct sqlite_store *st)
{
	return sqlite__exec(st, ST_BEGIN_READ);
}

int sqlite__end_read(struct sqlite_store *st, int err)
{
	int e = sqlite__exec(st, ST_COMMIT);

	if (e)
		sqlite__exec(st, ST_ROLLBACK);
	return err ?: e;
}

/* Clamps a window to the timestamps a store can hold; false when empty. */
bool sqlite__clamp(int64_t *from, int64_t *to)
{
	if (*from < 0)
		*from = 0;
	if (*to > STORE_TS_LIMIT)
		*to = STORE_TS_LIMIT;
	return *from < *to;
}

void sqlite__query_begin(struct sqlite_store *st)
{
	/* Bounded between queries, never during one: qseries borrow from it. */
	if (st->ninfos > SERIES_CACHE_MAX)
		sqlite__drop_series_info(st);
	sqlite__shapes_trim(st);
}
