/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_CUDA_CUDA_TRACKER_H
#define FW_AGENT_CUDA_CUDA_TRACKER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/bpf/sample.h"
#include "gpu/cuda_join.h"
#include "gpu/dispatch_scale.h"

/*
 * GPU time profiling, agent side: finds the copies of libflamewatch-cuda.so
 * that processes map (every process's /proc/PID/maps at start; then the
 * maps of each process whose dynamic loader reports loading it
 * (lib_watch.h), or, polling, of every process for a while after its exec;
 * and every process now and then; through /proc/PID/root, so containers
 * work), attaches the sampler's USDT programs to each file once, and turns
 * the probes' launches and activity records into gpu_time samples and GPU
 * intervals of the batch being filled (src/gpu/cuda_join.h pairs them up).
 */
struct cuda_tracker;
struct cpu_profile;
struct sampler;

/*
 * Borrows sampler and cp, which must outlive it. proc_root is "/proc"
 * (or a fixture directory). Returns NULL with errno set.
 */
struct cuda_tracker *cuda_tracker__new(struct sampler *sampler, struct cpu_profile *cp,
				       const char *proc_root);
/*
 * Calls fn (may be NULL) once for each process found mapping the library,
 * before its probes are attached: the collector describes the process to
 * the unwinder, so that even the first launch stacks unwind through the
 * CUDA libraries, which have no frame pointers.
 */
void cuda_tracker__on_process(struct cuda_tracker *t, void (*fn)(void *ctx, pid_t pid), void *ctx);
/* Detaches the probes; pending records are dropped (flush first). Accepts NULL. */
void cuda_tracker__free(struct cuda_tracker *t);

/*
 * Attaches to the library at path (as this process opens it) for every
 * process mapping it, now or later. Returns 1 when newly attached, 0 when
 * already, or -errno.
 */
int cuda_tracker__attach_file(struct cuda_tracker *t, const char *path);
/*
 * The libflamewatch-cuda.so that `flamewatch cuda` injects: beside this
 * binary (build tree), or in ../lib/flamewatch or ../lib (install). Writes
 * its real path to out. Returns 0 or -errno (-ENOENT: none).
 */
int cuda_tracker__default_lib(char *out, size_t size);
/*
 * Learns which processes load the library from their dynamic loaders, as
 * they load it (lib_watch.h), instead of polling every new process for
 * 30 s; the loaders are hooked as scans find them. Call before the first
 * scan. Returns 0, or -errno (the tracker then polls): -EOPNOTSUPP without
 * bpf_loop() (Linux 5.17+).
 */
int cuda_tracker__watch(struct cuda_tracker *t);
/*
 * How often every process is looked at after the first scan; 0: never.
 * The default is 30 s with loader events, 5 s polling.
 */
void cuda_tracker__set_scan_interval(struct cuda_tracker *t, uint64_t ns);
/* Looks at every process now. Returns the number of library files newly attached. */
int cuda_tracker__scan(struct cuda_tracker *t);
/*
 * A process exec'd, in the mount namespace mnt_ns (0: unknown). Polling,
 * look at it on the next ticks, while it loads its libraries; on loader
 * events, only the first process of a namespace (a new container, which
 * may bring its own loader) is looked at, once.
 */
void cuda_tracker__exec(struct cuda_tracker *t, pid_t pid, uint32_t mnt_ns);
/*
 * pid exec'd, in the order of its CUDA records (the sampler's exec mark):
 * the old image's pending records are emitted unattributed, its launches
 * and kernel names forgotten.
 */
void cuda_tracker__image_gone(struct cuda_tracker *t, pid_t pid);
/* A process exited: its pending records are emitted unattributed. */
void cuda_tracker__exit(struct cuda_tracker *t, pid_t pid);
/*
 * Every tick: the maps of reported and new processes, the periodic scan,
 * records that waited too long.
 */
void cuda_tracker__tick(struct cuda_tracker *t);
/*
 * The library-load watch's descriptor, readable when a process loaded
 * libflamewatch-cuda.so (-1 without a watch): call cuda_tracker__tick()
 * then, so that the process is attached at once, not on the next tick.
 */
int cuda_tracker__watch_fd(const struct cuda_tracker *t);
/* Emits every pending record (unattributed): the agent is stopping. */
void cuda_tracker__flush(struct cuda_tracker *t);

/* Ring buffer records, from the sampler's callbacks. Borrowed. */
void cuda_tracker__launch(struct cuda_tracker *t, const struct fw_cuda_launch *l);
void cuda_tracker__activity(struct cuda_tracker *t, const struct fw_cuda_activity *a);
void cuda_tracker__conflict(struct cuda_tracker *t, const struct fw_cuda_conflict *c);
/* A kernel name the library announced (flamewatch:name): kept by (pid, address). */
void cuda_tracker__name(struct cuda_tracker *t, const struct fw_cuda_name *n);

/* Number of library files attached. */
uint32_t cuda_tracker__nattached(const struct cuda_tracker *t);

/* What finding the library cost so far, and the join's outcomes (the agent's /metrics). */
struct cuda_tracker_stats {
	uint64_t maps_reads;	/* /proc/PID/maps opens tried, full scans included */
	uint64_t full_scans;	/* looks at every process */
	uint64_t lib_events;	/* loads of the library the loaders' hook reported */
	uint64_t lib_events_lost;	/* ... and could not (read once a second) */
	uint32_t watching;	/* 1: on loader events (cuda_tracker__watch()); 0: polling */
	uint32_t loaders;	/* loader files hooked */
	/* processes whose library collects every record, or duty-cycles them */
	uint32_t records_all, records_duty_cycled;
	uint64_t collection_switches;	/* changes between the two */
	struct cuda_join_stats join;	/* how records found their launches */
	struct dispatch_scale_stats scale;	/* duty-cycled weights from kernel counts */
};
void cuda_tracker__stats(const struct cuda_tracker *t, struct cuda_tracker_stats *out);
/*
 * The weights of duty-cycled records scaled by the GPU's own kernel counts
 * (gpu/dispatch_scale.h): the busy timeline's reader feeds it the counts.
 * NULL for NULL.
 */
struct dispatch_scale *cuda_tracker__dispatch_scale(struct cuda_tracker *t);
/* Whether pid's library said it collects every record (false: unknown or duty-cycled). */
bool cuda_tracker__records_complete(const struct cuda_tracker *t, uint32_t pid);
/* Logs the join's and the probes' counters (info), losses (warn). */
void cuda_tracker__report(struct cuda_tracker *t);

#endif
