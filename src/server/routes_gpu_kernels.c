// SPDX-License-Identifier: Apache-2.0
/*
 * GPU activity: the intervals of kernels, copies and sets for a timeline
 * (GET /api/v1/gpu/kernels) and the kernel table (GET /api/v1/gpu/kernels/top).
 * GPU time flame graphs are /api/v1/profile?type=gpu_time.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "server/request.h"
#include "server/routes.h"
#include "store/selector.h"
#include "store/store.h"

#define DEFAULT_MAX_INTERVALS 100000
#define MAX_INTERVALS 1000000
#define DEFAULT_TOP 100
#define MAX_TOP 1000000

struct kernels_out {
	struct strbuf *sb;
	uint64_t n;
	bool timeline;		/* the busy timeline's spans too */
};

/* A span of the busy timeline (GPU_BUSY, GPU_COVERAGE): no work of its own. */
static bool _is_timeline(const struct store_gpu_interval *iv)
{
	return iv->kind == GPU_BUSY || iv->kind == GPU_COVERAGE;
}

static int _interval(void *ctx, const struct store_gpu_interval *iv)
{
	struct kernels_out *o = ctx;
	struct strbuf *sb = o->sb;

	if (_is_timeline(iv) && !o->timeline)
		return 0;

	strbuf__printf(sb, "%s{\"start\":%lld,\"end\":%lld,\"name\":", o->n ? "," : "",
		       (long long)iv->start_ns, (long long)iv->end_ns);
	strbuf__json_string(sb, iv->name);
	strbuf__puts(sb, ",\"kind\":");
	strbuf__json_string(sb, gpu_activity_kind__name(iv->kind));
	strbuf__printf(sb, ",\"device\":%u,\"stream\":%u,\"pid\":%u,\"comm\":", iv->device,
		       iv->stream, iv->pid);
	strbuf__json_string(sb, iv->comm);
	/* A busy span's correlation is the idle time inside it: said as such. */
	strbuf__printf(sb, ",\"bytes\":%llu,\"weight\":%u,\"correlation\":%llu,", (unsigned long long)iv->bytes,
		       iv->weight, iv->kind == GPU_BUSY ? 0ULL : (unsigned long long)iv->correlation);
	if (iv->kind == GPU_BUSY)
		strbuf__printf(sb, "\"idle_ns\":%llu,", (unsigned long long)iv->correlation);
	strbuf__puts(sb, "\"stack\":");
	if (iv->stack == STORE_NO_STACK)
		strbuf__puts(sb, "null}");
	else
		strbuf__printf(sb, "%u}", iv->stack);
	o->n++;
	return 0;
}

/*
 * timeline=only: the busy timeline alone, for a track drawn at any zoom.
 * Spans of one (process, device, kind) closer than the resolution merge,
 * so that a wide window comes back in about as many spans as it has
 * pixels, however many the library sent. A few spans are open at a time
 * (one per process and device): the first to end goes out when more come.
 */
#define TL_OPEN 64

struct tl_span {
	int64_t start, end;
	uint64_t gap;		/* the widest idle gap merged into it, ns */
	uint64_t idle;		/* busy: idle ns inside it, gaps merged here included */
	uint32_t pid, device, kind;
	char comm[64];
};

struct tl_out {
	struct strbuf *sb;
	uint64_t n;
	int64_t resolution;
	struct tl_span open[TL_OPEN];
	uint32_t nopen;
};

static void _tl_emit(struct tl_out *o, const struct tl_span *t)
{
	struct strbuf *sb = o->sb;

	strbuf__printf(sb, "%s{\"start\":%lld,\"end\":%lld,\"name\":\"[%s]\",\"kind\":\"%s\"",
		       o->n ? "," : "", (long long)t->start, (long long)t->end,
		       gpu_activity_kind__name(t->kind), gpu_activity_kind__name(t->kind));
	strbuf__printf(sb, ",\"device\":%u,\"stream\":0,\"pid\":%u,\"comm\":", t->device, t->pid);
	strbuf__json_string(sb, t->comm);
	strbuf__printf(sb, ",\"bytes\":%llu,\"weight\":1,\"correlation\":0,", (unsigned long long)t->gap);
	if (t->kind == GPU_BUSY)
		strbuf__printf(sb, "\"idle_ns\":%llu,", (unsigned long long)t->idle);
	strbuf__puts(sb, "\"stack\":null}");
	o->n++;
}

/*
 * A busy span's idle time as it joins a merged one ending at end: what it
 * holds inside, and the gap it was merged over. Overlapping spans (a span
 * split by the agent, rows of one span stored twice) add only the idle of
 * their part past end.
 */
static uint64_t _tl_idle(const struct store_gpu_interval *iv, int64_t end)
{
	uint64_t len = (uint64_t)(iv->end_ns - iv->start_ns), idle = iv->correlation;

	if (idle > len)
		idle = len;
	if (iv->start_ns >= end)
		return idle + (uint64_t)(iv->start_ns - end);
	if (iv->end_ns <= end)
		return 0;
	return (uint64_t)((double)idle * (double)(iv->end_ns - end) / (double)len);
}

static int _tl_interval(void *ctx, const struct store_gpu_interval *iv)
{
	struct tl_out *o = ctx;
	struct tl_span *t = NULL;
	uint64_t gap = iv->kind == GPU_BUSY ? iv->bytes : 0;
	uint32_t i, first = 0;

	if (!_is_timeline(iv) || iv->end_ns <= iv->start_ns)
		return 0;
	for (i = 0; i < o->nopen; i++) {
		struct tl_span *x = &o->open[i];

		if (x->pid == iv->pid && x->device == iv->device && x->kind == iv->kind) {
			t = x;
			break;
		}
		if (x->end < o->open[first].end)
			first = i;
	}
	if (t && iv->start_ns - t->end <= o->resolution) {
		if (iv->start_ns > t->end && (uint64_t)(iv->start_ns - t->end) > t->gap)
			t->gap = (uint64_t)(iv->start_ns - t->end);
		if (gap > t->gap)
			t->gap = gap;
		if (iv->kind == GPU_BUSY)
			t->idle += _tl_idle(iv, t->end);
		if (iv->end_ns > t->end)
			t->end = iv->end_ns;
		return 0;
	}
	if (t) {
		_tl_emit(o, t);
	} else if (o->nopen == TL_OPEN) {
		t = &o->open[first];
		_tl_emit(o, t);
	} else {
		t = &o->open[o->nopen++];
	}
	*t = (struct tl_span){
		.start = iv->start_ns, .end = iv->end_ns, .gap = gap,
		.idle = iv->kind == GPU_BUSY ? _tl_idle(iv, iv->start_ns) : 0,
		.pid = iv->pid, .device = iv->device, .kind = iv->kind,
	};
	snprintf(t->comm, sizeof(t->comm), "%s", iv->comm ? iv->comm : "");
	return 0;
}

static void _timeline_only(struct request *r, int64_t from, int64_t to, struct selector *sel)
{
	struct strbuf sb = STRBUF_INIT;
	struct tl_out *o = calloc(1, sizeof(*o));
	int64_t res;
	int err;

	if (!o) {
		request__error(r, 500, "out of memory");
		return;
	}
	if (request__duration_param(r, "resolution", PARAM_BARE_NS, (to - from) / 2000, 0,
				    PARAM_MAX_DURATION_NS, &res))
		goto out;
	o->sb = &sb;
	o->resolution = res;
	strbuf__printf(&sb, "{\"from\":%lld,\"to\":%lld,\"resolution_ns\":%lld,\"intervals\":[",
		       (long long)from, (long long)to, (long long)res);
	err = store__gpu_intervals(r->srv->store, from, to, sel, NULL, 0, _tl_interval, o);
	if (err) {
		request__error(r, 500, "store: %s", strerror(-err));
		goto out;
	}
	for (uint32_t i = 0; i < o->nopen; i++)
		_tl_emit(o, &o->open[i]);
	strbuf__puts(&sb, "],\"frames\":[],\"stacks\":[]}");
	request__reply_json(r, 200, &sb);
out:
	strbuf__release(&sb);
	free(o);
}

/* The launching stacks the intervals name: frames as objects, stacks as frame indexes. */
static void _write_dict(struct strbuf *sb, const struct profile *p)
{
	uint32_t nstacks = profile__nstacks(p);

	strbuf__puts(sb, ",\"frames\":[");
	for (uint32_t i = 0; i < p->nframes; i++) {
		const struct profile_frame *f = &p->frames[i];
		const char *bin = "";

		if (f->mapping != PROFILE_NO_MAPPING) {
			const char *path = profile__string(p, p->mappings[f->mapping].path);
			const char *slash = strrchr(path, '/');

			bin = slash ? slash + 1 : path;
		}
		strbuf__puts(sb, i ? ",{\"name\":" : "{\"name\":");
		strbuf__json_string(sb, profile__string(p, f->function));
		strbuf__puts(sb, ",\"kind\":");
		strbuf__json_string(sb, frame_kind__name(f->kind));
		strbuf__puts(sb, ",\"binary\":");
		strbuf__json_string(sb, bin);
		strbuf__putc(sb, '}');
	}
	strbuf__puts(sb, "],");
	profile__write_stacks_json(p, nstacks, sb);
}

void routes__gpu_kernels(struct request *r)
{
	struct strbuf sb = STRBUF_INIT;
	struct kernels_out o = { .sb = &sb };
	struct selector *sel = NULL;
	struct profile *dict = NULL;
	uint64_t limit;
	int64_t from, to;
	int err;

	const char *tl = request__param(r, "timeline");

	if (request__window(r, &from, &to) || request__selector(r, &sel) ||
	    request__uint_param(r, "limit", DEFAULT_MAX_INTERVALS, 1, MAX_INTERVALS, &limit))
		goto out;
	if (tl && strcmp(tl, "0") && strcmp(tl, "1") && strcmp(tl, "only")) {
		request__error(r, 400, "timeline: '%s' is not 0, 1 or only", tl);
		goto out;
	}
	if (tl && !strcmp(tl, "only")) {
		_timeline_only(r, from, to, sel);
		goto out;
	}
	o.timeline = tl && !strcmp(tl, "1");
	dict = profile__new(1, from);
	if (!dict) {
		request__error(r, 500, "out of memory");
		goto out;
	}
	strbuf__printf(&sb, "{\"from\":%lld,\"to\":%lld,\"intervals\":[", (long long)from,
		       (long long)to);
	err = store__gpu_intervals(r->srv->store, from, to, sel, dict, limit, _interval, &o);
	if (err == -E2BIG) {
		request__error(r, 400, "the window holds more than %llu GPU intervals: narrow it "
			       "or raise limit", (unsigned long long)limit);
		goto out;
	}
	if (err) {
		request__error(r, 500, "store: %s", strerror(-err));
		goto out;
	}
	strbuf__putc(&sb, ']');
	_write_dict(&sb, dict);
	strbuf__putc(&sb, '}');
	request__reply_json(r, 200, &sb);
out:
	strbuf__release(&sb);
	profile__free(dict);
	selector__free(sel);
}

/* One row of the kernel table. */
struct kernel_row {
	uint32_t name;		/* id in names */
	uint32_t kind;
	uint64_t calls;		/* launches the records stand for: weights summed */
	uint64_t records;
	uint64_t total_ns;	/* GPU ns x weight */
	uint64_t max_ns;
};

struct top {
	struct intern *names;	/* key: kind (u32) then the name, NUL included */
	struct kernel_row *rows;
	uint32_t n, cap;
	int oom;
};

static int _top_add(void *ctx, const struct store_gpu_interval *iv)
{
	struct top *t = ctx;
	uint64_t dur = iv->end_ns > iv->start_ns ? (uint64_t)(iv->end_ns - iv->start_ns) : 0;
	uint32_t w = iv->weight ? iv->weight : 1;
	size_t len = strlen(iv->name) + 1;
	char key[4 + 4096];
	struct kernel_row *row;
	bool added;
	int64_t id;

	if (_is_timeline(iv))
		return 0;

	if (len > sizeof(key) - 4)
		len = sizeof(key) - 4;
	memcpy(key, &iv->kind, 4);
	memcpy(key + 4, iv->name, len);
	key[4 + len - 1] = '\0';
	id = intern__add(t->names, key, 4 + len, &added);
	if (id < 0)
		return -ENOMEM;
	if (added) {
		if (t->n == t->cap) {
			uint32_t cap = t->cap ? t->cap * 2 : 64;
			struct kernel_row *rows = realloc(t->rows, cap * sizeof(*rows));

			if (!rows)
				return -ENOMEM;
			t->rows = rows;
			t->cap = cap;
		}
		t->rows[t->n++] = (struct kernel_row){ .name = (uint32_t)id, .kind = iv->kind };
	}
	row = &t->rows[id];
	row->calls += w;
	row->records++;
	row->total_ns += dur * w;
	if (dur > row->max_ns)
		row->max_ns = dur;
	return 0;
}

static int _by_total(const void *a, const void *b)
{
	const struct kernel_row *x = a, *y = b;

	if (x->total_ns != y->total_ns)
		return x->total_ns > y->total_ns ? -1 : 1;
	return x->name < y->name ? -1 : x->name > y->name;
}

void routes__gpu_kernels_top(struct request *r)
{
	struct strbuf sb = STRBUF_INIT;
	struct top t = { 0 };
	struct selector *sel = NULL;
	uint64_t limit, total = 0;
	int64_t from, to;
	int err;

	if (request__window(r, &from, &to) || request__selector(r, &sel) ||
	    request__uint_param(r, "limit", DEFAULT_TOP, 1, MAX_TOP, &limit))
		goto out;
	t.names = intern__new();
	if (!t.names) {
		request__error(r, 500, "out of memory");
		goto out;
	}
	err = store__gpu_intervals(r->srv->store, from, to, sel, NULL, 0, _top_add, &t);
	if (err) {
		request__error(r, err == -ENOMEM ? 503 : 500, "store: %s", strerror(-err));
		goto out;
	}
	for (uint32_t i = 0; i < t.n; i++)
		total += t.rows[i].total_ns;
	/* An empty window has no rows: qsort() must not see their NULL. */
	if (t.n)
		qsort(t.rows, t.n, sizeof(*t.rows), _by_total);
	strbuf__printf(&sb, "{\"from\":%lld,\"to\":%lld,\"total_ns\":%llu,\"kernels\":[",
		       (long long)from, (long long)to, (unsigned long long)total);
	for (uint32_t i = 0; i < t.n && i < limit; i++) {
		const struct kernel_row *k = &t.rows[i];
		const char *key = intern__key(t.names, k->name, NULL);

		strbuf__puts(&sb, i ? ",{\"name\":" : "{\"name\":");
		strbuf__json_string(&sb, key + 4);
		strbuf__puts(&sb, ",\"kind\":");
		strbuf__json_string(&sb, gpu_activity_kind__name(k->kind));
		strbuf__printf(&sb, ",\"calls\":%llu,\"records\":%llu,\"total_ns\":%llu,"
			       "\"mean_ns\":%llu,\"max_ns\":%llu}",
			       (unsigned long long)k->calls, (unsigned long long)k->records,
			       (unsigned long long)k->total_ns,
			       (unsigned long long)(k->calls ? k->total_ns / k->calls : 0),
			       (unsigned long long)k->max_ns);
	}
	strbuf__puts(&sb, "]}");
	request__reply_json(r, 200, &sb);
out:
	strbuf__release(&sb);
	intern__free(t.names);
	free(t.rows);
	selector__free(sel);
}
