// SPDX-License-Identifier: Apache-2.0
/* GET /api/v1/flamechart: a window's samples in time order, one lane per thread. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "format/trace.h"
#include "server/request.h"
#include "server/routes.h"
#include "store/selector.h"
#include "store/store.h"

#define DEFAULT_MAX_SAMPLES 200000
#define MAX_SAMPLES 5000000
#define MAX_HZ 100000

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
	if (request__type(r, &type) || request__window(r, &from, &to) || request__selector(r, &sel) ||
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
