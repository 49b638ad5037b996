// SPDX-License-Identifier: GPL-2.0
/*
 * CPU strips: sched_switch closes the busy interval of the task leaving a
 * CPU. Idle (pid 0) is the gaps and is never recorded.
 *
 * Bound. A machine doing 100k switches/s produces mostly intervals of a
 * few microseconds, far below what a timeline can show. Intervals of at
 * least min_ns are emitted as they are. Shorter ones go into a per-CPU
 * window that is emitted as one coalesced record (start of the first,
 * summed busy time, the thread with most of it by a weighted majority vote)
 * once it spans window_ns or a long interval arrives. Every record either
 * covers at least min_ns of busy time or closes a window that is followed
 * by such a record or spans window_ns, so a CPU emits at most
 * 2 * 1e9 / min(min_ns, window_ns) records per second: with the defaults
 * (1 ms both) 2000 records/s/CPU, 96 KB/s/CPU. The ring buffer holds half
 * a second of that worst case (cpu_strips.c says why not more) and is
 * drained every 100 ms; past that, records are dropped and counted
 * (FW_STRIP_RINGBUF_FULL). The per-switch cost is a clock read, a per-CPU
 * array lookup and a few compares.
 *
 * A task that keeps its CPU is only seen when it leaves; the agent reads
 * start/cur_tid from `state` on every drain and reports such a run in
 * pieces while it lasts (cpu_strips.c), trimming the final record.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "strips.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u64 min_ns = 1000000;
const volatile __u64 window_ns = 1000000;
/*
 * Bytes pending above which a record wakes the agent (0: never): its
 * timer is slow, to cost next to nothing, and this ring holds only half
 * a second of the worst case.
 */
const volatile __u64 wakeup_bytes = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 * 1024);	/* resized by the loader */
} strips SEC(".maps");

/* What runs now on a CPU, and its window of short intervals. */
struct cpu_state {
	__u64 switches;		/* FW_STRIP_SWITCHES and FW_STRIP_COALESCED_IN, kept */
	__u64 coalesced;	/* here to save a map lookup per switch */
	__u64 start;		/* when the running task got the CPU; 0: unknown */
	__u32 cur_pid, cur_tid;	/* the running task: the agent reports long runs early */
	__u64 win_start;	/* 0: window empty */
	__u64 win_busy;
	__u64 cand_weight;	/* majority vote over the window's busy time */
	__u32 cand_pid, cand_tid;
	__u64 cand_comm[FW_STRIP_COMM_LEN / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_state);
} state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FW_STRIP_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} strip_stats SEC(".maps");

static __always_inline void stat_inc(enum fw_strip_stat stat)
{
	__u32 key = stat;
	__u64 *v = bpf_map_lookup_elem(&strip_stats, &key);

	if (v)
		*v += 1;
}

static __always_inline void emit(__u64 start, __u64 end, __u32 pid, __u32 tid, __u32 flags,
				 const __u64 *comm)
{
	struct fw_cpu_interval *r = bpf_ringbuf_reserve(&strips, sizeof(*r), 0);

	if (!r) {
		stat_inc(FW_STRIP_RINGBUF_FULL);
		return;
	}
	r->start_ns = start;
	r->end_ns = end;
	r->pid = pid;
	r->tid = tid;
	r->cpu = bpf_get_smp_processor_id();
	r->flags = flags;
	__builtin_memcpy(r->comm, comm, sizeof(r->comm));
	bpf_ringbuf_submit(r, wakeup_bytes &&
			   bpf_ringbuf_query(&strips, BPF_RB_AVAIL_DATA) > wakeup_bytes ?
			   BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	stat_inc(FW_STRIP_EMITTED);
}

static __always_inline void flush_window(struct cpu_state *st)
{
	if (!st->win_start)
		return;
	emit(st->win_start, st->win_start + st->win_busy, st->cand_pid, st->cand_tid,
	     FW_STRIP_COALESCED, st->cand_comm);
	st->win_start = 0;
	st->win_busy = 0;
	st->cand_weight = 0;
}

static __always_inline void strips_switch(struct task_struct *prev, struct task_struct *next)
{
	__u32 key = 0;
	struct cpu_state *st = bpf_map_lookup_elem(&state, &key);
	__u64 now = bpf_ktime_get_boot_ns(), start, d, comm[FW_STRIP_COMM_LEN / 8];
	__u32 pid, tid;

	if (!st)
		return;
	st->switches++;
	start = st->start;
	st->start = now;
	st->cur_tid = BPF_CORE_READ(next, pid);
	st->cur_pid = BPF_CORE_READ(next, tgid);
	tid = BPF_CORE_READ(prev, pid);
	if (!tid || !start || now <= start)
		return;		/* idle ended, or the first switch seen on this CPU */
	pid = BPF_CORE_READ(prev, tgid);
	d = now - start;
	if (d >= min_ns) {
		flush_window(st);
		bpf_probe_read_kernel(comm, sizeof(comm), prev->comm);
		emit(start, now, pid, tid, 0, comm);
		return;
	}
	if (st->win_start && now - st->win_start > window_ns)
		flush_window(st);
	st->coalesced++;
	if (!st->win_start)
		st->win_start = start;
	st->win_busy += d;
	/* The comm is copied only when the leader changes. */
	if (st->cand_tid == tid) {
		st->cand_weight += d;
	} else if (st->cand_weight >= d) {
		st->cand_weight -= d;
	} else {
		st->cand_weight = d - st->cand_weight;
		st->cand_tid = tid;
		st->cand_pid = pid;
		bpf_probe_read_kernel(st->cand_comm, sizeof(st->cand_comm), prev->comm);
	}
}

/*
 * Off-CPU time's handler (sample.bpf.c's on_sched_switch), where the agent
 * records both: a tail call from here costs less than a second program
 * attached beside this one, whose every run pays the tracepoint's dispatch.
 * Empty: the tail call falls through.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} chain SEC(".maps");

/* raw_tp, not tp_btf, for the same reason as sample.bpf.c's on_exec. */
SEC("raw_tp/sched_switch")
int BPF_PROG(fw_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	strips_switch(prev, next);
	bpf_tail_call(ctx, &chain, 0);
	return 0;
}
