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
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "common/batch.h"
#include "common/profile.h"
#include "gpu/nvml.h"
#include "gpu/poller.h"
#include "testutil.h"

#define FAKE "build/fakes/libnvidia-ml.so.1"
#define FAKE_OLD "build/fakes/olddriver/libnvidia-ml.so.1"

static char _values[64];
static char _comm[32];

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
		   "gpu1.util 3\ngpu1.mem_util 1\ngpu1.power_mw 90001\n"
		   "proc 0 %d 55 11 1073741824\nproc 0 %d 20 3 4096\nproc 1 %d 7 2 268435456\n",
		(int)getpid(), (int)getppid(), (int)getpid());
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

/* The points of name on GPU gpu from index from on: some, each exactly want. */
static void _expect_exact(const struct batch *b, uint32_t from, const char *name, const char *gpu,
			 double want)
{
	int found = 0;

	for (uint32_t i = from; i < b->nmetrics; i++) {
		const struct batch_metric *m = &b->metrics[i];

		if (strcmp(profile__string(b->dict, m->name), name) ||
		    strcmp(batch__series_label(b, m->series, "gpu"), gpu))
			continue;
		found++;
		if (m->value != want)
			fail_msg("%s gpu %s: %.17g, want %.17g", name, gpu, m->value, want);
	}
	if (!found)
		fail_msg("%s gpu %s: no point", name, gpu);
}

/* Lines of the fake's call log from line skip on that name function fn (all: NULL). */
static int _calls(const char *log, int skip, const char *fn)
{
	char line[256];
	int n = 0, k = 0;
	FILE *f = fopen(log, "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		if (k++ < skip)
			continue;
		if (!fn || (!strncmp(line, fn, strlen(fn)) &&
			    (line[strlen(fn)] == ' ' || line[strlen(fn)] == '\n')))
			n++;
	}
	fclose(f);
	return n;
}

/* Opens lib with every NVML call logged to a new file; its path goes in log. */
static struct nvml *_open_logged(const char *lib, char log[64])
{
	int fd;
	struct nvml *n;

	snprintf(log, 64, "/tmp/fw-nvml-calls-XXXXXX");
	fd = mkstemp(log);
	assert_true(fd >= 0);
	close(fd);
	setenv("FAKE_NVML_CALLS", log, 1);
	n = nvml__open(lib);
	unsetenv("FAKE_NVML_CALLS");
	assert_non_null(n);
	return n;
}

static void test_every_metric(void **state)
{
	struct nvml *n = nvml__open(FAKE);
	struct batch *b = batch__new(1);
	int64_t t0 = now_ns(), ts;
	double v;
	int rc;

	assert_non_null(n);
	assert_int_equal(nvml__ngpus(n), 2);
	/* Rounds 100 ms apart: utilisation from every driver sample. */
	nvml__set_interval(n, 100000000ULL);
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
	/* PCIe rates need two reads of the counters: none in the first round. */
	assert_int_equal(_find(b, "flamewatch_gpu_pcie_tx_bytes_per_second", "0", 0, NULL, NULL), 0);
	_expect(b, "flamewatch_gpu_throttle_reasons", "0", 5);
	_expect(b, "flamewatch_gpu_energy_joules_total", "0", 987654.321);
	/* First round: the newest sample only, at the driver's time. */
	_expect(b, "flamewatch_gpu_utilization_percent", "0", 61);
	_expect(b, "flamewatch_gpu_utilization_percent", "1", 3);
	_expect(b, "flamewatch_gpu_memory_utilization_percent", "0", 23);
	/* (the driver's clock may pass a 100 ms mark between t0 and its answer) */
	_find(b, "flamewatch_gpu_utilization_percent", "0", 0, NULL, &ts);
	assert_true(ts <= now_ns() && ts > t0 - 1000000000LL && ts % 100000000LL == 0);

	/* Missing function and NOT_SUPPORTED: absent, not zero. */
	assert_int_equal(_find(b, "flamewatch_gpu_mig_mode", "0", 0, NULL, NULL), 0);
	assert_int_equal(_find(b, "flamewatch_gpu_temperature_slowdown_celsius", "0", 0, NULL, NULL), 0);
	assert_false(nvml__available(n, 0, NVML_M_MIG_MODE));
	assert_false(nvml__available(n, 1, NVML_M_TEMP_SLOWDOWN));
	assert_true(nvml__available(n, 1, NVML_M_POWER));

	/* Per process: by pid, with comm; memory once although in both lists. */
	assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "0", getpid(), &v, &ts), 1);
	assert_true(v == 55);
	/* At the driver's sample time (the fake's 500 ms grid), not the round's. */
	assert_true(ts <= t0 && ts > t0 - 1000000000LL && ts % 500000000LL == 0);
	assert_int_equal(_find(b, "flamewatch_gpu_process_memory_utilization_percent", "0", getpid(), &v, NULL), 1);
	assert_true(v == 11);
	assert_int_equal(_find(b, "flamewatch_gpu_process_memory_used_bytes", "0", getpid(), &v, NULL), 1);
	assert_true(v == 1073741824.0);
	assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "0", getppid(), &v, NULL), 1);
	assert_true(v == 20);
	/*
	 * GPU 1 has one process: its utilisation is the GPU's (3 %, memory
	 * 1 %, at the GPU sample's time), not the driver's per-process 7 and 2.
	 */
	assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "1", getpid(), &v, &ts), 1);
	assert_true(v == 3);
	{
		int64_t gts = 0;

		_find(b, "flamewatch_gpu_utilization_percent", "1", 0, NULL, &gts);
		assert_true(ts == gts);
	}
	assert_int_equal(_find(b, "flamewatch_gpu_process_memory_utilization_percent", "1", getpid(), &v, NULL), 1);
	assert_true(v == 1);
	for (uint32_t i = 0; i < b->nmetrics; i++) {
		const char *p = batch__series_label(b, b->metrics[i].series, "pid");

		if (p && atoi(p) != getpid())
			p = NULL;	/* the parent: another comm */

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
		/* At 100 ms, samples are asked once a second: the tenth round. */
		for (int k = 0; k < 10; k++) {
			rc = nvml__collect(n, b, now_ns());
			assert_true(rc > 0);
			if (k < 9)
				assert_int_equal(_find(b, "flamewatch_gpu_utilization_percent", "0", 0,
						       NULL, NULL), 1);
		}
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
		/* The counters' rate over the 0.35 s between the rounds. */
		_expect_exact(b, before, "flamewatch_gpu_pcie_tx_bytes_per_second", "0", 1500 * 1024.0);
		_expect_exact(b, before, "flamewatch_gpu_pcie_rx_bytes_per_second", "0", 2500 * 1024.0);
		/* Values that hardly change: from the first round's answer, every round. */
		_expect_exact(b, before, "flamewatch_gpu_sm_clock_max_hertz", "0", 1980e6);
		_expect_exact(b, before, "flamewatch_gpu_power_limit_watts", "0", 700);
	}
	batch__free(b);
	nvml__close(n);
}

static void test_fallback_without_samples(void **state)
{
	char log[64];
	struct batch *b = batch__new(1);
	int64_t t0 = now_ns(), ts = 0;
	struct nvml *n = _open_logged(FAKE_OLD, log);
	nvml__set_interval(n, 100000000ULL);
	assert_true(nvml__collect(n, b, t0) > 0);
	_expect(b, "flamewatch_gpu_utilization_percent", "0", 61);
	_expect(b, "flamewatch_gpu_memory_utilization_percent", "0", 23);
	_find(b, "flamewatch_gpu_utilization_percent", "0", 0, NULL, &ts);
	assert_true(ts == t0);
	/* nvmlDeviceGetMemoryInfo (v1): used includes the reserved 512 MiB. */
	_expect(b, "flamewatch_gpu_memory_used_bytes", "0", 5368709120.0 + (512 << 20));
	/* No field values: PCIe from nvmlDeviceGetPcieThroughput (KB/s), energy from its own query. */
	_expect(b, "flamewatch_gpu_pcie_tx_bytes_per_second", "0", 1500 * 1024.0);
	_expect(b, "flamewatch_gpu_pcie_rx_bytes_per_second", "0", 2500 * 1024.0);
	_expect(b, "flamewatch_gpu_energy_joules_total", "0", 987654.321);
	assert_int_equal(_calls(log, 0, "nvmlDeviceGetTotalEnergyConsumption"), 2);

	/*
	 * The energy counter (2.7 ms of CPU a read on an H200) is read again
	 * only 60 s on, its last reading exported every round meanwhile.
	 */
	for (int i = 1; i <= 9; i++)
		assert_true(nvml__collect(n, b, t0 + i * 1000000000LL) > 0);
	assert_true(nvml__collect(n, b, t0 + 59000000000LL) > 0);
	assert_int_equal(_calls(log, 0, "nvmlDeviceGetTotalEnergyConsumption"), 2);
	assert_int_equal(_find(b, "flamewatch_gpu_energy_joules_total", "0", 0, NULL, NULL), 11);
	assert_true(nvml__collect(n, b, t0 + 60000000000LL) > 0);
	assert_int_equal(_calls(log, 0, "nvmlDeviceGetTotalEnergyConsumption"), 4);
	batch__free(b);
	nvml__close(n);
	unlink(log);
}

static void test_no_library(void **state)
{
	errno = 0;
	assert_null(nvml__open("/nonexistent/libnvidia-ml.so.1"));
	assert_int_equal(errno, ENOENT);
	assert_int_equal(nvml__ngpus(NULL), 0);
	assert_int_equal(nvml__collect(NULL, NULL, 0), -EINVAL);
}

/*
 * What a round asks NVML at the default 1 s interval: every cheap query
 * once, none of the expensive ones (GetSamples, GetMaxClockInfo,
 * GetPcieThroughput, GetTotalEnergyConsumption); the PCIe and energy
 * counters in one nvmlDeviceGetFieldValues in the first two rounds and
 * then every 5 s, per-process utilisation every round where two processes
 * share the GPU (GPU 0) and never where one is alone (GPU 1: the GPU's
 * utilisation is its); the values that hardly change again only a minute
 * later.
 */
static void test_calls_per_round(void **state)
{
	char log[64];
	struct batch *b = batch__new(1);
	struct nvml_stats st;
	struct nvml *n;
	int64_t t0 = now_ns();
	int at_open, after1, after5;

	n = _open_logged(FAKE, log);
	at_open = _calls(log, 0, NULL);
	assert_true(nvml__collect(n, b, t0) > 0);
	after1 = _calls(log, 0, NULL);
	assert_int_equal(_calls(log, at_open, "nvmlDeviceGetMaxClockInfo"), 4);
	assert_int_equal(_calls(log, at_open, "nvmlDeviceGetEnforcedPowerLimit"), 2);
	for (int i = 1; i <= 4; i++)
		assert_true(nvml__collect(n, b, t0 + i * 1000000000LL) > 0);
	after5 = _calls(log, 0, NULL);

	/* Rounds 2-5, two GPUs: 9 cheap queries per GPU per round, the
	 * per-process utilisation of GPU 0, and the second read of the PCIe
	 * counters in round 2. */
	assert_int_equal(after5 - after1, 2 * (4 * 9 + 1) + 4);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetFieldValues"), 2);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetUtilizationRates"), 8);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetProcessUtilization"), 4);
	assert_int_equal(_calls(log, 0, "nvmlDeviceGetProcessUtilization 1"), 0);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetComputeRunningProcesses_v3"), 8);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetClockInfo"), 16);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetSamples"), 0);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetMaxClockInfo"), 0);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetEnforcedPowerLimit"), 0);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetTemperatureThreshold"), 0);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetPcieThroughput"), 0);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetTotalEnergyConsumption"), 0);
	/* Still exported every round, from the first answer. */
	assert_int_equal(_find(b, "flamewatch_gpu_sm_clock_max_hertz", "1", 0, NULL, NULL), 5);
	nvml__stats(n, &st);
	assert_int_equal(st.calls, (uint64_t)(after5 - at_open));
	assert_int_equal(st.sole_process_reads, 5);

	/* A minute on: asked again (a power limit can be changed). */
	assert_true(nvml__collect(n, b, t0 + 61000000000LL) > 0);
	assert_int_equal(_calls(log, after5, "nvmlDeviceGetMaxClockInfo"), 4);
	assert_int_equal(_calls(log, after5, "nvmlDeviceGetEnforcedPowerLimit"), 2);
	batch__free(b);
	nvml__close(n);
	unlink(log);
}

/*
 * The costly queries at their default cadence over 21 one-second rounds:
 * the PCIe counters in rounds 0 and 1 (a rate at once) and then every 5 s,
 * per-process utilisation every second (GPU 0, shared by two processes), the
 * energy field once (it is due again after 60 s); the PCIe rates and
 * energy are exported in every round all the same.
 */
static void test_costly_cadence(void **state)
{
	char log[64];
	struct batch *b = batch__new(1);
	int before, fv_rounds = 0, pu_rounds = 0, energy = 0;
	int64_t t0 = now_ns();
	struct nvml *n = _open_logged(FAKE, log);
	for (int i = 0; i <= 20; i++) {
		int fv, pu;

		before = _calls(log, 0, NULL);
		batch__reset(b);
		if (i == 1) {	/* the fake's counters move every 125 ms of real time */
			struct timespec d = { 0, 130000000 };

			nanosleep(&d, NULL);
		}
		assert_true(nvml__collect(n, b, t0 + i * 1000000000LL) > 0);
		fv = _calls(log, before, "nvmlDeviceGetFieldValues");
		pu = _calls(log, before, "nvmlDeviceGetProcessUtilization");
		assert_true(fv == 0 || fv == 2);	/* one call per GPU, or none */
		assert_true(pu == 0 || (pu == 1 && _calls(log, before,
					 "nvmlDeviceGetProcessUtilization 0") == 1));
		if (fv)
			fv_rounds |= 1 << i;
		if (pu)
			pu_rounds |= 1 << i;
		if (i >= 1) {
			assert_int_equal(_find(b, "flamewatch_gpu_pcie_tx_bytes_per_second", "0", 0,
					       NULL, NULL), 1);
			assert_int_equal(_find(b, "flamewatch_gpu_pcie_rx_bytes_per_second", "1", 0,
					       NULL, NULL), 1);
		}
		energy += _find(b, "flamewatch_gpu_energy_joules_total", "0", 0, NULL, NULL);
	}
	assert_int_equal(fv_rounds, 1 << 0 | 1 << 1 | 1 << 6 | 1 << 11 | 1 << 16);
	assert_int_equal(pu_rounds, (1 << 21) - 1);
	assert_int_equal(energy, 21);
	batch__free(b);
	nvml__close(n);
	unlink(log);
}

/*
 * 32-bit PCIe counters (the H200's), which wrap: read sooner than the 5 s
 * of 64-bit ones, as soon as at four times the last rate they could wrap
 * twice. GPU 0 moves ~2.5 MiB/s: every 5 s, as 64-bit counters. GPU 1
 * sends 512 MB/s: every 2 s (2^32 / (4 x 512 MB/s) = 2.1 s). Its counter
 * starts 10 MB short of 2^32 and wraps before the second read: the rate
 * is right all the same.
 */
static void test_pcie32_read_as_often_as_safe(void **state)
{
	char vals[64] = "/tmp/fw-nvml-p32-XXXXXX", log[64];
	struct timespec d = { 0, 130000000 };
	struct batch *b = batch__new(1);
	int fd = mkstemp(vals), reads[2] = { 0, 0 };
	int64_t t0 = now_ns();
	struct nvml *n;

	assert_true(fd >= 0);
	dprintf(fd, "gpu0.pcie_tx_kb 1500\ngpu0.pcie_rx_kb 2500\n"
		    "gpu1.pcie_tx_kb 500000\ngpu1.pcie_rx_kb 7\n");
	close(fd);
	setenv("FAKE_NVML_VALUES", vals, 1);
	setenv("FAKE_NVML_PCIE32", "4284967296", 1);
	n = _open_logged(FAKE, log);
	setenv("FAKE_NVML_VALUES", _values, 1);
	unsetenv("FAKE_NVML_PCIE32");
	for (int i = 0; i <= 12; i++) {
		int before = _calls(log, 0, NULL);

		batch__reset(b);
		if (i == 1)	/* the fake's counters move every 125 ms of real time */
			nanosleep(&d, NULL);
		assert_true(nvml__collect(n, b, t0 + i * 1000000000LL) > 0);
		for (int g = 0; g < 2; g++)
			if (_calls(log, before, g ? "nvmlDeviceGetFieldValues 1" :
					   "nvmlDeviceGetFieldValues 0"))
				reads[g] |= 1 << i;
		if (i >= 1) {
			_expect(b, "flamewatch_gpu_pcie_tx_bytes_per_second", "1", 500000 * 1024.0);
			_expect(b, "flamewatch_gpu_pcie_rx_bytes_per_second", "0", 2500 * 1024.0);
		}
	}
	assert_int_equal(reads[0], 1 << 0 | 1 << 1 | 1 << 6 | 1 << 11);
	assert_int_equal(reads[1], 1 << 0 | 1 << 1 | 1 << 3 | 1 << 5 | 1 << 7 | 1 << 9 | 1 << 11);
	batch__free(b);
	nvml__close(n);
	unlink(vals);
	unlink(log);
}

/*
 * nvmlDeviceGetProcessUtilization costs over a millisecond of CPU: a GPU
 * whose running-process lists were empty twice in a row is not asked; nor
 * is one whose lists name a single process, which gets the GPU's
 * utilisation; it is asked in the round a second process comes, and
 * always when told so.
 */
static void test_idle_gpu_skips_process_utilization(void **state)
{
	char vals[64] = "/tmp/fw-nvml-idle-XXXXXX", log[64] = "/tmp/fw-nvml-calls-XXXXXX";
	struct batch *b = batch__new(1);
	int fd = mkstemp(vals), lfd = mkstemp(log), pu[9];
	double v = -1;
	int64_t t0 = now_ns();
	struct nvml *n;
	FILE *f;

	assert_true(fd >= 0 && lfd >= 0);
	assert_true(write(fd, "gpu1.util 77\n", 13) == 13);
	close(fd);
	close(lfd);
	setenv("FAKE_NVML_VALUES", vals, 1);
	setenv("FAKE_NVML_RELOAD", "1", 1);
	setenv("FAKE_NVML_CALLS", log, 1);
	n = nvml__open(FAKE);
	setenv("FAKE_NVML_VALUES", _values, 1);
	unsetenv("FAKE_NVML_RELOAD");
	unsetenv("FAKE_NVML_CALLS");
	assert_non_null(n);
	for (int i = 0; i < 9; i++) {
		int before = _calls(log, 0, NULL);

		if (i == 4) {	/* a process comes to GPU 1 */
			f = fopen(vals, "a");
			fprintf(f, "proc 1 %d 40 4 1048576\n", (int)getpid());
			fclose(f);
		}
		if (i == 6) {	/* and a second one */
			f = fopen(vals, "a");
			fprintf(f, "proc 1 %d 30 3 1048576\n", (int)getppid());
			fclose(f);
		}
		if (i == 8)	/* the second has left; the driver is asked all the same */
			nvml__set_process_query_always(n, 1);
		if (i != 5)
			batch__reset(b);
		assert_true(nvml__collect(n, b, t0 + i * 1000000000LL) > 0);
		pu[i] = _calls(log, before, "nvmlDeviceGetProcessUtilization");
		if (i == 5) {
			/* Rounds 4 and 5: the GPU's utilisation for the process, each round. */
			assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "1",
					       getpid(), &v, NULL), 2);
			assert_true(v == 77);
		}
		if (i == 6) {	/* the driver's own figures, per pid */
			assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "1",
					       getpid(), &v, NULL), 1);
			assert_true(v == 40);
			assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "1",
					       getppid(), &v, NULL), 1);
			assert_true(v == 30);
		}
		if (i == 7) {
			f = fopen(vals, "w");
			fprintf(f, "gpu1.util 77\nproc 1 %d 40 4 1048576\n", (int)getpid());
			fclose(f);
		}
	}
	assert_int_equal(pu[0], 2);	/* both GPUs: one empty read is not enough */
	assert_int_equal(pu[1], 0);
	assert_int_equal(pu[2], 0);
	assert_int_equal(pu[3], 0);
	assert_int_equal(pu[4], 0);	/* one process on GPU 1: the GPU's figure */
	assert_int_equal(pu[5], 0);
	assert_int_equal(pu[6], 1);	/* two: the driver's, per pid */
	assert_int_equal(pu[7], 1);
	assert_int_equal(pu[8], 1);	/* one, but always asked */
	batch__free(b);
	nvml__close(n);
	unlink(vals);
	unlink(log);
}

/*
 * Per-process rows as the H200's driver gives them: a process that starts
 * after the collector, one utilisation sample per driver period at the
 * driver's time, NOT_FOUND between samples. Each sample is exported once,
 * under the process's own pid and comm, and the rows stop when it leaves.
 */
static void test_process_joins_later(void **state)
{
	char vals[64] = "/tmp/fw-nvml-procs-XXXXXX";
	struct timespec d = { 0, 150000000 };
	struct batch *b = batch__new(1);
	int fd = mkstemp(vals), nu = 0, nm = 0;
	struct nvml *n;
	int64_t last = 0;
	pid_t child;
	FILE *f;

	assert_true(fd >= 0);
	assert_true(write(fd, "gpu0.util 5\n", 12) == 12);
	close(fd);
	child = fork();
	assert_true(child >= 0);
	if (!child) {
		alarm(30);	/* gone even if the test fails before it kills us */
		pause();
		_exit(0);
	}
	setenv("FAKE_NVML_VALUES", vals, 1);
	setenv("FAKE_NVML_RELOAD", "1", 1);
	setenv("FAKE_NVML_PROC_PERIOD_MS", "200", 1);
	n = nvml__open(FAKE);
	setenv("FAKE_NVML_VALUES", _values, 1);
	unsetenv("FAKE_NVML_RELOAD");
	unsetenv("FAKE_NVML_PROC_PERIOD_MS");
	assert_non_null(n);
	nvml__set_costly_intervals(n, 0, 0);	/* every round, to see each sample */
	nvml__set_process_query_always(n, 1);	/* the driver's samples, though it is alone */

	for (int i = 0; i < 2; i++) {
		assert_true(nvml__collect(n, b, now_ns()) > 0);
		nanosleep(&d, NULL);
	}
	assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "0", child, NULL, NULL), 0);

	f = fopen(vals, "a");
	fprintf(f, "proc 0 %d 40 4 1048576\n", (int)child);
	fclose(f);
	batch__reset(b);
	for (int i = 0; i < 10; i++) {
		assert_true(nvml__collect(n, b, now_ns()) > 0);
		nanosleep(&d, NULL);
	}
	for (uint32_t i = 0; i < b->nmetrics; i++) {
		const struct batch_metric *m = &b->metrics[i];
		const char *name = profile__string(b->dict, m->name);
		const char *p = batch__series_label(b, m->series, "pid");
		char want[16];

		snprintf(want, sizeof(want), "%d", (int)child);
		if (!p)
			continue;
		assert_string_equal(p, want);
		assert_string_equal(batch__series_label(b, m->series, "comm"), _comm);
		if (!strcmp(name, "flamewatch_gpu_process_utilization_percent")) {
			assert_true(m->value == 40);
			assert_true(m->ts_ns > last);		/* never the same sample twice */
			assert_true(m->ts_ns % 200000000LL == 0);
			last = m->ts_ns;
			nu++;
		} else if (!strcmp(name, "flamewatch_gpu_process_memory_used_bytes")) {
			assert_true(m->value == 1048576);
			nm++;
		}
	}
	/* 1.5 s of rounds: one sample per 200 ms (under load, a few more or fewer). */
	if (nu < 5 || nu > 10)
		fail_msg("%d utilisation samples of the process in 1.5 s at 200 ms", nu);
	assert_int_equal(nm, 10);

	f = fopen(vals, "w");
	fclose(f);
	batch__reset(b);
	nanosleep(&d, NULL);
	assert_true(nvml__collect(n, b, now_ns()) > 0);
	assert_int_equal(_find(b, "flamewatch_gpu_process_memory_used_bytes", "0", child, NULL, NULL), 0);
	assert_int_equal(_find(b, "flamewatch_gpu_process_utilization_percent", "0", child, NULL, NULL), 0);

	kill(child, SIGKILL);
	waitpid(child, NULL, 0);
	batch__free(b);
	nvml__close(n);
	unlink(vals);
}

/*
 * A driver with nvmlDeviceGetFieldValues but without the PCIe counter
 * fields: PCIe from nvmlDeviceGetPcieThroughput from the first round on
 * (said once), energy still from its field, the PCIe fields not asked again.
 */
static void test_field_fallback(void **state)
{
	char log[64];
	struct batch *b = batch__new(1);
	int after1;
	int64_t t0 = now_ns();
	struct nvml *n;

	setenv("FAKE_NVML_NO_FIELDS", "197,198", 1);
	n = _open_logged(FAKE, log);
	unsetenv("FAKE_NVML_NO_FIELDS");
	assert_non_null(n);
	nvml__set_costly_intervals(n, 0, 0);
	assert_true(nvml__collect(n, b, t0) > 0);
	_expect(b, "flamewatch_gpu_pcie_tx_bytes_per_second", "0", 1500 * 1024.0);
	_expect(b, "flamewatch_gpu_pcie_rx_bytes_per_second", "1", 201 * 1024.0);
	_expect(b, "flamewatch_gpu_energy_joules_total", "0", 987654.321);
	after1 = _calls(log, 0, NULL);
	batch__reset(b);
	assert_true(nvml__collect(n, b, t0 + 1000000000LL) > 0);
	_expect(b, "flamewatch_gpu_pcie_tx_bytes_per_second", "0", 1500 * 1024.0);
	_expect(b, "flamewatch_gpu_energy_joules_total", "1", 123456.79);
	/* Per GPU two throughput queries; no field is due (energy: every 60 s). */
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetFieldValues"), 0);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetPcieThroughput"), 4);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetTotalEnergyConsumption"), 0);
	/* 60 s on: the energy field, alone in the call. */
	assert_true(nvml__collect(n, b, t0 + 60000000000LL) > 0);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetFieldValues"), 2);
	assert_int_equal(_calls(log, after1, "nvmlDeviceGetTotalEnergyConsumption"), 0);
	assert_true(nvml__available(n, 0, NVML_M_PCIE_TX));
	batch__free(b);
	nvml__close(n);
	unlink(log);
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
		assert_true(nvml__collect(n, b, now_ns()) >= 0);
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
	p = gpu_poller__start(FAKE, 100000000ULL, 0, 0, 0);
	unsetenv("FAKE_NVML_PCIE_SLEEP_MS");
	assert_non_null(p);
	assert_int_equal(gpu_poller__ngpus(p), 2);
	nanosleep(&d, NULL);
	t0 = now_ns();
	n = gpu_poller__drain(p, b);
	t1 = now_ns();
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
	assert_null(gpu_poller__start("/nonexistent/libnvidia-ml.so.1", 100000000ULL, 0, 0, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_metric),
		cmocka_unit_test(test_fallback_without_samples),
		cmocka_unit_test(test_no_library),
		cmocka_unit_test(test_field_fallback),
		cmocka_unit_test(test_calls_per_round),
		cmocka_unit_test(test_costly_cadence),
		cmocka_unit_test(test_pcie32_read_as_often_as_safe),
		cmocka_unit_test(test_idle_gpu_skips_process_utilization),
		cmocka_unit_test(test_process_joins_later),
		cmocka_unit_test(test_round_cost),
		cmocka_unit_test(test_poller),
	};

	return cmocka_run_group_tests(tests, _setup, _teardown);
}
