/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_UNWIND_UNWIND_TABLE_H
#define FW_UNWIND_UNWIND_TABLE_H

/*
 * Compact unwind tables for code built without frame pointers (Debian's
 * libc, most -O2 builds). User space turns a file's .eh_frame/.debug_frame
 * into a sorted array of 8-byte rows, one per change of the unwind rule;
 * the BPF unwinder binary-searches it by the file-relative pc. The row
 * layout below is shared with BPF, hence fixed-width types only.
 *
 * Only the three things an x86-64 unwinder needs are kept: how to compute
 * the CFA, where the caller's rbp was saved, and whether this is a frame
 * the generic rule cannot handle. The return address is always at CFA - 8;
 * rows where the CFI says otherwise become UNWIND_NO_CFI.
 */
#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

enum unwind_cfa_type {            /* in unwind_row.cfa_type */
	UNWIND_CFA_RSP = 1,       /* CFA = rsp + cfa_offset */
	UNWIND_CFA_RBP = 2,       /* CFA = rbp + cfa_offset */
	/*
	 * Lazy PLT entry: CFA = rsp + 8, or rsp + 16 when ((rip & 15) >= 11),
	 * i.e. once the entry's push has run. This is binutils' .plt CFA
	 * expression; cfa_offset and rbp_slot are 0.
	 */
	UNWIND_CFA_PLT = 3,
	/*
	 * Signal trampoline (__restore_rt): the interrupted registers are in
	 * the ucontext that starts at rsp. cfa_offset and rbp_slot are 0.
	 */
	UNWIND_CFA_SIGNAL = 4,
	/*
	 * No usable rule here (gap between FDEs, or a rule a row cannot
	 * express): the caller falls back to frame pointers.
	 */
	UNWIND_NO_CFI = 5,
	/* Outermost frame (return address undefined: _start, clone's child): stop. */
	UNWIND_END = 6,
	/*
	 * Go's runtime.asmcgocall calling C on the g0 stack (the call
	 * instruction only): the caller is on the goroutine's stack. rsp +
	 * cfa_offset holds the goroutine's g (or 0) and rsp + rbp_slot (bytes,
	 * not words, for this type) the depth g.stack.hi - sp (or, when g is
	 * 0, the sp itself); the return address into runtime.cgocall is at
	 * that sp, and rbp keeps its value. See src/unwind/go_switch.c.
	 */
	UNWIND_GO_ASMCGOCALL = 7,
	/*
	 * Go's runtime.systemstack calling a function on the g0 stack (the
	 * call instruction only): the caller is on the stack of the goroutine
	 * m.curg, whose sp systemstack saved in curg.sched.sp (g + 0x38), where
	 * the return address is. g0 is at %fs:-8 and its m at g0 + 0x30;
	 * cfa_offset is the offset of curg in m. rbp keeps its value.
	 */
	UNWIND_GO_SYSTEMSTACK = 8,
	/*
	 * Go's runtime.cgocallback calling Go (cgocallbackg) on the
	 * goroutine's stack for C code: the caller, C, is on the g0 stack,
	 * where cgocallback left its own frame at g0.sched.sp (g0 = m.g0 at
	 * offset 0 of m, m = g.m with g at %fs:-8). That frame's CFA is
	 * g0.sched.sp + cfa_offset, with the return address at CFA - 8 and
	 * the caller's rbp at CFA - 16.
	 */
	UNWIND_GO_CGOCALLBACK = 9,
};

struct unwind_row {
	__u32 pc;          /* ELF virtual address where this row starts; the row lasts until the next row's pc */
	__s16 cfa_offset;  /* bytes; 0 unless cfa_type is UNWIND_CFA_RSP or UNWIND_CFA_RBP */
	__u8  cfa_type;    /* enum unwind_cfa_type */
	__u8  rbp_slot;    /* 0: rbp keeps its value (same value / not saved); k > 0: the caller's rbp is saved at CFA - 8*k */
};

_Static_assert(sizeof(struct unwind_row) == 8, "unwind_row is shared with BPF");

#ifndef __VMLINUX_H__
#include <stddef.h>
#include <stdint.h>

/*
 * What one build produced. Type counts are over the final (merged) rows;
 * unsupported_rows counts rows from the CFI whose rules a row cannot express
 * (CFA in another register or an unknown expression, rbp not saved at
 * CFA - 8k, return address not at CFA - 8, offset beyond s16); they became
 * UNWIND_NO_CFI.
 */
struct unwind_table_stats {
	size_t fdes;             /* FDEs (and synthesized PLT ranges) that produced rows */
	size_t rows_raw;         /* rows before adjacent identical rows were merged */
	size_t rows;             /* rows in the table (== *nrows) */
	size_t no_cfi_rows;
	size_t unsupported_rows;
	size_t signal_rows;
	size_t plt_rows;
	size_t go_rows;          /* UNWIND_GO_* rows */
	size_t hdr_fdes;         /* FDEs found through .eh_frame_hdr's table, not listed */
};

/*
 * Builds the unwind table of the x86-64 ELF file behind fd from its
 * .eh_frame, merged with its .debug_frame where that covers code .eh_frame
 * does not; when debug_fd >= 0, the .debug_frame (and, if fd has no
 * .eh_frame, the .eh_frame) of that separate debug file are merged in the
 * same way, at lower priority. PLT sections that no FDE covers get
 * synthesized rows. Both fds are borrowed; their file offsets are not used.
 *
 * On success *rows is an owned, malloc'd array (free() it) of *nrows rows,
 * sorted by pc with strictly increasing pcs, adjacent identical rows merged,
 * gaps between FDEs filled with UNWIND_NO_CFI rows, and a final
 * UNWIND_NO_CFI row after the last FDE. stats may be NULL. Nothing else is
 * retained once the call returns.
 *
 * A Go binary's runtime.asmcgocall gets UNWIND_GO_ASMCGOCALL rows over its
 * calls of C code, its runtime.systemstack an UNWIND_GO_SYSTEMSTACK row
 * over its call on the g0 stack and its runtime.cgocallback an
 * UNWIND_GO_CGOCALLBACK row over its call of Go for C, even when the binary has no CFI at all (built with
 * -ldflags=-w, or stripped): its table is then those rows between
 * UNWIND_NO_CFI rows.
 *
 * Returns 0, -EBADF (bad fd), -ENOEXEC (not an ELF file), -ENOTSUP (not
 * x86-64 ELF64), -ENOENT (no CFI at all and no Go stack switch), -E2BIG (a virtual address does
 * not fit u32), -ENOMEM, or -EIO when the ELF or CFI cannot be read.
 * On error *rows is NULL and *nrows 0.
 */
int unwind_table__build(int fd, int debug_fd, struct unwind_row **rows,
			size_t *nrows, struct unwind_table_stats *stats);

/* Receives n rows of a streamed table (borrowed); non-zero stops the build. */
typedef int (*unwind_rows_fn)(void *ctx, const struct unwind_row *rows, size_t n);

/*
 * The same table as unwind_table__build(), handed to fn in order, in
 * pieces of up to ~1,000 rows, without the whole of it in memory (a Go
 * binary's excepted: its stack switches are spliced into the whole table).
 * A file's table is ~8 bytes a row, millions of rows for the largest
 * libraries; its FDE list is what stays, 16 bytes an FDE. *nrows is the
 * count handed over. Returns as unwind_table__build(), or fn's error.
 */
int unwind_table__stream(int fd, int debug_fd, unwind_rows_fn fn, void *ctx, size_t *nrows,
			 struct unwind_table_stats *stats);

/*
 * The part of unwind_table__build()'s table that covers [lo, hi), built
 * from the FDEs that overlap it only (found through .eh_frame_hdr where
 * the file has one: a build of a few KiB of code then reads a few FDEs,
 * not the file's whole CFI). The first row starts at lo with the rule in
 * force there; no row starts at or past hi, so the rows answer for pcs in
 * [lo, hi) only. For every such pc unwind_table__find() gives the same
 * rule as in the whole table. Returns as unwind_table__build(), and
 * -EINVAL for an empty range or one past 4 GiB; a file with CFI but none
 * in the range gets one UNWIND_NO_CFI row.
 */
int unwind_table__build_range(int fd, int debug_fd, uint64_t lo, uint64_t hi,
			      struct unwind_row **rows, size_t *nrows,
			      struct unwind_table_stats *stats);

/*
 * The row covering pc: the last row whose pc <= pc, or NULL when pc is
 * below the first row (or nrows is 0). rows is borrowed; so is the result.
 */
const struct unwind_row *unwind_table__find(const struct unwind_row *rows,
					    size_t nrows, uint64_t pc);

/* A short name for an enum unwind_cfa_type ("rsp", "plt", ...), for logs and tests. */
const char *unwind_cfa_type__name(unsigned int type);
#endif

#endif
