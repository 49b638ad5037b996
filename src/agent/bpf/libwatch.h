/* SPDX-License-Identifier: Apache-2.0 */
/* Records shared between libwatch.bpf.c and user space (lib_watch.c). */
#ifndef FW_AGENT_BPF_LIBWATCH_H
#define FW_AGENT_BPF_LIBWATCH_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Longest watched file name, NUL included: a power of two (the BPF side masks with it). */
#define FW_LIBWATCH_NAME_LEN 32
/* Link-map entries one loader change walks; longer lists are cut (counted). */
#define FW_LIBWATCH_MAX_OBJECTS 1024

/* A process loaded the watched library. */
struct fw_lib_event {
	__u32 pid;		/* thread group id, in the initial pid namespace */
	__u32 pad;
};

_Static_assert(sizeof(struct fw_lib_event) == 8, "fw_lib_event layout is shared with user space");

/* Counters in the per-CPU libwatch_stats map. */
enum fw_libwatch_stat {
	FW_LIBWATCH_CALLS,		/* loader notifications (_dl_debug_state calls) */
	FW_LIBWATCH_WALKS,		/* ... that walked the link map (RT_CONSISTENT) */
	FW_LIBWATCH_NAMES,		/* object names read */
	FW_LIBWATCH_EVENTS,		/* events written */
	FW_LIBWATCH_RINGBUF_FULL,	/* events lost: the ring buffer was full */
	FW_LIBWATCH_FAULTS,		/* loader memory unreadable: walk stopped */
	FW_LIBWATCH_TRUNCATED,		/* link maps longer than FW_LIBWATCH_MAX_OBJECTS */
	FW_LIBWATCH_STAT_MAX,
};

#endif
