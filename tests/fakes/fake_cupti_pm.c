// SPDX-License-Identifier: Apache-2.0
/*
 * CUPTI's profiler, host and PM sampling APIs in the fake CUPTI
 * (build/fakes/libcupti.so, with fake_cupti.c), for `flamewatch gpu-busy`
 * without a GPU. It keeps the contracts the product depends on: the
 * profiler initialised first, one session per device (a second Enable is
 * HARDWARE_BUSY), a config image before SetConfig, counter data images of
 * the size GetCounterDataSize gave, samples only once complete, decodes
 * that stop when the image is full, and with KEEP_OLDEST nothing decoded
 * after an overflow until the session starts again.
 *
 * Samples are made up when decoded, for the time since Start: sample k
 * covers [t0 + k*I, t0 + (k+1)*I) on fake_cupti_now()'s clock. Control:
 *   FAKE_CUDA_DEVICES=N        devices (default 1), as the fake libcuda
 *   FAKE_PM_SCHEDULE=B:I[:L]   from Start, B ms busy then I ms idle, again
 *                              (default: idle); a sample's busy fraction is
 *                              its overlap with busy phases, times L (default
 *                              1: a launch-bound loop of tiny kernels computes
 *                              in a small part of each sample, e.g. 0.05)
 *   FAKE_PM_FAIL=STEP:CODE[:N] the CUPTI function STEP returns CODE (its
 *                              first N calls only); cuptiProfilerDeviceSupported
 *                              with CODE 0 answers "unsupported (vGPU)"
 *   FAKE_PM_FAIL_DEVICE=D      FAKE_PM_FAIL applies to device D only
 *   FAKE_PM_OVERFLOW_EVERY=N   every Nth decode of a device reports an
 *                              overflow; its later decodes fail with
 *                              OUT_OF_MEMORY until the session restarts
 *   FAKE_PM_DISPATCH_PER_MS=N  kernels dispatched per ms of busy phase
 *                              (gr__dispatch_count.sum); each adds its launch
 *                              and drain, FAKE_PM_EDGE_NS (285), to the
 *                              compute-active cycles, as a GPU does
 *   FAKE_PM_DISPATCH_FILE=F    kernels dispatched: those the fake CUPTI of
 *                              the process on the GPU ran (its
 *                              FAKE_CUPTI_DISPATCH_FILE, the same F)
 *   FAKE_PM_NO_DISPATCH=1      the chip offers no gr__dispatch_count
 * A device index out of range is CUPTI_ERROR_INVALID_DEVICE. At exit, a
 * session still enabled or a profiler still initialised is reported on
 * stderr ("fake CUPTI: ... at exit"), for the tests of a clean stop.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cupti.h>
#include <cupti_target.h>
#include <cupti_profiler_target.h>
#include <cupti_profiler_host.h>
#include <cupti_pmsampling.h>

#include "fake_cupti.h"

#define API __attribute__((visibility("default")))
#define MAX_DEV 8
#define FAKE_CYCLES_PER_NS 1.755	/* an H100's clock, for plausible counts */

static const char *const _metric_names[] = { "gr__compute_cycles_active.sum", "gr__cycles_elapsed.max",
					     "gr__dispatch_count.sum" };
#define NMET 3

struct CUpti_Profiler_Host_Object {
	int metric[NMET];	/* index into _metric_names per configured metric */
	size_t nmetrics;
};

struct CUpti_PmSampling_Object {
	int dev;
	int enabled, configured, started, broken;
	uint64_t interval_ns, t0;
	uint64_t next;		/* the next sample to decode */
	unsigned decodes;
	size_t hw_buf;
	uint64_t dispatch_seen;	/* FAKE_PM_DISPATCH_FILE's count at the last decode */
};

/* The counter data image: a header, then max_samples records. */
#define IMAGE_MAGIC 0x464b504dU
struct image_hdr {
	uint32_t magic;
	uint32_t max_samples;
	uint32_t completed;
	uint32_t pad;
};
struct image_rec {
	uint64_t start, end;
	double active, elapsed, dispatches;
};

static int _profiler_inited;
static struct CUpti_PmSampling_Object _objs[MAX_DEV];

static int _ndev(void)
{
	const char *s = getenv("FAKE_CUDA_DEVICES");
	int n = s ? atoi(s) : 1;

	return n < 0 ? 0 : n > MAX_DEV ? MAX_DEV : n;
}

/* FAKE_PM_FAIL's code for step on device dev (-1: any), or -1. */
static int _fail_code(const char *step, int dev)
{
	static int calls;
	const char *s = getenv("FAKE_PM_FAIL"), *only = getenv("FAKE_PM_FAIL_DEVICE");
	char name[96];
	int code = 0, times = 0, n;

	if (!s || sscanf(s, "%95[^:]:%d%n", name, &code, &n) < 2 || strcmp(name, step))
		return -1;
	if (only && dev >= 0 && atoi(only) != dev)
		return -1;
	if (s[n] == ':')
		times = atoi(s + n + 1);
	if (times > 0 && calls >= times)
		return -1;
	calls++;
	return code;
}

#define CHECK(p, step, dev)							\
	do {									\
		int _c;								\
		if (fake_cupti_failing())					\
			return CUPTI_ERROR_UNKNOWN;				\
		if (!(p) || !(p)->structSize)					\
			return CUPTI_ERROR_INVALID_PARAMETER;			\
		_c = _fail_code(step, dev);					\
		if (_c > 0)							\
			return (CUptiResult)_c;					\
	} while (0)

API CUptiResult cuptiProfilerInitialize(CUpti_Profiler_Initialize_Params *p)
{
	CHECK(p, "cuptiProfilerInitialize", -1);
	_profiler_inited++;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiProfilerDeInitialize(CUpti_Profiler_DeInitialize_Params *p)
{
	CHECK(p, "cuptiProfilerDeInitialize", -1);
	if (!_profiler_inited)
		return CUPTI_ERROR_NOT_INITIALIZED;
	_profiler_inited--;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiProfilerDeviceSupported(CUpti_Profiler_DeviceSupported_Params *p)
{
	int c;

	if (fake_cupti_failing())
		return CUPTI_ERROR_UNKNOWN;
	if (!p || !p->structSize)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (p->cuDevice < 0 || p->cuDevice >= _ndev())
		return CUPTI_ERROR_INVALID_DEVICE;
	c = _fail_code("cuptiProfilerDeviceSupported", p->cuDevice);
	if (c > 0)
		return (CUptiResult)c;
	p->architecture = p->sli = p->vGpu = p->confidentialCompute = p->cmp = p->wsl =
		CUPTI_PROFILER_CONFIGURATION_SUPPORTED;
	if (c == 0)
		p->vGpu = CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED;
	p->isSupported = c == 0 ? CUPTI_PROFILER_CONFIGURATION_UNSUPPORTED : CUPTI_PROFILER_CONFIGURATION_SUPPORTED;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiDeviceGetChipName(CUpti_Device_GetChipName_Params *p)
{
	CHECK(p, "cuptiDeviceGetChipName", p ? (int)p->deviceIndex : -1);
	if (p->deviceIndex >= (size_t)_ndev())
		return CUPTI_ERROR_INVALID_DEVICE;
	p->pChipName = "GH100";
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiPmSamplingGetCounterAvailability(CUpti_PmSampling_GetCounterAvailability_Params *p)
{
	CHECK(p, "cuptiPmSamplingGetCounterAvailability", p ? (int)p->deviceIndex : -1);
	if (!_profiler_inited)
		return CUPTI_ERROR_NOT_INITIALIZED;
	if (p->deviceIndex >= (size_t)_ndev())
		return CUPTI_ERROR_INVALID_DEVICE;
	/* Another session on the device keeps the counters. */
	if (_objs[p->deviceIndex].enabled)
		return CUPTI_ERROR_HARDWARE_BUSY;
	if (!p->pCounterAvailabilityImage) {
		p->counterAvailabilityImageSize = 64;
		return CUPTI_SUCCESS;
	}
	if (p->counterAvailabilityImageSize < 64)
		return CUPTI_ERROR_INVALID_PARAMETER;
	memset(p->pCounterAvailabilityImage, 0xa5, 64);
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiProfilerHostInitialize(CUpti_Profiler_Host_Initialize_Params *p)
{
	CHECK(p, "cuptiProfilerHostInitialize", -1);
	if (p->profilerType != CUPTI_PROFILER_TYPE_PM_SAMPLING || !p->pChipName || strcmp(p->pChipName, "GH100"))
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->pHostObject = calloc(1, sizeof(*p->pHostObject));
	return p->pHostObject ? CUPTI_SUCCESS : CUPTI_ERROR_OUT_OF_MEMORY;
}

API CUptiResult cuptiProfilerHostDeinitialize(CUpti_Profiler_Host_Deinitialize_Params *p)
{
	CHECK(p, "cuptiProfilerHostDeinitialize", -1);
	if (!p->pHostObject)
		return CUPTI_ERROR_INVALID_PARAMETER;
	free(p->pHostObject);
	return CUPTI_SUCCESS;
}

static int _metric(const char *name)
{
	const char *no = getenv("FAKE_PM_NO_DISPATCH");
	int n = no && atoi(no) ? NMET - 1 : NMET;

	for (int i = 0; i < n; i++)
		if (name && !strcmp(name, _metric_names[i]))
			return i;
	return -1;
}

API CUptiResult cuptiProfilerHostConfigAddMetrics(CUpti_Profiler_Host_ConfigAddMetrics_Params *p)
{
	CHECK(p, "cuptiProfilerHostConfigAddMetrics", -1);
	if (!p->pHostObject || !p->ppMetricNames || !p->numMetrics || p->numMetrics > NMET)
		return CUPTI_ERROR_INVALID_PARAMETER;
	for (size_t i = 0; i < p->numMetrics; i++) {
		int m = _metric(p->ppMetricNames[i]);

		if (m < 0)
			return CUPTI_ERROR_INVALID_METRIC_NAME;
		p->pHostObject->metric[i] = m;
	}
	p->pHostObject->nmetrics = p->numMetrics;
	return CUPTI_SUCCESS;
}

#define CONFIG_SIZE 872

API CUptiResult cuptiProfilerHostGetConfigImageSize(CUpti_Profiler_Host_GetConfigImageSize_Params *p)
{
	CHECK(p, "cuptiProfilerHostGetConfigImageSize", -1);
	if (!p->pHostObject || !p->pHostObject->nmetrics)
		return CUPTI_ERROR_INVALID_OPERATION;
	p->configImageSize = CONFIG_SIZE;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiProfilerHostGetConfigImage(CUpti_Profiler_Host_GetConfigImage_Params *p)
{
	CHECK(p, "cuptiProfilerHostGetConfigImage", -1);
	if (!p->pHostObject || !p->pConfigImage || p->configImageSize < CONFIG_SIZE)
		return CUPTI_ERROR_INVALID_PARAMETER;
	memset(p->pConfigImage, 0, CONFIG_SIZE);
	memcpy(p->pConfigImage, "FAKECFG", 7);
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiProfilerHostGetNumOfPasses(CUpti_Profiler_Host_GetNumOfPasses_Params *p)
{
	CHECK(p, "cuptiProfilerHostGetNumOfPasses", -1);
	if (!p->pConfigImage || p->configImageSize < CONFIG_SIZE || memcmp(p->pConfigImage, "FAKECFG", 7))
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->numOfPasses = 1;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiPmSamplingEnable(CUpti_PmSampling_Enable_Params *p)
{
	struct CUpti_PmSampling_Object *o;

	CHECK(p, "cuptiPmSamplingEnable", p ? (int)p->deviceIndex : -1);
	if (!_profiler_inited)
		return CUPTI_ERROR_NOT_INITIALIZED;
	if (p->deviceIndex >= (size_t)_ndev())
		return CUPTI_ERROR_INVALID_DEVICE;
	o = &_objs[p->deviceIndex];
	if (o->enabled)
		return CUPTI_ERROR_HARDWARE_BUSY;
	memset(o, 0, sizeof(*o));
	o->dev = (int)p->deviceIndex;
	o->enabled = 1;
	p->pPmSamplingObject = o;
	return CUPTI_SUCCESS;
}

static int _valid(const struct CUpti_PmSampling_Object *o)
{
	return o && o >= _objs && o < _objs + MAX_DEV && o->enabled;
}

API CUptiResult cuptiPmSamplingDisable(CUpti_PmSampling_Disable_Params *p)
{
	CHECK(p, "cuptiPmSamplingDisable", -1);
	if (!_valid(p->pPmSamplingObject))
		return CUPTI_ERROR_INVALID_PARAMETER;
	memset(p->pPmSamplingObject, 0, sizeof(*p->pPmSamplingObject));
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiPmSamplingSetConfig(CUpti_PmSampling_SetConfig_Params *p)
{
	struct CUpti_PmSampling_Object *o;

	CHECK(p, "cuptiPmSamplingSetConfig", _valid(p ? p->pPmSamplingObject : NULL) ? p->pPmSamplingObject->dev : -1);
	o = p->pPmSamplingObject;
	if (!_valid(o) || !p->pConfig || p->configSize < CONFIG_SIZE || memcmp(p->pConfig, "FAKECFG", 7) ||
	    !p->samplingInterval || p->hardwareBufferSize < 4096 ||
	    p->triggerMode != CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (o->started)
		return CUPTI_ERROR_INVALID_OPERATION;
	o->interval_ns = p->samplingInterval;
	o->hw_buf = p->hardwareBufferSize;
	o->configured = 1;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiPmSamplingGetCounterDataSize(CUpti_PmSampling_GetCounterDataSize_Params *p)
{
	CHECK(p, "cuptiPmSamplingGetCounterDataSize", -1);
	if (!_valid(p->pPmSamplingObject) || !p->pMetricNames || !p->numMetrics || p->numMetrics > NMET ||
	    !p->maxSamples)
		return CUPTI_ERROR_INVALID_PARAMETER;
	for (size_t i = 0; i < p->numMetrics; i++)
		if (_metric(p->pMetricNames[i]) < 0)
			return CUPTI_ERROR_INVALID_METRIC_NAME;
	p->counterDataSize = sizeof(struct image_hdr) + (size_t)p->maxSamples * sizeof(struct image_rec);
	return CUPTI_SUCCESS;
}

/* The image's header, once its size and magic are right. */
static struct image_hdr *_image(const uint8_t *img, size_t size)
{
	struct image_hdr *h = (struct image_hdr *)img;

	if (!img || size < sizeof(*h) || h->magic != IMAGE_MAGIC ||
	    size != sizeof(*h) + (size_t)h->max_samples * sizeof(struct image_rec) || h->completed > h->max_samples)
		return NULL;
	return h;
}

API CUptiResult cuptiPmSamplingCounterDataImageInitialize(CUpti_PmSampling_CounterDataImage_Initialize_Params *p)
{
	struct image_hdr *h;

	CHECK(p, "cuptiPmSamplingCounterDataImageInitialize", -1);
	if (!_valid(p->pPmSamplingObject) || !p->pCounterData || p->counterDataSize <= sizeof(*h) ||
	    (p->counterDataSize - sizeof(*h)) % sizeof(struct image_rec))
		return CUPTI_ERROR_INVALID_PARAMETER;
	memset(p->pCounterData, 0, p->counterDataSize);
	h = (struct image_hdr *)p->pCounterData;
	h->magic = IMAGE_MAGIC;
	h->max_samples = (uint32_t)((p->counterDataSize - sizeof(*h)) / sizeof(struct image_rec));
	return CUPTI_SUCCESS;
}

/* FAKE_PM_DISPATCH_FILE's counter, mapped once; NULL: none. */
static uint64_t *_dispatch_file(void)
{
	static uint64_t *counter;
	static int tried;

	if (!tried) {
		tried = 1;
		counter = fake_dispatch_counter("FAKE_PM_DISPATCH_FILE");
	}
	return counter;
}

API CUptiResult cuptiPmSamplingStart(CUpti_PmSampling_Start_Params *p)
{
	struct CUpti_PmSampling_Object *o;

	CHECK(p, "cuptiPmSamplingStart", _valid(p ? p->pPmSamplingObject : NULL) ? p->pPmSamplingObject->dev : -1);
	o = p->pPmSamplingObject;
	if (!_valid(o) || !o->configured)
		return CUPTI_ERROR_INVALID_OPERATION;
	if (o->started)
		return CUPTI_ERROR_INVALID_OPERATION;
	o->started = 1;
	o->broken = 0;
	o->t0 = fake_cupti_now();
	o->next = 0;
	/* Kernels before sampling started are no sample's. */
	if (_dispatch_file())
		o->dispatch_seen = __atomic_load_n(_dispatch_file(), __ATOMIC_RELAXED);
	return CUPTI_SUCCESS;
}

/* Samples after Stop stay in the buffer until decoded; none are added. */
static uint64_t _stopped_at[MAX_DEV];

API CUptiResult cuptiPmSamplingStop(CUpti_PmSampling_Stop_Params *p)
{
	struct CUpti_PmSampling_Object *o;

	CHECK(p, "cuptiPmSamplingStop", -1);
	o = p->pPmSamplingObject;
	if (!_valid(o) || !o->started)
		return CUPTI_ERROR_INVALID_OPERATION;
	o->started = 0;
	_stopped_at[o->dev] = fake_cupti_now();
	return CUPTI_SUCCESS;
}

/* FAKE_PM_SCHEDULE's compute level L (1 unless given). */
static double _schedule_level(void)
{
	const char *s = getenv("FAKE_PM_SCHEDULE");
	unsigned long busy_ms, idle_ms;
	double level = 1.0;

	if (!s || sscanf(s, "%lu:%lu:%lf", &busy_ms, &idle_ms, &level) < 3 || !(level > 0))
		return 1.0;
	return level;
}

/* Busy fraction of [a, b) under FAKE_PM_SCHEDULE, phases from t0. */
static double _busy_fraction(uint64_t t0, uint64_t a, uint64_t b)
{
	const char *s = getenv("FAKE_PM_SCHEDULE");
	unsigned long busy_ms = 0, idle_ms = 0;
	uint64_t period, busy, in = 0;
	double level = 1.0;

	if (!s || sscanf(s, "%lu:%lu:%lf", &busy_ms, &idle_ms, &level) < 2 || !busy_ms)
		return 0;
	busy = busy_ms * 1000000ULL;
	period = busy + idle_ms * 1000000ULL;
	for (uint64_t t = a; t < b;) {
		uint64_t phase = (t - t0) % period, step;

		if (phase < busy) {
			step = busy - phase;
			if (step > b - t)
				step = b - t;
			in += step;
		} else {
			step = period - phase;
			if (step > b - t)
				step = b - t;
		}
		t += step;
	}
	return level * (double)in / (double)(b - a);
}

/*
 * FAKE_PM_DISPATCH_FILE: the kernels the fake CUPTI of the process on the
 * GPU ran since the last decode, spread evenly over this decode's samples,
 * with each one's launch-and-drain cycles (FAKE_PM_EDGE_NS) as active.
 */
static void _count_dispatches(struct CUpti_PmSampling_Object *o, struct image_rec *r, uint32_t n)
{
	uint64_t *counter = _dispatch_file();
	double edge_ns = getenv("FAKE_PM_EDGE_NS") ? atof(getenv("FAKE_PM_EDGE_NS")) : 285;
	uint64_t now, delta;

	if (!counter || !n)
		return;
	now = __atomic_load_n(counter, __ATOMIC_RELAXED);
	delta = now - o->dispatch_seen;
	o->dispatch_seen = now;
	for (uint32_t i = 0; i < n; i++) {
		/* Whole numbers, adding up to delta. */
		r[i].dispatches = (double)(delta * (i + 1) / n - delta * i / n);
		r[i].active += r[i].dispatches * edge_ns * FAKE_CYCLES_PER_NS;
		if (r[i].active > r[i].elapsed)
			r[i].active = r[i].elapsed;
	}
}

API CUptiResult cuptiPmSamplingDecodeData(CUpti_PmSampling_DecodeData_Params *p)
{
	struct CUpti_PmSampling_Object *o;
	const char *every = getenv("FAKE_PM_OVERFLOW_EVERY");
	struct image_rec *rec;
	struct image_hdr *h;
	double per_ms, edge_ns, level;
	uint32_t first;
	uint64_t now;

	CHECK(p, "cuptiPmSamplingDecodeData", _valid(p ? p->pPmSamplingObject : NULL) ? p->pPmSamplingObject->dev : -1);
	o = p->pPmSamplingObject;
	h = _image(p->pCounterDataImage, p->counterDataImageSize);
	if (!_valid(o) || !o->configured || !h)
		return CUPTI_ERROR_INVALID_PARAMETER;
	/* KEEP_OLDEST after an overflow: nothing more, until started again. */
	if (o->broken)
		return CUPTI_ERROR_OUT_OF_MEMORY;
	o->decodes++;
	p->overflow = 0;
	if (every && atoi(every) > 0 && o->decodes % (unsigned)atoi(every) == 0) {
		p->overflow = 1;
		o->broken = 1;
	}
	now = o->started ? fake_cupti_now() : _stopped_at[o->dev];
	rec = (struct image_rec *)(h + 1);
	per_ms = getenv("FAKE_PM_DISPATCH_PER_MS") ? atof(getenv("FAKE_PM_DISPATCH_PER_MS")) : 0;
	edge_ns = getenv("FAKE_PM_EDGE_NS") ? atof(getenv("FAKE_PM_EDGE_NS")) : 285;
	level = _schedule_level();
	first = h->completed;
	while (o->t0 + (o->next + 1) * o->interval_ns <= now && h->completed < h->max_samples) {
		struct image_rec *r = &rec[h->completed++];
		double cycles = (double)o->interval_ns * FAKE_CYCLES_PER_NS, busy;

		r->start = o->t0 + o->next * o->interval_ns;
		r->end = r->start + o->interval_ns;
		busy = _busy_fraction(o->t0, r->start, r->end);
		r->elapsed = cycles;
		r->active = cycles * busy;
		if (per_ms) {
			/* The busy share of the sample, without the compute level. */
			double busy_ms = busy / level * (double)o->interval_ns / 1e6;

			r->dispatches = (double)(uint64_t)(busy_ms * per_ms + 0.5);
			r->active += r->dispatches * edge_ns * FAKE_CYCLES_PER_NS;
			if (r->active > cycles)
				r->active = cycles;
		}
		o->next++;
	}
	_count_dispatches(o, rec + first, h->completed - first);
	p->decodeStopReason = o->t0 + (o->next + 1) * o->interval_ns <= now
				      ? CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL
				      : CUPTI_PM_SAMPLING_DECODE_STOP_REASON_END_OF_RECORDS;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiPmSamplingGetCounterDataInfo(CUpti_PmSampling_GetCounterDataInfo_Params *p)
{
	const struct image_hdr *h;

	CHECK(p, "cuptiPmSamplingGetCounterDataInfo", -1);
	h = _image(p->pCounterDataImage, p->counterDataImageSize);
	if (!h)
		return CUPTI_ERROR_INVALID_PARAMETER;
	p->numTotalSamples = h->max_samples;
	p->numPopulatedSamples = h->completed;
	p->numCompletedSamples = h->completed;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiPmSamplingCounterDataGetSampleInfo(CUpti_PmSampling_CounterData_GetSampleInfo_Params *p)
{
	const struct image_hdr *h;
	const struct image_rec *r;

	CHECK(p, "cuptiPmSamplingCounterDataGetSampleInfo", -1);
	h = _image(p->pCounterDataImage, p->counterDataImageSize);
	if (!h || p->sampleIndex >= h->completed)
		return CUPTI_ERROR_INVALID_PARAMETER;
	r = (const struct image_rec *)(h + 1) + p->sampleIndex;
	p->startTimestamp = r->start;
	p->endTimestamp = r->end;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiProfilerHostEvaluateToGpuValues(CUpti_Profiler_Host_EvaluateToGpuValues_Params *p)
{
	const struct image_hdr *h;
	const struct image_rec *r;

	CHECK(p, "cuptiProfilerHostEvaluateToGpuValues", -1);
	h = _image(p->pCounterDataImage, p->counterDataImageSize);
	if (!p->pHostObject || !h || p->rangeIndex >= h->completed || !p->ppMetricNames || !p->pMetricValues ||
	    !p->numMetrics || p->numMetrics > NMET)
		return CUPTI_ERROR_INVALID_PARAMETER;
	r = (const struct image_rec *)(h + 1) + p->rangeIndex;
	for (size_t i = 0; i < p->numMetrics; i++) {
		int m = _metric(p->ppMetricNames[i]);

		if (m < 0)
			return CUPTI_ERROR_INVALID_METRIC_NAME;
		p->pMetricValues[i] = m == 0 ? r->active : m == 1 ? r->elapsed : r->dispatches;
	}
	return CUPTI_SUCCESS;
}

__attribute__((destructor)) static void _check_clean_exit(void)
{
	static const char enabled[] = "fake CUPTI: PM sampling still enabled at exit\n";
	static const char inited[] = "fake CUPTI: profiler still initialised at exit\n";
	int any = 0;

	for (int i = 0; i < MAX_DEV; i++)
		any |= _objs[i].enabled;
	if (any && write(2, enabled, sizeof(enabled) - 1) < 0)
		return;
	if (_profiler_inited && write(2, inited, sizeof(inited) - 1) < 0)
		return;
}
