/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Records shared between sample.bpf.c and user space. Fixed-width types only;
 * the variable-length part comes last.
 */
#ifndef FW_AGENT_BPF_SAMPLE_H
#define FW_AGENT_BPF_SAMPLE_H

#ifndef __VMLINUX_H__
#include <linux/types.h>	/* BPF programs get these types from vmlinux.h */
#endif

#include "python.h"

#define FW_COMM_LEN 16
#define FW_MAX_KSTACK 127
#define FW_MAX_USTACK 127
#define FW_MAX_FRAMES (FW_MAX_KSTACK + FW_MAX_USTACK)

enum fw_event_type {
	FW_EVENT_SAMPLE = 1,
	FW_EVENT_EXEC = 2,
	FW_EVENT_EXIT = 3,
	FW_EVENT_FORK = 4,
};

/* Set in fw_sample.flags. */
#define FW_SAMPLE_USTACK_TRUNCATED (1u << 0)	/* hit FW_MAX_USTACK */
#define FW_SAMPLE_USTACK_FAULT     (1u << 1)	/* a frame pointer pointed at unreadable memory */
#define FW_SAMPLE_KERNEL_THREAD    (1u << 2)	/* no user space to walk */
#define FW_SAMPLE_NO_TABLES        (1u << 3)	/* process unknown to the unwinder: frame pointers only */
#define FW_SAMPLE_UNKNOWN_MAPPING  (1u << 4)	/* a pc outside every known mapping: maps changed */

/*
 * One CPU sample. addrs holds kstack_len kernel addresses and then
 * ustack_len user addresses, each leaf first; the first user address is the
 * interrupted instruction, the others are return addresses. Then, for a
 * CPython process, pystack_len Python frames, leaf first, two words each
 * (see python.h).
 */
struct fw_sample {
	__u32 type;		/* FW_EVENT_SAMPLE */
	__u32 pid;		/* thread group id, in the initial pid namespace */
	__u32 tid;
	__u32 cpu;
	__u64 boot_ns;		/* CLOCK_BOOTTIME; user space converts to wall clock */
	char comm[FW_COMM_LEN];
	__u16 kstack_len;
	__u16 ustack_len;
	__u32 flags;
	__u16 pystack_len;
	__u16 pad16;
	__u32 pad32;
	__u64 addrs[FW_MAX_FRAMES + 2 * FW_MAX_PYFRAMES];
};

_Static_assert(sizeof(struct fw_sample) == 56 + 8 * (FW_MAX_FRAMES + 2 * FW_MAX_PYFRAMES),
	       "fw_sample layout is shared with user space");

/* Process lifecycle: exec replaces the address space, exit ends it. */
struct fw_proc_event {
	__u32 type;		/* FW_EVENT_EXEC, FW_EVENT_EXIT or FW_EVENT_FORK */
	__u32 pid;
	__u32 ppid;		/* FW_EVENT_FORK: the parent's thread group id */
	__u32 pad;
	__u64 boot_ns;
	char comm[FW_COMM_LEN];
};

_Static_assert(sizeof(struct fw_proc_event) == 40,
	       "fw_proc_event layout is shared with user space");

/* Counters in the per-CPU stats map; every failure path bumps one. */
enum fw_stat {
	FW_STAT_SAMPLES,		/* samples written to the ring buffer */
	FW_STAT_IDLE,			/* samples of the idle task, skipped */
	FW_STAT_FILTERED,		/* samples of processes not being followed */
	FW_STAT_RINGBUF_FULL,		/* sample reservations that failed */
	FW_STAT_KSTACK_ERROR,		/* bpf_get_stack() failed */
	FW_STAT_USTACK_TRUNCATED,
	FW_STAT_USTACK_FAULT,
	FW_STAT_NO_SCRATCH,		/* per-CPU scratch lookup failed (never expected) */
	FW_STAT_PROC_EVENTS,
	FW_STAT_PROC_RINGBUF_FULL,
	FW_STAT_FOLLOW_FULL,		/* a child could not be added to the followed set */
	FW_STAT_UNWIND_NO_TABLES,	/* samples of processes whose tables were not loaded yet */
	FW_STAT_UNWIND_FP_FRAMES,	/* frames unwound through frame pointers */
	FW_STAT_UNWIND_CFI_FRAMES,	/* frames unwound through unwind tables */
	FW_STAT_UNWIND_ROW_MISS,	/* a table lookup found no row (corrupt or racing table) */
	FW_STAT_UNWIND_BAD_FRAME,	/* a step went nowhere (sp did not grow): walk stopped */
	FW_STAT_PY_SAMPLES,		/* samples of CPython processes with Python frames */
	FW_STAT_PY_NO_THREAD,		/* CPython samples whose thread state was not found */
	FW_STAT_PY_FAULT,		/* a read of interpreter memory failed: Python walk stopped */
	FW_STAT_PY_TRUNCATED,		/* Python stacks deeper than FW_MAX_PYFRAMES */
	FW_STAT_PY_FRAMES,		/* Python frames emitted */
	FW_STAT_MAX,
};

#endif
