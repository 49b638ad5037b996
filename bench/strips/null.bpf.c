// SPDX-License-Identifier: GPL-2.0
/*
 * Calibration for strips_overhead.sh: what a sched_switch program costs
 * before it does anything (empty), and with the one clock read the strips
 * program needs (clock). Not part of the agent.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("tp_btf/sched_switch")
int BPF_PROG(fw_cal_empty, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(fw_cal_clock, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return bpf_ktime_get_boot_ns() == 1;
}
