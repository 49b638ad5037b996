/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_GPU_DISPATCH_SCALE_H
#define FW_GPU_DISPATCH_SCALE_H

#include <stdbool.h>
#include <stdint.h>

/*
 * GPU time weighted by the hardware's count of kernels (issue 25, "weights
 * from counts").
 *
 * Where a process's CUDA library duty-cycles its activity records, a kernel
 * record stands for the D launches of its window's group (its weight), so
 * the weights summed estimate the launches. That estimate comes out short:
 * CUPTI's work inside a window slows the launching thread, and a window
 * sees fewer launches than the time around it. The GPU's monitors count
 * every kernel dispatched (gpu-busy's third metric) at no cost to anyone.
 * For a process alone on its GPU, counted / estimated over the same
 * seconds is the factor that takes the bias out, and a record's weight
 * times it is the launches it stands for.
 *
 * Both sides are summed per second of Unix time. A second counts once it
 * is over by SETTLE (its records are in), the monitors covered at least
 * 95 % of it for that process, and every record in it was duty-cycled;
 * seconds that never qualify are dropped. The factor comes from decaying
 * sums of the seconds that counted, so it follows a workload that changes
 * while one odd second moves it little. Until enough launches are summed it
 * is 1, and one outside [0.5, 2] is not believed (the counts are then not
 * this process's kernels alone: another client of the GPU NVML does not
 * list, a process that uses two GPUs): 1 again, and counted in the stats.
 *
 * Memory copies and sets are no dispatches and are never scaled.
 */
struct dispatch_scale;

struct dispatch_scale_stats {
	uint64_t seconds_used;		/* seconds whose counts went into a factor */
	uint64_t seconds_dropped;	/* not covered, not duty-cycled throughout, or late */
	uint64_t records_scaled;	/* kernel records whose weight a factor changed */
	uint64_t implausible;		/* factors out of range, not used */
	uint64_t mixed;			/* processes seen on two GPUs: not scaled */
	uint32_t processes;		/* with a factor in force now */
	uint32_t short_processes;	/* whose records now stand for under half the count */
};

struct dispatch_scale *dispatch_scale__new(void);
/* Accepts NULL. */
void dispatch_scale__free(struct dispatch_scale *s);

/*
 * The monitors of GPU dev counted n kernels dispatched over [start_ns,
 * end_ns), a range they covered, while NVML named pid alone on that GPU.
 * Times more than a few seconds past now_ns (Unix) are not believed.
 */
void dispatch_scale__counted(struct dispatch_scale *s, uint32_t pid, uint32_t dev,
			     int64_t start_ns, int64_t end_ns, uint64_t n, int64_t now_ns);

/*
 * A kernel record of pid that ended at end_ns on the process's device
 * `dev`, standing for weight launches, duty_cycled as its library said.
 * Returns the weight to store: weight x pid's factor, rounded up or down at
 * random in proportion (so totals stay unbiased), and at least 1. now_ns is
 * Unix time, for the seconds that are over.
 */
uint32_t dispatch_scale__record(struct dispatch_scale *s, uint32_t pid, uint32_t dev,
				int64_t end_ns, uint32_t weight, bool duty_cycled, int64_t now_ns);

/* The factor in force for pid now (1 when none); for logs and tests. */
double dispatch_scale__factor(const struct dispatch_scale *s, uint32_t pid);

/*
 * Whether pid's factor moved by more than 5 % since it was last given here
 * (from 1 at first), and the factor: for a log line when it does.
 */
bool dispatch_scale__news(struct dispatch_scale *s, uint32_t pid, double *factor);

/*
 * Whether pid's duty-cycled records have just come to stand for less than
 * half of the kernels the monitors counted, with that ratio (counted per
 * launch recorded): once, until they recover. No factor corrects it (see
 * above), so its GPU time is short: CUPTI lost records, or another client
 * of the GPU that NVML does not name dispatched kernels beside it. For a
 * warning in the log.
 */
bool dispatch_scale__short(struct dispatch_scale *s, uint32_t pid, double *counted_per_recorded);

/* The process is gone. */
void dispatch_scale__forget(struct dispatch_scale *s, uint32_t pid);

void dispatch_scale__stats(const struct dispatch_scale *s, struct dispatch_scale_stats *out);

#endif
