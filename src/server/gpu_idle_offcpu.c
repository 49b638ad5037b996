// SPDX-License-Identifier: Apache-2.0
/* Off-CPU time charged to a GPU's idle gaps (see gpu_idle_offcpu.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/profile.h"
#include "server/gpu_idle_offcpu.h"
#include "store/store.h"

/*
 * GPU-time samples read to find the launching threads: a thread that
 * launched less than one in this many of the window's kernels may be
 * missed, and matters as little.
 */
#define MAX_GPU_SAMPLES 200000
/*
 * A gap's next launch: the first kernel that starts this close to the
 * gap's end (before it by NEXT_EARLY_NS, clocks of two sources; after it
 * by NEXT_LATE_NS, a busy set from coarser data). Further away, not known.
 */
#define NEXT_EARLY_NS 100000LL
#define NEXT_LATE_NS 50000000LL

/* One block's walk over the idle time it overlaps. */
struct walk {
	struct offcpu_idle *o;
	uint32_t tid;
	int64_t charged;
};

/* The launching thread whose kernel ended the gap that ends at end; 0: not known. */
static uint32_t _next_launcher(const struct offcpu_idle *o, int64_t end)
{
	size_t lo = 0, hi = o->nlaunches;

	if (end == INT64_MAX)
		return 0;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (o->launches[mid].ts < end - NEXT_EARLY_NS)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == o->nlaunches || o->launches[lo].ts > end + NEXT_LATE_NS)
		return 0;
	return o->launches[lo].tid;
}

static int _idle_part(void *ctx, int64_t start, int64_t end)
{
	struct walk *w = ctx;
	uint32_t next = _next_launcher(w->o, busy_set__next_start(w->o->busy, end));

	/* Not known (the last gap, a launch not sampled): the usual one's. */
	if (!next)
		next = w->o->usual_ender;
	/* Another thread's launch ended this gap: it was waited for, not this one. */
	if (next && next != w->tid) {
		w->o->not_next_ns += end - start;
		return 0;
	}
	w->charged += end - start;
	return busy_set__add(w->o->charged, start, end);
}

/* Inside the known time, the gaps of the busy set. */
static int _known_part(void *ctx, int64_t start, int64_t end)
{
	struct walk *w = ctx;

	return busy_set__gaps(w->o->busy, start, end, _idle_part, w);
}

static size_t _tid_slot(const struct offcpu_idle *o, uint32_t tid)
{
	size_t lo = 0, hi = o->ntids;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (o->tids[mid] < tid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* tid's index in tids, or ntids when it is not there. */
static size_t _tid_index(const struct offcpu_idle *o, uint32_t tid)
{
	size_t i = _tid_slot(o, tid);

	return i < o->ntids && o->tids[i] == tid ? i : o->ntids;
}

static int _add_tid(struct offcpu_idle *o, uint32_t tid)
{
	size_t i = _tid_slot(o, tid);

	if (i < o->ntids && o->tids[i] == tid)
		return 0;
	if (o->ntids == o->cap_tids) {
		size_t cap = o->cap_tids ? o->cap_tids * 2 : 8;
		uint32_t *v = realloc(o->tids, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		o->tids = v;
		o->cap_tids = cap;
	}
	memmove(o->tids + i + 1, o->tids + i, (o->ntids - i) * sizeof(*o->tids));
	o->tids[i] = tid;
	o->ntids++;
	return 0;
}

/* An idle gap of the window: its idle time, to the thread whose launch ended it. */
static int _count_ender(void *ctx, int64_t start, int64_t end)
{
	struct offcpu_idle *o = ctx;
	int64_t idle = o->known ? busy_set__covered(o->known, start, end) : end - start;
	size_t i = _tid_index(o, _next_launcher(o, busy_set__next_start(o->busy, end)));

	if (i < o->ntids)
		o->ender_idle[i] += idle;
	return 0;
}

/*
 * The thread whose launches ended most of the window's idle time: in a
 * training loop, the one that starts each step after the data loading.
 * Gaps whose own end is not known are charged to it alone. Idle time, not
 * a count of gaps: a step's kernels launched from two threads leave one
 * gap of microseconds and one of the whole loading time per step, so
 * counts tie, and where the window begins or which tid is lower would
 * decide who waited for the last gap.
 */
static int _find_usual_ender(struct offcpu_idle *o)
{
	int64_t best = 0;
	int err;

	o->ender_idle = calloc(o->ntids ? o->ntids : 1, sizeof(*o->ender_idle));
	if (!o->ender_idle)
		return -ENOMEM;
	err = busy_set__gaps(o->busy, o->from, o->to, _count_ender, o);
	for (size_t i = 0; !err && i < o->ntids; i++) {
		if (o->ender_idle[i] > best) {
			best = o->ender_idle[i];
			o->usual_ender = o->tids[i];
		}
	}
	return err;
}

static int _launch(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
		   int64_t value, const char *comm, uint32_t pid)
{
	struct offcpu_idle *o = ctx;

	(void)stack;
	(void)cpu;
	(void)comm;
	(void)pid;
	/* tid 0: the launch was not seen (a record without its launch). */
	if (value <= 0 || !tid)
		return 0;
	if (o->nlaunches == o->cap_launches) {
		size_t cap = o->cap_launches ? o->cap_launches * 2 : 256;
		struct offcpu_launch *v = realloc(o->launches, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		o->launches = v;
		o->cap_launches = cap;
	}
	/* In ts order, as the store passes them. */
	o->launches[o->nlaunches++] = (struct offcpu_launch){ ts, tid };
	return _add_tid(o, tid);
}

static int _block(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
		  int64_t value, const char *comm, uint32_t pid)
{
	struct offcpu_idle *o = ctx;
	struct walk w = { o, tid, 0 };
	int64_t a, b, c;
	int kind, err;

	(void)cpu;
	if (value <= 0 || ts > o->to - value)
		b = o->to;	/* also where ts + value would overflow */
	else
		b = ts + value;
	a = ts > o->from ? ts : o->from;
	if (value <= 0 || b <= a)
		return 0;
	kind = sync_stacks__kind(&o->sync, o->p, stack);
	if (kind < 0)
		return kind;
	/* The profiler's own blocks in the process are no thread's wait. */
	if (_tid_index(o, tid) == o->ntids || kind == STACK_OBSERVER) {
		o->other_blocks++;
		o->other_blocked_ns += b - a;
		return 0;
	}
	o->blocks++;
	o->blocked_ns += b - a;
	/* The process was there, blocked: its span holds the block. */
	if (!o->span_from || a < o->span_from)
		o->span_from = a;
	if (b > o->span_to)
		o->span_to = b;
	if (kind == STACK_SYNC) {
		o->waiting_ns += b - a;
		return 0;
	}
	if (o->unknown)
		return 0;
	if (o->known)
		err = busy_set__each(o->known, a, b, _known_part, &w);
	else
		err = busy_set__gaps(o->busy, a, b, _idle_part, &w);
	if (err)
		return err;
	if (!w.charged)
		return 0;
	o->idle_ns += w.charged;
	c = profile__intern_string(o->p, comm ? comm : "");
	if (c < 0)
		return -ENOMEM;
	return profile__add_sample(o->p, stack, pid, 0, 0, (uint32_t)c, (uint64_t)w.charged);
}

int offcpu_idle__read(struct store *st, const struct selector *sel, uint32_t pid,
		      struct offcpu_idle *o)
{
	struct profile *scratch;
	int err;

	o->p = profile__new(1, (uint64_t)o->from);
	o->charged = busy_set__new();
	scratch = profile__new(1, (uint64_t)o->from);
	if (!o->p || !o->charged || !scratch) {
		profile__free(scratch);
		return -ENOMEM;
	}
	/* A gap that ends at the window's end is ended by a launch after it. */
	err = store__samples(st, o->from, o->to + NEXT_LATE_NS, sel, SAMPLE_GPU_TIME,
			     MAX_GPU_SAMPLES, scratch, _launch, o, NULL);
	profile__free(scratch);
	if (!err && !o->ntids) {
		o->main_thread = true;
		err = _add_tid(o, pid);
	}
	if (!err && !o->main_thread && !o->unknown)
		err = _find_usual_ender(o);
	if (err)
		return err;
	err = store__samples(st, o->from - OFFCPU_LOOKBACK_NS, o->to, sel, SAMPLE_OFFCPU, 0, o->p,
			     _block, o, NULL);
	if (err)
		return err;
	/* Threads blocked together count once here. */
	busy_set__finish(o->charged);
	o->wall_ns = busy_set__covered(o->charged, o->from, o->to);
	return 0;
}

void offcpu_idle__release(struct offcpu_idle *o)
{
	profile__free(o->p);
	o->p = NULL;
	busy_set__free(o->charged);
	o->charged = NULL;
	free(o->tids);
	o->tids = NULL;
	o->ntids = o->cap_tids = 0;
	free(o->launches);
	o->launches = NULL;
	free(o->ender_idle);
	o->ender_idle = NULL;
	o->usual_ender = 0;
	o->nlaunches = o->cap_launches = 0;
	sync_stacks__release(&o->sync);
}
