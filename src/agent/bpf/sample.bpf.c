// SPDX-License-Identifier: GPL-2.0
/*
 * CPU sampling: a perf_event program on a cpu-clock event per CPU records the
 * kernel stack and the frame-pointer user stack of whatever was running, and
 * tracepoints report exec/exit/fork so user space can keep its view of each
 * process's address space current.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "sample.h"

char LICENSE[] SEC("license") = "GPL";

/* Set by the loader before load. */
const volatile bool follow_only = false;	/* sample only tgids in `followed` */
const volatile bool follow_children = false;	/* add forked children of followed tgids */

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);	/* resized by the loader */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} followed SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct fw_sample);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void stat_inc(enum fw_stat stat)
{
	__u32 key = stat;
	__u64 *v = bpf_map_lookup_elem(&stats, &key);

	if (v)
		*v += 1;
}

static __always_inline bool is_followed(__u32 tgid)
{
	return !follow_only || bpf_map_lookup_elem(&followed, &tgid);
}

/*
 * Walks the user stack through the saved frame pointers: [bp] holds the
 * caller's bp and [bp + 8] the return address. The walk stops at a zero or
 * non-increasing bp (stacks grow down, so callers live at higher addresses),
 * or at unreadable memory.
 */
static __always_inline void walk_user_stack(struct fw_sample *s, __u64 ip, __u64 bp)
{
	__u32 k = s->kstack_len, n = 0;

	if (k > FW_MAX_KSTACK)
		return;
	s->addrs[k] = ip;
	n = 1;

	for (int i = 0; i < FW_MAX_USTACK - 1; i++) {
		__u64 frame[2];		/* saved bp, return address */
		__u32 idx = k + n;

		if (!bp)
			goto out;
		if (bpf_probe_read_user(frame, sizeof(frame), (void *)bp)) {
			s->flags |= FW_SAMPLE_USTACK_FAULT;
			stat_inc(FW_STAT_USTACK_FAULT);
			goto out;
		}
		if (!frame[1])
			goto out;
		if (idx >= FW_MAX_FRAMES)
			goto out;
		s->addrs[idx] = frame[1];
		n++;
		if (frame[0] <= bp)
			goto out;
		bp = frame[0];
	}
	if (bp) {
		s->flags |= FW_SAMPLE_USTACK_TRUNCATED;
		stat_inc(FW_STAT_USTACK_TRUNCATED);
	}
out:
	s->ustack_len = n;
}

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id, zero = 0;
	struct task_struct *task;
	struct pt_regs *regs;
	struct fw_sample *s;
	long n;
	__u64 size;

	if (tid == 0) {
		stat_inc(FW_STAT_IDLE);
		return 0;
	}
	if (!is_followed(tgid)) {
		stat_inc(FW_STAT_FILTERED);
		return 0;
	}
	s = bpf_map_lookup_elem(&scratch, &zero);
	if (!s) {
		stat_inc(FW_STAT_NO_SCRATCH);
		return 0;
	}

	s->type = FW_EVENT_SAMPLE;
	s->pid = tgid;
	s->tid = tid;
	s->cpu = bpf_get_smp_processor_id();
	s->boot_ns = bpf_ktime_get_boot_ns();
	s->flags = 0;
	s->ustack_len = 0;
	bpf_get_current_comm(s->comm, sizeof(s->comm));

	n = bpf_get_stack(ctx, s->addrs, FW_MAX_KSTACK * sizeof(__u64), 0);
	if (n < 0) {
		stat_inc(FW_STAT_KSTACK_ERROR);
		n = 0;
	}
	s->kstack_len = n / sizeof(__u64);

	/*
	 * When the sample interrupted the kernel, ctx->regs are kernel
	 * registers; the user registers are the ones saved on kernel entry.
	 * Kernel text lives in the upper half of the address space, which is
	 * a cheaper test than the code segment's privilege level.
	 */
	task = bpf_get_current_task_btf();
	if (!task->mm) {
		s->flags |= FW_SAMPLE_KERNEL_THREAD;
	} else if ((__s64)ctx->regs.ip >= 0) {
		walk_user_stack(s, ctx->regs.ip, ctx->regs.bp);
	} else {
		regs = (struct pt_regs *)bpf_task_pt_regs(task);
		walk_user_stack(s, BPF_CORE_READ(regs, ip), BPF_CORE_READ(regs, bp));
	}

	size = offsetof(struct fw_sample, addrs) +
	       ((__u64)s->kstack_len + s->ustack_len) * sizeof(__u64);
	if (size > sizeof(*s))
		size = sizeof(*s);
	if (bpf_ringbuf_output(&events, s, size, BPF_RB_NO_WAKEUP)) {
		stat_inc(FW_STAT_RINGBUF_FULL);
		return 0;
	}
	stat_inc(FW_STAT_SAMPLES);
	return 0;
}

static __always_inline void emit_proc_event(__u32 type, struct task_struct *p, __u32 ppid)
{
	struct fw_proc_event *e;

	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		stat_inc(FW_STAT_PROC_RINGBUF_FULL);
		return;
	}
	e->type = type;
	e->pid = p->tgid;
	e->ppid = ppid;
	e->pad = 0;
	e->boot_ns = bpf_ktime_get_boot_ns();
	bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), p->comm);
	bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
	stat_inc(FW_STAT_PROC_EVENTS);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p)
{
	if (is_followed(p->tgid))
		emit_proc_event(FW_EVENT_EXEC, p, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	/* Only the thread group leader's exit ends the process's address space. */
	if (p->pid == p->tgid && is_followed(p->tgid))
		emit_proc_event(FW_EVENT_EXIT, p, 0);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = parent->tgid, ctgid = child->tgid;
	__u8 one = 1;

	/* New threads join their group, which is already followed or not. */
	if (!follow_only || !follow_children || ptgid == ctgid)
		return 0;
	if (!bpf_map_lookup_elem(&followed, &ptgid))
		return 0;
	if (bpf_map_update_elem(&followed, &ctgid, &one, BPF_ANY)) {
		stat_inc(FW_STAT_FOLLOW_FULL);
		return 0;
	}
	emit_proc_event(FW_EVENT_FORK, child, ptgid);
	return 0;
}
