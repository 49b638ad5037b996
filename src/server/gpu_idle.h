/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SERVER_GPU_IDLE_H
#define FW_SERVER_GPU_IDLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * When a GPU was busy, as a set of disjoint half-open intervals, for
 * GET /api/v1/gpu/idle: the union of a process's kernel intervals, or of
 * the spans where NVML saw its utilisation at or above a threshold. The
 * idle time is the complement. Intervals may be added in any order;
 * busy_set__finish() sorts and merges them before any query.
 */
struct busy_set;

/* NULL with errno set (ENOMEM). */
struct busy_set *busy_set__new(void);
/* Accepts NULL. */
void busy_set__free(struct busy_set *s);
/* Adds [start, end); empty or reversed intervals are ignored. 0 or -ENOMEM. */
int busy_set__add(struct busy_set *s, int64_t start, int64_t end);
/* Sorts and merges overlapping or touching intervals. */
void busy_set__finish(struct busy_set *s);
/* Disjoint intervals after busy_set__finish(). */
size_t busy_set__count(const struct busy_set *s);
/* Busy nanoseconds inside [from, to). */
int64_t busy_set__covered(const struct busy_set *s, int64_t from, int64_t to);
/*
 * Whether ts falls in a busy interval. *cursor (start it at 0) remembers
 * where the last lookup ended, so that lookups in ts order cost O(1) each;
 * a ts earlier than the last one still answers right.
 */
int busy_set__contains(const struct busy_set *s, int64_t ts, size_t *cursor);
/* The start of the first interval starting at or after ts; INT64_MAX if none. */
int64_t busy_set__next_start(const struct busy_set *s, int64_t ts);
/*
 * cb runs for each idle gap inside [from, to), in time order; a non-zero
 * return stops the walk and is returned.
 */
int busy_set__gaps(const struct busy_set *s, int64_t from, int64_t to,
		   int (*cb)(void *ctx, int64_t start, int64_t end), void *ctx);

/*
 * cb runs for each interval of s inside [from, to), clipped to it, in time
 * order; a non-zero return stops the walk and is returned.
 */
int busy_set__each(const struct busy_set *s, int64_t from, int64_t to,
		   int (*cb)(void *ctx, int64_t start, int64_t end), void *ctx);
/*
 * Adds to dst the parts of src's intervals that no interval of cover
 * holds (src and cover finished). 0 or -ENOMEM.
 */
int busy_set__add_outside(struct busy_set *dst, const struct busy_set *src,
			  const struct busy_set *cover);

/*
 * Whether a frame's function is a CUDA call that blocks the CPU until the
 * GPU has finished queued work (cudaDeviceSynchronize, cuStreamSynchronize,
 * their _ptsz and _v2 forms, ...). A CPU sample under one is the CPU
 * waiting on a busy GPU: never idle time, whatever a coarse busy source
 * says. Copies are not among them: a stall that only moves data is idle
 * time the analysis must show.
 */
bool gpu_idle__is_sync_call(const char *function);

/*
 * Whether a mapping's path is libflamewatch-cuda.so (or .so.N): a stack
 * through it is the profiler's own work in the process (its control
 * thread, its CUPTI callbacks), which no answer about the application's
 * idle GPU should show.
 */
bool gpu_idle__is_observer_path(const char *path);

/*
 * What each stack of one profile is, looked at once per stack id.
 * Zero-initialise; release with sync_stacks__release().
 */
struct profile;
struct sync_stacks {
	uint8_t *v;	/* per stack id: 0 not looked at yet, else an enum stack_kind */
	size_t cap;
};

enum stack_kind {
	STACK_PLAIN = 1,
	STACK_SYNC,	/* a frame is a sync call: the CPU waits on the GPU */
	STACK_OBSERVER,	/* a frame is in libflamewatch-cuda.so (ahead of STACK_SYNC) */
};

/* The stack's enum stack_kind, or -ENOMEM. */
int sync_stacks__kind(struct sync_stacks *c, const struct profile *p, uint32_t stack);
void sync_stacks__release(struct sync_stacks *c);

#endif
