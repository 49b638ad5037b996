/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_GPU_PM_BUSY_H
#define FW_GPU_PM_BUSY_H

#include <stddef.h>
#include <stdint.h>

#include "gpu/pm_spans.h"

/*
 * The busy timeline of whole GPUs from their own performance monitors,
 * through CUPTI's PM sampling API (bench/README.md, "gpu/pm_sampling", has
 * the measurements behind every choice here). Each sample's busy fraction
 * is gr__compute_cycles_active.sum over gr__cycles_elapsed.max: exactly 0
 * when idle, and it covers every context on the device, so one sampler per
 * node sees everyone's kernels. A sample is busy when any compute was in
 * flight in it (PM_BUSY_MIN_FRACTION): a launch-bound loop of tiny kernels
 * keeps the GPU computing for a small part of every sample, and the
 * timeline from activity records calls that busy too (it merges gaps
 * shorter than its merge gap), so the two sources agree where they meet.
 *
 * CUPTI and libcuda are dlopen'd: the binary runs where neither exists.
 * Only one PM sampling session may hold a device at a time (another
 * process, Nsight Compute, DCGM): the loser gets CUPTI_ERROR_HARDWARE_BUSY,
 * which the caller may retry later.
 *
 * Nothing here starts a thread: the caller decodes every device in turn.
 * Built without CUPTI's headers, pm_busy__open fails with step "build".
 */

#define PM_BUSY_DEFAULT_INTERVAL_NS 100000ULL		/* edges within 0.1 ms */
/* Busy: compute in flight for this share of a sample's cycles or more (idle reads 0). */
#define PM_BUSY_MIN_FRACTION 0.001
#define PM_BUSY_DEFAULT_DECODE_NS 100000000ULL
#define PM_BUSY_DEFAULT_HW_BUF_BYTES (4u << 20)

/* CUPTI's (or libcuda's) code for a failed step, and its message. */
struct pm_busy_error {
	char step[64];
	int code;
	char msg[160];
};

/* CUPTI_ERROR_HARDWARE_BUSY: someone else samples the device. */
#define PM_BUSY_HARDWARE_BUSY 26

struct pm_busy_config {
	uint64_t interval_ns;	/* one sample per interval (GPU_TIME_INTERVAL trigger) */
	uint64_t decode_ns;	/* how often the caller will decode: sizes the buffers */
	size_t hw_buf_bytes;	/* the hardware buffer, at least; 0: the default */
};

struct pm_busy_stats {
	uint64_t samples;	/* completed samples read */
	uint64_t busy_samples;
	uint64_t overflows;	/* decodes that reported a hardware buffer overflow */
	uint64_t decode_errors;	/* failed decode calls, samples that made no sense */
	uint64_t restarts;	/* sessions started again after a loss */
	uint64_t decode_cpu_ns;	/* CPU time of this thread inside pm_busy__decode */
	uint64_t dispatches;	/* kernels the GPU dispatched, where the chip counts them */
};

struct pm_busy;		/* the libraries, the profiler and the devices' names */
struct pm_busy_dev;	/* sampling on one device */

/*
 * Loads libcuda (cuda_path, else $FLAMEWATCH_LIBCUDA, else libcuda.so.1)
 * and CUPTI (cupti_path, else $FLAMEWATCH_CUPTI, else the usual sonames and
 * CUDA's directories), initialises CUDA, names every device and initialises
 * CUPTI's profiler. Returns an owned object, or NULL with *err set (step
 * "load" when a library is missing, "devices" when there is no device).
 */
struct pm_busy *pm_busy__open(const char *cupti_path, const char *cuda_path, struct pm_busy_error *err);
/* Frees everything; every device must be stopped first. Accepts NULL. */
void pm_busy__close(struct pm_busy *pb);
int pm_busy__ndevices(const struct pm_busy *pb);
/* Device idx's UUID as NVML writes it ("GPU-xxxxxxxx-..."); borrowed. */
const char *pm_busy__uuid(const struct pm_busy *pb, int idx);

/*
 * Starts sampling CUDA device idx. Returns an owned object, or NULL with
 * *err set: err->code is CUPTI's result, PM_BUSY_HARDWARE_BUSY when another
 * session holds the device.
 */
struct pm_busy_dev *pm_busy__start(struct pm_busy *pb, int idx, const struct pm_busy_config *cfg,
				   struct pm_busy_error *err);
const char *pm_busy__chip(const struct pm_busy_dev *d);
uint64_t pm_busy__interval_ns(const struct pm_busy_dev *d);
/*
 * Decodes what the device has sampled since the last call and hands its
 * busy runs and covered ranges to sink (borrowed), in Unix ns. A decode
 * that lost samples (overflow, failed call) gives busy runs but no covered
 * range, and the session is started again, since CUPTI returns nothing more
 * after an overflow. Returns 0, or -errno with *err set when that restart
 * failed: the device is then no longer sampled (pm_busy__stop it).
 */
int pm_busy__decode(struct pm_busy_dev *d, const struct pm_busy_sink *sink, struct pm_busy_error *err);
void pm_busy__get_stats(const struct pm_busy_dev *d, struct pm_busy_stats *st);
/* Stops sampling, hands the last samples to sink (may be NULL), disables
 * PM sampling and frees d. Accepts NULL. last (may be NULL): the counts
 * with those last samples in. */
void pm_busy__stop(struct pm_busy_dev *d, const struct pm_busy_sink *sink, struct pm_busy_stats *last);

#endif
