/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SERVER_GPU_IDLE_OFFCPU_H
#define FW_SERVER_GPU_IDLE_OFFCPU_H

#include <stdbool.h>
#include <stdint.h>

#include "server/gpu_idle.h"

/*
 * The off-CPU half of GET /api/v1/gpu/idle: the time a process's threads
 * spent blocked while its GPU was idle, under the stacks they blocked in.
 *
 * Only the threads that put work on the GPU are charged: the GPU idles
 * until one of them launches again, so their blocks are what its idle
 * time waits on. The others (parked pool workers, a logger on its queue)
 * are blocked through busy and idle time alike and explain nothing; their
 * time is only counted, in other_blocked_ns. The launching threads are
 * those of the process's GPU-time samples in the window; without any
 * (NVML alone), the main thread (tid = pid). Where the kernel that ended
 * a gap is known, only the thread that launched it is charged that gap:
 * PyTorch's backward thread, parked while the main thread loads data,
 * waited on it like the GPU did (not_next_ns). A gap whose end is not
 * known (the last one, or its launch not sampled) goes to the thread that
 * ended most of the idle time of the known ones.
 *
 * An off-CPU sample is one block: [ts, ts + value) under its stack. A block
 * is charged only the parts of it that fall in idle time, with the same
 * idle definition the CPU samples get: inside the window, outside the busy
 * set, and inside `known` when only that time is known. A block
 * inside a CUDA synchronisation call is the thread waiting on a busy GPU:
 * it is counted in waiting_on_gpu_ns and never charged, as its CPU samples
 * would be.
 */
struct store;
struct selector;
struct profile;

/*
 * Blocks are stored under the time they began, so a block that runs into
 * the window may have begun before it: the samples this long before the
 * window are read too. A block that began earlier still is not seen.
 */
#define OFFCPU_LOOKBACK_NS (30LL * 1000000000LL)

struct offcpu_launch {
	int64_t ts;			/* the kernel's start */
	uint32_t tid;			/* the thread that launched it */
};

struct offcpu_idle {
	/* In: the idle definition (borrowed). */
	const struct busy_set *busy;
	const struct busy_set *known;	/* non-NULL: only time inside it may be idle */
	bool unknown;			/* nothing says when the GPU was busy: nothing is idle */
	int64_t from, to;		/* the window */

	/* Out. p's sample values are nanoseconds charged to idle time. */
	struct profile *p;
	uint32_t *tids;			/* the charged threads, sorted */
	size_t ntids;
	bool main_thread;		/* no GPU-time sample: tids is the main thread */
	uint64_t blocks;		/* their blocks with a part in the window */
	int64_t blocked_ns;		/* their time inside the window, summed over threads */
	int64_t idle_ns;		/* their time inside idle time, summed over threads */
	int64_t waiting_ns;		/* their time inside the window in a sync call */
	/* Idle time in which at least one of them was blocked. */
	int64_t wall_ns;
	/* Blocks of the other threads: their time inside the window, summed. */
	uint64_t other_blocks;
	int64_t other_blocked_ns;
	/* Charged threads' idle time in gaps another of them ended: not charged. */
	int64_t not_next_ns;
	/*
	 * The first block's start and the last one's end, inside the window (0
	 * when none): a block is evidence the process was there, so the route
	 * widens the process's span to hold them, and every charged part then
	 * lies inside the span its idle_ns is of.
	 */
	int64_t span_from, span_to;

	/* Private. */
	struct busy_set *charged;	/* the idle parts of every block, merged */
	size_t cap_tids;
	struct offcpu_launch *launches;	/* the GPU-time samples, in ts order */
	size_t nlaunches, cap_launches;
	int64_t *ender_idle;		/* per tids[]: idle ns of the gaps its launch ended */
	uint32_t usual_ender;		/* the tid that ended the most; 0: none known */
	struct sync_stacks sync;
};

/*
 * Reads the GPU-time and off-CPU samples of sel (one process, pid) and
 * fills the out fields of o (in fields set, out fields zero). 0, or a
 * negative errno.
 */
int offcpu_idle__read(struct store *st, const struct selector *sel, uint32_t pid,
		      struct offcpu_idle *o);
/* Frees what offcpu_idle__read() allocated; the in fields are left. */
void offcpu_idle__release(struct offcpu_idle *o);

#endif
