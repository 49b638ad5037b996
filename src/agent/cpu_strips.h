/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_CPU_STRIPS_H
#define FW_AGENT_CPU_STRIPS_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/bpf/strips.h"

/*
 * The CPU strips collector: a sched_switch BPF program (strips.bpf.c says
 * how it bounds its cost) writing per-CPU busy intervals into a ring buffer
 * that wakes its reader only once a quarter full; cpu_strips__drain() runs
 * on the agent's tick and then, and appends the intervals to the batch
 * being filled.
 */
struct cpu_strips;
struct cpu_profile;

struct cpu_strips_opts {
	uint64_t min_ns;	/* shorter intervals are coalesced; 0: 1 ms */
	uint64_t window_ns;	/* span of a coalescing window; 0: 1 ms */
	/*
	 * A raw_tp program (borrowed fd) the strips' sched_switch program
	 * tail-calls at every switch (off-CPU time's); ignored unless chain.
	 */
	bool chain;
	int chain_fd;
};

struct cpu_strips_stats {
	uint64_t bpf[FW_STRIP_STAT_MAX];	/* summed over CPUs */
	uint64_t intervals;			/* added to batches */
	uint64_t dropped;			/* undecodable or out of memory */
};

/* Loads and attaches; NULL with errno set and the reason logged. */
struct cpu_strips *cpu_strips__open(const struct cpu_strips_opts *o);
/* Readable when the ring buffer is a quarter full (borrowed), or -1. */
int cpu_strips__fd(const struct cpu_strips *s);
/* Whether the strips' program tail-calls opts.chain_fd (a failure to is logged). */
bool cpu_strips__chained(const struct cpu_strips *s);
/* Accepts NULL. */
void cpu_strips__close(struct cpu_strips *s);
/*
 * Appends every interval in the ring buffer to cp's batch (borrowed), with
 * the series of its process as cp gives it to CPU samples. Returns the
 * number added or -errno.
 */
int cpu_strips__drain(struct cpu_strips *s, struct cpu_profile *cp);
int cpu_strips__stats(struct cpu_strips *s, struct cpu_strips_stats *out);
const char *fw_strip_stat__name(enum fw_strip_stat stat);
/* Logs the counters: drops at warn, the rest at info. */
void cpu_strips__report(struct cpu_strips *s);

#endif
