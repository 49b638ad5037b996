/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_CONTINUOUS_H
#define FW_AGENT_CONTINUOUS_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/nvml.h"

/*
 * Continuous host-wide collection on an event loop, for `agent` and `run`:
 * drains the sampler every CONTINUOUS_TICK_MS (and whenever a ring buffer
 * fills to a quarter or asks for a process's tables) and hands a named
 * batch of timestamped
 * samples to deliver() every interval, or sooner once it holds max_samples
 * samples or CONTINUOUS_EARLY_INTERVALS CPU intervals.
 */

/*
 * Files with this much CFI or more get their unwind table once a sample
 * needs it (unwinder__set_on_demand()): ~200,000 rows, past which a table
 * costs real map memory and build time. libc, libstdc++ and libpython are
 * under it and built at once; libtorch_cpu, the CUDA libraries, libLLVM
 * and node are over. `record` builds every table at once: its runs are
 * short and its first samples count.
 */
/*
 * The agent's timer. Each tick is a wakeup with fixed work (the drains,
 * the strips' per-CPU state, GPU points), most of the agent's cost on a
 * quiet node at 100 ms; the ring buffers wake it at a quarter full
 * instead, so a slower timer loses nothing.
 */
#define CONTINUOUS_TICK_MS 500

#define CONTINUOUS_UNWIND_ON_DEMAND_BYTES (1u << 20)

/*
 * The default cap on unwind tables in the kernel (MiB) for `agent` and
 * `run`: large files cost only the chunks samples land in, and a file that
 * does not fit is chunked too, so the cap bounds memory without losing
 * frames (issue 31's budget for a GPU node).
 */
#define CONTINUOUS_UNWIND_MB 16

/*
 * A batch's CPU intervals grow with the CPUs and with how often their
 * tasks switch, up to 2,000 a second a CPU (strips.bpf.c). The agent holds
 * them, then their encoding and its compressed copy, at once (32 + ~60
 * bytes each). Past this many the batch goes early (no more than once a
 * CONTINUOUS_EARLY_MIN_NS), which bounds both by the count instead: ~3 MB.
 * Not lower: every batch names its frames afresh, so batches sent more
 * often cost CPU reading symbol tables again (bench/README.md).
 */
#define CONTINUOUS_EARLY_INTERVALS 32768
#define CONTINUOUS_EARLY_MIN_NS 1000000000ULL

struct batch;
struct collector;
struct cpu_strips;
struct event;
struct event_base;

struct continuous {
	struct collector *collector;
	struct event *tick;
	struct event *ready;	/* the ring buffer asks to be drained early */
	struct event *strips_ready;	/* so does the strips' */
	struct event *cuda_ready;	/* a process loaded the CUDA library */
	uint64_t interval_ns, last_flush_ns;
	uint32_t max_samples;
	uint64_t java_perfmap_interval_ns;	/* 0: off */
	void (*deliver)(void *ctx, struct batch *b);	/* consumes b */
	void *ctx;
	/* GPU metrics (NVML, on their own thread), NULL when off or no library */
	struct gpu_poller *gpu;
	uint64_t gpu_interval_ns;
	void (*on_gpu_round)(void *ctx, const struct batch *b, uint32_t first);
	struct cpu_strips *strips;	/* NULL: CPU strips off or unavailable */
	struct gpu_busy *busy;		/* the GPUs' monitors (agent/gpu_busy.h), or NULL */
};

struct continuous_opts {
	unsigned int freq_hz;
	unsigned long unwind_mb;
	uint64_t interval_ns;
	uint32_t max_samples;
	uint64_t java_perfmap_interval_ns;	/* 0: off */
	void (*deliver)(void *ctx, struct batch *b);
	void *ctx;
	/* NVML metrics every gpu_interval_ns; 0: none */
	uint64_t gpu_interval_ns;
	/* the PCIe counters and per-process utilisation this often (0: every round) */
	uint64_t gpu_pcie_interval_ns, gpu_process_interval_ns;
	int gpu_process_query_always;	/* --gpu-process-query always */
	/* Called after each GPU round with the batch and its first new metric; may be NULL. */
	void (*on_gpu_round)(void *ctx, const struct batch *b, uint32_t first);
	int no_cpu_strips;		/* --no-cpu-strips */
	int gpu_busy;			/* --gpu-busy: CONTINUOUS_GPU_BUSY_* */
	int no_offcpu;			/* --no-off-cpu */
	uint64_t offcpu_min_ns;		/* --off-cpu-min; 0: the default */
};

/*
 * --gpu-interval: a duration of 100ms or more, or "off" (0). Prints the
 * reason and returns -1 on a bad value.
 */
int continuous__parse_gpu_interval(const char *arg, uint64_t *ns);
/* --gpu-pcie-interval, --gpu-process-interval: a duration, 0 for every round. */
int continuous__parse_gpu_costly_interval(const char *flag, const char *arg, uint64_t *ns);
/* --gpu-process-query: "shared" (0) or "always" (1); -1 (said) otherwise. */
int continuous__parse_gpu_process_query(const char *flag, const char *arg, int *always);
#define CONTINUOUS_GPU_INTERVAL_NS 1000000000ULL
/* --gpu-busy: auto (0, the default: not while DCGM runs), on, off. */
#define CONTINUOUS_GPU_BUSY_AUTO 0
#define CONTINUOUS_GPU_BUSY_ON 1
#define CONTINUOUS_GPU_BUSY_OFF 2
/* Blocks shorter than this are not off-CPU time worth a stack (--off-cpu-min). */
#define CONTINUOUS_OFFCPU_MIN_NS 1000000ULL
#define CONTINUOUS_GPU_PCIE_INTERVAL_NS NVML_PCIE_INTERVAL_NS
#define CONTINUOUS_GPU_PROCESS_INTERVAL_NS NVML_PROCESS_INTERVAL_NS

/* Starts sampling the whole host. Prints the reason and returns -1 on failure. */
int continuous__start(struct continuous *c, struct event_base *base,
		      const struct continuous_opts *o);
/* Hands over what was collected so far. */
void continuous__flush(struct continuous *c);
/* Stops sampling, delivers the last batch and frees. */
void continuous__stop(struct continuous *c);

#endif
