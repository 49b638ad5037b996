/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The control side of the fake CUPTI (fake_cupti.c): what a test uses to
 * drive libflamewatch-cuda.so as if a CUDA application ran under a real
 * CUPTI. The fake implements the CUPTI functions the library calls, with
 * the real headers' types and record layouts, and records what the library
 * asked for (subscription, enabled callbacks and activity kinds, buffers).
 *
 * FAKE_CUPTI_MODE=fail makes every CUPTI function fail; =conflict makes
 * cuptiSubscribe report another subscriber. FAKE_CUPTI_SKEW_NS shifts the
 * fake's clock from CLOCK_REALTIME (default -1 s) so that the library's
 * conversion to Unix time is visible. FAKE_CUPTI_KERNEL_GAP_NS leaves that
 * much idle time between queued GPU work items, as a launch-bound loop's
 * GPU sees between kernels. FAKE_CUPTI_DISPATCH_FILE names a file of 8
 * bytes holding a little-endian counter that every kernel run adds one to:
 * the fake PM sampling of another process (FAKE_PM_DISPATCH_FILE) reads
 * the GPU's dispatches from it, as the monitors count a process's kernels.
 * FAKE_CUPTI_KEEP_ONE_IN=N delivers one kernel record in N and loses the
 * others without a word, as CUPTI did on an H100 in some runs.
 */
#ifndef FAKE_CUPTI_H
#define FAKE_CUPTI_H

#include <stdint.h>

/* The counter of FAKE_CUPTI_DISPATCH_FILE / FAKE_PM_DISPATCH_FILE, mapped; NULL: none. */
uint64_t *fake_dispatch_counter(const char *env);

struct fake_cupti_truth {
	uint64_t launches;		/* kernel launch API calls made (runtime + direct driver) */
	uint64_t kernel_ns;		/* GPU ns of every kernel, recorded or not */
	uint64_t memcpy_calls, memcpy_ns, memcpy_bytes;
	uint64_t memset_calls, memset_ns;
	uint64_t recorded;		/* records created (activity was enabled) */
	uint64_t delivered;		/* records handed over in completed buffers */
	uint64_t refused;		/* records dropped: no buffer */
	uint64_t buffers_requested, buffers_completed;
	uint64_t subscribes, unsubscribes, flushes;
	uint64_t refusals;		/* subscriptions refused (another client) */
	uint64_t callbacks;		/* callback invocations into the subscriber */
	uint64_t toggles_on;		/* activity enabled after being disabled */
};

/* One runtime launch (cudaLaunchKernel wrapping cuLaunchKernel) of a kernel
 * running dur_ns on the GPU. record_driver_corr: the kernel record carries
 * the nested driver call's correlation id instead of the runtime call's. */
void fake_cupti_launch(const char *name, uint64_t dur_ns, int record_driver_corr);
/* A driver-only launch (cuLaunchKernel, as Triton does). */
void fake_cupti_driver_launch(const char *name, uint64_t dur_ns);
/* A graph launch of n kernels, each dur_ns, sharing one correlation id;
 * their records carry graph id FAKE_CUPTI_GRAPH_ID. */
#define FAKE_CUPTI_GRAPH_ID 42
void fake_cupti_graph_launch(const char *name, int n, uint64_t dur_ns);
void fake_cupti_memcpy_htod(uint64_t bytes, uint64_t dur_ns);
/* cudaMemcpy device to host: returns once the fake GPU has run it, so
 * that a call of more than a window sees its window close meanwhile. */
void fake_cupti_memcpy_dtoh(uint64_t bytes, uint64_t dur_ns);
/* on: records are held back from periodic flushes (late records, as of a
 * long kernel) until off, or a forced flush. */
void fake_cupti_hold(int on);
void fake_cupti_memset(uint64_t bytes, uint64_t dur_ns);
/* Any other runtime API call the library must ignore (cudaGetLastError). */
void fake_cupti_other_call(void);

int fake_cupti_subscribed(void);
int fake_cupti_callbacks_on(void);	/* subscribed, a runtime API callback on */
int fake_cupti_activity_enabled(void);	/* concurrent kernel activity on */
void fake_cupti_set_mode(const char *mode);	/* as FAKE_CUPTI_MODE */
/* Holds CUPTI as another client would (torch.profiler): the library's
 * next subscription is refused. */
void fake_cupti_other_client(int hold);
void fake_cupti_get_truth(struct fake_cupti_truth *t);
/* The fake's clock, which cuptiGetTimestamp and every record use:
 * CLOCK_REALTIME + FAKE_CUPTI_SKEW_NS. */
uint64_t fake_cupti_now(void);
/* FAKE_CUPTI_MODE=fail is on: every CUPTI function fails. */
int fake_cupti_failing(void);
/* CLOCK_REALTIME ns at which the fake GPU has run everything queued so far. */
uint64_t fake_cupti_gpu_idle_at(void);
/* cudaDeviceSynchronize as CUPTI sees it (the runtime call around
 * cuCtxSynchronize): returns once the fake GPU ran everything queued. */
void fake_cupti_device_synchronize(void);

#endif
