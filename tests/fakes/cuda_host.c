// SPDX-License-Identifier: Apache-2.0
/*
 * A stand-in for a CUDA application in the tests of libflamewatch-cuda.so:
 * it loads the library as the CUDA driver would (dlopen, InitializeInjection)
 * and, with the fake CUPTI (FLAMEWATCH_CUPTI_PATH=build/fakes/libcupti.so),
 * makes the API calls and GPU work a real application would.
 *
 *   cuda_host app LIB|-                 work, a fork, known output, exit 3
 *   cuda_host drive LIB N DUR_NS SLEEP_US
 *       waits until the library subscribed, makes N kernel launches (and
 *       copies, sets, driver-only and graph launches among them), then
 *       prints what the fake saw as one JSON line and exits 0
 *   cuda_host stall LIB ROUNDS KERNELS KERNEL_US STALL_MS
 *       a training loop with a data-loading stall: each round, in
 *       host_train_step, KERNELS back-to-back kernels of KERNEL_US each,
 *       then a wait in cudaDeviceSynchronize (a stand-in around the fake's,
 *       which spins until the fake GPU is done, between CUPTI's callbacks),
 *       then STALL_MS of CPU work in host_load_batch with
 *       the GPU idle. Prints "busy START END" for each round's GPU work and
 *       "loop START END" around the loop (Unix ns), exits 0. With
 *       FAKE_CUPTI_KERNEL_GAP_NS the kernels leave that gap between them.
 *   cuda_host launchbound LIB SECONDS KERNEL_US CPU_US
 *       a launch-bound loop: CPU_US in host_prepare_launch, then one
 *       kernel of KERNEL_US (shorter: the GPU idles the rest of the cycle),
 *       for SECONDS. Prints "launchbound START END LAUNCHES" (Unix ns)
 *   cuda_host attrib LIB SECONDS
 *       after 1.5 s of initialisation, every kind of GPU work from its own
 *       function, as a training step makes it, for SECONDS: kernels (host_kernels), a graph launch
 *       (host_graph), an asynchronous copy in and a synchronous copy out of
 *       15 ms, longer than a window (host_copy_in, host_copy_out), a set
 *       (host_zero); then 2 s of a rare kernel (host_late) among many
 *       frequent ones (host_filler), whose records the fake holds back
 *       until the end: late records. Prints the fake's truth as drive does
 *       and exits 0
 *   cuda_host later LIB
 *       waits for a subscription, then for the library to let CUPTI go,
 *       then holds CUPTI as another client would until the library is
 *       refused (up to 30 s)
 *
 * CUDA_HOST_LOAD_AFTER_MS=N: runs N ms before it loads the library, as an
 * application that calls cuInit late does, then prints
 * "loaded SECONDS.NANOSECONDS" (CLOCK_REALTIME) once dlopen returned.
 *
 * CUDA_HOST_SUBSCRIBE_WAIT_S=N (drive, launchbound, later): how long it
 * waits for the library to subscribe before it gives up with exit code 4
 * (20 s).
 *
 * CUDA_HOST_WAIT_CALLBACKS=1 (drive): also waits until a runtime API
 * callback is on. The library subscribes before it enables its callbacks,
 * so a test that counts every launch (FLAMEWATCH_CUDA_COUNT_ALL) must not
 * launch in between: those launches no library could see.
 *
 * CUDA_HOST_EXEC_AGAIN=1 (drive): once the work is done and a window has
 * handed its records over, the process execs itself to do it all again,
 * in the same pid, with the variable unset.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fake_cupti.h"

static struct {
	void (*launch)(const char *, uint64_t, int);
	void (*driver_launch)(const char *, uint64_t);
	void (*graph_launch)(const char *, int, uint64_t);
	void (*memcpy_htod)(uint64_t, uint64_t);
	void (*memcpy_dtoh)(uint64_t, uint64_t);
	void (*hold)(int);
	void (*memset)(uint64_t, uint64_t);
	void (*other_call)(void);
	int (*subscribed)(void);
	int (*callbacks_on)(void);
	void (*other_client)(int);
	void (*get_truth)(struct fake_cupti_truth *);
	uint64_t (*gpu_idle_at)(void);
	void (*device_synchronize)(void);
} F;

static int _inject(const char *lib)
{
	void *h;
	int (*init)(void);

	if (!strcmp(lib, "-"))
		return 0;
	h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		fprintf(stderr, "cuda_host: %s\n", dlerror());
		return -1;
	}
	init = (int (*)(void))dlsym(h, "InitializeInjection");
	if (!init) {
		fprintf(stderr, "cuda_host: no InitializeInjection in %s\n", lib);
		return -1;
	}
	return init() == 1 ? 0 : -1;
}

static int _fake(void)
{
	const char *p = getenv("FLAMEWATCH_CUPTI_PATH");
	void *h;

	/* The same copy the library loaded. */
	h = p ? dlopen(p, RTLD_NOW | RTLD_LOCAL) : NULL;
	if (!h) {
		fprintf(stderr, "cuda_host: cannot open the fake CUPTI: %s\n", p ? dlerror() : "unset");
		return -1;
	}
#define SYM(f, n) *(void **)&F.f = dlsym(h, "fake_cupti_" n)
	SYM(launch, "launch");
	SYM(driver_launch, "driver_launch");
	SYM(graph_launch, "graph_launch");
	SYM(memcpy_htod, "memcpy_htod");
	SYM(memcpy_dtoh, "memcpy_dtoh");
	SYM(hold, "hold");
	SYM(memset, "memset");
	SYM(other_call, "other_call");
	SYM(subscribed, "subscribed");
	SYM(callbacks_on, "callbacks_on");
	SYM(other_client, "other_client");
	SYM(get_truth, "get_truth");
	SYM(gpu_idle_at, "gpu_idle_at");
	SYM(device_synchronize, "device_synchronize");
	return F.launch && F.get_truth ? 0 : -1;
}

static void _sleep_us(long us)
{
	struct timespec ts = { us / 1000000, (us % 1000000) * 1000 };

	nanosleep(&ts, NULL);
}

static int _wait_subscribed(int want, int seconds)
{
	const char *wait = getenv("CUDA_HOST_WAIT_CALLBACKS");
	int callbacks = want && wait && !strcmp(wait, "1");

	for (int i = 0; i < seconds * 100; i++) {
		if (F.subscribed() == want && (!callbacks || F.callbacks_on()))
			return 0;
		_sleep_us(10000);
	}
	return -1;
}

static int _app(void)
{
	unsigned long sum = 0;
	pid_t pid;
	int st;

	for (unsigned long i = 0; i < 3000000; i++)
		sum = sum * 31 + i;
	printf("checksum=%lu\n", sum);
	fflush(stdout);
	pid = fork();
	if (pid == 0)
		_exit(5);
	waitpid(pid, &st, 0);
	printf("child=%d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
	_sleep_us(300000);	/* let the library's thread run a few windows */
	printf("done\n");
	return 3;
}

static void _print_truth(void)
{
	struct fake_cupti_truth t;

	F.get_truth(&t);
	printf("{\"launches\":%llu,\"kernel_ns\":%llu,\"memcpy_calls\":%llu,\"memcpy_ns\":%llu,"
	       "\"memcpy_bytes\":%llu,\"memset_calls\":%llu,\"memset_ns\":%llu,\"recorded\":%llu,"
	       "\"subscribes\":%llu,\"toggles_on\":%llu,\"callbacks\":%llu}\n",
	       (unsigned long long)t.launches, (unsigned long long)t.kernel_ns,
	       (unsigned long long)t.memcpy_calls, (unsigned long long)t.memcpy_ns,
	       (unsigned long long)t.memcpy_bytes, (unsigned long long)t.memset_calls,
	       (unsigned long long)t.memset_ns, (unsigned long long)t.recorded,
	       (unsigned long long)t.subscribes, (unsigned long long)t.toggles_on,
	       (unsigned long long)t.callbacks);
	fflush(stdout);
}

static int _drive(long n, uint64_t dur, long sleep_us)
{
	int vary = getenv("HOST_VARY") != NULL;
	const char *wait_s = getenv("CUDA_HOST_SUBSCRIBE_WAIT_S");

	if (_wait_subscribed(1, wait_s ? atoi(wait_s) : 20)) {
		fprintf(stderr, "cuda_host: the library did not subscribe\n");
		return 4;
	}
	for (long i = 0; i < n; i++) {
		uint64_t d = vary ? dur * (uint64_t)(1 + i % 7) / 4 : dur;

		F.other_call();
		if (i % 8 == 3)
			F.driver_launch("_Z13driver_kernelPf", d);
		else if (i % 50 == 17)
			F.graph_launch("_Z12graph_kernelv", 3, d);
		else
			F.launch(i % 2 ? "_Z10kernel_onePf" : "_Z10kernel_twoPfi", d, (int)(i % 4 == 1));
		if (i % 10 == 0)
			F.memcpy_htod(4096, dur / 2);
		if (i % 16 == 0)
			F.memset(1024, dur / 4);
		if (sleep_us)
			_sleep_us(sleep_us);
	}
	_print_truth();
	return 0;
}

static uint64_t _unix_ns(void);

/* attrib: each kind of work from a function of its own (see the top). */
static __attribute__((noinline)) void host_kernels(void)
{
	for (int i = 0; i < 10; i++)
		F.launch("_Z6kernelPf", 30000, i % 4 == 1);
	F.driver_launch("_Z13driver_kernelPf", 20000);
}

static __attribute__((noinline)) void host_graph(void)
{
	F.graph_launch("_Z10graph_nodev", 4, 25000);
}

static __attribute__((noinline)) void host_copy_in(void)
{
	F.memcpy_htod(1 << 20, 200000);
}

static __attribute__((noinline)) void host_copy_out(void)
{
	F.memcpy_dtoh(1 << 20, 15000000);
}

static __attribute__((noinline)) void host_zero(void)
{
	F.memset(1 << 16, 10000);
}

static __attribute__((noinline)) void host_filler(int n)
{
	for (int i = 0; i < n; i++)
		F.launch("_Z6fillerv", 100, 0);
}

static __attribute__((noinline)) void host_late(void)
{
	F.launch("_Z11late_kernelv", 50000, 0);
}

static int _attrib(long seconds)
{
	uint64_t until;

	if (!F.memcpy_dtoh || !F.hold || _wait_subscribed(1, 20)) {
		fprintf(stderr, "cuda_host: the library did not subscribe\n");
		return 4;
	}
	/*
	 * A CUDA application initialises for a while before its first
	 * kernel: the agent meanwhile describes the process to its unwinder,
	 * without which a launch's walk stops in CUDA's libraries.
	 */
	_sleep_us(1500000);
	until = _unix_ns() + (uint64_t)seconds * 1000000000ull;
	for (long step = 0; _unix_ns() < until; step++) {
		host_kernels();
		host_graph();
		if (step % 5 == 0) {
			host_copy_in();
			host_copy_out();
		}
		host_zero();
		_sleep_us(1000);
	}
	/* 16,000 launches a second, under the rate above which activity is duty-cycled. */
	F.hold(1);
	until = _unix_ns() + 2000000000ull;
	while (_unix_ns() < until) {
		host_late();
		host_filler(80);
		_sleep_us(5000);
	}
	_sleep_us(300000);
	F.hold(0);
	_sleep_us(500000);
	_print_truth();
	return 0;
}

static uint64_t _unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The application's synchronising call, named so on purpose: the fake's
 * makes CUPTI's callbacks around its wait. */
static __attribute__((noinline)) int cudaDeviceSynchronize(void)
{
	F.device_synchronize();
	return 0;
}

static __attribute__((noinline)) void host_load_batch(uint64_t ns)
{
	uint64_t until = _unix_ns() + ns;

	while (_unix_ns() < until)
		__asm__ volatile("" ::: "memory");
}

static __attribute__((noinline)) void host_train_step(long kernels, uint64_t dur_ns)
{
	const char *g = getenv("FAKE_CUPTI_KERNEL_GAP_NS");
	uint64_t end, gap = g ? strtoull(g, NULL, 10) : 0;

	for (long i = 0; i < kernels; i++)
		F.launch(i % 2 ? "_Z4gemmPf" : "_Z4reluPf", dur_ns, 0);
	/*
	 * Queued back to back behind the first (launching is far quicker than
	 * running), with the fake's gap between kernels.
	 */
	end = F.gpu_idle_at();
	printf("busy %llu %llu\n",
	       (unsigned long long)(end - (uint64_t)kernels * dur_ns - (uint64_t)(kernels - 1) * gap),
	       (unsigned long long)end);
	cudaDeviceSynchronize();
}

static int _stall(long rounds, long kernels, uint64_t kernel_us, long stall_ms)
{
	uint64_t t0;

	if (!F.gpu_idle_at || !F.device_synchronize || _wait_subscribed(1, 20)) {
		fprintf(stderr, "cuda_host: the library did not subscribe\n");
		return 4;
	}
	t0 = _unix_ns();
	for (long r = 0; r < rounds; r++) {
		host_train_step(kernels, kernel_us * 1000);
		host_load_batch((uint64_t)stall_ms * 1000000);
	}
	printf("loop %llu %llu\n", (unsigned long long)t0, (unsigned long long)_unix_ns());
	fflush(stdout);
	return 0;
}

/* The CPU's side of a launch-bound step: Python's overhead between kernels, say. */
static __attribute__((noinline)) void host_prepare_launch(uint64_t ns)
{
	uint64_t until = _unix_ns() + ns;

	while (_unix_ns() < until)
		__asm__ volatile("" ::: "memory");
}

/*
 * A launch-bound loop: CPU_US of host_prepare_launch, then one kernel of
 * KERNEL_US, which the GPU finishes before the next launch, so that it
 * idles for the rest of each cycle, in gaps too short to keep apart.
 */
static int _launchbound(double seconds, uint64_t kernel_us, uint64_t cpu_us)
{
	const char *wait_s = getenv("CUDA_HOST_SUBSCRIBE_WAIT_S");
	const char *progress = getenv("CUDA_HOST_PROGRESS_MS");
	uint64_t t0, end, now, next_at, n = 0;
	uint64_t progress_ns = progress ? strtoull(progress, NULL, 10) * 1000000ull : 0;

	if (_wait_subscribed(1, wait_s ? atoi(wait_s) : 20)) {
		fprintf(stderr, "cuda_host: the library did not subscribe\n");
		return 4;
	}
	t0 = _unix_ns();
	end = t0 + (uint64_t)(seconds * 1e9);
	next_at = progress_ns ? t0 + progress_ns : UINT64_MAX;
	while ((now = _unix_ns()) < end) {
		/* The truth over any stretch of the run: launches so far, now and then. */
		if (now >= next_at) {
			printf("at %llu %llu\n", (unsigned long long)now, (unsigned long long)n);
			next_at += progress_ns;
		}
		host_prepare_launch(cpu_us * 1000);
		F.launch("_Z4tinyPf", kernel_us * 1000, 0);
		n++;
	}
	printf("launchbound %llu %llu %llu\n", (unsigned long long)t0, (unsigned long long)_unix_ns(),
	       (unsigned long long)n);
	fflush(stdout);
	return 0;
}

static int _later(void)
{
	const char *wait_s = getenv("CUDA_HOST_SUBSCRIBE_WAIT_S");

	if (_wait_subscribed(1, wait_s ? atoi(wait_s) : 20)) {
		fprintf(stderr, "cuda_host: the library did not subscribe\n");
		return 4;
	}
	printf("subscribed\n");
	fflush(stdout);
	if (_wait_subscribed(0, 20)) {
		fprintf(stderr, "cuda_host: the library kept CUPTI\n");
		return 4;
	}
	F.other_client(1);
	printf("released\n");
	fflush(stdout);
	/* Until the library tried again (the next tracer attached) and a bit. */
	for (int i = 0; i < 3000; i++) {
		struct fake_cupti_truth t;

		F.get_truth(&t);
		if (t.refusals)
			break;
		_sleep_us(10000);
	}
	_sleep_us(500000);
	return 0;
}

int main(int argc, char **argv)
{
	const char *after = getenv("CUDA_HOST_LOAD_AFTER_MS");
	struct timespec now;

	if (argc < 3) {
		fprintf(stderr, "usage: cuda_host app|drive|attrib|later|stall|launchbound LIB [ARGS]\n");
		return 2;
	}
	if (after) {
		_sleep_us(atol(after) * 1000);
		if (_inject(argv[2]))
			return 2;
		clock_gettime(CLOCK_REALTIME, &now);
		printf("loaded %lld.%09ld\n", (long long)now.tv_sec, now.tv_nsec);
		fflush(stdout);
	} else if (_inject(argv[2])) {
		return 2;
	}
	if (!strcmp(argv[1], "app"))
		return _app();
	if (_fake())
		return 2;
	if (!strcmp(argv[1], "drive") && argc == 6) {
		int rc = _drive(atol(argv[3]), strtoull(argv[4], NULL, 10), atol(argv[5]));
		const char *again = getenv("CUDA_HOST_EXEC_AGAIN");

		if (rc || !again || strcmp(again, "1"))
			return rc;
		/* No exit flush at an exec: the windows hand the records over. */
		_sleep_us(2500000);
		unsetenv("CUDA_HOST_EXEC_AGAIN");
		execv("/proc/self/exe", argv);
		perror("cuda_host: exec");
		return 2;
	}
	if (!strcmp(argv[1], "later"))
		return _later();
	if (!strcmp(argv[1], "attrib") && argc == 4)
		return _attrib(atol(argv[3]));
	if (!strcmp(argv[1], "launchbound") && argc == 6)
		return _launchbound(atof(argv[3]), strtoull(argv[4], NULL, 10),
				    strtoull(argv[5], NULL, 10));
	if (!strcmp(argv[1], "stall") && argc == 7)
		return _stall(atol(argv[3]), atol(argv[4]), strtoull(argv[5], NULL, 10), atol(argv[6]));
	fprintf(stderr, "cuda_host: bad arguments\n");
	return 2;
}
