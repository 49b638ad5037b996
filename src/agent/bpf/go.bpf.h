/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Go: crossing from the g0 (system) stack back to the goroutine stack at
 * runtime.asmcgocall, so that C code called through cgo keeps the Go
 * frames that called it. Included by sample.bpf.c after the unwinder's
 * state; the row's facts come from src/unwind/go_switch.c.
 */
#ifndef FW_AGENT_BPF_GO_BPF_H
#define FW_AGENT_BPF_GO_BPF_H

/* g.stack.hi: g starts with stack {lo, hi} in every Go release. */
#define GO_G_STACK_HI 8
/* The rest src/unwind/go_switch.c checks in systemstack's code before it emits a row. */
#define GO_TLS_G (-8)		/* g is at %fs:-8 */
#define GO_G_M 0x30
#define GO_G_SCHED_SP 0x38
#define GO_M_G0 0		/* g0 is the first field of m */

/*
 * st is at the call of C code in asmcgocall, with st->sp the g0 stack
 * pointer of that call. Moves st to asmcgocall's return address into
 * runtime.cgocall on the goroutine stack. The goroutine stack lies
 * anywhere relative to g0's (Go heap vs. thread stack), so the "callers
 * live higher" check cannot apply across this step.
 * Returns 0 to go on, 1 to stop, -1 on a fault.
 */
static __always_inline int go_leave_g0(struct fw_unwind_state *st, const struct unwind_row *row)
{
	__u64 g, v, hi, sp, ip;

	if (read_user_u64(&g, st->sp + row->cfa_offset) ||
	    read_user_u64(&v, st->sp + row->rbp_slot))
		return -1;
	if (g) {
		if (read_user_u64(&hi, g + GO_G_STACK_HI))
			return -1;
		sp = hi - v;
	} else {
		sp = v;
	}
	if (read_user_u64(&ip, sp))
		return -1;
	stat_inc(FW_STAT_UNWIND_GO_SWITCH);
	st->ip = ip;
	st->sp = sp + 8;
	return ip ? 0 : 1;
}

/*
 * st is at the call in systemstack on the g0 stack. Moves st to
 * systemstack's return address on the stack of the goroutine it left,
 * m.curg, which saved its sp in curg.sched.sp: what systemstack itself
 * reads to switch back. The thread's g (g0 now) is in its TLS block.
 */
static __always_inline int go_leave_systemstack(struct fw_unwind_state *st,
						const struct unwind_row *row)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 g0, m, curg, sp, ip;

	if (read_user_u64(&g0, BPF_CORE_READ(task, thread.fsbase) + GO_TLS_G) || !g0 ||
	    read_user_u64(&m, g0 + GO_G_M) || !m ||
	    read_user_u64(&curg, m + row->cfa_offset) || !curg ||
	    read_user_u64(&sp, curg + GO_G_SCHED_SP) || !sp ||
	    read_user_u64(&ip, sp))
		return -1;
	stat_inc(FW_STAT_UNWIND_GO_SWITCH);
	st->ip = ip;
	st->sp = sp + 8;
	return ip ? 0 : 1;
}

/*
 * st is at cgocallback's call of Go code for C, on the goroutine's stack.
 * Moves st to cgocallback's own frame on the g0 stack, whose sp is in
 * g0.sched.sp, and from there to its caller in C (crosscall2). The
 * thread's g is the goroutine or, inside a nested switch, g0: both lead
 * to the same m and g0.
 */
static __always_inline int go_leave_cgocallback(struct fw_unwind_state *st,
						const struct unwind_row *row)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 g, m, g0, sp, cfa, ip, bp;

	if (read_user_u64(&g, BPF_CORE_READ(task, thread.fsbase) + GO_TLS_G) || !g ||
	    read_user_u64(&m, g + GO_G_M) || !m ||
	    read_user_u64(&g0, m + GO_M_G0) || !g0 ||
	    read_user_u64(&sp, g0 + GO_G_SCHED_SP) || !sp)
		return -1;
	cfa = sp + row->cfa_offset;
	if (read_user_u64(&ip, cfa - 8) || read_user_u64(&bp, cfa - 16))
		return -1;
	stat_inc(FW_STAT_UNWIND_GO_SWITCH);
	st->ip = ip;
	st->sp = cfa;
	st->bp = bp;
	return ip ? 0 : 1;
}

#endif
