// SPDX-License-Identifier: Apache-2.0
/* The read side of the API: flame graphs, flame charts, series and labels. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "common/timeparse.h"
#include "format/flamegraph.h"
#include "format/folded.h"
#include "format/pprof.h"
#include "format/speedscope.h"
#include "format/trace.h"
#include "server/request.h"
#include "server/routes.h"
#include "store/selector.h"
#include "store/store.h"

#define DEFAULT_MAX_NODES 20000
#define MAX_NODES 1000000
#define DEFAULT_MAX_SAMPLES 200000
#define MAX_SAMPLES 5000000
#define MAX_HZ 100000
#define MAX_POINTS 100000

static int _type(struct request *r, uint32_t *type)
{
	const char *t = request__param(r, "type");

	if (!t || !strcmp(t, "cpu")) {
		*type = SAMPLE_CPU;
	} else if (!strcmp(t, "gpu_time")) {
		*type = SAMPLE_GPU_TIME;
	} else if (!strcmp(t, "offcpu")) {
		*type = SAMPLE_OFFCPU;
	} else {
		request__error(r, 400, "type: '%s' is not one of cpu, gpu_time, offcpu", t);
		return -1;
	}
	return 0;
}

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
	if (_type(r, &type) || request__window(r, &from, &to) || request__selector(r, &sel) ||
	    request__uint_param(r, "max_nodes", DEFAULT_MAX_NODES, 1, MAX_NODES, &max_nodes) ||
	    request__uint_param(r, "hz", r->srv->default_hz, 1, MAX_HZ, &hz))
		goto out;
	p = profile__new(type == SAMPLE_CPU ? 1000000000ULL / hz : 1, from);
	if (!p) {
		request__error(r, 500, "out of memory");
		goto out;
	}
	p->duration_ns = to - from;
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
	} else if (!strcmp(format, "speedscope")) {
		_reply_file_writer(r, "application/json", type == SAMPLE_CPU && !cpu_ns ?
				   _speedscope_samples : _speedscope_ns, p);
	} else {
		struct strbuf sb = STRBUF_INIT;

		err = flamegraph__write_json(p, type == SAMPLE_CPU && !cpu_ns ? "samples" : "nanoseconds",
					     max_nodes, &sb);
		if (err)
			request__error(r, 500, "cannot build the flame graph: %s", strerror(-err));
		else
			request__reply_json(r, 200, &sb);
		strbuf__release(&sb);
	}
out:
	profile__free(p);
	selector__free(sel);
}

/*
 * A flame chart lane per thread: consecutive samples of one thread with the
 * same stack become one event [start, end), ending where the next sample of
 * that thread starts (or one period later for the last, or when the thread
 * left the CPU).
 */
struct lane {
	uint32_t pid, tid;
	uint32_t comm;		/* index in the chart's comms */
	struct trace_event *events;
	size_t nevents, cap;
	int64_t last;
	bool open;
};

struct chart {
	struct profile *dict;
	struct intern *lane_keys;	/* (pid, tid) -> lane */
	struct lane *lanes;
	uint32_t nlanes, cap;
	struct intern *comms;
	int64_t period;
	const uint32_t *stride;	/* set by the store before the first sample */
	uint64_t samples;
};

static void _close_event(struct lane *l, int64_t end)
{
	if (!l->open)
		return;
	l->events[l->nevents - 1].end = end;
	l->open = false;
}

static int _open_event(struct lane *l, int64_t start, uint32_t stack)
{
	if (l->nevents == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct trace_event *ne = realloc(l->events, cap * sizeof(*ne));

		if (!ne)
			return -ENOMEM;
		l->events = ne;
		l->cap = cap;
	}
	l->events[l->nevents++] = (struct trace_event){ .start = start, .end = start, .stack = stack };
	l->open = true;
	return 0;
}

static struct lane *_lane(struct chart *c, uint32_t pid, uint32_t tid, const char *comm)
{
	uint32_t key[2] = { pid, tid };
	bool added;
	int64_t id = intern__add(c->lane_keys, key, sizeof(key), &added);
	int64_t cid;

	if (id < 0)
		return NULL;
	if (!added)
		return &c->lanes[id];
	if (c->nlanes == c->cap) {
		uint32_t cap = c->cap ? c->cap * 2 : 16;
		struct lane *nl = realloc(c->lanes, cap * sizeof(*nl));

		if (!nl)
			return NULL;
		c->lanes = nl;
		c->cap = cap;
	}
	cid = intern__add(c->comms, comm, strlen(comm) + 1, NULL);
	if (cid < 0)
		return NULL;
	c->lanes[c->nlanes] = (struct lane){ .pid = pid, .tid = tid, .comm = cid };
	return &c->lanes[c->nlanes++];
}

static int _chart_sample(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
			 int64_t value, const char *comm, uint32_t pid)
{
	struct chart *c = ctx;
	struct lane *l = _lane(c, pid, tid, comm);
	int64_t period;
	bool gap;

	(void)cpu;
	(void)value;
	if (!l)
		return -ENOMEM;
	c->samples++;
	/*
	 * A gap longer than two (kept) sample periods means the thread was
	 * off CPU.
	 */
	period = c->period * *c->stride;
	gap = l->open && ts - l->last > 2 * period;
	if (l->open && (gap || l->events[l->nevents - 1].stack != stack))
		_close_event(l, gap ? l->last + period : ts);
	if (!l->open && _open_event(l, ts, stack))
		return -ENOMEM;
	l->last = ts;
	return 0;
}

static void _write_stacks(struct strbuf *sb, const struct profile *d)
{
	uint32_t nstacks = profile__nstacks(d);

	strbuf__puts(sb, "\"frames\":[");
	for (uint32_t f = 0; f < d->nframes; f++) {
		const struct profile_frame *fr = &d->frames[f];

		if (f)
			strbuf__putc(sb, ',');
		strbuf__putc(sb, '[');
		strbuf__json_string(sb, profile__string(d, fr->function));
		strbuf__putc(sb, ',');
		strbuf__json_string(sb, fr->mapping == PROFILE_NO_MAPPING ? "" :
				    profile__string(d, d->mappings[fr->mapping].path));
		strbuf__printf(sb, ",%u]", fr->kind);
	}
	strbuf__puts(sb, "],\"stacks\":[");
	for (uint32_t s = 0; s < nstacks; s++) {
		uint32_t n;
		const uint32_t *frames = profile__stack(d, s, &n);

		strbuf__puts(sb, s ? ",[" : "[");
		for (uint32_t i = 0; i < n; i++)
			strbuf__printf(sb, "%s%u", i ? "," : "", frames[i]);
		strbuf__putc(sb, ']');
	}
	strbuf__putc(sb, ']');
}

static void _write_chart_json(struct strbuf *sb, const struct chart *c, int64_t from, int64_t to,
			      uint32_t stride)
{
	strbuf__printf(sb, "{\"from\":%lld,\"to\":%lld,\"stride\":%u,\"samples\":%llu,",
		       (long long)from, (long long)to, stride, (unsigned long long)c->samples);
	_write_stacks(sb, c->dict);
	strbuf__puts(sb, ",\"comms\":[");
	for (uint32_t i = 0; i < intern__count(c->comms); i++) {
		if (i)
			strbuf__putc(sb, ',');
		strbuf__json_string(sb, intern__key(c->comms, i, NULL));
	}
	strbuf__puts(sb, "],\"lanes\":[");
	for (uint32_t i = 0; i < c->nlanes; i++) {
		const struct lane *l = &c->lanes[i];

		strbuf__printf(sb, "%s{\"pid\":%u,\"tid\":%u,\"comm\":%u,\"events\":[",
			       i ? "," : "", l->pid, l->tid, l->comm);
		for (size_t e = 0; e < l->nevents; e++)
			strbuf__printf(sb, "%s[%lld,%lld,%u]", e ? "," : "",
				       (long long)l->events[e].start, (long long)l->events[e].end,
				       l->events[e].stack);
		strbuf__puts(sb, "]}");
	}
	strbuf__puts(sb, "]}\n");
}

static int _write_chart_trace(struct strbuf *sb, const struct chart *c)
{
	struct trace_lane *tl = calloc(c->nlanes + 1, sizeof(*tl));
	int err;

	if (!tl)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->nlanes; i++)
		tl[i] = (struct trace_lane){
			.pid = c->lanes[i].pid, .tid = c->lanes[i].tid,
			.comm = intern__key(c->comms, c->lanes[i].comm, NULL),
			.events = c->lanes[i].events, .nevents = c->lanes[i].nevents,
		};
	err = trace__write_json(c->dict, tl, c->nlanes, sb);
	free(tl);
	return err;
}

void routes__flamechart(struct request *r)
{
	const char *format = request__param(r, "format");
	struct chart c = { 0 };
	struct strbuf sb = STRBUF_INIT;
	struct selector *sel = NULL;
	uint64_t max_samples, hz;
	uint32_t type, stride = 1;
	int64_t from, to;
	int err;

	if (format && strcmp(format, "json") && strcmp(format, "trace")) {
		request__error(r, 400, "format: '%s' is not one of json, trace", format);
		return;
	}
	if (_type(r, &type) || request__window(r, &from, &to) || request__selector(r, &sel) ||
	    request__uint_param(r, "max_samples", DEFAULT_MAX_SAMPLES, 1, MAX_SAMPLES,
				&max_samples) ||
	    request__uint_param(r, "hz", r->srv->default_hz, 1, MAX_HZ, &hz))
		goto out;
	c.dict = profile__new(0, from);
	c.lane_keys = intern__new();
	c.comms = intern__new();
	if (!c.dict || !c.lane_keys || !c.comms) {
		request__error(r, 500, "out of memory");
		goto out;
	}
	c.period = 1000000000LL / hz;
	c.stride = &stride;
	err = store__samples(r->srv->store, from, to, sel, type, max_samples, c.dict,
			     _chart_sample, &c, &stride);
	if (err) {
		request__error(r, 500, "store: %s", strerror(-err));
		goto out;
	}
	/* Downsampled windows keep one sample in `stride`: each stands for more time. */
	c.period *= stride;
	for (uint32_t i = 0; i < c.nlanes; i++)
		_close_event(&c.lanes[i], c.lanes[i].last + c.period);
	if (format && !strcmp(format, "trace")) {
		if (_write_chart_trace(&sb, &c)) {
			request__error(r, 500, "out of memory");
			goto out;
		}
	} else {
		_write_chart_json(&sb, &c, from, to, stride);
	}
	request__reply_json(r, 200, &sb);
out:
	for (uint32_t i = 0; i < c.nlanes; i++)
		free(c.lanes[i].events);
	free(c.lanes);
	intern__free(c.lane_keys);
	intern__free(c.comms);
	profile__free(c.dict);
	strbuf__release(&sb);
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

	if (_type(r, &type) || request__window(r, &from, &to) || request__selector(r, &sel) ||
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
