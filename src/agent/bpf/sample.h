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
#include "ruby.h"

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
#define FW_SAMPLE_WANTS_TABLE      (1u << 5)	/* a pc in a chunk of a file's rows not built yet */
#define FW_SAMPLE_PY_BORROWED      (1u << 6)	/* Python frames of another thread (CUDA launches) */
#define FW_SAMPLE_OFFCPU_NO_STACK  (1u << 7)	/* an off-CPU block charged without its stack */

/*
 * One CPU sample. addrs holds kstack_len kernel addresses and then
 * ustack_len user addresses, each leaf first; the first user address is the
 * interrupted instruction, the others are return addresses. Then, for a
 * CPython or CRuby process, pystack_len Python or Ruby frames, leaf first,
 * two words each (see python.h, ruby.h).
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

/*
 * Off-CPU time: a followed thread blocked (it left the CPU sleeping, not
 * preempted) for blocked_ns, from s.boot_ns on, in the stack s (kernel and
 * user, walked as a CPU sample's at the moment it blocked). Variable
 * length: ends with s.addrs. A block whose stack was not taken (BPF
 * walks only where long blocks are likely) has FW_SAMPLE_OFFCPU_NO_STACK
 * in s.flags and no frames.
 */
#define FW_EVENT_OFFCPU 5

struct fw_offcpu {
	__u32 type;		/* FW_EVENT_OFFCPU */
	__u16 wakeup;		/* BPF's own while the thread sleeps; 0 in the ring buffer */
	__u16 kskip;		/* leaf kernel frames of the tracing itself, above __schedule() */
	__u64 blocked_ns;
	struct fw_sample s;	/* s.type is FW_EVENT_OFFCPU too */
};

_Static_assert(sizeof(struct fw_offcpu) == 16 + sizeof(struct fw_sample),
	       "fw_offcpu layout is shared with user space");

/* Process lifecycle: exec replaces the address space, exit ends it. */
struct fw_proc_event {
	__u32 type;		/* FW_EVENT_EXEC, FW_EVENT_EXIT or FW_EVENT_FORK */
	__u32 pid;
	__u32 ppid;		/* FW_EVENT_FORK: the parent's thread group id */
	__u32 mnt_ns;		/* FW_EVENT_EXEC: the mount namespace's inode number (a container) */
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
	FW_STAT_RB_SAMPLES,		/* samples of CRuby processes with Ruby frames */
	FW_STAT_RB_NO_EC,		/* CRuby samples of threads without an execution context */
	FW_STAT_RB_FAULT,		/* a read of VM memory failed: Ruby walk stopped */
	FW_STAT_RB_TRUNCATED,		/* Ruby stacks deeper than FW_MAX_PYFRAMES */
	FW_STAT_RB_FRAMES,		/* Ruby frames emitted */
	FW_STAT_PY_WAKEUPS,		/* samples that woke the agent: new code objects */
	FW_STAT_UNWIND_GO_SWITCH,	/* steps from Go's g0 stack back to a goroutine's (cgo) */
	FW_STAT_DESCRIBE_WAKEUPS,	/* samples that woke the agent: a process or mapping to describe */
	FW_STAT_UNWIND_WANTED,		/* frames in a chunk of rows not built yet (on demand) */
	FW_STAT_OFFCPU_WALKS,		/* blocks of followed threads whose stack was walked */
	FW_STAT_OFFCPU_SAMPLES,		/* off-CPU records written (blocked >= the minimum) */
	FW_STAT_OFFCPU_SHORT,		/* blocks shorter than the minimum, not walked: dropped */
	FW_STAT_OFFCPU_MAP_FULL,	/* walks lost: offcpu_pending full */
	FW_STAT_OFFCPU_RINGBUF_FULL,	/* off-CPU records lost: ring buffer full */
	FW_STAT_OFFCPU_TAKEN,		/* blocks >= the minimum, with their stack */
	FW_STAT_OFFCPU_TAKEN_NS,	/* ... and their blocked time */
	FW_STAT_OFFCPU_NOT_TAKEN,	/* blocks >= the minimum that were not walked */
	FW_STAT_OFFCPU_NOT_TAKEN_NS,	/* ... and their blocked time */
	FW_STAT_OFFCPU_WALKS_SHORT,	/* walked blocks that ended under the minimum: wasted */
	FW_STAT_OFFCPU_NO_THREAD,	/* blocks not followed: no per-thread state to be had */
	FW_STAT_OFFCPU_UNSEEN,		/* blocks whose times could not be read: dropped */
	FW_STAT_UNWIND_PREFETCHED,	/* chunks asked for from stack words above a frame without one */
	FW_STAT_UNWIND_ROW_CACHED,	/* CFI frames whose row came from the per-CPU row cache */
	FW_STAT_MAX,
};


/* ---- CUDA: the USDT probes of libflamewatch-cuda.so (src/cuda/probes.h) ---- */

#include "cuda/probes.h"

/*
 * Event types of their own, far from the CPU sampler's, so that other
 * record kinds can be added there without renumbering these.
 */
#define FW_EVENT_CUDA_LAUNCH   32
#define FW_EVENT_CUDA_ACTIVITY 33

/*
 * A launch probe: the launching thread's user stack, walked exactly as a
 * CPU sample's (s.type is FW_EVENT_CUDA_LAUNCH too, s.cpu the CPU it ran
 * on). The probe fires in user mode, so there is no kernel stack to take:
 * the kernel frames would be the uprobe trap itself (s.kstack_len is 0).
 */
struct fw_cuda_launch {
	__u32 type;		/* FW_EVENT_CUDA_LAUNCH */
	__u32 weight;
	__u64 correlation;
	struct fw_sample s;	/* variable length: ends with s.addrs */
};

_Static_assert(sizeof(struct fw_cuda_launch) == 16 + sizeof(struct fw_sample),
	       "fw_cuda_launch layout is shared with user space");

/* An activity probe: count records copied from the library (variable length). */
struct fw_cuda_activity {
	__u32 type;		/* FW_EVENT_CUDA_ACTIVITY */
	__u32 pid;
	__u32 count;		/* <= FW_CUDA_MAX_BATCH */
	__u32 pad;
	__u64 boot_ns;
	struct fw_cuda_record recs[FW_CUDA_MAX_BATCH];
};

_Static_assert(sizeof(struct fw_cuda_activity) == 24 + 56 * FW_CUDA_MAX_BATCH,
	       "fw_cuda_activity layout is shared with user space");

/* Counters of the CUDA probes, in their own per-CPU map (cuda_stats). */
enum fw_cuda_stat {
	FW_CUDA_STAT_LAUNCHES,		/* launch events written */
	FW_CUDA_STAT_LAUNCH_RINGBUF_FULL,	/* launches dropped: ring buffer over half full */
	FW_CUDA_STAT_ACTIVITIES,	/* activity batches written */
	FW_CUDA_STAT_RECORDS,		/* records in them */
	FW_CUDA_STAT_ACTIVITY_RINGBUF_FULL,	/* batches lost: ring buffer full */
	FW_CUDA_STAT_ACTIVITY_FAULT,	/* the records could not be read */
	FW_CUDA_STAT_ACTIVITY_TRUNCATED,	/* count > FW_CUDA_MAX_BATCH: the rest dropped */
	FW_CUDA_STAT_CONFLICTS,		/* conflict probes (another CUPTI subscriber) */
	FW_CUDA_STAT_FILTERED,		/* probes of processes not being followed */
	FW_CUDA_STAT_NAMES,		/* kernel names copied */
	FW_CUDA_STAT_NAME_LOST,		/* names lost: ring buffer full or unreadable */
	FW_CUDA_STAT_EXEC_LOST,		/* exec marks lost: ring buffer full */
	FW_CUDA_STAT_MAX,
};

/* A conflict probe: another CUPTI subscriber holds the process. */
#define FW_EVENT_CUDA_CONFLICT 34
#define FW_CUDA_CONFLICT_LEN 120

struct fw_cuda_conflict {
	__u32 type;		/* FW_EVENT_CUDA_CONFLICT */
	__u32 pid;
	char what[FW_CUDA_CONFLICT_LEN];	/* NUL-terminated, cut to fit */
};

_Static_assert(sizeof(struct fw_cuda_conflict) == 128,
	       "fw_cuda_conflict layout is shared with user space");

/*
 * A name probe: a kernel's mangled name, copied when the library first
 * reports it, so that it outlives the process. A name that does not fit
 * (no NUL in name[]) is read from the process by address instead.
 */
#define FW_EVENT_CUDA_NAME 35
#define FW_CUDA_NAME_LEN 2032

struct fw_cuda_name {
	__u32 type;		/* FW_EVENT_CUDA_NAME */
	__u32 pid;
	__u64 addr;		/* the name_addr the records carry */
	char name[FW_CUDA_NAME_LEN];
};

_Static_assert(sizeof(struct fw_cuda_name) == 2048,
	       "fw_cuda_name layout is shared with user space");

/*
 * A bare __u32 type, in the samples' ring buffer, written with a wakeup
 * when a CUDA probe first fires for a followed process: the agent maps the
 * CUDA ring buffer now, before a burst fills it (sampler.c).
 */
#define FW_EVENT_CUDA_SEEN 36
/*
 * An exec mark, in the CUDA ring buffer: pid's old image is gone. Written
 * at the exec of every followed process once a CUDA probe has fired, so
 * the agent forgets the old image's kernel names and launches in the order
 * of the CUDA records, not at the exec event in the other buffer, which it
 * may read after the new image's first names.
 */
#define FW_EVENT_CUDA_EXEC 37

struct fw_cuda_exec {
	__u32 type;		/* FW_EVENT_CUDA_EXEC */
	__u32 pid;
};

_Static_assert(sizeof(struct fw_cuda_exec) == 8,
	       "fw_cuda_exec layout is shared with user space");

#endif
