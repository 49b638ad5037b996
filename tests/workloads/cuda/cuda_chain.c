// SPDX-License-Identifier: Apache-2.0
/*
 * Fires the CUDA probes of a fake libflamewatch-cuda.so with synthetic GPU
 * timings from known call chains, so a test can demand exact gpu_time
 * samples. Phases (correlation ids in brackets):
 *
 *   launch first [1..10]:   main;phase_launch_first;a;b;launch_kernel;fwtest_launch
 *                           kernelA(int), GPU ns 1000*k for k = 1..10, weight 2
 *                           (records carry the weight): 110000 ns
 *   records first [101..105]: the records come before their launches, from
 *                           main;phase_records_first;a;b;launch_kernel;fwtest_launch
 *                           kernelB(float*, int), 7000 ns each, weight 0 in the
 *                           record, 3 in the launch: 105000 ns
 *   copy [200]:             main;phase_copy;copy_h2d;fwtest_launch
 *                           [memcpy HtoD], 4096 bytes, 3000 ns, weight 1
 *   orphan [300]:           a record of orphan() that no launch ever names:
 *                           5000 ns, under the stack of the process's last
 *                           launch (the copy's), marked as not its own
 *   collection:             as the library says how it collects records:
 *                           every one (first), then duty-cycled, every
 *                           record costing 1700 ns and 2.5 % of the time
 *
 * Prints "attached" once the agent set the semaphores (waits up to 60 s;
 * exits 3 if it never does) and "done" at the end.
 *
 * Each kernel name is announced (the name probe) before its records, as
 * the library does.
 *
 * `cuda_chain exitnow`: the same phases, and an exit right after the last
 * record, as a CUDA process's final flush at exit does: the agent gets the
 * records only after the process is gone.
 *
 * `cuda_chain burst N [noattach]`: instead, N launches from
 * main;phase_burst;a;b;launch_kernel;fwtest_launch, each followed in
 * batches of 64 by its record (kernelA(int), 1000 ns, weight 1): N * 1000
 * ns in all, as fast as the probes allow. Prints the wall time per launch
 * (with noattach it does not wait for an agent: the cost of an idle probe).
 *
 * `cuda_chain gap ROUNDS MS`: a training loop with a data-loading stall.
 * Each round launches one kernelA(int) from
 * main;phase_gap;train_step;launch_kernel;fwtest_launch whose record spans
 * the MS milliseconds the CPU then spends in wait_for_gpu (spinning in a
 * stand-in for cudaStreamSynchronize), then spins MS milliseconds in
 * load_batch_stall with no kernel running: the GPU is idle exactly while
 * load_batch_stall runs, half of the loop's wall time. Prints
 * "gap FROM_NS TO_NS" (CLOCK_REALTIME) around the loop. With
 * CUDA_CHAIN_BUSY=1 it also sends the busy timeline the library would:
 * a FW_CUDA_BUSY span per kernel, and FW_CUDA_COVERAGE over the loop.
 *
 * `cuda_chain blockgap ROUNDS MS`: the same loop, but the data loader
 * blocks instead of spinning: load_batch_blocked sleeps in read() on a
 * timerfd that fires after MS milliseconds, so the GPU's idle time is
 * off-CPU time under load_batch_blocked, with no CPU samples. Prints
 * "blockgap FROM_NS TO_NS BLOCKED_NS": the loop, and the wall time spent
 * inside those read() calls (the truth off-CPU profiling must find).
 * Meanwhile POOL_WORKERS threads that launch nothing stay parked on a
 * timer, blocked through busy and idle time alike, and a backward thread
 * launches the second half of each step's GPU work and waits through the
 * idle gap for the next step.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "cuda/probes.h"

int fwtest_attached(void);
void fwtest_launch(uint64_t correlation, uint32_t weight);
void fwtest_activity(const struct fw_cuda_record *recs, uint32_t count);
void fwtest_name(const char *name);

static int announce_names;
static int send_busy;		/* CUDA_CHAIN_BUSY=1: the busy timeline too (gap) */

static const char kernel_a[] = "_Z7kernelAi";
static const char kernel_b[] = "_Z7kernelBPfi";
static const char orphan[] = "_Z6orphanv";

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* Once per name, as the library does (a name probe copies 2 KiB). */
static void announce(const char *name)
{
	static const char *done[8];

	for (int i = 0; i < 8; i++) {
		if (done[i] == name)
			return;
		if (!done[i]) {
			done[i] = name;
			break;
		}
	}
	fwtest_name(name);
}

static struct fw_cuda_record rec(uint64_t corr, const char *name, uint32_t kind, uint64_t dur,
				 uint32_t weight, uint64_t bytes)
{
	static uint64_t t;
	struct fw_cuda_record r;

	if (!t)
		t = now_ns();
	memset(&r, 0, sizeof(r));
	r.correlation = corr;
	r.start_ns = t;
	r.end_ns = t + dur;
	t += dur + 100;
	r.name_addr = (uint64_t)(uintptr_t)name;
	if (announce_names && name && kind == FW_CUDA_KERNEL)
		announce(name);
	r.device = 0;
	r.stream = kind == FW_CUDA_KERNEL ? 7 : 13;
	r.kind = kind;
	r.weight = weight;
	r.bytes = bytes;
	return r;
}

__attribute__((noinline)) void launch_kernel(uint64_t corr, uint32_t weight)
{
	fwtest_launch(corr, weight);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void b(uint64_t corr, uint32_t weight)
{
	launch_kernel(corr, weight);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void a(uint64_t corr, uint32_t weight)
{
	b(corr, weight);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void phase_launch_first(void)
{
	struct fw_cuda_record recs[10];

	for (int k = 1; k <= 10; k++)
		a(k, 2);
	for (int k = 1; k <= 10; k++)
		recs[k - 1] = rec(k, kernel_a, FW_CUDA_KERNEL, 1000ULL * k, 2, 0);
	fwtest_activity(recs, 10);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void phase_records_first(void)
{
	struct fw_cuda_record recs[5];

	for (int k = 0; k < 5; k++)
		recs[k] = rec(101 + k, kernel_b, FW_CUDA_KERNEL, 7000, 0, 0);
	fwtest_activity(recs, 5);
	for (int k = 0; k < 5; k++)
		a(101 + k, 3);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void copy_h2d(uint64_t corr)
{
	fwtest_launch(corr, 1);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void phase_copy(void)
{
	struct fw_cuda_record r;

	copy_h2d(200);
	r = rec(200, NULL, FW_CUDA_MEMCPY_HTOD, 3000, 1, 4096);
	fwtest_activity(&r, 1);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void phase_orphan(void)
{
	struct fw_cuda_record r = rec(300, orphan, FW_CUDA_KERNEL, 5000, 1, 0);

	fwtest_activity(&r, 1);
	__asm__ volatile("" ::: "memory");
}

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

__attribute__((noinline)) void phase_burst(long n)
{
	static struct fw_cuda_record recs[FW_CUDA_MAX_BATCH];
	uint64_t t0 = mono_ns(), corr = 1000;

	for (long done = 0; done < n;) {
		int k = n - done < FW_CUDA_MAX_BATCH ? (int)(n - done) : FW_CUDA_MAX_BATCH;

		for (int i = 0; i < k; i++) {
			a(corr + i, 1);
			recs[i] = rec(corr + i, kernel_a, FW_CUDA_KERNEL, 1000, 1, 0);
		}
		fwtest_activity(recs, k);
		corr += k;
		done += k;
	}
	printf("burst: %ld launches, %.0f ns per launch and record\n", n,
	       (double)(mono_ns() - t0) / (n ? n : 1));
	__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void spin_until(uint64_t end)
{
	while (now_ns() < end)
		__asm__ volatile("" ::: "memory");
}

/*
 * Stands for the runtime's call of the same name (this program links no
 * CUDA): the idle analysis must count samples under it as the CPU waiting
 * on the GPU, never as idle time.
 */
static uint64_t gpu_done_ns;

__attribute__((noinline)) int cudaStreamSynchronize(void *stream)
{
	(void)stream;
	spin_until(gpu_done_ns);
	__asm__ volatile("" ::: "memory");
	return 0;
}

__attribute__((noinline)) void wait_for_gpu(uint64_t end)
{
	gpu_done_ns = end;
	cudaStreamSynchronize(NULL);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void load_batch_stall(uint64_t end)
{
	spin_until(end);
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void train_step(uint64_t corr, uint64_t ms)
{
	struct fw_cuda_record r;
	uint64_t t = now_ns();

	launch_kernel(corr, 1);
	memset(&r, 0, sizeof(r));
	r.correlation = corr;
	r.start_ns = t;
	r.end_ns = t + ms * 1000000ULL;
	r.name_addr = (uint64_t)(uintptr_t)kernel_a;
	r.stream = 7;
	r.kind = FW_CUDA_KERNEL;
	r.weight = 1;
	wait_for_gpu(r.end_ns);
	fwtest_activity(&r, 1);
	if (send_busy) {
		struct fw_cuda_record b = { .start_ns = r.start_ns, .end_ns = r.end_ns,
					    .bytes = 5000, .kind = FW_CUDA_BUSY };

		fwtest_activity(&b, 1);
	}
	__asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void phase_gap(long rounds, uint64_t ms)
{
	uint64_t t0 = now_ns();

	for (long i = 0; i < rounds; i++) {
		train_step(5000 + i, ms);
		load_batch_stall(now_ns() + ms * 1000000ULL);
	}
	if (send_busy) {
		struct fw_cuda_record c = { .start_ns = t0, .end_ns = now_ns(),
					    .kind = FW_CUDA_COVERAGE };

		fwtest_activity(&c, 1);
	}
	printf("gap %llu %llu\n", (unsigned long long)t0, (unsigned long long)now_ns());
	__asm__ volatile("" ::: "memory");
}

/* Blocks in read() until the timer fires ms from now; the ns spent in read(). */
__attribute__((noinline)) uint64_t load_batch_blocked(int tfd, uint64_t ms)
{
	struct itimerspec its = { .it_value = { .tv_sec = ms / 1000,
						.tv_nsec = (ms % 1000) * 1000000 } };
	uint64_t expirations, t0;

	if (timerfd_settime(tfd, 0, &its, NULL)) {
		perror("cuda_chain: timerfd_settime");
		exit(1);
	}
	t0 = now_ns();
	if (read(tfd, &expirations, sizeof(expirations)) != sizeof(expirations)) {
		perror("cuda_chain: read");
		exit(1);
	}
	__asm__ volatile("" ::: "memory");
	return now_ns() - t0;
}

/*
 * A pool worker with nothing to do, as a real process has several: it
 * wakes every 20 ms to find its queue empty and blocks again, through busy
 * and idle time alike. It launches no GPU work, so its blocks explain none
 * of the idle time.
 */
static volatile int pool_stop;

__attribute__((noinline)) void *pool_worker_parked(void *arg)
{
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	struct itimerspec its = { .it_value = { 0, 20000000 }, .it_interval = { 0, 20000000 } };
	uint64_t expirations;

	(void)arg;
	if (tfd < 0 || timerfd_settime(tfd, 0, &its, NULL)) {
		perror("cuda_chain: pool timerfd");
		exit(1);
	}
	while (!pool_stop && read(tfd, &expirations, sizeof(expirations)) > 0)
		;
	close(tfd);
	return NULL;
}

#define POOL_WORKERS 3

/*
 * The second half of each step's GPU work is launched by another thread,
 * as PyTorch's backward pass is by its autograd thread, while the main
 * thread waits for it; between steps that thread waits for the next one,
 * parked through the idle gap like the GPU. The gap ends with the main
 * thread's launch: it alone is what the GPU waited on.
 */
static pthread_mutex_t bw_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t bw_cv = PTHREAD_COND_INITIALIZER;
static int bw_go, bw_done, bw_stop;
static uint64_t bw_corr, bw_ms;

__attribute__((noinline)) void *backward_worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&bw_mu);
	for (;;) {
		while (!bw_go && !bw_stop)
			pthread_cond_wait(&bw_cv, &bw_mu);
		if (bw_stop)
			break;
		bw_go = 0;
		pthread_mutex_unlock(&bw_mu);
		train_step(bw_corr, bw_ms);
		pthread_mutex_lock(&bw_mu);
		bw_done = 1;
		pthread_cond_broadcast(&bw_cv);
	}
	pthread_mutex_unlock(&bw_mu);
	return NULL;
}

/* Half the step here, half on the backward thread, waited for. */
__attribute__((noinline)) void train_step_with_backward(uint64_t corr, uint64_t ms)
{
	train_step(corr, ms / 2);
	pthread_mutex_lock(&bw_mu);
	bw_corr = corr + 100000;
	bw_ms = ms - ms / 2;
	bw_done = 0;
	bw_go = 1;
	pthread_cond_broadcast(&bw_cv);
	while (!bw_done)
		pthread_cond_wait(&bw_cv, &bw_mu);
	pthread_mutex_unlock(&bw_mu);
}

__attribute__((noinline)) void phase_blockgap(long rounds, uint64_t ms)
{
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC);
	uint64_t t0 = now_ns(), blocked = 0;
	pthread_t pool[POOL_WORKERS], bw;

	if (tfd < 0) {
		perror("cuda_chain: timerfd_create");
		exit(1);
	}
	for (int i = 0; i < POOL_WORKERS; i++) {
		if (pthread_create(&pool[i], NULL, pool_worker_parked, NULL)) {
			fprintf(stderr, "cuda_chain: pthread_create failed\n");
			exit(1);
		}
	}
	if (pthread_create(&bw, NULL, backward_worker, NULL)) {
		fprintf(stderr, "cuda_chain: pthread_create failed\n");
		exit(1);
	}
	for (long i = 0; i < rounds; i++) {
		train_step_with_backward(6000 + i, ms);
		blocked += load_batch_blocked(tfd, ms);
	}
	printf("blockgap %llu %llu %llu\n", (unsigned long long)t0, (unsigned long long)now_ns(),
	       (unsigned long long)blocked);
	fflush(stdout);
	pool_stop = 1;
	pthread_mutex_lock(&bw_mu);
	bw_stop = 1;
	pthread_cond_broadcast(&bw_cv);
	pthread_mutex_unlock(&bw_mu);
	for (int i = 0; i < POOL_WORKERS; i++)
		pthread_join(pool[i], NULL);
	pthread_join(bw, NULL);
	close(tfd);
	__asm__ volatile("" ::: "memory");
}

/* Every record collected, then duty-cycled: one switch, logged by the agent. */
__attribute__((noinline)) void phase_collection(void)
{
	struct fw_cuda_record c = { .start_ns = now_ns(), .kind = FW_CUDA_COLLECTION,
				    .bytes = UINT64_MAX, .weight = 1, .stream = 10000 };

	c.end_ns = c.start_ns;
	fwtest_activity(&c, 1);
	c.start_ns = c.end_ns = now_ns();
	c.weight = 0;
	c.bytes = 25000;
	c.correlation = 1700;
	fwtest_activity(&c, 1);
}

int main(int argc, char **argv)
{
	int burst = argc >= 3 && !strcmp(argv[1], "burst");
	int gap = argc >= 4 && !strcmp(argv[1], "gap");
	int blockgap = argc >= 4 && !strcmp(argv[1], "blockgap");
	int wait = !(argc >= 4 && !strcmp(argv[3], "noattach") && !gap && !blockgap);
	int exitnow = argc >= 2 && !strcmp(argv[1], "exitnow");
	const char *busy = getenv("CUDA_CHAIN_BUSY");

	send_busy = busy && !strcmp(busy, "1");

	for (int i = 0; wait && !fwtest_attached(); i++) {
		if (i == 6000) {
			fprintf(stderr, "cuda_chain: no agent attached within 60 s\n");
			return 3;
		}
		usleep(10000);
	}
	/*
	 * Another agent on the host may have set the semaphores: a test that
	 * names a file in CUDA_CHAIN_GO waits for its own agent and then
	 * creates it.
	 */
	for (int i = 0; wait && getenv("CUDA_CHAIN_GO") && access(getenv("CUDA_CHAIN_GO"), F_OK);
	     i++) {
		if (i == 6000) {
			fprintf(stderr, "cuda_chain: %s did not appear within 60 s\n",
				getenv("CUDA_CHAIN_GO"));
			return 3;
		}
		usleep(10000);
	}
	printf(wait ? "attached\n" : "not waiting for an agent\n");
	fflush(stdout);
	/*
	 * A real CUDA process spends far longer in cuInit() than this before
	 * its first launch. An agent that attached before we started (the
	 * semaphores were set at exec) describes us to its unwinder on its
	 * next 100 ms tick; launches before that unwind by frame pointers only.
	 */
	if (wait)
		usleep(300000);
	if (gap) {
		phase_gap(atol(argv[2]), (uint64_t)atol(argv[3]));
		usleep(300000);
		printf("done\n");
		return 0;
	}
	if (blockgap) {
		phase_blockgap(atol(argv[2]), (uint64_t)atol(argv[3]));
		usleep(300000);
		printf("done\n");
		return 0;
	}
	if (burst) {
		phase_burst(atol(argv[2]));
		usleep(300000);
		printf("done\n");
		return 0;
	}
	/* As the library does: names reach the agent however late it drains. */
	announce_names = 1;
	phase_launch_first();
	phase_records_first();
	phase_copy();
	phase_orphan();
	phase_collection();
	if (exitnow) {
		printf("done\n");
		fflush(stdout);
		_exit(0);	/* gone before the agent's next drain */
	}
	/* The agent drains every 100 ms: let it see the launches while we live. */
	usleep(300000);
	printf("done\n");
	fflush(stdout);
	return 0;
}
