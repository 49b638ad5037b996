/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_GPU_PM_SPANS_H
#define FW_GPU_PM_SPANS_H

#include <stdint.h>

/*
 * The samples of one decode of a GPU's performance monitors (pm_busy.c)
 * turned into what a busy timeline needs: maximal runs of consecutive busy
 * samples, and the time the samples cover. Samples are not kept: each one
 * is folded in as it is read. No CUPTI here, so that it is testable alone.
 *
 * Timestamps come in on the sampler's clock and go out in Unix ns (plus
 * offset_ns). A hole between two samples wider than gap_ns ends both the
 * busy run and the covered range: nobody knows what the GPU did there.
 */

/*
 * Receives the spans of one device, in time order. Either may be NULL.
 * idle_ns: the idle time inside a busy span, from its samples' busy
 * fractions: a sample with compute in flight for 30 % of its cycles is
 * busy, and 70 % of it idle. A launch-bound loop of tiny kernels is busy
 * in every sample, and its gaps between kernels, too short for a sample
 * to see, are this. dispatches: the kernels the GPU dispatched inside a
 * covered range, PM_NO_DISPATCHES where the chip does not count them.
 */
#define PM_NO_DISPATCHES UINT64_MAX

struct pm_busy_sink {
	void (*busy)(void *ctx, int dev, uint64_t start_ns, uint64_t end_ns, uint64_t idle_ns);
	void (*covered)(void *ctx, int dev, uint64_t start_ns, uint64_t end_ns, uint64_t dispatches);
	void *ctx;
};

/* Covered ranges wait for the decode's end (they depend on its outcome);
 * a decode with more holes than this reports none. */
#define PM_SPANS_MAX_COVERED 16

struct pm_spans {
	const struct pm_busy_sink *sink;	/* borrowed */
	int dev;
	int64_t offset_ns;
	uint64_t gap_ns;
	int lossy;		/* something of this decode is unknown */
	int busy_open;
	uint64_t busy_start, busy_end;
	double busy_idle;	/* ns idle inside the open busy run */
	int have_last;
	uint64_t last_start, last_end;	/* the samples so far: the last start, the latest end */
	unsigned ncov;
	uint64_t cov[PM_SPANS_MAX_COVERED][2];
	double cov_dispatches[PM_SPANS_MAX_COVERED];
	int counted;		/* every sample so far came with its dispatches */
};

/* Starts one decode. */
void pm_spans__begin(struct pm_spans *s, const struct pm_busy_sink *sink, int dev, int64_t offset_ns,
		     uint64_t gap_ns);
/*
 * One sample, on the sampler's clock, busy or not, with the fraction of
 * its cycles that had compute in flight (0..1) and the kernels dispatched
 * in it (negative: not counted). A sample that ends before it starts or
 * starts before the previous one is dropped and makes the decode lossy.
 */
void pm_spans__add(struct pm_spans *s, uint64_t start, uint64_t end, int busy, double fraction,
		   double dispatches);
/* The decode lost samples (overflow, failed call): no covered range for it. */
void pm_spans__set_lossy(struct pm_spans *s);
/* Ends the decode: the open busy run, then the covered ranges unless lossy. */
void pm_spans__end(struct pm_spans *s);

#endif
