// SPDX-License-Identifier: Apache-2.0
/*
 * GPU metric points: GET /api/v1/gpu/metrics (series for the UI's charts)
 * and the GPU part of /metrics (each series' newest value).
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/strbuf.h"
#include "common/timeparse.h"
#include "format/prom_points.h"
#include "format/gpu_metrics.h"
#include "server/request.h"
#include "server/routes_gpu.h"
#include "store/selector.h"
#include "store/store.h"

/* Raw points (step=0) over a long window could be millions: refuse past this. */
#define MAX_POINTS 2000000
/* /metrics shows a series while its newest point is at most this old. */
#define LATEST_MAX_AGE_NS (5 * 60 * 1000000000LL)

struct gm_out {
	struct strbuf *sb;
	uint32_t nseries, npoints_series;
	uint64_t npoints;
	struct strbuf max;	/* the series' max column, appended at its end */
};

/* The shortest text that reads back as exactly v (15 to 17 digits). */
static void _shortest(struct strbuf *sb, double v)
{
	char buf[32];

	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, sizeof(buf), "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			break;
	}
	strbuf__puts(sb, buf);
}

static void _json_double(struct strbuf *sb, double v)
{
	if (isfinite(v))
		_shortest(sb, v);
	else
		strbuf__puts(sb, "null");
}

static void _end_series(struct gm_out *o)
{
	if (!o->nseries)
		return;
	strbuf__puts(o->sb, "],\"max\":[");
	strbuf__append(o->sb, o->max.buf ? o->max.buf : "", o->max.len);
	strbuf__puts(o->sb, "]}");
	o->max.len = 0;
	if (o->max.buf)
		o->max.buf[0] = '\0';
}

static int _gm_series(void *ctx, const char *name, const char *const *lnames,
		      const char *const *lvalues, size_t n)
{
	struct gm_out *o = ctx;

	_end_series(o);
	strbuf__puts(o->sb, o->nseries++ ? "," : "");
	strbuf__puts(o->sb, "{\"metric\":");
	strbuf__json_string(o->sb, name);
	strbuf__puts(o->sb, ",\"labels\":{");
	for (size_t i = 0; i < n; i++) {
		if (i)
			strbuf__putc(o->sb, ',');
		strbuf__json_string(o->sb, lnames[i]);
		strbuf__putc(o->sb, ':');
		strbuf__json_string(o->sb, lvalues[i]);
	}
	strbuf__puts(o->sb, "},\"points\":[");
	o->npoints_series = 0;
	return o->sb->oom ? -ENOMEM : 0;
}

static int _gm_point(void *ctx, int64_t ts, double avg, double max, uint32_t count)
{
	struct gm_out *o = ctx;

	if (++o->npoints > MAX_POINTS)
		return -E2BIG;
	if (o->npoints_series++) {
		strbuf__putc(o->sb, ',');
		strbuf__putc(&o->max, ',');
	}
	strbuf__printf(o->sb, "[%lld,", (long long)ts);
	_json_double(o->sb, avg);
	strbuf__putc(o->sb, ']');
	_json_double(&o->max, max);
	(void)count;
	return o->sb->oom || o->max.oom ? -ENOMEM : 0;
}

/*
 * query: a Prometheus-style series selector, optionally led by a metric
 * name: flamewatch_gpu_power_watts{gpu="0"}, {__name__=~"flamewatch_gpu_.*"},
 * {uuid="GPU-..."}. The name becomes a __name__ matcher.
 */
static int _query(struct request *r, struct selector **sel)
{
	const char *q = request__param(r, "query");
	struct strbuf text = STRBUF_INIT;
	char err[256];
	size_t n = 0;
	int rc = 0;

	*sel = NULL;
	if (!q)
		return 0;
	while (isspace((unsigned char)*q))
		q++;
	if (!q[0])
		return 0;
	while (isalnum((unsigned char)q[n]) || q[n] == '_' || q[n] == ':')
		n++;
	if (n) {
		const char *rest = q + n;

		while (isspace((unsigned char)*rest))
			rest++;
		strbuf__puts(&text, "{__name__=\"");
		strbuf__append(&text, q, n);
		strbuf__putc(&text, '"');
		if (*rest == '{') {
			const char *inner = rest + 1;

			while (isspace((unsigned char)*inner))
				inner++;
			if (*inner != '}')
				strbuf__putc(&text, ',');
			strbuf__puts(&text, inner);
		} else if (*rest) {
			request__error(r, 400, "query: expected '{' after the metric name");
			rc = -1;
			goto out;
		} else {
			strbuf__putc(&text, '}');
		}
	} else {
		strbuf__puts(&text, q);
	}
	if (text.oom) {
		request__error(r, 503, "out of memory");
		rc = -1;
		goto out;
	}
	*sel = selector__parse(text.buf, err, sizeof(err));
	if (!*sel) {
		request__error(r, 400, "query: %s", err);
		rc = -1;
	}
out:
	strbuf__release(&text);
	return rc;
}

void routes__gpu_metrics(struct request *r)
{
	const char *step_s = request__param(r, "step");
	struct strbuf sb = STRBUF_INIT;
	struct gm_out o = { .sb = &sb };
	struct store_metric_visitor v = { _gm_series, _gm_point, &o };
	struct selector *sel = NULL;
	int64_t from, to, step;
	int err;

	if (request__window(r, &from, &to) || _query(r, &sel))
		goto out;
	/* About 300 points across the window, at least one second each; 0: raw points. */
	step = (to - from) / 300;
	if (step < 1000000000LL)
		step = 1000000000LL;
	if (step_s && !strcmp(step_s, "0")) {
		step = 0;
	} else if (step_s && param__parse_duration(step_s, 0, 1000000, PARAM_MAX_DURATION_NS, &step)) {
		request__error(r, 400, "step: '%.64s' is not 0 (raw points) or a duration from 1ms "
			       "to 3650d (500ms, 10s, 1m)", step_s);
		goto out;
	}
	if (step && (to - from) / step > 100000) {
		request__error(r, 400, "step: %s makes more than 100000 points per series",
			       step_s ? step_s : "(default)");
		goto out;
	}
	strbuf__printf(&sb, "{\"from\":%lld,\"to\":%lld,\"step\":%lld,"
		       "\"aggregation\":{\"points\":\"avg\",\"max\":\"max\"},\"series\":[",
		       (long long)from, (long long)to, (long long)step);
	err = store__metrics(r->srv->store, from, to, step, sel, &v);
	if (err == -E2BIG) {
		request__error(r, 413, "more than %d points: ask for a larger step or a shorter "
			       "window", MAX_POINTS);
		goto out;
	}
	if (err) {
		request__error(r, err == -ENOMEM ? 503 : 500, "store: %s", strerror(-err));
		goto out;
	}
	_end_series(&o);
	strbuf__puts(&sb, "]}\n");
	request__reply_json(r, 200, &sb);
out:
	strbuf__release(&sb);
	strbuf__release(&o.max);
	selector__free(sel);
}

static int _latest(void *ctx, const char *name, const char *const *lnames,
		   const char *const *lvalues, size_t n, int64_t ts, double value)
{
	return prom_points__put(ctx, name, lnames, lvalues, n, NULL, ts, value);
}

void routes__gpu_prometheus(struct store *store, struct strbuf *out)
{
	struct prom_points *p = prom_points__new();
	struct timespec now;
	int err;

	if (!p) {
		out->oom = true;
		return;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	err = store__metrics_latest(store, (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec -
					   LATEST_MAX_AGE_NS, _latest, p);
	if (err)
		strbuf__printf(out, "# flamewatch: GPU metrics unavailable: %s\n", strerror(-err));
	else
		prom_points__write(p, out, gpu_metric__help, gpu_metric__type);
	prom_points__free(p);
}
