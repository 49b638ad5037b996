// SPDX-License-Identifier: Apache-2.0
/*
 * A stand-in for libnvidia-ml.so.1 on machines without a GPU, loaded by
 * the tests through LD_LIBRARY_PATH. Two GPUs whose values come from the
 * file named by FAKE_NVML_VALUES (read at nvmlInit), so that a test knows
 * every number the collector should report:
 *
 *	gpu0.util 37          gpu0.mem_util 12     gpu0.mem_used 1000000000
 *	gpu0.mem_total 2000   gpu0.sm_clock 1500   (MHz)  gpu0.mem_clock 2600
 *	gpu0.sm_clock_max 1980 gpu0.mem_clock_max 2619 gpu0.power_mw 250000
 *	gpu0.power_limit_mw 700000 gpu0.temp 55 gpu0.pcie_tx_kb 100
 *	gpu0.pcie_rx_kb 200   gpu0.reasons 4       gpu0.energy_mj 123456789
 *	proc GPU PID SM_UTIL MEM_UTIL USED_BYTES
 *
 * Unset keys keep the defaults below. As real drivers do sometimes, one
 * function is missing (nvmlDeviceGetMigMode) and one answers
 * NOT_SUPPORTED (nvmlDeviceGetTemperatureThreshold).
 *
 * It answers as the H200's driver did when measured:
 *  - nvmlDeviceGetFieldValues gives the PCIe byte counters (fields 197,
 *    198: cumulative, growing at pcie_{tx,rx}_kb KiB/s since nvmlInit,
 *    updated every 125 ms, with the µs time of the update) and the energy
 *    counter (83, mJ);
 *  - nvmlDeviceGetProcessUtilization has one sample per process, taken by
 *    the "driver" every FAKE_NVML_PROC_PERIOD_MS (default 500) at a
 *    Unix-µs time on that grid: only samples newer than lastSeenTimeStamp,
 *    NOT_FOUND when there are none; with no buffer, INSUFFICIENT_SIZE and
 *    the count;
 *  - nvmlDeviceGetSamples keeps one sample every 100 ms for the last two
 *    seconds (the agent asks once a second; a loaded machine may make it
 *    a little late, and the driver keeps more than that), returns those
 *    newer than lastSeenTimeStamp, NOT_FOUND when none.
 * Built with -DFAKE_OLD_DRIVER it lacks nvmlDeviceGetSamples,
 * nvmlDeviceGetMemoryInfo_v2 and nvmlDeviceGetFieldValues, so the
 * collector falls back to the older calls.
 *
 * FAKE_NVML_PCIE_SLEEP_MS=20 makes nvmlDeviceGetPcieThroughput take as long
 * as the real one, which measures over 20 ms.
 *
 * FAKE_NVML_NO_FIELDS="197,198" makes those field ids NOT_SUPPORTED, as
 * on drivers older than the PCIe counters.
 *
 * FAKE_NVML_PCIE32=OFFSET gives the PCIe counters as 32-bit values, as the
 * H200's driver does, starting at OFFSET bytes (so that a test sees them wrap).
 *
 * FAKE_NVML_CALLS names a file that gets one line per call: "name gpu".
 *
 * FAKE_NVML_RELOAD=1: the process lines of FAKE_NVML_VALUES are read again
 * whenever the file changes, so that a test can start and stop GPU
 * processes while the collector runs.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "gpu/nvml_api.h"

#define NGPU 2
#define NPROC 16

#define EXPORT __attribute__((visibility("default")))

struct fake_gpu {
	unsigned long long v[16];
};

enum { UTIL, MEM_UTIL, MEM_USED, MEM_TOTAL, SM, MEMCLK, SM_MAX, MEM_MAX, POWER, LIMIT, TEMP,
       TX, RX, REASONS, ENERGY, NFIELDS };
static const char *const _fields[NFIELDS] = {
	"util", "mem_util", "mem_used", "mem_total", "sm_clock", "mem_clock", "sm_clock_max",
	"mem_clock_max", "power_mw", "power_limit_mw", "temp", "pcie_tx_kb", "pcie_rx_kb",
	"reasons", "energy_mj",
};

static struct fake_gpu _gpus[NGPU];
static struct { unsigned int gpu, pid, sm, mem; unsigned long long used; } _procs[NPROC];
static int _nprocs, _inited, _pcie_sleep_ms, _reload;
static unsigned long long _init_us, _proc_period_us;
static struct timespec _mtime;
static char _path[4096];		/* FAKE_NVML_VALUES at nvmlInit */
static char _no_fields[256];		/* ",197,198," from FAKE_NVML_NO_FIELDS */
static int _pcie32;			/* FAKE_NVML_PCIE32 set */
static unsigned long long _pcie32_offset;
static FILE *_calls;

static unsigned long long _now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (unsigned long long)ts.tv_sec * 1000000ULL + ts.tv_nsec / 1000;
}

static void _defaults(void)
{
	for (int i = 0; i < NGPU; i++) {
		unsigned long long *v = _gpus[i].v;

		v[UTIL] = 37 + 40 * i;
		v[MEM_UTIL] = 12 + 20 * i;
		v[MEM_USED] = 1000000000ULL * (i + 1);
		v[MEM_TOTAL] = 150754820096ULL;
		v[SM] = 1500 + i * 10;
		v[MEMCLK] = 2619;
		v[SM_MAX] = 1980;
		v[MEM_MAX] = 2619;
		v[POWER] = 250123 + i * 1000;
		v[LIMIT] = 700000;
		v[TEMP] = 55 + i;
		v[TX] = 100 + i;
		v[RX] = 200 + i;
		v[REASONS] = 4;
		v[ENERGY] = 123456789ULL + i;
	}
}

/* Reads the values file: everything (all), or only its process lines. */
static void _read_values(int all)
{
	char line[256], key[64];
	struct stat st;
	FILE *f;

	if (!_path[0] || !(f = fopen(_path, "r")))
		return;
	if (!fstat(fileno(f), &st))
		_mtime = st.st_mtim;
	_nprocs = 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned int g, pid, sm, mem;
		unsigned long long val;
		int idx;

		if (sscanf(line, "proc %u %u %u %u %llu", &g, &pid, &sm, &mem, &val) == 5) {
			if (_nprocs < NPROC && g < NGPU)
				_procs[_nprocs++] = (typeof(_procs[0])){ g, pid, sm, mem, val };
			continue;
		}
		if (!all || sscanf(line, "gpu%u.%63s %llu", &g, key, &val) != 3 || g >= NGPU)
			continue;
		for (idx = 0; idx < NFIELDS; idx++)
			if (!strcmp(key, _fields[idx]))
				_gpus[g].v[idx] = val;
	}
	fclose(f);
}

static void _load(void)
{
	const char *e;

	_defaults();
	_nprocs = 0;
	_init_us = _now_us();
	e = getenv("FAKE_NVML_PCIE_SLEEP_MS");
	_pcie_sleep_ms = e ? atoi(e) : 0;
	e = getenv("FAKE_NVML_PROC_PERIOD_MS");
	_proc_period_us = (e && atoi(e) > 0 ? (unsigned long long)atoi(e) : 500ULL) * 1000;
	_reload = getenv("FAKE_NVML_RELOAD") != NULL;
	if (getenv("FAKE_NVML_CALLS"))
		_calls = fopen(getenv("FAKE_NVML_CALLS"), "w");
	e = getenv("FAKE_NVML_VALUES");
	snprintf(_path, sizeof(_path), "%s", e ? e : "");
	e = getenv("FAKE_NVML_PCIE32");
	_pcie32 = e != NULL;
	_pcie32_offset = e ? strtoull(e, NULL, 10) : 0;
	e = getenv("FAKE_NVML_NO_FIELDS");
	snprintf(_no_fields, sizeof(_no_fields), ",%s,", e ? e : "");
	_read_values(1);
}

/* The process lines again if the file changed since it was read. */
static void _maybe_reload(void)
{
	struct stat st;

	if (!_reload || !_path[0] || stat(_path, &st))
		return;
	if (st.st_mtim.tv_sec != _mtime.tv_sec || st.st_mtim.tv_nsec != _mtime.tv_nsec)
		_read_values(0);
}

static int _gpu(nvmlDevice_t d, const char *fn)
{
	int i = (int)((struct fake_gpu *)d - _gpus);

	if (!_inited || i < 0 || i >= NGPU)
		return -1;
	if (_calls) {
		fprintf(_calls, "%s %d\n", fn, i);
		fflush(_calls);
	}
	return i;
}

#define GPU(d) int g = _gpu(d, __func__); if (g < 0) return NVML_ERROR_INVALID_ARGUMENT

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
	_load();
	_inited = 1;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
	_inited = 0;
	if (_calls)
		fclose(_calls);
	_calls = NULL;
	return NVML_SUCCESS;
}

EXPORT const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS: return "Success";
	case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
	case NVML_ERROR_NOT_FOUND: return "Not Found";
	case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
	default: return "Unknown Error";
	}
}

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *n)
{
	if (!_inited)
		return NVML_ERROR_UNINITIALIZED;
	*n = NGPU;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int i, nvmlDevice_t *d)
{
	if (!_inited)
		return NVML_ERROR_UNINITIALIZED;
	if (i >= NGPU)
		return NVML_ERROR_INVALID_ARGUMENT;
	*d = (nvmlDevice_t)&_gpus[i];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t d, char *buf, unsigned int len)
{
	GPU(d);
	snprintf(buf, len, "GPU-fa4e0000-0000-4000-8000-00000000000%d", g);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t d, char *buf, unsigned int len)
{
	GPU(d);
	snprintf(buf, len, "Fake H200 %d", g);
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t d, nvmlUtilization_t *u)
{
	GPU(d);
	u->gpu = (unsigned int)_gpus[g].v[UTIL];
	u->memory = (unsigned int)_gpus[g].v[MEM_UTIL];
	return NVML_SUCCESS;
}

#ifndef FAKE_OLD_DRIVER
/* One sample every 100 ms over the last second, like a driver's ring. */
EXPORT nvmlReturn_t nvmlDeviceGetSamples(nvmlDevice_t d, nvmlSamplingType_t type,
					 unsigned long long last, nvmlValueType_t *vt,
					 unsigned int *count, nvmlSample_t *samples)
{
	unsigned long long now = _now_us(), t = now - now % 100000 - 1900000;
	unsigned int n = 0, cap;
	GPU(d);

	if (type != NVML_GPU_UTILIZATION_SAMPLES && type != NVML_MEMORY_UTILIZATION_SAMPLES)
		return NVML_ERROR_NOT_SUPPORTED;
	*vt = NVML_VALUE_TYPE_UNSIGNED_INT;
	if (!samples) {
		*count = 20;
		return NVML_SUCCESS;
	}
	cap = *count;
	for (; t <= now && n < cap; t += 100000) {
		if (t <= last)
			continue;
		samples[n].timeStamp = t;
		samples[n].sampleValue.uiVal =
			(unsigned int)_gpus[g].v[type == NVML_GPU_UTILIZATION_SAMPLES ? UTIL : MEM_UTIL];
		n++;
	}
	*count = n;
	return n ? NVML_SUCCESS : NVML_ERROR_NOT_FOUND;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t d, nvmlMemory_t *m)
{
	GPU(d);
	m->total = _gpus[g].v[MEM_TOTAL];
	m->used = _gpus[g].v[MEM_USED] + (512ULL << 20);
	m->free = m->total - m->used;
	return NVML_SUCCESS;
}

#ifndef FAKE_OLD_DRIVER
/* v2: 512 MiB of the total reserved by the driver, not counted as used. */
EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t d, nvmlMemory_v2_t *m)
{
	GPU(d);
	if (m->version != nvmlMemory_v2)
		return NVML_ERROR_INVALID_ARGUMENT;
	m->total = _gpus[g].v[MEM_TOTAL];
	m->reserved = 512ULL << 20;
	m->used = _gpus[g].v[MEM_USED];
	m->free = m->total - m->used - m->reserved;
	return NVML_SUCCESS;
}
#endif

/* v1: used includes what the driver reserved. */
EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t d, nvmlClockType_t t, unsigned int *v)
{
	GPU(d);
	if (t != NVML_CLOCK_SM && t != NVML_CLOCK_MEM && t != NVML_CLOCK_GRAPHICS)
		return NVML_ERROR_INVALID_ARGUMENT;
	*v = (unsigned int)_gpus[g].v[t == NVML_CLOCK_MEM ? MEMCLK : SM];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t d, nvmlClockType_t t, unsigned int *v)
{
	GPU(d);
	*v = (unsigned int)_gpus[g].v[t == NVML_CLOCK_MEM ? MEM_MAX : SM_MAX];
	return NVML_SUCCESS;
}

#ifndef FAKE_OLD_DRIVER
/*
 * The PCIe byte counters grow at the scripted KiB/s from nvmlInit on; the
 * energy counter is the scripted mJ. Unknown field ids: NOT_SUPPORTED in
 * that entry, as the driver answers.
 */
EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t d, int count, nvmlFieldValue_t *v)
{
	unsigned long long now = _now_us();
	GPU(d);

	if (count < 0 || (count && !v))
		return NVML_ERROR_INVALID_ARGUMENT;
	for (int i = 0; i < count; i++) {
		nvmlFieldValue_t *f = &v[i];
		unsigned long long kib;
		char id[16];

		f->timestamp = (long long)now;
		f->latencyUsec = 0;
		f->nvmlReturn = NVML_SUCCESS;
		f->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
		snprintf(id, sizeof(id), ",%u,", f->fieldId);
		if (strstr(_no_fields, id)) {
			f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
			continue;
		}
		switch (f->fieldId) {
		case NVML_FI_DEV_PCIE_COUNT_TX_BYTES:
		case NVML_FI_DEV_PCIE_COUNT_RX_BYTES:
			/* Updated every 125 ms: a whole number of bytes at any KiB/s. */
			kib = _gpus[g].v[f->fieldId == NVML_FI_DEV_PCIE_COUNT_TX_BYTES ? TX : RX];
			f->timestamp = (long long)(now - (now - _init_us) % 125000);
			f->value.ullVal = kib * 128 * ((now - _init_us) / 125000);
			if (_pcie32) {
				f->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
				f->value.uiVal = (unsigned int)(f->value.ullVal + _pcie32_offset);
			}
			break;
		case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
			f->value.ullVal = _gpus[g].v[ENERGY];
			break;
		default:
			f->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
			break;
		}
	}
	return NVML_SUCCESS;
}
#endif

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t d, unsigned int *mw)
{
	GPU(d);
	*mw = (unsigned int)_gpus[g].v[POWER];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetEnforcedPowerLimit(nvmlDevice_t d, unsigned int *mw)
{
	GPU(d);
	*mw = (unsigned int)_gpus[g].v[LIMIT];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t d, nvmlTemperatureSensors_t s,
					     unsigned int *v)
{
	GPU(d);
	*v = (unsigned int)_gpus[g].v[TEMP];
	return NVML_SUCCESS;
}

/* As on GPUs whose board reports no thresholds. */
EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t d,
						      nvmlTemperatureThresholds_t t,
						      unsigned int *v)
{
	GPU(d);
	(void)g;
	return NVML_ERROR_NOT_SUPPORTED;
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t d, nvmlPcieUtilCounter_t c,
						unsigned int *v)
{
	GPU(d);
	if (_pcie_sleep_ms) {
		struct timespec ts = { 0, _pcie_sleep_ms * 1000000L };

		nanosleep(&ts, NULL);
	}
	*v = (unsigned int)_gpus[g].v[c == NVML_PCIE_UTIL_TX_BYTES ? TX : RX];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t d,
							      unsigned long long *v)
{
	GPU(d);
	*v = _gpus[g].v[REASONS];
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t d, unsigned long long *v)
{
	GPU(d);
	*v = _gpus[g].v[ENERGY];
	return NVML_SUCCESS;
}

/*
 * The driver's latest sample: one per process on this GPU, all taken at
 * the last point of the sampling grid; nothing newer than last: NOT_FOUND.
 */
EXPORT nvmlReturn_t nvmlDeviceGetProcessUtilization(nvmlDevice_t d,
						    nvmlProcessUtilizationSample_t *u,
						    unsigned int *count, unsigned long long last)
{
	unsigned long long now = _now_us(), ts = now - now % _proc_period_us;
	unsigned int n = 0;
	GPU(d);

	_maybe_reload();
	for (int i = 0; i < _nprocs; i++)
		n += _procs[i].gpu == (unsigned int)g;
	if (!n || ts <= last)
		return NVML_ERROR_NOT_FOUND;
	if (!u || *count < n) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	n = 0;
	for (int i = 0; i < _nprocs; i++) {
		if (_procs[i].gpu != (unsigned int)g)
			continue;
		u[n] = (nvmlProcessUtilizationSample_t){ .pid = _procs[i].pid, .timeStamp = ts,
							 .smUtil = _procs[i].sm,
							 .memUtil = _procs[i].mem };
		n++;
	}
	*count = n;
	return NVML_SUCCESS;
}

static nvmlReturn_t _running(int g, unsigned int *count, nvmlProcessInfo_t *p)
{
	unsigned int n = 0;

	_maybe_reload();
	for (int i = 0; i < _nprocs; i++)
		n += _procs[i].gpu == (unsigned int)g;
	if (*count < n) {
		*count = n;
		return NVML_ERROR_INSUFFICIENT_SIZE;
	}
	n = 0;
	for (int i = 0; i < _nprocs; i++)
		if (_procs[i].gpu == (unsigned int)g)
			p[n++] = (nvmlProcessInfo_t){ .pid = _procs[i].pid,
						      .usedGpuMemory = _procs[i].used };
	*count = n;
	return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
							    nvmlProcessInfo_t *p)
{
	GPU(d);
	return _running(g, count, p);
}

/* The same processes hold a graphics context too: the collector must not count them twice. */
EXPORT nvmlReturn_t nvmlDeviceGetGraphicsRunningProcesses_v3(nvmlDevice_t d, unsigned int *count,
							     nvmlProcessInfo_t *p)
{
	GPU(d);
	return _running(g, count, p);
}
