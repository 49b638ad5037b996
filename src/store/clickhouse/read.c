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
 * those of the raw samples.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "store/rowbinary.h"
#include "store/selector.h"
#include "clickhouse_impl.h"

#define MAX_PLAN_RANGES	2048	/* OR'd raw ranges that help ClickHouse skip data */
#define CHUNK_ROWS	(1u << 20)	/* flame chart samples read per request, about */

static bool _clamp(int64_t *from, int64_t *to)
{
	if (*from < 0)
		*from = 0;
	if (*to > CH_TS_LIMIT)
		*to = CH_TS_LIMIT;
	return *from < *to;
}

static inline int64_t _floor_m(int64_t t) { return t / CH_NS_MIN * CH_NS_MIN; }
static inline int64_t _ceil_m(int64_t t) { return _floor_m(t + CH_NS_MIN - 1); }

static inline struct rbr _reader(struct strbuf *b)
{
	return (struct rbr){ (uint8_t *)b->buf, (uint8_t *)b->buf + b->len, false };
}

/* ---- series selection ---------------------------------------------------------- */

static const char *_label_get(void *ctx, const char *name)
{
	const struct ch_series *s = ctx;

	for (size_t i = 0; i < s->nlabels; i++)
		if (!strcmp(s->names[i], name))
			return s->values[i];
	return NULL;
}

static bool _matches(const struct selector *sel, const struct ch_series *s)
{
	return !sel || !selector__count(sel) || selector__matches(sel, _label_get, (void *)s);
}

/*
 * " AND series IN (...)" for a selector, from every series ClickHouse
 * holds now; *none is set when no series matches (the answer is empty).
 */
static int _series_filter(struct ch_store *st, const struct selector *sel, struct strbuf *sql,
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
		if (!_matches(sel, st->series[i]))
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
static bool _plan(struct strbuf *roll, struct strbuf *raw, int64_t from, int64_t rfrom,
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
			 ", %" PRId64 ")", from, step, (int64_t)(CH_NS_MIN - 1), from, step);
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
			strbuf__printf(raw, "intDiv(ts, %lld) * %lld", CH_NS_MIN, CH_NS_MIN);
		else
			strbuf__putc(raw, *p);
	}
	strbuf__putc(raw, ')');
	/* And where that rest can lie, so that ClickHouse skips the other granules. */
	if (step <= 0 || (step % CH_NS_MIN == 0 && (from % CH_NS_MIN) == 0) ||
	    (b - a) / step < MAX_PLAN_RANGES) {
		strbuf__printf(raw, " AND ((ts < %" PRId64 ") OR (ts >= %" PRId64 ")", a, b);
		if (step > 0 && !(step % CH_NS_MIN == 0 && from % CH_NS_MIN == 0)) {
			int64_t x = from + (a - from + step - 1) / step * step;

			for (; x < b; x += step) {
				int64_t m = _floor_m(x);

				if (m != x)
					strbuf__printf(raw, " OR (ts >= %" PRId64 " AND ts < %" PRId64
						       ")", m, (int64_t)(m + CH_NS_MIN));
			}
		}
		strbuf__putc(raw, ')');
	}
	return true;
}

/* ---- stacks into a caller's profile ------------------------------------------- */

/* Stack hash -> id in out, for one query. */
struct exporter {
	struct ch_store *st;
	struct profile *out;
	struct intern *ids;		/* stack hash (8 bytes) -> index in out_ids */
	uint32_t *out_ids;
	uint32_t cap;
	uint64_t *todo;			/* hashes to look up */
	uint32_t ntodo, cap_todo;
};

static void _ex_free(struct exporter *ex)
{
	intern__free(ex->ids);
	free(ex->out_ids);
	free(ex->todo);
}

/* Notes a stack hash the caller will want; looked up by _ex_run(). */
static int _ex_want(struct exporter *ex, uint64_t h)
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

/* The id in out of a stack _ex_run() exported. */
static uint32_t _ex_id(const struct exporter *ex, uint64_t h)
{
	int64_t i = intern__find(ex->ids, &h, sizeof(h));

	return i < 0 ? UINT32_MAX : ex->out_ids[i];
}

static void _id_list(struct strbuf *sql, const uint64_t *ids, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		strbuf__printf(sql, "%s%" PRIu64, i ? "," : "", ids[i]);
}

/* Reads the stacks noted since the last run, and their frames, into out. */
static int _ex_run(struct exporter *ex)
{
	struct ch_store *st = ex->st;
	struct strbuf sql = STRBUF_INIT, sresp = STRBUF_INIT, fresp = STRBUF_INIT;
	struct intern *fidx = intern__new();	/* frame hash -> index in fout */
	uint32_t *fout = NULL, nf = 0, capf = 0, *frames = NULL;
	uint64_t *fwant = NULL;
	struct rbr r;
	int err = 0;

	if (!ex->ntodo) {
		intern__free(fidx);
		return 0;
	}
	if (!fidx) {
		err = -ENOMEM;
		goto out;
	}
	strbuf__printf(&sql, "SELECT id, frames FROM %s.stacks WHERE id IN (", st->db);
	_id_list(&sql, ex->todo, ex->ntodo);
	strbuf__puts(&sql, ") FORMAT RowBinary");
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &sresp);
	if (err)
		goto out;
	/* Pass 1: the frames they need. */
	r = _reader(&sresp);
	while (rbr__more(&r)) {
		uint64_t n;

		rbr__u64(&r);
		n = rbr__varint(&r);
		for (uint64_t i = 0; i < n && !r.bad; i++) {
			uint64_t fh = rbr__u64(&r);
			bool added;
			int64_t k = intern__add(fidx, &fh, sizeof(fh), &added);

			if (k < 0) {
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
			       " file, line FROM %s.frames WHERE id IN (", st->db);
		_id_list(&sql, fwant, nf);
		strbuf__puts(&sql, ") FORMAT RowBinary");
		err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &fresp);
		if (err)
			goto out;
		r = _reader(&fresp);
		while (rbr__more(&r)) {
			uint64_t fh = rbr__u64(&r);
			uint8_t kind = rbr__u8(&r), has_map = rbr__u8(&r);
			const char *path = rbr__str(&r), *bid = rbr__str(&r);
			uint64_t addr = rbr__u64(&r);
			const char *fn = rbr__str(&r), *file = rbr__str(&r);
			uint32_t line = rbr__u32(&r), mapping = PROFILE_NO_MAPPING;
			int64_t k = intern__find(fidx, &fh, sizeof(fh)), id;

			if (r.bad || k < 0 || kind >= FRAME_KIND_MAX) {
				err = -EIO;
				goto out;
			}
			if (fout[k] != UINT32_MAX)
				continue;	/* a copy not merged yet */
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
			fout[k] = (uint32_t)id;
		}
		if (r.bad) {
			err = -EIO;
			goto out;
		}
	}
	/* Pass 2: the stacks, in out's frame ids. */
	r = _reader(&sresp);
	frames = malloc((nf + 1) * sizeof(*frames));
	if (!frames) {
		err = -ENOMEM;
		goto out;
	}
	while (rbr__more(&r)) {
		uint64_t h = rbr__u64(&r), n = rbr__varint(&r);
		int64_t k = intern__find(ex->ids, &h, sizeof(h)), id;
		uint32_t *fr = frames, *big = NULL;

		if (n > nf) {
			big = malloc(n * sizeof(*big));
			if (!big) {
				err = -ENOMEM;
				goto out;
			}
			fr = big;
		}
		for (uint64_t i = 0; i < n && !r.bad; i++) {
			uint64_t fh = rbr__u64(&r);
			int64_t f = intern__find(fidx, &fh, sizeof(fh));

			fr[i] = f < 0 ? UINT32_MAX : fout[f];
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
		if (_ex_id(ex, ex->todo[i]) == UINT32_MAX) {
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
	intern__free(fidx);
	free(fout);
	free(fwant);
	free(frames);
	return err;
}

/* ---- store__profile ----------------------------------------------------------- */

struct pkey {
	uint64_t stack, period;
	char comm[];
};

int ch__profile(void *impl, int64_t from, int64_t to, const struct selector *sel, uint32_t type,
		struct profile *out)
{
	struct ch_store *st = impl;
	struct strbuf sql = STRBUF_INIT, roll = STRBUF_INIT, raw = STRBUF_INIT;
	struct strbuf filter = STRBUF_INIT, resp = STRBUF_INIT;
	struct exporter ex = { .st = st, .out = out };
	struct intern *keys = intern__new();
	uint64_t *sums = NULL, first_period = 0;
	uint32_t cap = 0;
	bool none, any_period = false, mixed = false, use_roll;
	struct pkey *k = NULL;
	int64_t w;
	struct rbr r;
	int err;

	if (!keys)
		return -ENOMEM;
	err = ch__watermark(st, "samples", &w);
	if (err || !_clamp(&from, &to) || (from < w && (from = w) >= to))
		goto out;
	err = _series_filter(st, sel, &filter, &none);
	if (err || none)
		goto out;
	use_roll = _plan(&roll, &raw, from, from, to, 0);
	strbuf__puts(&sql, "SELECT series, stack, toInt64(sum(value)) FROM (");
	if (use_roll)
		strbuf__printf(&sql, "SELECT series, stack, value FROM %s.samples_1m WHERE type = %u"
			       " AND %s%s UNION ALL ", st->db, type, roll.buf,
			       filter.buf ? filter.buf : "");
	strbuf__printf(&sql, "SELECT series, stack, value FROM %s.samples WHERE type = %u AND %s%s"
		       ") GROUP BY series, stack FORMAT RowBinary", st->db, type, raw.buf,
		       filter.buf ? filter.buf : "");
	err = sql.oom || roll.oom || raw.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	if (err)
		goto out;
	/* Sums by (stack, period, comm), as SQLite tags them. */
	r = _reader(&resp);
	while (!err && rbr__more(&r)) {
		uint64_t series = rbr__u64(&r), stack = rbr__u64(&r);
		int64_t v = rbr__i64(&r), id;
		const struct ch_series *s;
		size_t len;

		if (r.bad)
			break;
		err = ch__series(st, series, &s);
		if (err)
			break;
		if (!_matches(sel, s))
			continue;
		len = sizeof(*k) + strlen(s->comm) + 1;
		free(k);
		k = calloc(1, len);
		if (!k) {
			err = -ENOMEM;
			break;
		}
		k->stack = stack;
		if (type == SAMPLE_CPU)
			k->period = s->period_ns ? s->period_ns : out->period_ns;
		strcpy(k->comm, s->comm);
		id = intern__add(keys, k, len, NULL);
		if (id < 0) {
			err = (int)id;
			break;
		}
		if ((uint32_t)id >= cap) {
			uint32_t c = cap ? cap * 2 : 1024;
			uint64_t *a = realloc(sums, c * sizeof(*a));

			if (!a) {
				err = -ENOMEM;
				break;
			}
			memset(a + cap, 0, (c - cap) * sizeof(*a));
			sums = a;
			cap = c;
		}
		sums[id] += (uint64_t)v;
	}
	if (!err && r.bad)
		err = -EIO;
	for (uint32_t i = 0; !err && i < intern__count(keys); i++) {
		const struct pkey *pk = intern__key(keys, i, NULL);

		if (!sums[i])
			continue;
		if (!any_period) {
			first_period = pk->period;
			any_period = true;
		} else if (pk->period != first_period) {
			mixed = true;
		}
		err = _ex_want(&ex, pk->stack);
	}
	err = err ?: _ex_run(&ex);
	for (uint32_t i = 0; !err && i < intern__count(keys); i++) {
		const struct pkey *pk = intern__key(keys, i, NULL);
		uint64_t v = sums[i];
		int64_t comm;

		if (!v)
			continue;
		if (mixed && __builtin_mul_overflow(v, pk->period, &v))
			v = UINT64_MAX;
		comm = profile__intern_string(out, pk->comm);
		if (comm < 0)
			err = (int)comm;
		else
			err = profile__add_sample(out, _ex_id(&ex, pk->stack), 0, 0, 0,
						  (uint32_t)comm, v);
	}
	if (!err && type == SAMPLE_CPU && any_period)
		out->period_ns = mixed ? 1 : first_period;
out:
	free(k);
	free(sums);
	intern__free(keys);
	_ex_free(&ex);
	strbuf__release(&sql);
	strbuf__release(&roll);
	strbuf__release(&raw);
	strbuf__release(&filter);
	strbuf__release(&resp);
	return err;
}

/* ---- store__series ------------------------------------------------------------ */

struct gb {
	uint32_t group;
	uint32_t pad;
	int64_t bucket;
	int64_t sum;
};

static int _by_group_bucket(const void *pa, const void *pb)
{
	const struct gb *a = pa, *b = pb;

	if (a->group != b->group)
		return a->group < b->group ? -1 : 1;
	return (a->bucket > b->bucket) - (a->bucket < b->bucket);
}

struct gname {
	const char *name;
	uint32_t id;
};

static int _by_gname(const void *a, const void *b)
{
	return strcmp(((const struct gname *)a)->name, ((const struct gname *)b)->name);
}

int ch__query_series(void *impl, int64_t from, int64_t to, int64_t step,
		     const struct selector *sel, uint32_t type, const char *by,
		     int (*cb)(void *ctx, const char *group, int64_t bucket_start, int64_t sum),
		     void *ctx)
{
	struct ch_store *st = impl;
	struct strbuf sql = STRBUF_INIT, roll = STRBUF_INIT, raw = STRBUF_INIT;
	struct strbuf filter = STRBUF_INIT, resp = STRBUF_INIT;
	struct intern *groups = intern__new(), *cells = intern__new();
	struct gb *res = NULL;
	struct gname *names = NULL;
	uint32_t *rank = NULL, nres = 0, cap = 0;
	int64_t cfrom = from, cto = to, w;
	bool none, use_roll;
	struct rbr r;
	int err = -ENOMEM;

	if (!groups || !cells)
		goto out;
	err = ch__watermark(st, "samples", &w);
	if (err || !_clamp(&cfrom, &cto) || (cfrom < w && (cfrom = w) >= cto))
		goto out;
	err = _series_filter(st, sel, &filter, &none);
	if (err || none)
		goto out;
	use_roll = _plan(&roll, &raw, from, cfrom, cto, step);
	strbuf__puts(&sql, "SELECT series, b, toInt64(sum(value)) FROM (");
	if (use_roll)
		strbuf__printf(&sql, "SELECT series, intDiv(minute - %" PRId64 ", %" PRId64
			       ") AS b, value FROM %s.samples_1m WHERE type = %u AND %s%s"
			       " UNION ALL ", from, step, st->db, type, roll.buf,
			       filter.buf ? filter.buf : "");
	strbuf__printf(&sql, "SELECT series, intDiv(ts - %" PRId64 ", %" PRId64 ") AS b, value"
		       " FROM %s.samples WHERE type = %u AND %s%s) GROUP BY series, b"
		       " FORMAT RowBinary", from, step, st->db, type, raw.buf,
		       filter.buf ? filter.buf : "");
	err = sql.oom || roll.oom || raw.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	if (err)
		goto out;
	r = _reader(&resp);
	while (!err && rbr__more(&r)) {
		uint64_t series = rbr__u64(&r);
		int64_t b = rbr__i64(&r), v = rbr__i64(&r), g, c;
		const struct ch_series *s;
		const char *group = "";
		struct gb key;

		if (r.bad)
			break;
		err = ch__series(st, series, &s);
		if (err)
			break;
		if (!_matches(sel, s))
			continue;
		if (by) {
			const char *val = _label_get((void *)s, by);

			group = val ? val : "";
		}
		g = intern__add(groups, group, strlen(group) + 1, NULL);
		if (g < 0) {
			err = (int)g;
			break;
		}
		key = (struct gb){ .group = (uint32_t)g, .bucket = b };
		c = intern__add(cells, &key, sizeof(key), NULL);
		if (c < 0) {
			err = (int)c;
			break;
		}
		if ((uint32_t)c >= cap) {
			uint32_t nc = cap ? cap * 2 : 1024;
			struct gb *a = realloc(res, nc * sizeof(*a));

			if (!a) {
				err = -ENOMEM;
				break;
			}
			res = a;
			cap = nc;
		}
		if ((uint32_t)c == nres) {
			res[nres] = key;
			nres++;
		}
		res[c].sum += v;
	}
	if (!err && r.bad)
		err = -EIO;
	if (err)
		goto out;
	/* Groups in byte order, then buckets. */
	{
		uint32_t ng = intern__count(groups);

		names = malloc((ng + 1) * sizeof(*names));
		rank = malloc((ng + 1) * sizeof(*rank));
		if (!names || !rank) {
			err = -ENOMEM;
			goto out;
		}
		for (uint32_t i = 0; i < ng; i++)
			names[i] = (struct gname){ intern__key(groups, i, NULL), i };
		qsort(names, ng, sizeof(*names), _by_gname);
		for (uint32_t i = 0; i < ng; i++)
			rank[names[i].id] = i;
		for (uint32_t i = 0; i < nres; i++)
			res[i].group = rank[res[i].group];
	}
	qsort(res, nres, sizeof(*res), _by_group_bucket);
	for (uint32_t i = 0; !err && i < nres; i++)
		if (res[i].sum)
			err = cb(ctx, names[res[i].group].name, from + res[i].bucket * step,
				 res[i].sum);
out:
	free(res);
	free(names);
	free(rank);
	intern__free(groups);
	intern__free(cells);
	strbuf__release(&sql);
	strbuf__release(&roll);
	strbuf__release(&raw);
	strbuf__release(&filter);
	strbuf__release(&resp);
	return err;
}

/* ---- store__samples ------------------------------------------------------------- */

struct srow {
	int64_t ts, value;
	uint64_t series, stack;
	uint32_t tid, cpu;
};

int ch__samples(void *impl, int64_t from, int64_t to, const struct selector *sel, uint32_t type,
		uint32_t max_samples, struct profile *dict,
		int (*cb)(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
			  int64_t value, const char *comm, uint32_t pid),
		void *ctx, uint32_t *stride)
{
	struct ch_store *st = impl;
	struct strbuf sql = STRBUF_INIT, filter = STRBUF_INIT, resp = STRBUF_INIT;
	struct exporter ex = { .st = st, .out = dict };
	struct srow *rows = NULL;
	int64_t *minutes = NULL, w;
	uint64_t *counts = NULL, total = 0, k = 1, idx = 0;
	uint32_t nmin = 0, cap_min = 0, cap_rows = 0;
	bool none;
	struct rbr r;
	int err;

	err = ch__watermark(st, "samples", &w);
	if (err || !_clamp(&from, &to) || (from < w && (from = w) >= to))
		goto out;
	err = _series_filter(st, sel, &filter, &none);
	if (err || none)
		goto out;
	/* Per minute counts: the stride, and requests of bounded size. */
	strbuf__printf(&sql, "SELECT intDiv(ts, %lld) AS m, count() FROM %s.samples WHERE"
		       " type = %u AND ts >= %" PRId64 " AND ts < %" PRId64 "%s GROUP BY m"
		       " ORDER BY m FORMAT RowBinary", CH_NS_MIN, st->db, type, from, to,
		       filter.buf ? filter.buf : "");
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	if (err)
		goto out;
	r = _reader(&resp);
	while (rbr__more(&r)) {
		int64_t m = rbr__i64(&r);
		uint64_t c = rbr__u64(&r);

		if (nmin == cap_min) {
			uint32_t nc = cap_min ? cap_min * 2 : 256;
			int64_t *a = realloc(minutes, nc * sizeof(*a));
			uint64_t *b = realloc(counts, nc * sizeof(*b));

			if (a)
				minutes = a;
			if (b)
				counts = b;
			if (!a || !b) {
				err = -ENOMEM;
				goto out;
			}
			cap_min = nc;
		}
		minutes[nmin] = m;
		counts[nmin++] = c;
		total += c;
	}
	if (r.bad) {
		err = -EIO;
		goto out;
	}
	/*
	 * A selector's series were matched above; without one every series
	 * counts, so counts and rows agree either way.
	 */
	if (max_samples && total > max_samples)
		k = (total + max_samples - 1) / max_samples;
	if (k > UINT32_MAX)
		k = UINT32_MAX;
	*stride = (uint32_t)k;
	for (uint32_t i = 0; !err && i < nmin;) {
		int64_t a = minutes[i] * CH_NS_MIN, b;
		uint64_t n = 0;
		uint32_t nrows = 0;

		while (i < nmin && (!n || n + counts[i] <= CHUNK_ROWS))
			n += counts[i++];
		b = i < nmin ? minutes[i] * CH_NS_MIN : to;
		if (a < from)
			a = from;
		if (b > to)
			b = to;
		sql.len = 0;
		resp.len = 0;
		strbuf__printf(&sql, "SELECT ts, series, stack, tid, cpu, value FROM %s.samples"
			       " WHERE type = %u AND ts >= %" PRId64 " AND ts < %" PRId64 "%s"
			       " ORDER BY ts, series, tid, cpu, stack, value FORMAT RowBinary",
			       st->db, type, a, b, filter.buf ? filter.buf : "");
		err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
		if (err)
			break;
		r = _reader(&resp);
		while (rbr__more(&r)) {
			struct srow s;

			/* One statement each: initializers are evaluated in no fixed order. */
			s.ts = rbr__i64(&r);
			s.series = rbr__u64(&r);
			s.stack = rbr__u64(&r);
			s.tid = rbr__u32(&r);
			s.cpu = rbr__u32(&r);
			s.value = rbr__i64(&r);

			if (r.bad)
				break;
			if (idx++ % k)
				continue;
			if (nrows == cap_rows) {
				uint32_t nc = cap_rows ? cap_rows * 2 : 4096;
				struct srow *p = realloc(rows, nc * sizeof(*p));

				if (!p) {
					err = -ENOMEM;
					break;
				}
				rows = p;
				cap_rows = nc;
			}
			rows[nrows++] = s;
			err = _ex_want(&ex, s.stack);
			if (err)
				break;
		}
		if (!err && r.bad)
			err = -EIO;
		err = err ?: _ex_run(&ex);
		for (uint32_t j = 0; !err && j < nrows; j++) {
			const struct ch_series *s;

			err = ch__series(st, rows[j].series, &s);
			if (!err)
				err = cb(ctx, rows[j].ts, _ex_id(&ex, rows[j].stack), rows[j].tid,
					 rows[j].cpu, rows[j].value, s->comm, s->pid);
		}
	}
out:
	free(rows);
	free(minutes);
	free(counts);
	_ex_free(&ex);
	strbuf__release(&sql);
	strbuf__release(&filter);
	strbuf__release(&resp);
	return err;
}

/* ---- labels --------------------------------------------------------------------- */

static int _by_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Label names (name NULL) or the values of label name, over series with samples in the window. */
static int _labels(struct ch_store *st, const char *name, int64_t from, int64_t to,
		   int (*cb)(void *ctx, const char *s), void *ctx)
{
	struct strbuf sql = STRBUF_INIT, roll = STRBUF_INIT, raw = STRBUF_INIT;
	struct strbuf resp = STRBUF_INIT;
	struct intern *set = intern__new();
	const char **sorted = NULL;
	int64_t w;
	struct rbr r;
	int err = -ENOMEM;

	if (!set)
		goto out;
	err = ch__watermark(st, "samples", &w);
	if (err || !_clamp(&from, &to) || (from < w && (from = w) >= to))
		goto out;
	strbuf__puts(&sql, "SELECT DISTINCT series FROM (");
	if (_plan(&roll, &raw, from, from, to, 0))
		strbuf__printf(&sql, "SELECT series FROM %s.samples_1m WHERE %s UNION ALL ",
			       st->db, roll.buf);
	strbuf__printf(&sql, "SELECT series FROM %s.samples WHERE %s) FORMAT RowBinary", st->db,
		       raw.buf);
	err = sql.oom || roll.oom || raw.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	if (err)
		goto out;
	r = _reader(&resp);
	while (!err && rbr__more(&r)) {
		uint64_t id = rbr__u64(&r);
		const struct ch_series *s;

		if (r.bad)
			break;
		err = ch__series(st, id, &s);
		for (size_t j = 0; !err && j < s->nlabels; j++) {
			const char *t = name ? (strcmp(s->names[j], name) ? NULL : s->values[j])
					     : s->names[j];

			if (t && intern__add(set, t, strlen(t) + 1, NULL) < 0)
				err = -ENOMEM;
		}
	}
	if (!err && r.bad)
		err = -EIO;
	if (err)
		goto out;
	sorted = malloc((intern__count(set) + 1) * sizeof(*sorted));
	if (!sorted) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < intern__count(set); i++)
		sorted[i] = intern__key(set, i, NULL);
	qsort(sorted, intern__count(set), sizeof(*sorted), _by_str);
	for (uint32_t i = 0; !err && i < intern__count(set); i++)
		err = cb(ctx, sorted[i]);
out:
	free(sorted);
	intern__free(set);
	strbuf__release(&sql);
	strbuf__release(&roll);
	strbuf__release(&raw);
	strbuf__release(&resp);
	return err;
}

int ch__label_names(void *impl, int64_t from, int64_t to,
		    int (*cb)(void *ctx, const char *name), void *ctx)
{
	return _labels(impl, NULL, from, to, cb, ctx);
}

int ch__label_values(void *impl, const char *name, int64_t from, int64_t to,
		     int (*cb)(void *ctx, const char *value), void *ctx)
{
	return _labels(impl, name, from, to, cb, ctx);
}

/* ---- GPU intervals --------------------------------------------------------------- */

struct grow {
	struct store_gpu_interval iv;
	uint64_t series, stack;
	uint8_t has;
};

int ch__gpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
		      struct profile *dict, uint32_t limit,
		      int (*cb)(void *ctx, const struct store_gpu_interval *iv), void *ctx)
{
	struct ch_store *st = impl;
	struct strbuf sql = STRBUF_INIT, filter = STRBUF_INIT, resp = STRBUF_INIT;
	struct exporter ex = { .st = st, .out = dict };
	struct grow *rows = NULL;
	uint32_t n = 0, nrows = 0, cap = 0;
	int64_t w;
	bool none;
	struct rbr r;
	int err;

	err = ch__watermark(st, "samples", &w);
	if (err || (from < w && (from = w) >= to))
		goto out;
	err = _series_filter(st, sel, &filter, &none);
	if (err || none)
		goto out;
	strbuf__printf(&sql, "SELECT start, end, series, device, stream, kind, name, has_stack,"
		       " stack, correlation, bytes, weight FROM %s.gpu_intervals FINAL"
		       " WHERE start >= %" PRId64 " AND start < %" PRId64 "%s ORDER BY start,"
		       " series, device, stream, correlation, kind", st->db, from, to,
		       filter.buf ? filter.buf : "");
	if (limit)
		strbuf__printf(&sql, " LIMIT %u", limit + 1);
	strbuf__puts(&sql, " FORMAT RowBinary");
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	if (err)
		goto out;
	/* All rows first (names stay in resp), then their stacks, then the callbacks. */
	r = _reader(&resp);
	while (rbr__more(&r)) {
		struct grow g = { .iv = { .stack = STORE_NO_STACK } };

		g.iv.start_ns = rbr__i64(&r);
		g.iv.end_ns = rbr__i64(&r);
		g.series = rbr__u64(&r);
		g.iv.device = rbr__u32(&r);
		g.iv.stream = rbr__u32(&r);
		g.iv.kind = rbr__u8(&r);
		g.iv.name = rbr__str(&r);
		g.has = rbr__u8(&r);
		g.stack = rbr__u64(&r);
		g.iv.correlation = rbr__u64(&r);
		g.iv.bytes = rbr__u64(&r);
		g.iv.weight = rbr__u32(&r);
		if (r.bad)
			break;
		if (nrows == cap) {
			uint32_t nc = cap ? cap * 2 : 1024;
			struct grow *a = realloc(rows, nc * sizeof(*a));

			if (!a) {
				err = -ENOMEM;
				goto out;
			}
			rows = a;
			cap = nc;
		}
		rows[nrows++] = g;
		if (dict && g.has && (err = _ex_want(&ex, g.stack)))
			goto out;
	}
	if (r.bad) {
		err = -EIO;
		goto out;
	}
	err = _ex_run(&ex);
	for (uint32_t i = 0; !err && i < nrows; i++) {
		struct store_gpu_interval *iv = &rows[i].iv;
		const struct ch_series *s;

		err = ch__series(st, rows[i].series, &s);
		if (err)
			break;
		if (!_matches(sel, s))
			continue;
		if (limit && n++ >= limit) {
			err = -E2BIG;
			break;
		}
		iv->pid = s->pid;
		iv->comm = s->comm;
		if (dict && rows[i].has)
			iv->stack = _ex_id(&ex, rows[i].stack);
		err = cb(ctx, iv);
	}
out:
	free(rows);
	_ex_free(&ex);
	strbuf__release(&sql);
	strbuf__release(&filter);
	strbuf__release(&resp);
	return err;
}

/* ---- metric points ---------------------------------------------------------------- */

struct mx_get {
	const struct ch_series *s;
	const char *name;
};

static const char *_mx_get(void *ctx, const char *label)
{
	const struct mx_get *g = ctx;

	if (!strcmp(label, "__name__"))
		return g->name;
	return _label_get((void *)g->s, label);
}

int ch__metrics(void *impl, int64_t from, int64_t to, int64_t step, const struct selector *sel,
		const struct store_metric_visitor *v)
{
	struct ch_store *st = impl;
	struct strbuf sql = STRBUF_INIT, resp = STRBUF_INIT;
	const char *cur_name = NULL;
	uint64_t cur_series = 0;
	struct store_metric_fold fold = { .v = v, .step = step };
	int64_t w;
	bool match = false;
	struct rbr r;
	int err;

	err = ch__watermark(st, "metrics", &w);
	if (err || (from < w && (from = w) >= to))
		goto out;
	fold.from = from;
	strbuf__printf(&sql, "SELECT series, name, ts, value FROM %s.metric_points FINAL"
		       " WHERE ts >= %" PRId64 " AND ts < %" PRId64 " ORDER BY series, name, ts"
		       " FORMAT RowBinary", st->db, from, to);
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	r = _reader(&resp);
	while (!err && rbr__more(&r)) {
		uint64_t series = rbr__u64(&r);
		const char *name = rbr__str(&r);
		int64_t ts = rbr__i64(&r);
		double val = rbr__f64(&r);

		if (r.bad)
			break;
		if (!cur_name || series != cur_series || strcmp(name, cur_name)) {
			const struct ch_series *s;

			err = store_metric_fold__flush(&fold);
			if (err)
				break;
			cur_name = name;
			cur_series = series;
			err = ch__series(st, series, &s);
			if (err)
				break;
			{
				struct mx_get g = { s, name };

				match = !sel || selector__matches(sel, _mx_get, &g);
			}
			if (match)
				err = v->series(v->ctx, name, s->names, s->values, s->nlabels);
			if (err)
				break;
		}
		if (!match)
			continue;
		err = store_metric_fold__add(&fold, ts, val);
	}
	if (!err && r.bad)
		err = -EIO;
	if (!err)
		err = store_metric_fold__flush(&fold);
out:
	strbuf__release(&sql);
	strbuf__release(&resp);
	return err;
}

int ch__metrics_latest(void *impl, int64_t since,
		       int (*cb)(void *ctx, const char *name, const char *const *lnames,
				 const char *const *lvalues, size_t n, int64_t ts, double value),
		       void *ctx)
{
	struct ch_store *st = impl;
	struct strbuf sql = STRBUF_INIT, resp = STRBUF_INIT;
	int64_t w;
	struct rbr r;
	int err;

	err = ch__watermark(st, "metrics", &w);
	if (err)
		goto out;
	if (since < w)
		since = w;
	strbuf__printf(&sql, "SELECT series, name, max(ts), argMax(value, ts) FROM"
		       " %s.metric_points FINAL WHERE ts >= %" PRId64 " GROUP BY series, name"
		       " ORDER BY name, series FORMAT RowBinary", st->db, since);
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	r = _reader(&resp);
	while (!err && rbr__more(&r)) {
		uint64_t series = rbr__u64(&r);
		const char *name = rbr__str(&r);
		int64_t ts = rbr__i64(&r);
		double val = rbr__f64(&r);
		const struct ch_series *s;

		if (r.bad)
			break;
		err = ch__series(st, series, &s);
		if (!err)
			err = cb(ctx, name, s->names, s->values, s->nlabels, ts, val);
	}
	if (!err && r.bad)
		err = -EIO;
out:
	strbuf__release(&sql);
	strbuf__release(&resp);
	return err;
}

/* ---- CPU intervals ----------------------------------------------------------------- */

struct civ_row {
	int64_t start, end;
	const char *node, *comm;
	uint64_t series;
	uint32_t cpu, tid, pid;
};

static int _civ_emit(const struct civ_row *r, int64_t from, int64_t to,
		     int (*cb)(void *ctx, const struct store_cpu_interval *iv), void *ctx)
{
	struct store_cpu_interval iv = {
		.start_ns = r->start < from ? from : r->start,
		.end_ns = r->end > to ? to : r->end,
		.cpu = r->cpu, .pid = r->pid, .tid = r->tid,
		.comm = r->comm, .node = r->node,
	};

	return cb(ctx, &iv);
}

int ch__cpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
		      int64_t cpu, int (*cb)(void *ctx, const struct store_cpu_interval *iv),
		      void *ctx)
{
	struct ch_store *st = impl;
	struct strbuf sql = STRBUF_INIT, filter = STRBUF_INIT, resp = STRBUF_INIT;
	struct civ_row pend = { 0 };
	bool have = false, none;
	int64_t w, lo;
	struct rbr r;
	int err;

	err = ch__watermark(st, "samples", &w);
	if (err || !_clamp(&from, &to))
		goto out;
	err = _series_filter(st, sel, &filter, &none);
	if (err || none)
		goto out;
	/* No piece starting earlier than a chunk before the window reaches it. */
	lo = from > STORE_CPU_INTERVAL_CHUNK_NS ? from - STORE_CPU_INTERVAL_CHUNK_NS : 0;
	if (lo < w)
		lo = w;
	strbuf__printf(&sql, "SELECT start, dur, node, cpu, series, tid, comm FROM"
		       " %s.cpu_intervals FINAL WHERE start >= %" PRId64 " AND start < %" PRId64
		       " AND start + dur > %" PRId64 "%s", st->db, lo, to, from,
		       filter.buf ? filter.buf : "");
	if (cpu >= 0)
		strbuf__printf(&sql, " AND cpu = %" PRId64, cpu);
	strbuf__puts(&sql, " ORDER BY node, cpu, start FORMAT RowBinary");
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	r = _reader(&resp);
	while (!err && rbr__more(&r)) {
		struct civ_row row;
		const struct ch_series *s;

		row.start = rbr__i64(&r);
		row.end = row.start + rbr__i64(&r);
		row.node = rbr__str(&r);
		row.cpu = rbr__u32(&r);
		row.series = rbr__u64(&r);
		row.tid = rbr__u32(&r);
		row.comm = rbr__str(&r);
		if (r.bad)
			break;
		err = ch__series(st, row.series, &s);
		if (err)
			break;
		if (!_matches(sel, s))
			continue;
		row.pid = s->pid;
		/* The pieces of one interval, written together, join up again. */
		if (have && pend.end == row.start && !strcmp(pend.node, row.node) &&
		    pend.cpu == row.cpu && pend.series == row.series && pend.tid == row.tid &&
		    !strcmp(pend.comm, row.comm)) {
			pend.end = row.end;
			continue;
		}
		if (have) {
			err = _civ_emit(&pend, from, to, cb, ctx);
			if (err)
				break;
		}
		pend = row;
		have = true;
	}
	if (!err && r.bad)
		err = -EIO;
	if (!err && have)
		err = _civ_emit(&pend, from, to, cb, ctx);
out:
	strbuf__release(&sql);
	strbuf__release(&filter);
	strbuf__release(&resp);
	return err;
}
