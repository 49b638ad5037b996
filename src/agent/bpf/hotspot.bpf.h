/* SPDX-License-Identifier: GPL-2.0 */
/*
 * HotSpot frames, included by sample.bpf.c inside its user stack walk. For
 * a JVM user space has described in hs_procs, a pc in the code cache is
 * one of:
 *
 *  - the template interpreter: the frame is rbp-based, and its Method* and
 *    bytecode pointer sit at fixed slots below rbp. The frame's word in
 *    the stack becomes FW_HS_INTERP | bci | Method*; the caller's sp is
 *    the saved sender sp, which is exact even when the caller is compiled
 *    code that came through a c2i adapter.
 *  - a code blob with a frame size (nmethods, runtime stubs): compiled code
 *    keeps no frame pointer, but its frame is a fixed number of words, the
 *    return address and saved rbp at its top. The blob is found through
 *    the heap's segment map, exactly as the JVM finds it (CodeHeap::
 *    find_blob_unsafe), so nothing needs refreshing as code comes and goes.
 *    The pc stays in the stack; user space names it (inlined methods too).
 *  - any other blob (call stub, adapters): frame pointers, as before.
 */
#include "hotspot.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct fw_hs_proc);
} hs_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_HS_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} hs_stats SEC(".maps");

static __always_inline void hs_stat_inc(enum fw_hs_stat stat)
{
	__u32 key = stat;
	__u64 *v = bpf_map_lookup_elem(&hs_stats, &key);

	if (v)
		*v += 1;
}

/* The code blob holding pc, or 0: the segment map walked back to its block's header. */
static __always_inline __u64 hs_find_blob(struct fw_hs_proc *hp, __u64 pc)
{
	__u64 lo = 0, segmap = 0, seg, block;
	__u32 log2 = 0;
	__u8 hop = 0, used = 0;

	/* The heap first, into scalars: one hop loop for the verifier, not one per heap. */
	for (int h = 0; h < FW_HS_MAX_HEAPS; h++) {
		if (h < hp->nheaps && pc >= hp->heaps[h].lo && pc < hp->heaps[h].hi) {
			lo = hp->heaps[h].lo;
			segmap = hp->heaps[h].segmap;
			log2 = hp->heaps[h].log2_seg & 63;
			break;
		}
	}
	if (!segmap)
		return 0;
	seg = (pc - lo) >> log2;
	for (int i = 0; i < FW_HS_MAX_HOPS; i++) {
		if (bpf_probe_read_user(&hop, 1, (void *)(segmap + seg)))
			return 0;
		if (hop == 0xff)	/* free_sentinel: not in a used block */
			return 0;
		if (hop == 0 || seg < hop)
			break;
		seg -= hop;
	}
	if (hop)
		return 0;
	block = lo + (seg << log2);
	if (bpf_probe_read_user(&used, 1, (void *)(block + hp->block_used)) || !used)
		return 0;
	return block + hp->block_size;
}

/*
 * One frame of JVM code at pc (st->ip, or the call before it): sets the
 * caller's ip, sp and bp in st. Returns -1 when pc is not the JVM's (the
 * native rules apply), 0 to go on, 1 to stop.
 */
/*
 * Not inlined: a subprogram returns with a clean state, so the verifier
 * does not walk the native unwinder once per way out of here (three times
 * the load time when it did).
 */
static __noinline int hotspot_step(struct fw_unwind_state *st, struct fw_hs_proc *hp,
					struct fw_sample *s, __u32 idx, __u64 pc)
{
	__u64 ip = 0, sp = 0, bp = 0, blob;
	int frame_size = 0, complete = 0;

	if (!hp || pc < hp->cc_lo || pc >= hp->cc_hi)
		return -1;
	if (pc >= hp->interp_lo && pc < hp->interp_hi) {
		__u64 method = 0, bcp = 0, cm = 0, bci = FW_HS_BCI_NONE;

		if (!st->bp ||
		    read_user_u64(&method, st->bp + 8 * FW_HS_FRAME_METHOD) ||
		    read_user_u64(&bcp, st->bp + 8 * FW_HS_FRAME_BCP) ||
		    read_user_u64(&ip, st->bp + 8) ||
		    read_user_u64(&sp, st->bp + 8 * FW_HS_FRAME_SENDER_SP) ||
		    read_user_u64(&bp, st->bp))
			goto fault;
		/* bci = bcp - the first bytecode, which follows the ConstMethod. */
		if (method && !read_user_u64(&cm, method + hp->method_const) && cm &&
		    bcp >= cm + hp->const_size && bcp - cm - hp->const_size < FW_HS_BCI_NONE)
			bci = bcp - cm - hp->const_size;
		/* Checked again after the barrier: clang keeps the check on another register. */
		barrier_var(idx);
		if (idx < FW_MAX_FRAMES)
			s->addrs[idx] = FW_HS_INTERP | (bci << FW_HS_BCI_SHIFT) |
					(method & FW_HS_METHOD_MASK);
		/* A sender sp that does not climb is not one: the caller sits above rbp. */
		if (sp <= st->sp)
			sp = st->bp + 16;
		hs_stat_inc(FW_HS_STAT_INTERP_FRAMES);
		goto next;
	}

	blob = hs_find_blob(hp, pc);
	if (!blob) {
		hs_stat_inc(FW_HS_STAT_NO_BLOB);
		return -1;
	}
	if (bpf_probe_read_user(&frame_size, sizeof(frame_size), (void *)(blob + hp->blob_frame_size)))
		goto fault;
	if (frame_size <= 0 || frame_size > 1 << 20) {
		hs_stat_inc(FW_HS_STAT_STUB_FRAMES);
		return -1;
	}
	bp = st->bp;
	if (pc == st->ip) {
		__u64 code = 0;

		/* The leaf, interrupted anywhere: maybe before its frame is built. */
		if (bpf_probe_read_user(&complete, sizeof(complete),
					(void *)(blob + hp->blob_frame_complete)) ||
		    read_user_u64(&code, blob + hp->blob_code_begin))
			goto fault;
		if (complete > 0 && pc < code + complete) {
			/* Assume the entry: only the return address is pushed. */
			if (read_user_u64(&ip, st->sp))
				goto fault;
			sp = st->sp + 8;
			hs_stat_inc(FW_HS_STAT_COMPILED_FRAMES);
			goto next;
		}
	}
	sp = st->sp + 8 * (__u64)frame_size;
	if (read_user_u64(&ip, sp - 8) || read_user_u64(&bp, sp - 16))
		goto fault;
	hs_stat_inc(FW_HS_STAT_COMPILED_FRAMES);

next:
	if (!ip || sp <= st->sp)
		return 1;
	st->ip = ip;
	st->sp = sp;
	st->bp = bp;
	return 0;
fault:
	st->flags |= FW_SAMPLE_USTACK_FAULT;
	hs_stat_inc(FW_HS_STAT_FAULT);
	return 1;
}
