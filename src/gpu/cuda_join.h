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
 *    correlation id; it leaves when it falls more than max_distance ids
 *    behind the newest launch of its process, or when the process holds
 *    more than max_launches;
 *  - records waiting for their launch. A record leaves when its launch
 *    arrives, when it falls max_distance ids behind the newest launch (its
 *    launch is not coming), when the process holds more than max_records,
 *    or when it has waited max_record_age_ns. A record that leaves without
 *    a launch is still emitted, without a launch, so GPU time totals stay
 *    right.
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
};

/*
 * Called once per record, in the order records become final. l is the
 * launch (borrowed, for this call only) or NULL when the record never found
 * it. r is borrowed.
 */
typedef void (*cuda_join_emit_fn)(void *ctx, uint32_t pid, const struct fw_cuda_record *r,
				  const struct cuda_join_launch *l);

struct cuda_join_opts {
	uint32_t max_launches;		/* per process; 0: 4096 */
	uint32_t max_records;		/* per process; 0: 4096 */
	uint64_t max_distance;		/* correlation ids; 0: 65536 */
	uint64_t max_record_age_ns;	/* 0: 2 s */
	uint32_t max_pids;		/* processes with pending state; 0: 1024 */
	cuda_join_emit_fn emit;
	void (*free_stack)(void *ctx, void *stack);	/* may be NULL */
	void *ctx;
};

struct cuda_join_stats {
	uint64_t launches;		/* launches added */
	uint64_t records;		/* records added */
	uint64_t joined;		/* records emitted with their launch */
	uint64_t unattributed;		/* records emitted without */
	uint64_t launches_unmatched;	/* launches that left without any record */
	uint64_t launches_evicted_count;	/* left because of max_launches */
	uint64_t records_evicted_count;	/* left unattributed because of max_records */
	uint64_t records_evicted_distance;	/* ... because their launch fell behind */
	uint64_t records_expired;	/* ... because they waited max_record_age_ns */
	uint64_t pids_evicted;		/* processes dropped because of max_pids */
};

/* Borrows opts (copied). Returns NULL with errno set. */
struct cuda_join *cuda_join__new(const struct cuda_join_opts *opts);
/* Frees pending launches without emitting anything. Accepts NULL. */
void cuda_join__free(struct cuda_join *j);

/*
 * Adds a launch; consumes stack (also on failure). Emits the pending
 * records it completes. now_ns is the caller's monotonic clock. Returns 0
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
