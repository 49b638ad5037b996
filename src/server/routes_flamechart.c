// SPDX-License-Identifier: Apache-2.0
/*
 * GET /api/v1/flamechart: a window's samples in time order, one lane per
 * thread.
 *
 * On-CPU samples are points: consecutive samples of one thread with the
 * same stack become one event [start, end), ending where the next sample
 * of that thread starts (or one period later for the last, or when the
 * thread left the CPU). An off-CPU sample is a span already: the thread
 * was blocked in its stack for [ts, ts + value), so each block is an
 * event of its own, never merged with the next.
 *
 * type=offcpu makes the blocks the lanes' events; with=offcpu puts them
 * beside the events of another type, in each lane's "blocked", and ends
 * an on-CPU event where the thread's next block began: that is when it
 * left the CPU, which the samples alone can only guess.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "format/trace.h"
#include "server/gpu_idle_offcpu.h"
#include "server/request.h"
#include "server/routes.h"
#include "store/selector.h"
#include "store/store.h"

#define DEFAULT_MAX_SAMPLES 200000
#define MAX_SAMPLES 5000000
#define MAX_HZ 100000

struct spans {
	struct trace_event *v;
	size_t n, cap;
};

struct lane {
	uint32_t pid, tid;
	uint32_t comm;		/* index in the chart's comms */
	struct spans events;	/* the asked type's */
	struct spans blocked;	/* off-CPU blocks, by start */
	size_t bnext;		/* the first block no sample has passed yet */
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
	uint64_t samples, blocks;
	int64_t from;		/* blocks that ended before it are left out */
};

static int _push(struct spans *s, struct trace_event ev)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 64;
		struct trace_event *nv = realloc(s->v, cap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		s->v = nv;
		s->cap = cap;
	}
	s->v[s->n++] = ev;
	return 0;
}

static void _close_event(struct lane *l, int64_t end)
{
	if (!l->open)
		return;
	l->events.v[l->events.n - 1].end = end;
	l->open = false;
}

static int _open_event(struct lane *l, int64_t start, uint32_t stack)
{
	if (_push(&l->events, (struct trace_event){ .start = start, .end = start, .stack = stack }))
		return -ENOMEM;
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
	cid = intern__add(c->comms, comm ? comm : "", comm ? strlen(comm) + 1 : 1, NULL);
	if (cid < 0)
		return NULL;
	c->lanes[c->nlanes] = (struct lane){ .pid = pid, .tid = tid, .comm = cid };
	return &c->lanes[c->nlanes++];
}

/*
 * Passes the lane's blocks that began before `until`. The first of them
 * that began after the open event's last sample is where the thread left
 * the CPU: the event ends there, unless that is further than the gap rule
 * (two periods) would have let it run on, when it ends one period after
 * its last sample as it would without blocks.
 */
static void _pass_blocks(struct lane *l, int64_t until, int64_t period)
{
	while (l->bnext < l->blocked.n && l->blocked.v[l->bnext].start < until) {
		int64_t b = l->blocked.v[l->bnext++].start;

		if (l->open && b >= l->last)
			_close_event(l, b - l->last <= 2 * period ? b : l->last + period);
	}
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
	period = c->period * *c->stride;
	_pass_blocks(l, ts, period);
	/*
	 * A gap longer than two (kept) sample periods means the thread was
	 * off CPU.
	 */
	gap = l->open && ts - l->last > 2 * period;
	if (l->open && (gap || l->events.v[l->events.n - 1].stack != stack))
		_close_event(l, gap ? l->last + period : ts);
	if (!l->open && _open_event(l, ts, stack))
		return -ENOMEM;
	l->last = ts;
	return 0;
}

static int _chart_block(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
			int64_t value, const char *comm, uint32_t pid)
{
	struct chart *c = ctx;
	struct lane *l;
	int64_t end;

	(void)cpu;
	if (value <= 0)
		return 0;
	end = ts > INT64_MAX - value ? INT64_MAX : ts + value;
	if (end <= c->from)
		return 0;
	l = _lane(c, pid, tid, comm);
	if (!l)
		return -ENOMEM;
	c->blocks++;
	return _push(&l->blocked, (struct trace_event){ .start = ts, .end = end, .stack = stack,
							.flags = TRACE_BLOCKED });
}

/*
 * The blocks of [from, to): those of the window, at most max_samples of
 * them (*stride: one kept in it), after those that began up to
 * OFFCPU_LOOKBACK_NS before it and run into it. The lookback keeps at most
 * one block per thread (a thread's blocks do not overlap), so it is read
 * whole, without a stride.
 */
static int _read_blocks(struct store *st, struct chart *c, int64_t from, int64_t to,
			const struct selector *sel, uint64_t max_samples, uint32_t *stride)
{
	int err;

	c->from = from;
	err = store__samples(st, from > INT64_MIN + OFFCPU_LOOKBACK_NS ?
			     from - OFFCPU_LOOKBACK_NS : INT64_MIN, from, sel, SAMPLE_OFFCPU, 0,
			     c->dict, _chart_block, c, NULL);
	if (!err)
		err = store__samples(st, from, to, sel, SAMPLE_OFFCPU, max_samples, c->dict,
				     _chart_block, c, stride);
	return err;
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
	strbuf__puts(sb, "],");
	profile__write_stacks_json(d, nstacks, sb);
}

static void _write_spans(struct strbuf *sb, const char *key, const struct spans *s)
{
	strbuf__printf(sb, ",\"%s\":[", key);
	for (size_t e = 0; e < s->n; e++)
		strbuf__printf(sb, "%s[%lld,%lld,%u]", e ? "," : "", (long long)s->v[e].start,
			       (long long)s->v[e].end, s->v[e].stack);
	strbuf__putc(sb, ']');
}

static const char *const TYPE_NAMES[] = {
	[SAMPLE_CPU] = "cpu", [SAMPLE_GPU_TIME] = "gpu_time", [SAMPLE_OFFCPU] = "offcpu",
};

/* with: the lanes carry "blocked" beside their events. */
static void _write_chart_json(struct strbuf *sb, const struct chart *c, int64_t from, int64_t to,
			      uint32_t type, uint32_t stride, bool with, uint32_t bstride)
{
	strbuf__printf(sb, "{\"from\":%lld,\"to\":%lld,\"type\":\"%s\",\"stride\":%u,"
		       "\"samples\":%llu,", (long long)from, (long long)to, TYPE_NAMES[type], stride,
		       (unsigned long long)(type == SAMPLE_OFFCPU ? c->blocks : c->samples));
	if (with)
		strbuf__printf(sb, "\"blocks\":%llu,\"blocked_stride\":%u,",
			       (unsigned long long)c->blocks, bstride);
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

		strbuf__printf(sb, "%s{\"pid\":%u,\"tid\":%u,\"comm\":%u", i ? "," : "", l->pid,
			       l->tid, l->comm);
		_write_spans(sb, "events", type == SAMPLE_OFFCPU ? &l->blocked : &l->events);
		if (with)
			_write_spans(sb, "blocked", &l->blocked);
		strbuf__putc(sb, '}');
	}
	strbuf__puts(sb, "]}\n");
}

/*
 * A lane's events and blocks in one time-ordered list, as the trace
 * writer wants it: overlaps (which only odd data can make) are cut from
 * the later span, and one left empty is dropped.
 */
static int _merge(const struct lane *l, struct spans *out)
{
	size_t i = 0, j = 0;
	int64_t end = INT64_MIN;

	while (i < l->events.n || j < l->blocked.n) {
		struct trace_event ev;

		if (j == l->blocked.n ||
		    (i < l->events.n && l->events.v[i].start <= l->blocked.v[j].start))
			ev = l->events.v[i++];
		else
			ev = l->blocked.v[j++];
		if (ev.start < end)
			ev.start = end;
		if (ev.start >= ev.end)
			continue;
		if (_push(out, ev))
			return -ENOMEM;
		end = ev.end;
	}
	return 0;
}

static int _write_chart_trace(struct strbuf *sb, const struct chart *c, uint32_t type, bool with)
{
	struct trace_lane *tl = calloc(c->nlanes + 1, sizeof(*tl));
	struct spans *merged = calloc(c->nlanes + 1, sizeof(*merged));
	int err = 0;

	if (!tl || !merged) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < c->nlanes && !err; i++) {
		const struct lane *l = &c->lanes[i];
		const struct spans *s = type == SAMPLE_OFFCPU ? &l->blocked : &l->events;

		if (with) {
			err = _merge(l, &merged[i]);
			s = &merged[i];
		}
		tl[i] = (struct trace_lane){
			.pid = l->pid, .tid = l->tid, .comm = intern__key(c->comms, l->comm, NULL),
			.events = s->v, .nevents = s->n,
		};
	}
	if (!err)
		err = trace__write_json(c->dict, tl, c->nlanes, sb);
out:
	for (uint32_t i = 0; merged && i < c->nlanes; i++)
		free(merged[i].v);
	free(merged);
	free(tl);
	return err;
}

/* ?with=: "offcpu" or nothing. */
static int _with(struct request *r, uint32_t type, bool *with)
{
	const char *w = request__param(r, "with");

	*with = false;
	if (!w || !w[0])
		return 0;
	if (strcmp(w, "offcpu")) {
		request__error(r, 400, "with: '%.64s' is not offcpu", w);
		return -1;
	}
	/* The blocks are the events of an off-CPU chart already. */
	*with = type != SAMPLE_OFFCPU;
	return 0;
}

void routes__flamechart(struct request *r)
{
	const char *format = request__param(r, "format");
	struct chart c = { 0 };
	struct strbuf sb = STRBUF_INIT;
	struct selector *sel = NULL;
	uint64_t max_samples, hz;
	uint32_t type, stride = 1, bstride = 1;
	int64_t from, to;
	bool with;
	int err;

	if (format && strcmp(format, "json") && strcmp(format, "trace")) {
		request__error(r, 400, "format: '%.64s' is not one of json, trace", format);
		return;
	}
	if (request__type(r, &type) || _with(r, type, &with) || request__window(r, &from, &to) ||
	    request__selector(r, &sel) ||
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
	/* Blocks first: the samples that follow end their events where one begins. */
	if (type == SAMPLE_OFFCPU)
		err = _read_blocks(r->srv->store, &c, from, to, sel, max_samples, &stride);
	else if (with)
		err = _read_blocks(r->srv->store, &c, from, to, sel, max_samples, &bstride);
	else
		err = 0;
	if (!err && type != SAMPLE_OFFCPU)
		err = store__samples(r->srv->store, from, to, sel, type, max_samples, c.dict,
				     _chart_sample, &c, &stride);
	if (err) {
		request__error(r, 500, "store: %s", strerror(-err));
		goto out;
	}
	/* Downsampled windows keep one sample in `stride`: each stands for more time. */
	c.period *= stride;
	for (uint32_t i = 0; i < c.nlanes; i++) {
		_pass_blocks(&c.lanes[i], INT64_MAX, c.period);
		_close_event(&c.lanes[i], c.lanes[i].last + c.period);
	}
	if (format && !strcmp(format, "trace")) {
		if (_write_chart_trace(&sb, &c, type, with)) {
			request__error(r, 500, "out of memory");
			goto out;
		}
	} else {
		_write_chart_json(&sb, &c, from, to, type, stride, with, bstride);
	}
	request__reply_json(r, 200, &sb);
out:
	for (uint32_t i = 0; i < c.nlanes; i++) {
		free(c.lanes[i].events.v);
		free(c.lanes[i].blocked.v);
	}
	free(c.lanes);
	intern__free(c.lane_keys);
	intern__free(c.comms);
	profile__free(c.dict);
	strbuf__release(&sb);
	selector__free(sel);
}
