// SPDX-License-Identifier: Apache-2.0
/*
 * Queries of the ClickHouse backend. ClickHouse filters by time and sums;
 * label selectors are matched here, in C, with the same code as for SQLite
 * (selector.c), so both backends agree on what a selector selects; the
 * matching series go to ClickHouse as an IN list of ids.
 *
 * Windows are read from two tables: whole minutes from samples_1m (the
 * materialized view's per-minute sums) and the rest from samples. For
 * series buckets a minute is taken from samples_1m only when it lies in
 * one bucket; the raw side reads exactly the complement, so totals equal
 * those of the raw samples. Flame graphs also read hour rollups (flame.c).
 *
 * This file has what the queries share: the selection, the time plan and
 * the export of stacks; the queries are in query.c, intervals.c, metrics.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "common/u64map.h"
#include "store/selector.h"
#include "clickhouse_impl.h"

#define MAX_PLAN_RANGES	2048	/* OR'd raw ranges that help ClickHouse skip data */

bool ch__clamp(int64_t *from, int64_t *to)
{
	if (*from < 0)
		*from = 0;
	if (*to > STORE_TS_LIMIT)
		*to = STORE_TS_LIMIT;
	return *from < *to;
}

static inline int64_t _floor_m(int64_t t) { return t / STORE_NS_MIN * STORE_NS_MIN; }
static inline int64_t _ceil_m(int64_t t) { return _floor_m(t + STORE_NS_MIN - 1); }

/* ---- series selection ---------------------------------------------------------- */

const char *ch__label_get(void *ctx, const char *name)
{
	const struct ch_series *s = ctx;

	for (size_t i = 0; i < s->nlabels; i++)
		if (!strcmp(s->names[i], name))
			return s->values[i];
	return NULL;
}

bool ch__matches(const struct selector *sel, const struct ch_series *s)
{
	return !sel || !selector__count(sel) || selector__matches(sel, ch__label_get, (void *)s);
}

/*
 * " AND series IN (...)" for a selector, from every series ClickHouse
 * holds now; *none is set when no series matches (the answer is empty).
 */
int ch__series_filter(struct ch_store *st, const struct selector *sel, struct strbuf *sql,
		      bool *none)
{
	uint32_t n = 0;
	int err;

	*none = false;
	if (!sel || !selector__count(sel))
		return 0;
	err = ch__series_load(st);
	if (err)
		return err;
	strbuf__puts(sql, " AND series IN (");
	for (uint32_t i = 0; i < st->nseries; i++) {
		if (!ch__matches(sel, st->series[i]))
			continue;
		strbuf__printf(sql, "%s%" PRIu64, n++ ? "," : "", st->series[i]->id);
	}
	strbuf__putc(sql, ')');
	*none = !n;
	return sql->oom ? -ENOMEM : 0;
}

/* ---- the time plan ---------------------------------------------------------- */

/*
 * Conditions for the rows of [rfrom, to) -- rfrom being from or later, after
 * retention -- cut into buckets [from + i * step, ...) (step 0: one bucket):
 * roll for samples_1m, raw for samples. Returns false when samples_1m has
 * nothing to give (raw covers everything).
 */
bool ch__plan(struct strbuf *roll, struct strbuf *raw, int64_t from, int64_t rfrom,
	      int64_t to, int64_t step)
{
	int64_t a = _ceil_m(rfrom), b = _floor_m(to);
	char bucket[256] = "";

	if (a >= b) {
		strbuf__printf(raw, "ts >= %" PRId64 " AND ts < %" PRId64, rfrom, to);
		return false;
	}
	if (step > 0)
		snprintf(bucket, sizeof(bucket),
			 " AND intDiv(M - %" PRId64 ", %" PRId64 ") = intDiv(M + %" PRId64 " - %" PRId64
			 ", %" PRId64 ")", from, step, (int64_t)(STORE_NS_MIN - 1), from, step);
	/* samples_1m: whole minutes inside the window and inside one bucket. */
	strbuf__printf(roll, "minute >= %" PRId64 " AND minute < %" PRId64, a, b);
	for (const char *p = bucket; *p; p++) {
		if (*p == 'M')
			strbuf__puts(roll, "minute");
		else
			strbuf__putc(roll, *p);
	}
	/* samples: exactly the rest. */
	strbuf__printf(raw, "ts >= %" PRId64 " AND ts < %" PRId64 " AND NOT (ts >= %" PRId64
		       " AND ts < %" PRId64, rfrom, to, a, b);
	for (const char *p = bucket; *p; p++) {
		if (*p == 'M')
			strbuf__printf(raw, "intDiv(ts, %lld) * %lld", STORE_NS_MIN, STORE_NS_MIN);
		else
			strbuf__putc(raw, *p);
	}
	strbuf__putc(raw, ')');
	/* And where that rest can lie, so that ClickHouse skips the other granules. */
	if (step <= 0 || (step % STORE_NS_MIN == 0 && (from % STORE_NS_MIN) == 0) ||
	    (b - a) / step < MAX_PLAN_RANGES) {
		strbuf__printf(raw, " AND ((ts < %" PRId64 ") OR (ts >= %" PRId64 ")", a, b);
		if (step > 0 && !(step % STORE_NS_MIN == 0 && from % STORE_NS_MIN == 0)) {
			int64_t x = from + (a - from + step - 1) / step * step;

			for (; x < b; x += step) {
				int64_t m = _floor_m(x);

				if (m != x)
					strbuf__printf(raw, " OR (ts >= %" PRId64 " AND ts < %" PRId64
						       ")", m, (int64_t)(m + STORE_NS_MIN));
			}
		}
		strbuf__putc(raw, ')');
	}
	return true;
}

/* ---- stacks into a caller's profile ------------------------------------------- */

void ch__ex_free(struct exporter *ex)
{
	intern__free(ex->ids);
	free(ex->out_ids);
	free(ex->todo);
}

/* Notes a stack hash the caller will want; looked up by ch__ex_run(). */
int ch__ex_want(struct exporter *ex, uint64_t h)
{
	bool added;
	int64_t i;

	if (!ex->ids && !(ex->ids = intern__new()))
		return -ENOMEM;
	i = intern__add(ex->ids, &h, sizeof(h), &added);
	if (i < 0)
		return (int)i;
	if (!added)
		return 0;
	if ((uint32_t)i >= ex->cap) {
		uint32_t cap = ex->cap ? ex->cap * 2 : 1024;
		uint32_t *a = realloc(ex->out_ids, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		ex->out_ids = a;
		ex->cap = cap;
	}
	ex->out_ids[i] = UINT32_MAX;
	if (ex->ntodo == ex->cap_todo) {
		uint32_t cap = ex->cap_todo ? ex->cap_todo * 2 : 1024;
		uint64_t *a = realloc(ex->todo, cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		ex->todo = a;
		ex->cap_todo = cap;
	}
	ex->todo[ex->ntodo++] = h;
	return 0;
}

/* The id in out of a stack ch__ex_run() exported. */
uint32_t ch__ex_id(const struct exporter *ex, uint64_t h)
{
	int64_t i = intern__find(ex->ids, &h, sizeof(h));

	return i < 0 ? UINT32_MAX : ex->out_ids[i];
}

static void _id_list(struct strbuf *sql, const uint64_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		strbuf__printf(sql, "%s%" PRIu64, i ? "," : "", ids[i]);
}

/*
 * " WHERE id IN (...)" for the n ids wanted from table, or nothing when
 * they are an eighth of its rows or more: ClickHouse parses a long IN list
 * several times slower than it reads the whole table (bench/README.md),
 * and the reader skips what it did not ask for.
 */
#define SCAN_MIN 4096

int ch__where_ids(struct ch_store *st, const char *table, const uint64_t *ids, uint32_t n,
		  struct strbuf *sql)
{
	char q[160];
	int64_t rows = 0;
	int err;

	if (n >= SCAN_MIN) {
		snprintf(q, sizeof(q), "SELECT toInt64(count()) FROM %s.%s FORMAT RowBinary", st->db,
			 table);
		err = ch__select_i64(st, q, 0, &rows);
		if (err)
			return err;
		if ((int64_t)n * 8 >= rows)
			return 0;
	}
	strbuf__puts(sql, " WHERE id IN (");
	_id_list(sql, ids, n);
	strbuf__putc(sql, ')');
	return 0;
}

static int _seq_push(uint32_t **a, size_t *n, size_t *cap, uint32_t v)
{
	if (*n == *cap) {
		size_t c = *cap ? *cap * 2 : 4096;
		uint32_t *p = realloc(*a, c * sizeof(*p));

		if (!p)
			return -ENOMEM;
		*a = p;
		*cap = c;
	}
	(*a)[(*n)++] = v;
	return 0;
}

/*
 * Reads the stacks noted since the last run, and their frames, into out.
 * Pass 1 looks each frame of a wanted stack up once and keeps where it
 * went, in order; pass 2 reads the same rows again and takes those places
 * instead of looking every frame of every stack up a second time.
 */
int ch__ex_run(struct exporter *ex)
{
	struct ch_store *st = ex->st;
	struct strbuf sql = STRBUF_INIT, sresp = STRBUF_INIT, fresp = STRBUF_INIT;
	struct u64map fidx = { 0 };		/* frame hash -> index in fout */
	uint32_t *fout = NULL, nf = 0, capf = 0, *frames = NULL, *fseq = NULL;
	uint64_t *fwant = NULL;
	size_t nseq = 0, capseq = 0, pos = 0;
	struct rbr r;
	int err = 0;

	if (!ex->ntodo)
		return 0;
	strbuf__printf(&sql, "SELECT id, frames FROM %s.stacks", st->db);
	err = ch__where_ids(st, "stacks", ex->todo, ex->ntodo, &sql);
	strbuf__puts(&sql, " FORMAT RowBinary");
	err = err ?: sql.oom ? -ENOMEM : ch__select(st, sql.buf, &sresp);
	if (err)
		goto out;
	/* Pass 1: the frames they need. */
	r = ch__reader(&sresp);
	while (rbr__more(&r)) {
		uint64_t h = rbr__u64(&r), n = rbr__varint(&r);
		bool wanted = intern__find(ex->ids, &h, sizeof(h)) >= 0;

		for (uint64_t i = 0; i < n && !r.bad; i++) {
			uint64_t fh = rbr__u64(&r);
			bool added;
			uint64_t *k;

			if (!wanted)
				continue;
			k = u64map__upsert(&fidx, fh, &added);
			if (k && added)
				*k = nf;
			if (!k || _seq_push(&fseq, &nseq, &capseq, (uint32_t)*k)) {
				err = -ENOMEM;
				goto out;
			}
			if (!added)
				continue;
			if (nf == capf) {
				uint32_t cap = capf ? capf * 2 : 1024;
				uint32_t *a = realloc(fout, cap * sizeof(*a));
				uint64_t *w = realloc(fwant, cap * sizeof(*w));

				if (a)
					fout = a;
				if (w)
					fwant = w;
				if (!a || !w) {
					err = -ENOMEM;
					goto out;
				}
				capf = cap;
			}
			fout[nf] = UINT32_MAX;
			fwant[nf++] = fh;
		}
	}
	if (r.bad) {
		err = -EIO;
		goto out;
	}
	if (nf) {
		sql.len = 0;
		strbuf__printf(&sql, "SELECT id, kind, has_mapping, path, build_id, addr, function,"
			       " file, line FROM %s.frames", st->db);
		err = ch__where_ids(st, "frames", fwant, nf, &sql);
		strbuf__puts(&sql, " FORMAT RowBinary");
		err = err ?: sql.oom ? -ENOMEM : ch__select(st, sql.buf, &fresp);
		if (err)
			goto out;
		r = ch__reader(&fresp);
		while (rbr__more(&r)) {
			uint64_t fh = rbr__u64(&r);
			uint8_t kind = rbr__u8(&r), has_map = rbr__u8(&r);
			const char *path = rbr__str(&r), *bid = rbr__str(&r);
			uint64_t addr = rbr__u64(&r);
			const char *fn = rbr__str(&r), *file = rbr__str(&r);
			uint32_t line = rbr__u32(&r), mapping = PROFILE_NO_MAPPING;
			const uint64_t *k = u64map__get(&fidx, fh);
			int64_t id;

			if (r.bad || kind >= FRAME_KIND_MAX) {
				err = -EIO;
				goto out;
			}
			if (!k || fout[*k] != UINT32_MAX)
				continue;	/* not asked for, or a copy not merged yet */
			if (has_map) {
				id = profile__intern_mapping(ex->out, path, bid);
				if (id < 0) {
					err = (int)id;
					goto out;
				}
				mapping = (uint32_t)id;
			}
			id = profile__intern_named_frame(ex->out, (enum frame_kind)kind, mapping, addr,
							 fn, file, line);
			if (id < 0) {
				err = (int)id;
				goto out;
			}
			fout[*k] = (uint32_t)id;
		}
		if (r.bad) {
			err = -EIO;
			goto out;
		}
	}
	/* Pass 2: the stacks, in out's frame ids. */
	r = ch__reader(&sresp);
	frames = malloc((nf + 1) * sizeof(*frames));
	if (!frames) {
		err = -ENOMEM;
		goto out;
	}
	while (rbr__more(&r)) {
		uint64_t h = rbr__u64(&r), n = rbr__varint(&r);
		int64_t k = intern__find(ex->ids, &h, sizeof(h)), id;
		uint32_t *fr = frames, *big = NULL;

		if (k < 0) {	/* a row of the whole table, not asked for */
			for (uint64_t i = 0; i < n && !r.bad; i++)
				rbr__u64(&r);
			continue;
		}
		if (n > nf) {
			big = malloc(n * sizeof(*big));
			if (!big) {
				err = -ENOMEM;
				goto out;
			}
			fr = big;
		}
		for (uint64_t i = 0; i < n && !r.bad; i++) {
			/* The frame pass 1 looked up at this place. */
			uint64_t fh = rbr__u64(&r);

			fr[i] = pos < nseq ? fout[fseq[pos++]] : UINT32_MAX;
			if (fr[i] == UINT32_MAX) {
				pr_warn("store: clickhouse: frame %016llx is missing\n",
					(unsigned long long)fh);
				r.bad = true;
			}
		}
		if (r.bad || k < 0) {
			free(big);
			err = -EIO;
			goto out;
		}
		if (ex->out_ids[k] == UINT32_MAX) {
			id = profile__intern_stack(ex->out, fr, (uint32_t)n);
			if (id < 0) {
				free(big);
				err = (int)id;
				goto out;
			}
			ex->out_ids[k] = (uint32_t)id;
		}
		free(big);
	}
	if (r.bad)
		err = -EIO;
	for (uint32_t i = 0; !err && i < ex->ntodo; i++) {
		if (ch__ex_id(ex, ex->todo[i]) == UINT32_MAX) {
			pr_warn("store: clickhouse: stack %016llx is missing\n",
				(unsigned long long)ex->todo[i]);
			err = -EIO;
		}
	}
	ex->ntodo = 0;
out:
	strbuf__release(&sql);
	strbuf__release(&sresp);
	strbuf__release(&fresp);
	u64map__free(&fidx);
	free(fout);
	free(fwant);
	free(fseq);
	free(frames);
	return err;
}
