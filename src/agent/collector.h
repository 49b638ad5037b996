/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_COLLECTOR_H
#define FW_AGENT_COLLECTOR_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The CPU collector shared by `record`, `agent` and `run`: the BPF sampler,
 * process tracking, the unwinder's tables and the profile being filled,
 * wired together. The caller owns the clock: it calls collector__wait()
 * while it has nothing else to do and collector__tick() every
 * COLLECTOR_TICK_MS (record) or CONTINUOUS_TICK_MS (agents).
 */
struct collector;
struct cpu_profile;

struct collector_opts {
	unsigned int freq_hz;
	bool follow_only;	/* only processes given to collector__follow() ... */
	bool follow_children;	/* ... and their children */
	bool timed;		/* keep every sample with its timestamp (agents) */
	unsigned long unwind_mb;
	/*
	 * > 0: files with at least this much CFI get their unwind table only
	 * once a sample needs it (see unwinder__set_on_demand()).
	 */
	uint64_t unwind_on_demand_bytes;
	/* > 0: run `jcmd PID Compiler.perfmap` for each sampled JVM this often. */
	uint64_t java_perfmap_interval_ns;
	/*
	 * > 0: off-CPU time, blocks of followed threads at least this long
	 * (SAMPLE_OFFCPU samples; in aggregated mode see cpu_profile__set_aggregate()).
	 */
	uint64_t offcpu_min_ns;
	/*
	 * Walk the stack of every block (record: a profile asked for, for a
	 * while), not only of those likely to reach offcpu_min_ns.
	 */
	bool offcpu_walk_all;
	/*
	 * Leave this process's own blocks out of off-CPU time (agents): they
	 * are its waits for the next tick, and each cost a walk and a record.
	 */
	bool offcpu_skip_self;
	/* Load the off-CPU handler unattached: see collector__offcpu_prog_fd(). */
	bool offcpu_no_attach;
	/* Aggregated mode: the enum sample_type the profile counts (SAMPLE_CPU: 0). */
	uint32_t aggregate_type;
	/* Called when a followed process exits; may be NULL. */
	void (*on_followed_exit)(void *ctx, pid_t pid);
	void *ctx;
};

#define COLLECTOR_TICK_MS 100

/* Loads BPF and starts sampling. Returns NULL with errno set and the reason logged. */
struct collector *collector__new(const struct collector_opts *o, uint64_t start_unix_ns);
/* Stops sampling (if still running) and frees everything. Accepts NULL. */
void collector__free(struct collector *c);

/* Follows a process and its threads; describes it to the unwinder at once. */
int collector__follow(struct collector *c, pid_t pid);
/*
 * Follows our own child that waits to exec the command to profile: its
 * image is described when it execs. Describing this one, a copy of
 * flamewatch, would be wasted work that holds the command back.
 */
int collector__follow_before_exec(struct collector *c, pid_t pid);
/* Sleeps up to timeout_ms, waking early to describe newly exec'd followed processes. */
void collector__wait(struct collector *c, int timeout_ms);
/* Drains the samples, loads new unwind tables, names JIT frames. */
void collector__tick(struct collector *c);
/*
 * A descriptor readable when the ring buffer wants draining before the next
 * tick (bursts of CUDA records, new Python code objects, processes to
 * describe), or -1. Borrowed; call collector__drain().
 */
int collector__fd(struct collector *c);
/* Consumes the ring buffer and describes the processes it asked for, without the rest of a tick. */
void collector__drain(struct collector *c);
/*
 * Readable when a process loaded the CUDA library (-1: not watched);
 * borrowed. Call collector__cuda_ready() then.
 */
int collector__cuda_fd(struct collector *c);
/* Attaches the processes that loaded the CUDA library, without the rest of a tick. */
void collector__cuda_ready(struct collector *c);
/* Final drain, then detaches BPF: sampling costs nothing from here on. */
void collector__stop(struct collector *c);

/*
 * Timed mode: names the frames of the batch filled so far and hands it over
 * (the caller frees it); a new batch starts. NULL when out of memory (the
 * samples stay for the next call) or when there is nothing to hand over.
 */
struct batch *collector__take_batch(struct collector *c);

/* The profile (or batch) being filled. Borrowed. */
struct cpu_profile *collector__profile(struct collector *c);
/*
 * What finding libflamewatch-cuda.so cost so far. Returns 0, or -ENOENT
 * when GPU time is not collected (not timed mode, or stopped).
 */
struct cuda_tracker_stats;
struct dispatch_scale;
int collector__cuda_stats(struct collector *c, struct cuda_tracker_stats *out);
/* Whether pid's libflamewatch-cuda.so said it collects every record (false: unknown). */
bool collector__cuda_records_complete(struct collector *c, uint32_t pid);
/* The GPU time's count-based weights (cuda_tracker.h); NULL without GPU time. */
struct dispatch_scale *collector__dispatch_scale(struct collector *c);

/*
 * The off-CPU handler, loaded unattached (opts.offcpu_no_attach): its
 * program fd for another sched_switch program to tail-call (-1: off-CPU
 * time is off), or attached on its own. Returns 0 or -errno.
 */
int collector__offcpu_prog_fd(struct collector *c);
int collector__offcpu_attach(struct collector *c);

/* What off-CPU collection made of the blocks of followed threads, since it started. */
struct collector_offcpu_stats {
	uint64_t taken, taken_ns;		/* blocks of at least the minimum, with their stack */
	uint64_t not_taken, not_taken_ns;	/* ... without it (not walked) */
	uint64_t walks_short;			/* stack walks whose block ended short: wasted */
	/* blocks lost: ring buffer full, no per-thread state, times not readable */
	uint64_t lost_ringbuf, lost_thread, lost_unseen;
};
/* Returns 0, or -ENOENT where off-CPU time is off. */
int collector__offcpu_stats(struct collector *c, struct collector_offcpu_stats *out);
/* Logs lost samples (always) and the BPF and unwinder counters (info/debug). */
void collector__report(struct collector *c);

#endif
