/* SPDX-License-Identifier: Apache-2.0 */
/* Records shared between strips.bpf.c and user space (cpu_strips.c). */
#ifndef FW_AGENT_BPF_STRIPS_H
#define FW_AGENT_BPF_STRIPS_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define FW_STRIP_COMM_LEN 16

/* Set in fw_cpu_interval.flags. */
#define FW_STRIP_COALESCED (1u << 0)	/* several short intervals packed into one */

/*
 * One busy interval of one CPU, CLOCK_BOOTTIME. A coalesced record stands
 * for the short intervals of a window of at most window_ns: it starts where
 * the first began and lasts their summed busy time, attributed to the
 * thread that had most of it.
 */
struct fw_cpu_interval {
	__u64 start_ns;
	__u64 end_ns;
	__u32 pid;		/* thread group id */
	__u32 tid;
	__u32 cpu;
	__u32 flags;
	char comm[FW_STRIP_COMM_LEN];
};

_Static_assert(sizeof(struct fw_cpu_interval) == 48, "fw_cpu_interval layout");

/*
 * Counters. SWITCHES and COALESCED_IN live in the head of the per-CPU
 * state (one map lookup per switch instead of three); the others in the
 * strip_stats map. cpu_strips__stats() sums both.
 */
enum fw_strip_stat {
	FW_STRIP_SWITCHES,	/* sched_switch events seen */
	FW_STRIP_EMITTED,	/* records written to the ring buffer */
	FW_STRIP_COALESCED_IN,	/* short intervals folded into coalesced records */
	FW_STRIP_RINGBUF_FULL,	/* records dropped: ring buffer full */
	FW_STRIP_STAT_MAX,
};

#endif
