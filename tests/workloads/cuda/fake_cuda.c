// SPDX-License-Identifier: Apache-2.0
/*
 * A stand-in for libflamewatch-cuda.so in tests without a GPU: it fires
 * the very USDT probes of src/cuda/probes.h, with semaphores, from
 * functions the test program calls with synthetic launches and records.
 * Built under the real library's file name so the agent's discovery finds
 * it the same way.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include "cuda/probes.h"

__extension__ unsigned short flamewatch_launch_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short flamewatch_activity_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short flamewatch_conflict_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));
__extension__ unsigned short flamewatch_name_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));

/* True once an agent attached to both probes that carry GPU time. */
int fwtest_attached(void)
{
	return flamewatch_launch_semaphore && flamewatch_activity_semaphore;
}

__attribute__((noinline)) void fwtest_launch(uint64_t correlation, uint32_t weight)
{
	if (flamewatch_launch_semaphore)
		STAP_PROBE2(flamewatch, launch, correlation, weight);
	__asm__ volatile("" ::: "memory");	/* keep the frame */
}

struct native_launch {
	uint64_t correlation;
	uint32_t weight;
};

static __attribute__((noinline)) void *native_launcher(void *arg)
{
	const struct native_launch *nl = arg;

	pthread_setname_np(pthread_self(), "fw_native");
	fwtest_launch(nl->correlation, nl->weight);
	__asm__ volatile("" ::: "memory");
	return NULL;
}

/*
 * Launches from a native thread of its own ("fw_native", no Python on it)
 * while the caller waits for it, as PyTorch's autograd threads launch a
 * backward pass's kernels while the Python thread that called backward()
 * waits. Returns 0, or -1 if the thread could not run.
 */
__attribute__((noinline)) int fwtest_launch_on_thread(uint64_t correlation, uint32_t weight)
{
	struct native_launch nl = { correlation, weight };
	pthread_t t;

	if (pthread_create(&t, NULL, native_launcher, &nl))
		return -1;
	return pthread_join(t, NULL) ? -1 : 0;
}

__attribute__((noinline)) void fwtest_activity(const struct fw_cuda_record *recs, uint32_t count)
{
	if (flamewatch_activity_semaphore)
		STAP_PROBE2(flamewatch, activity, recs, count);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void fwtest_conflict(const char *what)
{
	if (flamewatch_conflict_semaphore)
		STAP_PROBE1(flamewatch, conflict, what);
}

/* Announces a kernel name, as the library does before its first record. */
__attribute__((noinline)) void fwtest_name(const char *name)
{
	if (flamewatch_name_semaphore)
		STAP_PROBE2(flamewatch, name, (uint64_t)(uintptr_t)name, name);
}
