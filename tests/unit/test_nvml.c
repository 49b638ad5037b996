// SPDX-License-Identifier: Apache-2.0
/*
 * The NVML collector against the fake libnvidia-ml.so.1 (tests/fakes):
 * every metric with the value the fake was scripted with, in the unit we
 * export; the missing function and the NOT_SUPPORTED one leave their metric
 * out (not 0); per-process points keyed by the sample's pid with the
 * process's comm, memory not counted twice across the compute and graphics
 * lists; sampled utilisation never repeats a sample; no library, no
 * collector. Also measures the CPU cost of one round.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/batch.h"
#include "common/profile.h"
#include "gpu/nvml.h"
#include "gpu/poller.h"

#define FAKE "build/fakes/libnvidia-ml.so.1"
#define FAKE_NOSAMPLES "build/fakes/nosamples/libnvidia-ml.so.1"

static char _values[64];
static char _comm[32];

static int64_t _now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int _setup(void **state)
{
	FILE *f;
	int fd;

	snprintf(_values, sizeof(_values), "/tmp/fw-fake-nvml-XXXXXX");
	fd = mkstemp(_values);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	fprintf(f, "gpu0.util 61\ngpu0.mem_util 23\ngpu0.mem_used 5368709120\n"
		   "gpu0.mem_total 150754820096\ngpu0.sm_clock 1755\ngpu0.mem_clock 2619\n"
		   "gpu0.sm_clock_max 1980\ngpu0.mem_clock_max 2619\ngpu0.power_mw 312456\n"
		   "gpu0.power_limit_mw 700000\ngpu0.temp 47\ngpu0.pcie_tx_kb 1500\n"
		   "gpu0.pcie_rx_kb 2500\ngpu0.reasons 5\ngpu0.energy_mj 987654321\n"
		   "gpu1.util 3\ngpu1.power_mw 90001\n"
		   "proc 0 %d 55 11 1073741824\nproc 1 %d 7 2 268435456\n", (int)getpid(),
		(int)getpid());
	fclose(f);
	setenv("FAKE_NVML_VALUES", _values, 1);
	f = fopen("/proc/self/comm", "r");
	assert_non_null(fgets(_comm, sizeof(_comm), f));
	fclose(f);
	_comm[strcspn(_comm, "\n")] = '\0';
	return 0;
}

static int _teardown(void **state)
{
	unlink(_values);
	return 0;
}

/* The points of metric name on GPU gpu (and pid, or none when pid is 0). */
static int _find(const struct batch *b, const char *name, const char *gpu, int pid,
		 double *value, int64_t *ts)
{
	int found = 0;
	char pidtxt[16];

	snprintf(pidtxt, sizeof(pidtxt), "%d", pid);
	for (uint32_t i = 0; i < b->nmetrics; i++) {
		const struct batch_metric *m = &b->metrics[i];
		const char *p = batch__series_label(b, m->series, "pid");

		if (strcmp(profile__string(b->dict, m->name), name) ||
		    strcmp(batch__series_label(b, m->series, "gpu"), gpu))
			continue;
		if (pid ? !p || strcmp(p, pidtxt) : p != NULL)
			continue;
		if (value)
			*value = m->value;
		if (ts)
			*ts = m->ts_ns;
		found++;
	}
	return found;
}

static void _expect(const struct batch *b, const char *name, const char *gpu, double want)
{
	double v = -1;
	int n = _find(b, name, gpu, 0, &v, NULL);

	if (n != 1)
		fail_msg("%s gpu %s: %d points, want 1", name, gpu, n);
	if (v != want)
		fail_msg("%s gpu %s: %.17g, want %.17g", name, gpu, v, want);
}

static void test_every_metric(void **state)
{
	struct nvml *n = nvml__open(FAKE);
	struct batch *b = batch__new(1);
	int64_t t0 = _now(), ts;
	double v;
	int rc;

	assert_non_null(n);
	assert_int_equal(nvml__ngpus(n), 2);
	rc = nvml__collect(n, b, t0);
	assert_true(rc > 0);
	assert_int_equal((uint32_t)rc, b->nmetrics);

	_expect(b, "flamewatch_gpu_memory_used_bytes", "0", 5368709120.0);
	_expect(b, "flamewatch_gpu_memory_total_bytes", "0", 150754820096.0);
	_expect(b, "flamewatch_gpu_sm_clock_hertz", "0", 1755e6);
	_expect(b, "flamewatch_gpu_memory_clock_hertz", "0", 2619e6);
	_expect(b, "flamewatch_gpu_sm_clock_max_hertz", "0", 1980e6);
	_expect(b, "flamewatch_gpu_memory_clock_max_hertz", "0", 2619e6);
	_expect(b, "flamewatch_gpu_power_watts", "0", 312.456);
	_expect(b, "flamewatch_gpu_power_watts", "1", 90.001);
	_expect(b, "flamewatch_gpu_power_limit_watts", "0", 700);
	_expect(b, "flamewatch_gpu_temperature_celsius", "0", 47);
	_expect(b, "flamewatch_gpu_pcie_tx_bytes_per_second", "0", 1500 * 1024.0);
	_expect(b, "flamewatch_gpu_pcie_rx_bytes_per_second", "0", 2500 * 1024.0);
	_expect(b, "flamewatch_gpu_throttle_reasons", "0", 5);
	_expect(b, "flamewatch_gpu_energy_joules_total", "0", 987654.321);
	/* First round: the newest sample only, at the driver's time. */
	_expect(b, "flamewatch_gpu_utilization_percent", "0", 61);
	_expect(b, "flamewatch_gpu_utilization_percent", "1", 3);
	_expect(b, "flamewatch_gpu_memory_utilization_percent", "0", 23);
	_find(b, "flamewatch_gpu_utilization_percent", "0", 0, NULL, &ts);
	assert_true(ts <= t0 && ts > t0 - 1000000000LL && ts % 100000000LL == 0);

	/* Missing function and NOT_SUPPORTED: absent, not zero. */
	assert_int_equal(_find(b, "flamewatch_gpu_mig_mode", "0", 0, NULL, NULL), 0);
	assert_int_equal(_find(b, "flamewatch_gpu_temperature_slowdown_celsius", "0", 0, NULL, NULL), 0);
	assert_false(nvml__available(n, 0, NVML_M_MIG_MODE));
	assert_false(nvml__available(n, 1, NVML_M_TEMP_SLOWDOWN));
	assert_true(nvml__available(n, 1, NVML_M_POWER));

	/* Per process: by pid, with comm; memory once although in both lists. */
	assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "0", getpid(), &v, NULL), 1);
	assert_true(v == 55);
	assert_int_equal(_find(b, "flamewatch_gpu_process_memory_utilization_percent", "0", getpid(), &v, NULL), 1);
	assert_true(v == 11);
	assert_int_equal(_find(b, "flamewatch_gpu_process_memory_used_bytes", "0", getpid(), &v, NULL), 1);
	assert_true(v == 1073741824.0);
	assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "1", getpid(), &v, NULL), 1);
	assert_true(v == 7);
	for (uint32_t i = 0; i < b->nmetrics; i++) {
		const char *p = batch__series_label(b, b->metrics[i].series, "pid");

		assert_string_equal(batch__series_label(b, b->metrics[i].series, "uuid"),
				    strcmp(batch__series_label(b, b->metrics[i].series, "gpu"), "0") ?
				    "GPU-fa4e0000-0000-4000-8000-000000000001" :
				    "GPU-fa4e0000-0000-4000-8000-000000000000");
		if (p)
			assert_string_equal(batch__series_label(b, b->metrics[i].series, "comm"), _comm);
	}

	/* 0.35 s later: only the samples taken since, none twice. */
	{
		struct timespec d = { 0, 350000000 };
		uint32_t before = b->nmetrics;
		int64_t last = ts;
		int nu = 0;

		nanosleep(&d, NULL);
		rc = nvml__collect(n, b, _now());
		assert_true(rc > 0);
		for (uint32_t i = before; i < b->nmetrics; i++) {
			const struct batch_metric *m = &b->metrics[i];

			if (strcmp(profile__string(b->dict, m->name), "flamewatch_gpu_utilization_percent") ||
			    strcmp(batch__series_label(b, m->series, "gpu"), "0"))
				continue;
			assert_true(m->ts_ns > last);
			last = m->ts_ns;
			nu++;
		}
		assert_true(nu >= 3 && nu <= 4);
	}
	batch__free(b);
	nvml__close(n);
}

static void test_fallback_without_samples(void **state)
{
	struct nvml *n = nvml__open(FAKE_NOSAMPLES);
	struct batch *b = batch__new(1);
	int64_t t0 = _now(), ts = 0;

	assert_non_null(n);
	assert_true(nvml__collect(n, b, t0) > 0);
	_expect(b, "flamewatch_gpu_utilization_percent", "0", 61);
	_expect(b, "flamewatch_gpu_memory_utilization_percent", "0", 23);
	_find(b, "flamewatch_gpu_utilization_percent", "0", 0, NULL, &ts);
	assert_true(ts == t0);
	/* nvmlDeviceGetMemoryInfo (v1): used includes the reserved 512 MiB. */
	_expect(b, "flamewatch_gpu_memory_used_bytes", "0", 5368709120.0 + (512 << 20));
	batch__free(b);
	nvml__close(n);
}

static void test_no_library(void **state)
{
	errno = 0;
	assert_null(nvml__open("/nonexistent/libnvidia-ml.so.1"));
	assert_int_equal(errno, ENOENT);
	assert_int_equal(nvml__ngpus(NULL), 0);
	assert_int_equal(nvml__collect(NULL, NULL, 0), -EINVAL);
}

/* Target: < 1 ms of CPU per GPU per round (real NVML calls cost more than the fake's). */
static void test_round_cost(void **state)
{
	struct nvml *n = nvml__open(FAKE);
	struct batch *b = batch__new(1);
	struct nvml_stats st;
	double per_gpu_us;

	assert_non_null(n);
	for (int i = 0; i < 2000; i++) {
		if (i % 100 == 0)
			batch__reset(b);
		assert_true(nvml__collect(n, b, _now()) >= 0);
	}
	nvml__stats(n, &st);
	per_gpu_us = st.cpu_ns / 1e3 / st.rounds / nvml__ngpus(n);
	printf("nvml round cost (fake library): %.2f us CPU per GPU, %llu rounds, %.1f points per round\n",
	       per_gpu_us, (unsigned long long)st.rounds, (double)st.points / st.rounds);
	assert_true(per_gpu_us < 1000);
	batch__free(b);
	nvml__close(n);
}

static int _count(const struct batch *b, const char *name, const char *gpu)
{
	return _find(b, name, gpu, 0, NULL, NULL);
}

/* The thread: rounds at the interval, drained without waiting for a round. */
static void test_poller(void **state)
{
	struct gpu_poller *p;
	struct batch *b = batch__new(1);
	struct timespec d = { 0, 550000000 };
	struct nvml_stats st;
	int64_t t0, t1;
	int n, k;

	/* As slow as real PCIe queries: 4 x 20 ms of each 100 ms round. */
	setenv("FAKE_NVML_PCIE_SLEEP_MS", "20", 1);
	p = gpu_poller__start(FAKE, 100000000ULL);
	unsetenv("FAKE_NVML_PCIE_SLEEP_MS");
	assert_non_null(p);
	assert_int_equal(gpu_poller__ngpus(p), 2);
	nanosleep(&d, NULL);
	t0 = _now();
	n = gpu_poller__drain(p, b);
	t1 = _now();
	assert_true(n > 0);
	/* Never waits for a round in progress. */
	assert_true(t1 - t0 < 10000000LL);
	k = _count(b, "flamewatch_gpu_power_watts", "1");
	if (k < 4 || k > 7)
		fail_msg("%d rounds in 550 ms at 100 ms", k);
	for (uint32_t i = 0; i < b->nmetrics; i++)
		if (!strcmp(profile__string(b->dict, b->metrics[i].name), "flamewatch_gpu_power_watts") &&
		    !strcmp(batch__series_label(b, b->metrics[i].series, "gpu"), "0"))
			assert_true(b->metrics[i].value == 312.456);
	gpu_poller__stats(p, &st);
	assert_true(st.rounds >= (uint64_t)k);
	gpu_poller__free(p);
	batch__free(b);
	assert_null(gpu_poller__start("/nonexistent/libnvidia-ml.so.1", 100000000ULL));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_metric),
		cmocka_unit_test(test_fallback_without_samples),
		cmocka_unit_test(test_no_library),
		cmocka_unit_test(test_round_cost),
		cmocka_unit_test(test_poller),
	};

	return cmocka_run_group_tests(tests, _setup, _teardown);
}
