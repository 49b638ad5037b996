/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_SAMPLER_H
#define FW_AGENT_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/bpf/sample.h"

/*
 * The CPU sampler: a cpu-clock perf event per online CPU with the BPF
 * program attached, plus the exec/exit/fork tracepoints, all writing into
 * one ring buffer. The ring buffer is never woken up by the kernel; the
 * caller drains it on its own timer with sampler__drain().
 */
struct sampler;

/* Called for each record, in ring-buffer order; the record is borrowed. */
typedef void (*sampler_sample_fn)(void *ctx, const struct fw_sample *s);
typedef void (*sampler_proc_fn)(void *ctx, const struct fw_proc_event *e);
typedef void (*sampler_cuda_launch_fn)(void *ctx, const struct fw_cuda_launch *l);
typedef void (*sampler_cuda_activity_fn)(void *ctx, const struct fw_cuda_activity *a);
typedef void (*sampler_cuda_conflict_fn)(void *ctx, const struct fw_cuda_conflict *c);
typedef void (*sampler_cuda_name_fn)(void *ctx, const struct fw_cuda_name *n);
typedef void (*sampler_cuda_exec_fn)(void *ctx, const struct fw_cuda_exec *x);
typedef void (*sampler_offcpu_fn)(void *ctx, const struct fw_offcpu *o);

struct sampler_opts {
	unsigned int freq_hz;		/* samples per second per CPU */
	bool follow_only;		/* only processes added with sampler__follow() */
	bool follow_children;		/* ... and the processes they fork */
	bool wakeup_on_exec;		/* exec events wake sampler__poll() */
	sampler_sample_fn on_sample;
	sampler_proc_fn on_proc;
	void *ctx;
	/* CUDA probe records (see sampler__attach_cuda()); each may be NULL. */
	sampler_cuda_launch_fn on_cuda_launch;
	sampler_cuda_activity_fn on_cuda_activity;
	sampler_cuda_conflict_fn on_cuda_conflict;
	sampler_cuda_name_fn on_cuda_name;
	/*
	 * x->pid exec'd, in the order of its CUDA records: the old image's
	 * records came before, the new one's come after.
	 */
	sampler_cuda_exec_fn on_cuda_exec;
	/*
	 * Off-CPU time (NULL: off, and sched_switch is not attached): one
	 * call per block of a followed thread of at least offcpu_min_ns.
	 * BPF walks the stacks of the blocks likely to reach it; the others
	 * come without frames (FW_SAMPLE_OFFCPU_NO_STACK), unless
	 * offcpu_walk_all has every block walked.
	 */
	sampler_offcpu_fn on_offcpu;
	uint64_t offcpu_min_ns;
	bool offcpu_walk_all;
	/* A process whose blocks are not recorded (the agent's own; 0: none). */
	pid_t offcpu_skip_pid;
	/*
	 * Load the off-CPU handler without attaching it: another sched_switch
	 * program tail-calls it (sampler__offcpu_prog_fd()), or
	 * sampler__offcpu_attach() attaches it later.
	 */
	bool offcpu_no_attach;
};

struct sampler_stats {
	uint64_t counters[FW_STAT_MAX];	/* summed over CPUs */
	uint64_t decode_errors;		/* records user space could not parse */
};

/* Loads and attaches everything; returns NULL with errno set and a logged reason. */
struct sampler *sampler__open(const struct sampler_opts *opts);

/*
 * Whether the BPF stack walks run on bpf_loop() (Linux 5.17+) or, on
 * older kernels, on bounded loops over global functions (same depth,
 * one more hash lookup per frame). The environment variable
 * FLAMEWATCH_NO_BPF_LOOP=1 forces the fallback, to test it on a newer
 * kernel. Probes the kernel (a tiny program load); needs CAP_BPF.
 */
bool sampler__use_bpf_loop(void);
/*
 * Where off-CPU profiles keep their per-thread state on this kernel: task
 * storage (Linux 6.4+), a table of SAMPLER_OFFCPU_THREADS threads (6.1 to
 * 6.3), or nowhere (before 6.1: off-CPU is off). The environment variable
 * FLAMEWATCH_OFFCPU_THREAD_TABLE=1 forces the table, to test it on a newer
 * kernel.
 */
enum sampler_offcpu {
	SAMPLER_OFFCPU_NONE,
	SAMPLER_OFFCPU_TABLE,
	SAMPLER_OFFCPU_TASK_STORAGE,
};
#define SAMPLER_OFFCPU_THREADS 8192
enum sampler_offcpu sampler__offcpu_support(void);
/*
 * What this kernel lacks for off-CPU block times, in words ("" when
 * nothing): they are the scheduler's own and need CONFIG_SCHED_INFO and
 * CONFIG_FAIR_GROUP_SCHED, seen in the kernel's BTF. Without them every
 * block is counted as lost. Read once a process (start-up, one thread); a
 * static string.
 */
const char *sampler__offcpu_missing(void);
/* Detaches and frees. Accepts NULL. */
void sampler__close(struct sampler *s);
/* Adds a thread group to the followed set. Returns 0 or -errno. */
int sampler__follow(struct sampler *s, pid_t tgid);
/* Removes a thread group from the followed set (it exited). */
void sampler__unfollow(struct sampler *s, pid_t tgid);
/* Consumes every record in the ring buffer. Returns the number consumed or -errno. */
int sampler__drain(struct sampler *s);
/*
 * Waits up to timeout_ms for a record that asks for a wakeup (samples never
 * do), then consumes every record. Returns the number consumed or -errno.
 */
int sampler__poll(struct sampler *s, int timeout_ms);
struct unwinder_maps;
/* The unwinder's maps; borrowed fds. */
void sampler__unwind_maps(struct sampler *s, struct unwinder_maps *out);
/* The py_procs map (pid -> struct fw_py_proc); a borrowed fd. */
int sampler__python_fd(struct sampler *s);
/* The rb_procs map (pid -> struct fw_rb_proc); a borrowed fd. */
int sampler__ruby_fd(struct sampler *s);
/* The py_known map (struct fw_py_code_key -> u8); a borrowed fd. */
int sampler__python_known_fd(struct sampler *s);
/* The hs_procs map (pid -> struct fw_hs_proc) and the hs_stats map; borrowed fds. */
void sampler__hotspot_fds(struct sampler *s, int *procs_fd, int *stats_fd);
/*
 * A descriptor that becomes readable when a record asked for a wakeup (CUDA
 * records, when the ring buffer fills up); then call sampler__drain().
 * Borrowed.
 */
int sampler__fd(struct sampler *s);
/* Whether off-CPU time is collected (asked for, and the kernel allows it). */
bool sampler__offcpu_on(const struct sampler *s);
/* The off-CPU handler's program fd (borrowed), for a tail call; -1 when off. */
int sampler__offcpu_prog_fd(const struct sampler *s);
/* Attaches the off-CPU handler (opts.offcpu_no_attach) to sched_switch. Returns 0 or -errno. */
int sampler__offcpu_attach(struct sampler *s);
/* Reads the counters of the BPF stats map. Returns 0 or -errno. */
int sampler__stats(struct sampler *s, struct sampler_stats *out);
const char *fw_stat__name(enum fw_stat stat);

/*
 * Converts a CLOCK_BOOTTIME timestamp from BPF to Unix nanoseconds, using
 * the offset between the two clocks measured now (it moves with NTP steps
 * and suspend, so it is re-read rather than cached).
 */
uint64_t sampler__boot_to_unix_ns(uint64_t boot_ns);

/*
 * Attaches the CUDA probe programs to the USDT probes flamewatch:launch,
 * activity, conflict and name of one libflamewatch-cuda.so file (path as this
 * process can open it, e.g. through /proc/PID/root), for every process that
 * maps it now or later: a uprobe belongs to the file, and the kernel sets
 * the probes' semaphores in each process that maps it. On success links[]
 * receives the owned links (bpf_link__destroy() each). Returns 0 or -errno
 * (-ENOENT: the file has no flamewatch launch probe).
 */
struct bpf_link;
#define SAMPLER_CUDA_LINKS 4
int sampler__attach_cuda(struct sampler *s, const char *path,
			 struct bpf_link *links[SAMPLER_CUDA_LINKS]);

/* The CUDA probes' counters (enum fw_cuda_stat), summed over CPUs. Returns 0 or -errno. */
int sampler__cuda_stats(struct sampler *s, uint64_t counters[FW_CUDA_STAT_MAX]);
const char *fw_cuda_stat__name(enum fw_cuda_stat stat);

#endif
