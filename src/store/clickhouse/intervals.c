// SPDX-License-Identifier: Apache-2.0
/*
 * ClickHouse backend: the GPU activity intervals and CPU busy intervals of
 * a window.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "clickhouse_impl.h"

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
	err = ch__series_filter(st, sel, &filter, &none);
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
	r = ch__reader(&resp);
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
		if (dict && g.has && (err = ch__ex_want(&ex, g.stack)))
			goto out;
	}
	if (r.bad) {
		err = -EIO;
		goto out;
	}
	err = ch__ex_run(&ex);
	for (uint32_t i = 0; !err && i < nrows; i++) {
		struct store_gpu_interval *iv = &rows[i].iv;
		const struct ch_series *s;

		err = ch__series(st, rows[i].series, &s);
		if (err)
			break;
		if (!ch__matches(sel, s))
			continue;
		if (limit && n++ >= limit) {
			err = -E2BIG;
			break;
		}
		iv->pid = s->pid;
		iv->comm = s->comm;
		if (dict && rows[i].has)
			iv->stack = ch__ex_id(&ex, rows[i].stack);
		err = cb(ctx, iv);
	}
out:
	free(rows);
	ch__ex_free(&ex);
	strbuf__release(&sql);
	strbuf__release(&filter);
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
	if (err || !ch__clamp(&from, &to))
		goto out;
	err = ch__series_filter(st, sel, &filter, &none);
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
	r = ch__reader(&resp);
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
		if (!ch__matches(sel, s))
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
