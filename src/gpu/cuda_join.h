/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_GPU_CUDA_JOIN_H
#define FW_GPU_CUDA_JOIN_H

#include <stdint.h>

#include "cuda/probes.h"

/*
 * The join of CUDA launches (the CPU side: a stack, from the launch probe)
 * with their activity records (the GPU side: start, end, device, ...), by
 * (pid, correlation id). Either side may arrive first, so each process has
 * two pending sets:
 *
 *  - launches waiting for records. A launch is kept after its first match,
 *    because one graph launch completes as many kernels with the same
 *    correlation id, and a record standing for GPU time carried from
 *    unkept launches may name it later; it leaves when it is older than
 *    max_launch_age_ns, or when the process holds more than max_launches.
 *    Age, not distance in ids: a long kernel's record comes seconds and
 *    millions of ids after its launch;
 *  - records waiting for their launch. A record leaves when its launch
 *    arrives, when it falls max_distance ids behind the newest launch (its
 *    launch is not coming), when the process holds more than max_records,
 *    or when it has waited max_record_age_ns.
 *
 * A record that leaves without its launch is never dropped, and never left
 * without a stack when the process has launched anything: it falls back
 * to the launch that last joined a record of the same kind and kernel name
 * in its process (CUDA_JOIN_FALLBACK_SAME), else to the launch that last
 * joined any record there (CUDA_JOIN_FALLBACK_OTHER). Only a process none
 * of whose launches was ever seen has records emitted without one
 * (CUDA_JOIN_LOST). Fallback needs hold_stack; without it, every record
 * that leaves without its launch is LOST.
 *
 * Not thread-safe.
 */
struct cuda_join;

/* A launch as the join keeps it. */
struct cuda_join_launch {
	uint64_t correlation;
	uint32_t tid, cpu;
	uint32_t weight;
	uint32_t matched;	/* records joined with it so far */
	void *stack;		/* the caller's, owned by the join (freed with free_stack) */
	uint64_t added_ns;
};

/* How a record found the launch it is emitted with. */
enum cuda_join_how {
	CUDA_JOIN_JOINED,		/* its launch was there when it came */
	CUDA_JOIN_JOINED_LATE,		/* it waited for its launch */
	CUDA_JOIN_FALLBACK_SAME,	/* not its launch: the last of its kind and name */
	CUDA_JOIN_FALLBACK_OTHER,	/* not its launch: the process's last */
	CUDA_JOIN_LOST,			/* no launch at all (l is NULL) */
	CUDA_JOIN_HOW_MAX,
};

/* Why a record left without its launch. */
enum cuda_join_why {
	CUDA_JOIN_WHY_COUNT,		/* more than max_records waited */
	CUDA_JOIN_WHY_DISTANCE,		/* its id fell max_distance behind the newest launch */
	CUDA_JOIN_WHY_AGE,		/* it waited max_record_age_ns */
	CUDA_JOIN_WHY_GONE,		/* its process exited or exec'd, or the agent stopped */
	CUDA_JOIN_WHY_MEMORY,		/* no memory to keep it waiting */
	CUDA_JOIN_WHY_UNNAMED,		/* correlation 0: carried time of launches none kept */
	CUDA_JOIN_WHY_NO_STACK,		/* its launch came with no stack (stack NULL) */
	CUDA_JOIN_WHY_MAX,
};

/*
 * Called once per record, in the order records become final. l is the
 * launch it is attributed to (borrowed, for this call only; NULL with
 * CUDA_JOIN_LOST). r is borrowed.
 */
typedef void (*cuda_join_emit_fn)(void *ctx, uint32_t pid, const struct fw_cuda_record *r,
				  const struct cuda_join_launch *l, enum cuda_join_how how);

struct cuda_join_opts {
	uint32_t max_launches;		/* per process; 0: 4096 */
	uint32_t max_records;		/* per process; 0: 4096 */
	uint64_t max_distance;		/* correlation ids, for waiting records; 0: 65536 */
	uint64_t max_record_age_ns;	/* 0: 2 s */
	uint64_t max_launch_age_ns;	/* 0: 10 s */
	uint32_t max_pids;		/* processes with pending state; 0: 1024 */
	uint32_t max_fallbacks;		/* kinds and names remembered per process; 0: 1024 */
	cuda_join_emit_fn emit;
	/* Drops one hold on stack (the launch's own, or a fallback's); may be NULL. */
	void (*free_stack)(void *ctx, void *stack);
	/* Takes one more hold on stack; NULL: no fallback. */
	void (*hold_stack)(void *ctx, void *stack);
	void *ctx;
};

struct cuda_join_stats {
	uint64_t launches;		/* launches added */
	uint64_t records;		/* records added */
	uint64_t how[CUDA_JOIN_HOW_MAX];	/* records emitted, by how */
	uint64_t how_ns[CUDA_JOIN_HOW_MAX];	/* their GPU ns x weight */
	uint64_t why[CUDA_JOIN_WHY_MAX];	/* records that left without their launch, by why */
	uint64_t launches_unmatched;	/* launches that left without any record */
	uint64_t launches_evicted_count;	/* left because of max_launches */
	uint64_t pids_evicted;		/* processes dropped because of max_pids */
};

/* "joined", "joined_late", ...: the names of the metrics' labels. */
const char *cuda_join_how__name(enum cuda_join_how how);
const char *cuda_join_why__name(enum cuda_join_why why);

/* Borrows opts (copied). Returns NULL with errno set. */
struct cuda_join *cuda_join__new(const struct cuda_join_opts *opts);
/* Frees pending launches without emitting anything. Accepts NULL. */
void cuda_join__free(struct cuda_join *j);

/*
 * Adds a launch; consumes stack (also on failure). stack may be NULL (it
 * could not be unwound): with fallback, its records are emitted as if they
 * had left without it. Emits the pending records it completes. now_ns is the caller's monotonic clock. Returns 0
 * or -ENOMEM.
 */
int cuda_join__launch(struct cuda_join *j, uint32_t pid, uint64_t correlation, uint32_t tid,
		      uint32_t cpu, uint32_t weight, void *stack, uint64_t now_ns);
/* Adds a record: emits it now if its launch is pending, else keeps it. Returns 0 or -ENOMEM. */
int cuda_join__record(struct cuda_join *j, uint32_t pid, const struct fw_cuda_record *r,
		      uint64_t now_ns);
/* Emits, unattributed, the records that have waited max_record_age_ns. */
void cuda_join__expire(struct cuda_join *j, uint64_t now_ns);
/* The process exited: emits its pending records unattributed and forgets its launches. */
void cuda_join__flush_pid(struct cuda_join *j, uint32_t pid);
/* cuda_join__flush_pid() for every process. */
void cuda_join__flush(struct cuda_join *j);
/* True when pid has pending state. */
int cuda_join__has_pid(const struct cuda_join *j, uint32_t pid);

/*
 * The weight a record stands for: its own (the library's sampling weight),
 * else its launch's, else 1. A gpu_time sample's value is its GPU ns times this.
 */
uint32_t cuda_join__weight(const struct fw_cuda_record *r, const struct cuda_join_launch *l);

void cuda_join__stats(const struct cuda_join *j, struct cuda_join_stats *out);
/* Launches and records pending over all processes. */
void cuda_join__pending(const struct cuda_join *j, uint64_t *launches, uint64_t *records);

#endif
