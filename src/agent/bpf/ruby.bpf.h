/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The CRuby frame walk, included by sample.bpf.c after python.bpf.h. For a
 * process user space has described in rb_procs, it finds the sampled
 * thread's execution context through the ruby_current_ec TLS variable,
 * walks its control frames from the current one outwards and appends
 * (iseq, pc) per Ruby frame to the sample; user space names them and
 * splices them into the native stack.
 *
 * Every Ruby thread sets ruby_current_ec to its own context, held GVL or
 * not, and non-Ruby threads leave it NULL: the thread pointer (the task's
 * fs base on x86-64) is all it takes to find the right one.
 */
#include "ruby.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct fw_rb_proc);
} rb_procs SEC(".maps");

/* Ruby 3.x control frames are 7 or 8 words; the fields used are in the first 5. */
#define FW_RB_CFP_READ 40

struct fw_rb_walk {
	struct fw_rb_proc *rp;
	__u64 cfp, last;	/* current frame; the outermost one walked (exclusive) */
	__u32 base;		/* index in addrs of the first Ruby word */
	__u32 n;
	__u32 fault;
};

static long rb_step(__u32 i, void *ctx)
{
	struct fw_rb_walk *w = ctx;
	struct fw_rb_proc *rp = w->rp;
	__u64 f[8] = {}, pc, iseq, ep, flags = 0, *slot;
	struct fw_sample *s;
	__u32 zero = 0, idx;

	if (w->cfp >= w->last)
		return 1;
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s)
		return 1;
	if (bpf_probe_read_user(f, FW_RB_CFP_READ, (void *)w->cfp)) {
		w->fault = 1;
		return 1;
	}
	w->cfp += rp->cfp_size;
	if (rp->cfp_pc > FW_RB_CFP_READ - 8 || rp->cfp_iseq > FW_RB_CFP_READ - 8 ||
	    rp->cfp_ep > FW_RB_CFP_READ - 8)
		return 1;
	pc = f[(rp->cfp_pc / 8) & 7];
	iseq = f[(rp->cfp_iseq / 8) & 7];
	ep = f[(rp->cfp_ep / 8) & 7];
	/* C method and C block frames have no pc: their native frames stand for them. */
	if (!pc || !iseq)
		return 0;
	if (ep && bpf_probe_read_user(&flags, sizeof(flags), (void *)ep)) {
		w->fault = 1;
		return 1;
	}
	if (w->n >= FW_MAX_PYFRAMES) {
		stat_inc(FW_STAT_RB_TRUNCATED);
		return 1;
	}
	idx = w->base + 2 * w->n;
	if (idx >= FW_MAX_FRAMES + 2 * FW_MAX_PYFRAMES - 1)
		return 1;
	slot = &s->addrs[idx];
	slot[0] = iseq;
	slot[1] = (pc & FW_RB_PC_MASK) | (flags & FW_RB_FRAME_FLAG_FINISH ? FW_RB_FINISH : 0);
	w->n++;
	return 0;
}

/* The thread's rb_execution_context_t, or 0 when it runs no Ruby. */
static __always_inline __u64 rb_find_ec(struct fw_rb_proc *rp, __u64 tp)
{
	__u64 addr, dtv = 0, block = 0, ec = 0;

	if (rp->tls_mode == FW_RB_TLS_TP) {
		addr = tp + rp->tls_off;
	} else {
		/* glibc's tcbhead_t: the dtv is the second word; its entries are 16 bytes. */
		if (bpf_probe_read_user(&dtv, sizeof(dtv), (void *)(tp + 8)) || !dtv ||
		    bpf_probe_read_user(&block, sizeof(block),
					(void *)(dtv + 16 * (__u64)rp->tls_modid)))
			return 0;
		/* Not allocated yet for this thread (TLS_DTV_UNALLOCATED is -1). */
		if (!block || block == (__u64)-1)
			return 0;
		addr = block + rp->tls_off;
	}
	if (bpf_probe_read_user(&ec, sizeof(ec), (void *)addr))
		return 0;
	return ec;
}

/*
 * Appends the Ruby frames of the sampled thread, if its process is CRuby.
 * For CPU samples only: rb_step() writes through scratch slot 0.
 */
static __always_inline void ruby_walk(struct fw_sample *s, __u32 tgid, struct task_struct *task)
{
	struct fw_rb_walk w = { .base = (__u32)s->kstack_len + s->ustack_len };
	struct fw_rb_proc *rp;
	__u64 ec, head[4] = {}, stack_end;

	/* The Ruby walk has no bounded-loop variant: native frames only before 5.17. */
	if (!have_bpf_loop)
		return;
	rp = bpf_map_lookup_elem(&rb_procs, &tgid);
	if (!rp)
		return;
	ec = rb_find_ec(rp, BPF_CORE_READ(task, thread.fsbase));
	if (!ec) {
		stat_inc(FW_STAT_RB_NO_EC);
		return;
	}
	if (rp->ec_vm_stack > 24 || rp->ec_vm_stack_size > 24 || rp->ec_cfp > 24 ||
	    bpf_probe_read_user(head, sizeof(head), (void *)ec)) {
		stat_inc(FW_STAT_RB_FAULT);
		return;
	}
	/*
	 * Control frames grow down from the end of the VM stack; the outermost
	 * one is a dummy frame every context starts with, which Ruby's own
	 * backtraces leave out too.
	 */
	stack_end = head[(rp->ec_vm_stack / 8) & 3] + 8 * head[(rp->ec_vm_stack_size / 8) & 3];
	w.rp = rp;
	w.cfp = head[(rp->ec_cfp / 8) & 3];
	w.last = stack_end - rp->cfp_size;
	if (!w.cfp || w.cfp >= w.last)
		return;
	bpf_loop(FW_MAX_PYFRAMES + 64, rb_step, &w, 0);	/* + C frames */
	if (w.fault)
		stat_inc(FW_STAT_RB_FAULT);
	if (!w.n)
		return;
	s->pystack_len = w.n;
	stat_inc(FW_STAT_RB_SAMPLES);
	{
		__u32 key = FW_STAT_RB_FRAMES;
		__u64 *v = bpf_map_lookup_elem(&stats, &key);

		if (v)
			*v += w.n;
	}
}
