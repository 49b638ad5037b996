// SPDX-License-Identifier: Apache-2.0
/*
 * The read side of the API: flame graphs, series and labels (flame charts:
 * routes_flamechart.c).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/flametree.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "common/timeparse.h"
#include "format/flamegraph.h"
#include "format/folded.h"
#include "format/pprof.h"
#include "format/speedscope.h"
#include "server/request.h"
#include "server/routes.h"
#include "store/selector.h"
#include "store/store.h"

#define DEFAULT_MAX_NODES 20000
#define MAX_NODES 1000000
#define MAX_HZ 100000
#define MAX_POINTS 100000

/* Runs a FILE-based writer into memory and replies with its bytes. */
static void _reply_file_writer(struct request *r, const char *content_type,
			       int (*write)(const struct profile *, FILE *),
			       const struct profile *p)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int err;

	if (!f) {
		request__error(r, 500, "out of memory");
		return;
	}
	err = write(p, f);
	if (fclose(f) && !err)
		err = -EIO;
	if (err)
		request__error(r, 500, "cannot encode the profile: %s", strerror(-err));
	else
		request__reply(r, 200, content_type, buf, len);
	free(buf);
}

static int _speedscope_samples(const struct profile *p, FILE *f)
{
	return speedscope__write(p, "none", f);
}

static int _speedscope_ns(const struct profile *p, FILE *f)
{
	return speedscope__write(p, "nanoseconds", f);
}

/*
 * The store cuts the graph to max_nodes before it names frames, so a
 * window of many distinct stacks costs about what the kept nodes cost.
 */
static void _reply_flamegraph(struct request *r, int64_t from, int64_t to,
			      const struct selector *sel, uint32_t type, uint64_t max_nodes,
			      struct profile *p)
{
	struct strbuf sb = STRBUF_INIT;
	struct flametree t = { 0 };
	bool cpu_ns;
	int err;

	err = store__flamegraph(r->srv->store, from, to, sel, type, max_nodes, p, &t);
	if (err) {
		request__error(r, 500, "store: %s", strerror(-err));
		return;
	}
	/* The store's periods win over ?hz=; mixed ones come as nanoseconds. */
	cpu_ns = type == SAMPLE_CPU && p->period_ns == 1;
	err = flamegraph__write_tree_json(p, &t, type == SAMPLE_CPU && !cpu_ns ? "samples" :
					  "nanoseconds", &sb);
	if (err)
		request__error(r, 500, "cannot build the flame graph: %s", strerror(-err));
	else
		request__reply_json(r, 200, &sb);
	strbuf__release(&sb);
	flametree__release(&t);
}

void routes__profile(struct request *r)
{
	const char *format = request__param(r, "format");
	struct selector *sel = NULL;
	struct profile *p = NULL;
	uint64_t max_nodes, hz;
	int64_t from, to;
	uint32_t type;
	bool cpu_ns;
	int err;

	if (!format)
		format = "json";
	if (strcmp(format, "json") && strcmp(format, "folded") && strcmp(format, "pprof") &&
	    strcmp(format, "speedscope")) {
		request__error(r, 400, "format: '%s' is not one of json, folded, pprof, speedscope",
			       format);
		return;
	}
	if (request__type(r, &type) || request__window(r, &from, &to) || request__selector(r, &sel) ||
	    request__uint_param(r, "max_nodes", DEFAULT_MAX_NODES, 1, MAX_NODES, &max_nodes) ||
	    request__uint_param(r, "hz", r->srv->default_hz, 1, MAX_HZ, &hz))
		goto out;
	p = profile__new(type == SAMPLE_CPU ? 1000000000ULL / hz : 1, from);
	if (!p) {
		request__error(r, 500, "out of memory");
		goto out;
	}
	p->duration_ns = to - from;
	if (!strcmp(format, "json")) {
		_reply_flamegraph(r, from, to, sel, type, max_nodes, p);
		goto out;
	}
	err = store__profile(r->srv->store, from, to, sel, type, p);
	if (err) {
		request__error(r, 500, "store: %s", strerror(-err));
		goto out;
	}
	/* The store's periods win over ?hz=; mixed ones come as nanoseconds. */
	cpu_ns = type == SAMPLE_CPU && p->period_ns == 1;
	if (!strcmp(format, "folded")) {
		_reply_file_writer(r, "text/plain", folded__write, p);
	} else if (!strcmp(format, "pprof")) {
		_reply_file_writer(r, "application/octet-stream",
				   type == SAMPLE_OFFCPU ? pprof__write_offcpu :
				   type == SAMPLE_GPU_TIME ? pprof__write_gpu_time : pprof__write, p);
	} else {
		_reply_file_writer(r, "application/json", type == SAMPLE_CPU && !cpu_ns ?
				   _speedscope_samples : _speedscope_ns, p);
	}
out:
	profile__free(p);
	selector__free(sel);
}

struct series_out {
	struct strbuf *sb;
	char *group;
	uint64_t points;
	uint32_t groups;
};

static int _series_point(void *ctx, const char *group, int64_t bucket, int64_t sum)
{
	struct series_out *o = ctx;

	if (!o->group || strcmp(o->group, group)) {
		free(o->group);
		o->group = strdup(group);
		if (!o->group)
			return -ENOMEM;
		strbuf__puts(o->sb, o->groups ? "]},{\"group\":" : "{\"group\":");
		strbuf__json_string(o->sb, group);
		strbuf__puts(o->sb, ",\"points\":[");
		o->groups++;
		o->points = 0;
	}
	strbuf__printf(o->sb, "%s[%lld,%lld]", o->points ? "," : "", (long long)bucket,
		       (long long)sum);
	o->points++;
	return 0;
}

#define NS_PER_MS 1000000LL
#define NS_PER_MIN (60LL * 1000000000LL)

/*
 * The first, partial bucket of an aligned grid: [from, next grid line) is
 * asked apart (its samples only, decoded raw: at most one step of them) and
 * its points merged, as the grid line before from, into the main answer.
 */
struct head_point {
	char *group;
	int64_t sum;
};

struct series_head {
	struct series_out *o;
	struct head_point *p;
	size_t n, cap, next;
	int64_t bucket;
};

static int _head_collect(void *ctx, const char *group, int64_t bucket, int64_t sum)
{
	struct series_head *h = ctx;

	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 16;
		struct head_point *p = realloc(h->p, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		h->p = p;
		h->cap = cap;
	}
	h->p[h->n].group = strdup(group);
	if (!h->p[h->n].group)
		return -ENOMEM;
	h->p[h->n++].sum = sum;
	return 0;
}

static int _series_point(void *ctx, const char *group, int64_t bucket, int64_t sum);

/* Emits the head points of groups before group (NULL: all that are left). */
static int _head_flush(struct series_head *h, const char *group)
{
	while (h->next < h->n && (!group || strcmp(h->p[h->next].group, group) < 0)) {
		int err = _series_point(h->o, h->p[h->next].group, h->bucket, h->p[h->next].sum);

		if (err)
			return err;
		h->next++;
	}
	return 0;
}

static int _series_point_merged(void *ctx, const char *group, int64_t bucket, int64_t sum)
{
	struct series_head *h = ctx;
	int err = _head_flush(h, group);

	if (!err && h->next < h->n && !strcmp(h->p[h->next].group, group)) {
		err = _series_point(h->o, group, h->bucket, h->p[h->next].sum);
		h->next++;
	}
	return err ? err : _series_point(h->o, group, bucket, sum);
}

static void _head_free(struct series_head *h)
{
	for (size_t i = 0; i < h->n; i++)
		free(h->p[i].group);
	free(h->p);
}

void routes__series(struct request *r)
{
	const char *by = request__param(r, "by");
	struct strbuf sb = STRBUF_INIT;
	struct series_out o = { .sb = &sb };
	struct series_head h = { .o = &o };
	struct selector *sel = NULL;
	int64_t from, to, step, grid, main_from;
	uint32_t type;
	bool align;
	int err = 0;

	if (request__type(r, &type) || request__window(r, &from, &to) || request__selector(r, &sel) ||
	    request__bool_param(r, "align", true, &align))
		goto out;
	/* About 300 points across the window, at least one second each. */
	step = (to - from) / 300;
	if (step < 1000000000LL)
		step = 1000000000LL;
	/* Whole minutes from a minute on, rounded up: at most 300 points. */
	if (step >= NS_PER_MIN)
		step = (step + NS_PER_MIN - 1) / NS_PER_MIN * NS_PER_MIN;
	if (request__duration_param(r, "step", 0, step, NS_PER_MS, PARAM_MAX_DURATION_NS, &step))
		goto out;
	/*
	 * Buckets of whole minutes starting on a whole minute are answered from
	 * the stores' minute rollups; any other grid decodes every raw sample
	 * (seconds per day of data). So from a minute on, the step is rounded
	 * to whole minutes and from down to a minute (the reply says which
	 * grid was used). Samples before from still do not count: the first
	 * bucket, which starts on the minute before from, holds those from
	 * from on. align=0 keeps the grid as asked.
	 */
	grid = from;
	if (step >= NS_PER_MIN && align) {
		step = (step + NS_PER_MIN / 2) / NS_PER_MIN * NS_PER_MIN;
		grid = from >= 0 ? from / NS_PER_MIN * NS_PER_MIN :
		       -((-from + NS_PER_MIN - 1) / NS_PER_MIN) * NS_PER_MIN;
	}
	if ((to - from) / step > MAX_POINTS) {
		request__error(r, 400, "step: %s makes more than %d points",
			       request__param(r, "step") ?: "(default)", MAX_POINTS);
		goto out;
	}
	strbuf__printf(&sb, "{\"from\":%lld,\"to\":%lld,\"step\":%lld,\"series\":[",
		       (long long)grid, (long long)to, (long long)step);
	main_from = from;
	h.bucket = grid;
	if (grid < from) {
		main_from = to - grid > step ? grid + step : to;
		err = store__series(r->srv->store, from, main_from, main_from - from, sel, type,
				    by && by[0] ? by : NULL, _head_collect, &h);
	}
	if (!err && main_from < to)
		err = store__series(r->srv->store, main_from, to, step, sel, type,
				    by && by[0] ? by : NULL, _series_point_merged, &h);
	if (!err)
		err = _head_flush(&h, NULL);
	if (err) {
		request__error(r, 500, "store: %s", strerror(-err));
		goto out;
	}
	strbuf__puts(&sb, o.groups ? "]}]}\n" : "]}\n");
	request__reply_json(r, 200, &sb);
out:
	_head_free(&h);
	free(o.group);
	strbuf__release(&sb);
	selector__free(sel);
}

struct list_out {
	struct strbuf *sb;
	uint64_t n;
};

static int _list_item(void *ctx, const char *item)
{
	struct list_out *o = ctx;

	if (o->n++)
		strbuf__putc(o->sb, ',');
	strbuf__json_string(o->sb, item);
	return 0;
}

void routes__labels(struct request *r)
{
	struct strbuf sb = STRBUF_INIT;
	struct list_out o = { .sb = &sb };
	int64_t from, to;
	int err;

	if (request__window(r, &from, &to))
		goto out;
	strbuf__puts(&sb, "{\"names\":[");
	err = store__label_names(r->srv->store, from, to, _list_item, &o);
	if (err) {
		request__error(r, 500, "store: %s", strerror(-err));
		goto out;
	}
	strbuf__puts(&sb, "]}\n");
	request__reply_json(r, 200, &sb);
out:
	strbuf__release(&sb);
}

void routes__label_values(struct request *r, const char *name)
{
	struct strbuf sb = STRBUF_INIT;
	struct list_out o = { .sb = &sb };
	int64_t from, to;
	int err;

	if (request__window(r, &from, &to))
		goto out;
	strbuf__puts(&sb, "{\"values\":[");
	err = store__label_values(r->srv->store, name, from, to, _list_item, &o);
	if (err) {
		request__error(r, 500, "store: %s", strerror(-err));
		goto out;
	}
	strbuf__puts(&sb, "]}\n");
	request__reply_json(r, 200, &sb);
out:
	strbuf__release(&sb);
}
