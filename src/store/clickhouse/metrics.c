// SPDX-License-Identifier: Apache-2.0
/*
 * ClickHouse backend: metric points over a window, and each series' newest
 * point for /metrics.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <string.h>

#include "store/selector.h"
#include "clickhouse_impl.h"

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
	return ch__label_get((void *)g->s, label);
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
	r = ch__reader(&resp);
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
	r = ch__reader(&resp);
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
