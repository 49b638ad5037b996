/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the BPF HotSpot unwinder needs to know about one JVM, shared between
 * hotspot.bpf.h and src/agent/interp/hotspot.c. Fixed-width types only. Every
 * offset comes from the vmStructs tables the JVM itself exports
 * (gHotSpotVMStructs and friends in libjvm.so), read from the process.
 */
#ifndef FW_AGENT_BPF_HOTSPOT_H
#define FW_AGENT_BPF_HOTSPOT_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

/* Code heaps: non-nmethods, profiled and non-profiled nmethods (one when not segmented). */
#define FW_HS_MAX_HEAPS 4
/* Segment map hops to a blob's start: blocks up to 254 * 7 segments (227 KB at 128 B). */
#define FW_HS_MAX_HOPS 8

/* One CodeHeap: its reserved range and the segment map that finds block starts. */
struct fw_hs_heap {
	__u64 lo, hi;		/* _memory._low_boundary, _high_boundary */
	__u64 segmap;		/* _segmap._low_boundary: one byte per segment */
	__u32 log2_seg;		/* _log2_segment_size */
	__u32 pad;
};

/* Value of the hs_procs map, keyed by thread group id. */
struct fw_hs_proc {
	__u64 cc_lo, cc_hi;		/* CodeCache::_low_bound, _high_bound */
	__u64 interp_lo, interp_hi;	/* the template interpreter's code (its StubQueue) */
	struct fw_hs_heap heaps[FW_HS_MAX_HEAPS];
	__u32 nheaps;
	__u16 block_size;		/* sizeof(HeapBlock): the blob follows its header */
	__u16 block_used;		/* HeapBlock::Header::_used (bool) */
	__u16 blob_frame_complete;	/* CodeBlob::_frame_complete_offset (int) */
	__u16 blob_frame_size;		/* CodeBlob::_frame_size (int, words) */
	__u16 blob_code_begin;		/* CodeBlob::_code_begin (address) */
	__u16 method_const;		/* Method::_constMethod */
	__u16 const_size;		/* sizeof(ConstMethod): the bytecodes follow it */
	__u16 pad[3];
};

_Static_assert(sizeof(struct fw_hs_proc) == 32 + 32 * FW_HS_MAX_HEAPS + 24,
	       "fw_hs_proc is shared with BPF");

/*
 * An interpreted frame takes its place in the user stack as one word:
 * FW_HS_INTERP set, the bytecode index in the 16 bits below it
 * (FW_HS_BCI_NONE when not known) and the Method* in the low 47 bits.
 * User addresses never have the top bit set, so the word cannot be taken
 * for one. Compiled frames keep their pc: user space finds the nmethod.
 */
#define FW_HS_INTERP (1ull << 63)
#define FW_HS_BCI_SHIFT 47
#define FW_HS_BCI_NONE 0xffffu
#define FW_HS_METHOD_MASK ((1ull << FW_HS_BCI_SHIFT) - 1)

/*
 * x86-64 interpreter frame slots, in words from rbp (frame_x86.hpp; only
 * sender_sp is in the exported constants, the others are the platform's
 * fixed layout): sender sp, Method*, bytecode pointer.
 */
#define FW_HS_FRAME_SENDER_SP (-1)
#define FW_HS_FRAME_METHOD (-3)
#define FW_HS_FRAME_BCP (-8)

/* Counters of the HotSpot walk, in their own per-CPU map (hs_stats). */
enum fw_hs_stat {
	FW_HS_STAT_INTERP_FRAMES,	/* interpreted frames named by Method* */
	FW_HS_STAT_COMPILED_FRAMES,	/* frames unwound by their code blob's frame size */
	FW_HS_STAT_STUB_FRAMES,		/* code cache frames without a frame size: frame pointers */
	FW_HS_STAT_NO_BLOB,		/* a code cache pc outside every used block */
	FW_HS_STAT_FAULT,		/* a read of JVM memory failed: walk stopped */
	FW_HS_STAT_MAX,
};

#endif
