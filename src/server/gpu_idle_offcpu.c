// SPDX-License-Identifier: Apache-2.0
/* Off-CPU time charged to a GPU's idle gaps (see gpu_idle_offcpu.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/profile.h"
#include "server/gpu_idle_offcpu.h"
#include "store/store.h"

/* One block's walk over the idle time it overlaps. */
struct walk {
	struct offcpu_idle *o;
	int64_t charged;
};

static int _idle_part(void *ctx, int64_t start, int64_t end)
{
	struct walk *w = ctx;

	w->charged += end - start;
	return busy_set__add(w->o->charged, start, end);
}

/* Inside the known time, the gaps of the busy set. */
static int _known_part(void *ctx, int64_t start, int64_t end)
{
	struct walk *w = ctx;

	return busy_set__gaps(w->o->busy, start, end, _idle_part, w);
}

/*
 * GPU-time samples read to find the launching threads: a thread that
 * launched less than one in this many of the window's kernels may be
 * missed, and matters as little.
 */
#define MAX_GPU_SAMPLES 200000

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

static bool _charged_tid(const struct offcpu_idle *o, uint32_t tid)
{
	size_t i = _tid_slot(o, tid);

	return i < o->ntids && o->tids[i] == tid;
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

static int _launch(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
		   int64_t value, const char *comm, uint32_t pid)
{
	(void)ts;
	(void)stack;
	(void)cpu;
	(void)comm;
	(void)pid;
	/* tid 0: the launch was not seen (a record without its launch). */
	return value > 0 && tid ? _add_tid(ctx, tid) : 0;
}

static int _block(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
		  int64_t value, const char *comm, uint32_t pid)
{
	struct offcpu_idle *o = ctx;
	struct walk w = { o, 0 };
	int64_t a, b, c;
	int sync, err;

	(void)cpu;
	if (value <= 0 || ts > o->to - value)
		b = o->to;	/* also where ts + value would overflow */
	else
		b = ts + value;
	a = ts > o->from ? ts : o->from;
	if (value <= 0 || b <= a)
		return 0;
	if (!_charged_tid(o, tid)) {
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
	sync = sync_stacks__in_sync(&o->sync, o->p, stack);
	if (sync < 0)
		return sync;
	if (sync) {
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
	err = store__samples(st, o->from, o->to, sel, SAMPLE_GPU_TIME, MAX_GPU_SAMPLES, scratch,
			     _launch, o, NULL);
	profile__free(scratch);
	if (!err && !o->ntids) {
		o->main_thread = true;
		err = _add_tid(o, pid);
	}
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
	sync_stacks__release(&o->sync);
}
