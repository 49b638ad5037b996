/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the BPF unwinder needs to know about each process, shared between
 * sample.bpf.c and src/agent/unwinder.c. Fixed-width types only.
 */
#ifndef FW_AGENT_BPF_UNWIND_H
#define FW_AGENT_BPF_UNWIND_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "unwind/unwind_table.h"

/* Executable file mappings per process the unwinder knows; beyond, frame pointers. */
#define FW_MAX_PROC_MAPPINGS 256

/*
 * One executable file mapping. Its file's rows are an array map of their
 * own, found in unwind_files under file_id, so every process that maps
 * libc points at the same rows and each table costs exactly its size.
 */
struct fw_mapping {
	__u64 start, end;	/* [start, end) in the process */
	__u64 bias;		/* ELF virtual address = address - bias */
	__u32 file_id;		/* with row_count 0: a table built on demand (wanted_tables) */
	__u32 row_count;	/* 0: no table (no CFI, over the cap, not built yet): frame pointers */
};

_Static_assert(sizeof(struct fw_mapping) == 32, "fw_mapping is shared with BPF");

/* Value of the proc_mappings map, keyed by thread group id; sorted by start. */
struct fw_proc_mappings {
	__u32 n;
	__u32 pad;
	struct fw_mapping m[FW_MAX_PROC_MAPPINGS];
};

#endif
