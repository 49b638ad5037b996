/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_GPU_BUSY_H
#define FW_AGENT_GPU_BUSY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * The busy timeline of each GPU from its own performance monitors: the
 * agent runs `flamewatch gpu-busy` (CUPTI's PM sampling, src/gpu/pm_busy.c)
 * as a child and reads its lines. PM sampling costs the applications
 * nothing per launch, so the timeline stays complete where the CUDA
 * library duty-cycles its activity records (a launch-bound loop). CUPTI
 * and the driver live in the child: their memory is not the agent's, and
 * a crash there is not one of the agent.
 *
 * The monitors see the whole GPU. Its spans become a process's busy
 * timeline (GPU_BUSY and GPU_COVERAGE intervals named
 * GPU_BUSY_NAME_MONITORS and GPU_COVERAGE_NAME_MONITORS) only while NVML's
 * running-process lists name that process alone on the GPU; otherwise they
 * are counted and dropped: the GPU's busy time is not any one process's.
 */
struct gpu_busy;
struct cpu_profile;
struct dispatch_scale;
struct event_base;
struct gpu_poller;

struct gpu_busy_stats {
	uint64_t lines, bad_lines;
	uint64_t busy_spans, cover_spans;	/* handed to a process's timeline */
	uint64_t unowned_spans;			/* dropped: no sole process on the GPU */
	uint64_t devices;			/* sampling now */
	uint64_t starts, exits;			/* of the child */
	uint64_t yielding;			/* 1: stopped while DCGM runs */
	uint64_t parked;			/* 1: stopped while no process needs it */
	uint64_t parks;				/* times it was stopped so */
	uint64_t dispatches;			/* kernels the GPUs dispatched (where counted) */
	uint64_t decode_cpu_ns;			/* the child's CPU decoding the samples */
};

/*
 * Starts `exe gpu-busy ARGS...` (exe NULL: /proc/self/exe; args
 * NULL-terminated, copied, may be NULL) with its stdout read on base. With
 * give_way, it is not started, or is stopped, while DCGM's host engine
 * (nv-hostengine) runs on the node, checked every 30 s: DCGM's profiling
 * metrics need the same monitors. With on_demand it is started only by
 * gpu_busy__steer(). Returns NULL with errno set when it cannot be started.
 */
struct gpu_busy *gpu_busy__start(struct event_base *base, const char *exe,
				 const char *const *args, bool give_way, bool on_demand);
/*
 * On demand, every tick: starts the child while some GPU's sole process
 * (NVML's fresh lists) does not have every CUDA record collected
 * (complete(ctx, pid) false: duty-cycled, or no library), and stops it
 * once none has for 30 s. Records collected in full give that process a
 * complete busy timeline already; the monitors would cost the node a
 * decode thread's CPU and CUPTI's memory for nothing, and keep them from
 * Nsight Compute and DCGM.
 */
void gpu_busy__steer(struct gpu_busy *g, struct gpu_poller *poller,
		     bool (*complete)(void *ctx, uint32_t pid), void *ctx, int64_t now_ns);
/*
 * Hands the spans whose process is known to cp's batch, and the kernels
 * the monitors counted inside them to scale (may be NULL): every tick, and
 * once more with final set after gpu_busy__stop(), which also hands the
 * spans still open.
 */
void gpu_busy__drain(struct gpu_busy *g, struct cpu_profile *cp, struct gpu_poller *poller,
		     struct dispatch_scale *scale, int64_t now_ns, bool final);
/*
 * Stops the child: EOF on its stdin, then its last lines are read (up to
 * 2 s; then SIGTERM, then SIGKILL). Accepts NULL.
 */
void gpu_busy__stop(struct gpu_busy *g);
/* Frees g (stopping the child if need be). Accepts NULL. */
void gpu_busy__free(struct gpu_busy *g);
void gpu_busy__stats(const struct gpu_busy *g, struct gpu_busy_stats *out);
/*
 * One line per device on what the timeline's source is now ("device 0
 * GPU-...: hardware monitors every 100 us", or its error), for the log and
 * /metrics. Returns the number of devices described.
 */
size_t gpu_busy__describe(const struct gpu_busy *g, char *buf, size_t len);

#endif
