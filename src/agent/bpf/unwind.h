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
 *
 * A large file's rows (or a file whose whole table would not fit the cap)
 * come a chunk at a time instead: each FW_CHUNK_BYTES of its address
 * space that samples land in has an array of its own in unwind_chunks,
 * under (file_id, address >> FW_CHUNK_SHIFT), built when the first sample
 * there asks for it (wanted_chunks) and shared, like whole tables, by
 * every process that maps the file. Code no sample runs costs nothing.
 */
struct fw_mapping {
	__u64 start, end;	/* [start, end) in the process */
	__u64 bias;		/* ELF virtual address = address - bias */
	__u32 file_id;		/* with row_count 0: rows by chunk (unwind_chunks) */
	__u32 row_count;	/* 0 with file_id 0: no table (no CFI): frame pointers */
};

_Static_assert(sizeof(struct fw_mapping) == 32, "fw_mapping is shared with BPF");

/*
 * 64 KiB of code a chunk: on libLLVM ~1,200 rows (~10 KiB), a build of
 * about a millisecond. A chunk holds at most one row a byte, so its
 * search takes at most FW_CHUNK_SHIFT + 1 rounds.
 */
#define FW_CHUNK_SHIFT 16
#define FW_CHUNK_BYTES (1u << FW_CHUNK_SHIFT)
/* Chunks loaded at once; their bytes count against the table cap too. */
#define FW_MAX_CHUNKS 8192

/*
 * A chunk's rows take 4 bytes each, not an unwind_row's 8: pc_off is the
 * row's address less the chunk's start, and rule indexes unwind_rules,
 * where each distinct rule (an unwind_row, its pc unused) is kept once
 * for all chunks: libLLVM's ~950,000 rows have a few hundred rules. A
 * chunk's array holds its row count in element 0 and then two rows an
 * element (array elements are 8 bytes whatever their value's size).
 * Half the bytes also keep the average chunk in one 8-KiB kmalloc block,
 * where 8-byte rows took 16 KiB.
 */
struct fw_chunk_row {
	__u16 pc_off;
	__u16 rule;
};

struct fw_chunk_elem {
	struct fw_chunk_row r[2];
};

_Static_assert(sizeof(struct fw_chunk_elem) == 8, "fw_chunk_elem is shared with BPF");

/* Distinct rules kept for chunks; a row whose rule finds no room becomes UNWIND_NO_CFI. */
#define FW_MAX_RULES 16384

/* Key of unwind_chunks and wanted_chunks. */
struct fw_chunk_key {
	__u32 file_id;
	__u32 chunk;		/* ELF virtual address >> FW_CHUNK_SHIFT */
};

_Static_assert(sizeof(struct fw_chunk_key) == 8, "fw_chunk_key is shared with BPF");

/* Value of the proc_mappings map, keyed by thread group id; sorted by start. */
struct fw_proc_mappings {
	__u32 n;
	__u32 pad;
	struct fw_mapping m[FW_MAX_PROC_MAPPINGS];
};

#endif
