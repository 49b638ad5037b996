// SPDX-License-Identifier: Apache-2.0
/*
 * ClickHouse backend: store__profile(), store__series(), store__samples()
 * and the label names and values of the series with samples in a window.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "clickhouse_impl.h"

#define CHUNK_ROWS	(1u << 20)	/* flame chart samples read per request, about */

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
	if (err || !ch__clamp(&from, &to) || (from < w && (from = w) >= to))
		goto out;
	err = ch__series_filter(st, sel, &filter, &none);
	if (err || none)
		goto out;
	use_roll = ch__plan(&roll, &raw, from, from, to, 0);
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
	r = ch__reader(&resp);
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
		if (!ch__matches(sel, s))
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
		err = ch__ex_want(&ex, pk->stack);
	}
	err = err ?: ch__ex_run(&ex);
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
			err = profile__add_sample(out, ch__ex_id(&ex, pk->stack), 0, 0, 0,
						  (uint32_t)comm, v);
	}
	if (!err && type == SAMPLE_CPU && any_period)
		out->period_ns = mixed ? 1 : first_period;
out:
	free(k);
	free(sums);
	intern__free(keys);
	ch__ex_free(&ex);
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
	if (err || !ch__clamp(&cfrom, &cto) || (cfrom < w && (cfrom = w) >= cto))
		goto out;
	err = ch__series_filter(st, sel, &filter, &none);
	if (err || none)
		goto out;
	use_roll = ch__plan(&roll, &raw, from, cfrom, cto, step);
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
	r = ch__reader(&resp);
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
		if (!ch__matches(sel, s))
			continue;
		if (by) {
			const char *val = ch__label_get((void *)s, by);

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
	if (err || !ch__clamp(&from, &to) || (from < w && (from = w) >= to))
		goto out;
	err = ch__series_filter(st, sel, &filter, &none);
	if (err || none)
		goto out;
	/* Per minute counts: the stride, and requests of bounded size. */
	strbuf__printf(&sql, "SELECT intDiv(ts, %lld) AS m, count() FROM %s.samples WHERE"
		       " type = %u AND ts >= %" PRId64 " AND ts < %" PRId64 "%s GROUP BY m"
		       " ORDER BY m FORMAT RowBinary", STORE_NS_MIN, st->db, type, from, to,
		       filter.buf ? filter.buf : "");
	err = sql.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	if (err)
		goto out;
	r = ch__reader(&resp);
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
		int64_t a = minutes[i] * STORE_NS_MIN, b;
		uint64_t n = 0;
		uint32_t nrows = 0;

		while (i < nmin && (!n || n + counts[i] <= CHUNK_ROWS))
			n += counts[i++];
		b = i < nmin ? minutes[i] * STORE_NS_MIN : to;
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
		r = ch__reader(&resp);
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
			err = ch__ex_want(&ex, s.stack);
			if (err)
				break;
		}
		if (!err && r.bad)
			err = -EIO;
		err = err ?: ch__ex_run(&ex);
		for (uint32_t j = 0; !err && j < nrows; j++) {
			const struct ch_series *s;

			err = ch__series(st, rows[j].series, &s);
			if (!err)
				err = cb(ctx, rows[j].ts, ch__ex_id(&ex, rows[j].stack), rows[j].tid,
					 rows[j].cpu, rows[j].value, s->comm, s->pid);
		}
	}
out:
	free(rows);
	free(minutes);
	free(counts);
	ch__ex_free(&ex);
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
	if (err || !ch__clamp(&from, &to) || (from < w && (from = w) >= to))
		goto out;
	strbuf__puts(&sql, "SELECT DISTINCT series FROM (");
	if (ch__plan(&roll, &raw, from, from, to, 0))
		strbuf__printf(&sql, "SELECT series FROM %s.samples_1m WHERE %s UNION ALL ",
			       st->db, roll.buf);
	strbuf__printf(&sql, "SELECT series FROM %s.samples WHERE %s) FORMAT RowBinary", st->db,
		       raw.buf);
	err = sql.oom || roll.oom || raw.oom ? -ENOMEM : ch__select(st, sql.buf, &resp);
	if (err)
		goto out;
	r = ch__reader(&resp);
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
