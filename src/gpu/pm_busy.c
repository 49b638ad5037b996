// SPDX-License-Identifier: Apache-2.0
/*
 * GPU busy timeline from CUPTI PM sampling (see pm_busy.h). The calls follow
 * NVIDIA's documented order, as the research probe bench/gpu/pm_sampling
 * made them: profiler initialise; per device, support check,
 * chip name, counter availability, host object, config image (one pass),
 * enable, set config, counter data image, start; decode periodically,
 * evaluate each completed sample and reset the image; stop, a last decode,
 * disable.
 *
 * Everything CUPTI writes back is checked before use (counts against the
 * image's capacity, end after start): a driver bug must cost a decode, not
 * the process.
 *
 * cupti_profiler_host.h includes <string> although it declares only C;
 * src/gpu/cshim/ holds an empty one so that it compiles as C. The Makefile
 * defines FW_HAVE_CUPTI when CUPTI's headers are there.
 */
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "gpu/pm_busy.h"

static void _set_error(struct pm_busy_error *e, const char *step, int code, const char *msg)
{
	if (!e)
		return;
	snprintf(e->step, sizeof(e->step), "%s", step);
	e->code = code;
	snprintf(e->msg, sizeof(e->msg), "%s", msg);
}

#ifndef FW_HAVE_CUPTI

struct pm_busy {
	int unused;
};

struct pm_busy_dev {
	int unused;
};

struct pm_busy *pm_busy__open(const char *cupti_path, const char *cuda_path, struct pm_busy_error *err)
{
	_set_error(err, "build", 0, "built without CUPTI headers");
	errno = ENOTSUP;
	return NULL;
}

void pm_busy__close(struct pm_busy *pb)
{
}

int pm_busy__ndevices(const struct pm_busy *pb)
{
	return 0;
}

const char *pm_busy__uuid(const struct pm_busy *pb, int idx)
{
	return "";
}

struct pm_busy_dev *pm_busy__start(struct pm_busy *pb, int idx, const struct pm_busy_config *cfg,
				   struct pm_busy_error *err)
{
	_set_error(err, "build", 0, "built without CUPTI headers");
	errno = ENOTSUP;
	return NULL;
}

const char *pm_busy__chip(const struct pm_busy_dev *d)
{
	return "";
}

uint64_t pm_busy__interval_ns(const struct pm_busy_dev *d)
{
	return 0;
}

int pm_busy__decode(struct pm_busy_dev *d, const struct pm_busy_sink *sink, struct pm_busy_error *err)
{
	return -ENOTSUP;
}

void pm_busy__get_stats(const struct pm_busy_dev *d, struct pm_busy_stats *st)
{
	memset(st, 0, sizeof(*st));
}

void pm_busy__stop(struct pm_busy_dev *d, const struct pm_busy_sink *sink, struct pm_busy_stats *last)
{
	if (last)
		memset(last, 0, sizeof(*last));
}

#else /* FW_HAVE_CUPTI */

#include <cupti_result.h>
#include <cupti_activity.h>
#include <cupti_target.h>
#include <cupti_profiler_target.h>
#include <cupti_profiler_host.h>
#include <cupti_pmsampling.h>

#define SYM(name) __typeof__(name) *name
static struct {
	SYM(cuptiGetResultString);
	SYM(cuptiGetTimestamp);
	SYM(cuptiProfilerInitialize);
	SYM(cuptiProfilerDeInitialize);
	SYM(cuptiProfilerDeviceSupported);
	SYM(cuptiDeviceGetChipName);
	SYM(cuptiPmSamplingGetCounterAvailability);
	SYM(cuptiProfilerHostInitialize);
	SYM(cuptiProfilerHostDeinitialize);
	SYM(cuptiProfilerHostConfigAddMetrics);
	SYM(cuptiProfilerHostGetConfigImageSize);
	SYM(cuptiProfilerHostGetConfigImage);
	SYM(cuptiProfilerHostGetNumOfPasses);
	SYM(cuptiProfilerHostEvaluateToGpuValues);
	SYM(cuptiPmSamplingEnable);
	SYM(cuptiPmSamplingDisable);
	SYM(cuptiPmSamplingSetConfig);
	SYM(cuptiPmSamplingGetCounterDataSize);
	SYM(cuptiPmSamplingCounterDataImageInitialize);
	SYM(cuptiPmSamplingStart);
	SYM(cuptiPmSamplingStop);
	SYM(cuptiPmSamplingDecodeData);
	SYM(cuptiPmSamplingGetCounterDataInfo);
	SYM(cuptiPmSamplingCounterDataGetSampleInfo);
} C;

/* C's pointers in order: _load_cupti fills them by index. */
static const char *const _cupti_symbols[] = {
	"cuptiGetResultString", "cuptiGetTimestamp",
	"cuptiProfilerInitialize", "cuptiProfilerDeInitialize",
	"cuptiProfilerDeviceSupported", "cuptiDeviceGetChipName",
	"cuptiPmSamplingGetCounterAvailability",
	"cuptiProfilerHostInitialize", "cuptiProfilerHostDeinitialize",
	"cuptiProfilerHostConfigAddMetrics", "cuptiProfilerHostGetConfigImageSize",
	"cuptiProfilerHostGetConfigImage", "cuptiProfilerHostGetNumOfPasses",
	"cuptiProfilerHostEvaluateToGpuValues",
	"cuptiPmSamplingEnable", "cuptiPmSamplingDisable", "cuptiPmSamplingSetConfig",
	"cuptiPmSamplingGetCounterDataSize", "cuptiPmSamplingCounterDataImageInitialize",
	"cuptiPmSamplingStart", "cuptiPmSamplingStop", "cuptiPmSamplingDecodeData",
	"cuptiPmSamplingGetCounterDataInfo", "cuptiPmSamplingCounterDataGetSampleInfo",
};

_Static_assert(sizeof(C) == sizeof(void *) * (sizeof(_cupti_symbols) / sizeof(_cupti_symbols[0])),
	       "one pointer per name");

/* The driver API subset, declared here: cuda.h renames some to _v2 macros. */
static struct {
	CUresult (*init)(unsigned int flags);
	CUresult (*count)(int *n);
	CUresult (*get)(CUdevice *dev, int ordinal);
	CUresult (*uuid)(CUuuid *uuid, CUdevice dev);
	CUresult (*error_name)(CUresult r, const char **name);	/* optional */
} D;

/*
 * Busy fraction: compute-active cycles over the cycles elapsed in their
 * clock domain. The third metric, kernels dispatched, is optional (a chip
 * without it samples the first two): compute-active cycles also count each
 * dispatch's launch and drain, which a kernel's record does not, and on a
 * loop of tiny kernels that alone reads busier than the records.
 * DISPATCH_EDGE_NS per dispatch is taken back out: the excess measured per
 * dispatch did not depend on the kernel's length (bench/README.md,
 * gpu/pm_sampling).
 */
static const char *_metrics[] = { "gr__compute_cycles_active.sum", "gr__cycles_elapsed.max",
				  "gr__dispatch_count.sum" };
#define NMETRICS (sizeof(_metrics) / sizeof(_metrics[0]))
#define NMETRICS_BASE 2
#define DISPATCH_EDGE_NS 285.0

/* A decode loops while CUPTI says the image filled up; this bounds it. */
#define MAX_DECODE_ROUNDS 64
/* Bytes a sample of these metrics may take in the hardware buffer (42-105 B
 * were seen), with room to spare. */
#define HW_BYTES_PER_SAMPLE 128

struct pm_busy {
	int ndev;
	char (*uuid)[48];
	int profiler_initialized;
};

struct pm_busy_dev {
	struct pm_busy *pb;
	int idx;
	CUdevice cudev;
	char chip[64];
	uint64_t interval_ns;
	size_t hw_buf_bytes;
	uint32_t max_samples;
	uint8_t *avail, *config, *image;
	size_t avail_size, config_size, image_size;
	CUpti_Profiler_Host_Object *host;
	CUpti_PmSampling_Object *obj;
	int started;
	size_t nmetrics;	/* NMETRICS, or NMETRICS_BASE where dispatches are not offered */
	int64_t offset_ns;
	struct pm_busy_stats st;
};

#define PARAMS(type, var) type var; memset(&var, 0, sizeof(var)); var.structSize = type##_STRUCT_SIZE

static int _cupti_fail(struct pm_busy_error *e, const char *step, CUptiResult r)
{
	const char *s = NULL;

	if (C.cuptiGetResultString(r, &s) != CUPTI_SUCCESS || !s)
		s = "unknown CUPTI error";
	_set_error(e, step, (int)r, s);
	return r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ? -EPERM : r == CUPTI_ERROR_HARDWARE_BUSY ? -EBUSY : -EIO;
}

static int _cuda_fail(struct pm_busy_error *e, const char *step, CUresult r)
{
	const char *s = NULL;

	if (!D.error_name || D.error_name(r, &s) != CUDA_SUCCESS || !s)
		s = "CUDA error";
	_set_error(e, step, (int)r, s);
	return -EIO;
}

static uint64_t _now(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void *_dlopen_first(const char *const *names, size_t n)
{
	void *h = NULL;

	for (size_t i = 0; i < n && !h; i++)
		h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	return h;
}

/*
 * libcuda first: CUPTI finds the driver by its soname, and one already
 * loaded (a test's fake, given by path) is the one it then gets.
 */
static int _load_cuda(const char *path, struct pm_busy_error *e)
{
	static void *handle;
	char msg[160];

	if (handle)
		return 0;
	if (!path || !*path)
		path = getenv("FLAMEWATCH_LIBCUDA");
	if (!path || !*path)
		path = "libcuda.so.1";
	handle = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
	if (!handle) {
		snprintf(msg, sizeof(msg), "cannot load libcuda: %s", dlerror());
		_set_error(e, "load", 0, msg);
		return -ENOENT;
	}
	D.init = (CUresult(*)(unsigned int))dlsym(handle, "cuInit");
	D.count = (CUresult(*)(int *))dlsym(handle, "cuDeviceGetCount");
	D.get = (CUresult(*)(CUdevice *, int))dlsym(handle, "cuDeviceGet");
	D.uuid = (CUresult(*)(CUuuid *, CUdevice))dlsym(handle, "cuDeviceGetUuid_v2");
	if (!D.uuid)
		D.uuid = (CUresult(*)(CUuuid *, CUdevice))dlsym(handle, "cuDeviceGetUuid");
	D.error_name = (CUresult(*)(CUresult, const char **))dlsym(handle, "cuGetErrorName");
	if (!D.init || !D.count || !D.get || !D.uuid) {
		snprintf(msg, sizeof(msg), "%s lacks cuInit, cuDeviceGetCount, cuDeviceGet or cuDeviceGetUuid",
			 path);
		_set_error(e, "load", 0, msg);
		dlclose(handle);
		handle = NULL;
		return -ENOSYS;
	}
	return 0;
}

static int _load_cupti(const char *path, struct pm_busy_error *e)
{
	static const char *const names[] = { "libcupti.so.13", "libcupti.so.12", "libcupti.so" };
	static const char *const dirs[] = {
		"/usr/local/cuda/extras/CUPTI/lib64/",
		"/usr/local/cuda/targets/x86_64-linux/lib/",
		"/usr/local/cuda/lib64/",
	};
	static void *handle;
	void **slot = (void **)&C;
	char msg[160];

	if (handle)
		return 0;
	if (!path || !*path)
		path = getenv("FLAMEWATCH_CUPTI");
	if (path && *path) {
		handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!handle)
			snprintf(msg, sizeof(msg), "cannot load CUPTI: %s", dlerror());
	} else {
		handle = _dlopen_first(names, sizeof(names) / sizeof(names[0]));
		for (size_t d = 0; !handle && d < sizeof(dirs) / sizeof(dirs[0]); d++) {
			for (size_t i = 0; !handle && i < sizeof(names) / sizeof(names[0]); i++) {
				char p[256];

				snprintf(p, sizeof(p), "%s%s", dirs[d], names[i]);
				handle = dlopen(p, RTLD_NOW | RTLD_LOCAL);
			}
		}
		if (!handle)
			snprintf(msg, sizeof(msg),
				 "cannot load CUPTI: no libcupti.so.13, .so.12 or .so found by the loader or "
				 "under /usr/local/cuda (set FLAMEWATCH_CUPTI or --cupti)");
	}
	if (!handle) {
		_set_error(e, "load", 0, msg);
		return -ENOENT;
	}
	for (size_t i = 0; i < sizeof(_cupti_symbols) / sizeof(_cupti_symbols[0]); i++) {
		slot[i] = dlsym(handle, _cupti_symbols[i]);
		if (!slot[i]) {
			snprintf(msg, sizeof(msg), "CUPTI lacks %s: too old for PM sampling", _cupti_symbols[i]);
			_set_error(e, "load", 0, msg);
			memset(&C, 0, sizeof(C));
			dlclose(handle);
			handle = NULL;
			return -ENOSYS;
		}
	}
	return 0;
}

struct pm_busy *pm_busy__open(const char *cupti_path, const char *cuda_path, struct pm_busy_error *err)
{
	struct pm_busy *pb = NULL;
	CUresult cr;
	int rc, n = 0;

	rc = _load_cuda(cuda_path, err);
	if (!rc)
		rc = _load_cupti(cupti_path, err);
	if (rc)
		goto fail;
	cr = D.init(0);
	if (cr != CUDA_SUCCESS) {
		rc = _cuda_fail(err, "cuInit", cr);
		goto fail;
	}
	cr = D.count(&n);
	if (cr != CUDA_SUCCESS) {
		rc = _cuda_fail(err, "cuDeviceGetCount", cr);
		goto fail;
	}
	if (n <= 0 || n > 1024) {
		_set_error(err, "devices", 0, n <= 0 ? "no CUDA device" : "implausible CUDA device count");
		rc = -ENODEV;
		goto fail;
	}
	pb = calloc(1, sizeof(*pb));
	if (pb)
		pb->uuid = calloc((size_t)n, sizeof(*pb->uuid));
	if (!pb || !pb->uuid) {
		_set_error(err, "memory", 0, "out of memory");
		rc = -ENOMEM;
		goto fail;
	}
	pb->ndev = n;
	for (int i = 0; i < n; i++) {
		const unsigned char *b;
		CUdevice dev;
		CUuuid u;

		memset(&u, 0, sizeof(u));
		if (D.get(&dev, i) != CUDA_SUCCESS || D.uuid(&u, dev) != CUDA_SUCCESS) {
			snprintf(pb->uuid[i], sizeof(pb->uuid[i]), "GPU-unknown");
			continue;
		}
		b = (const unsigned char *)u.bytes;
		snprintf(pb->uuid[i], sizeof(pb->uuid[i]),
			 "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1],
			 b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14],
			 b[15]);
	}
	{
		PARAMS(CUpti_Profiler_Initialize_Params, ip);
		CUptiResult r = C.cuptiProfilerInitialize(&ip);

		if (r) {
			rc = _cupti_fail(err, "cuptiProfilerInitialize", r);
			goto fail;
		}
		pb->profiler_initialized = 1;
	}
	return pb;
fail:
	pm_busy__close(pb);
	errno = -rc;
	return NULL;
}

void pm_busy__close(struct pm_busy *pb)
{
	if (!pb)
		return;
	if (pb->profiler_initialized) {
		PARAMS(CUpti_Profiler_DeInitialize_Params, dp);

		C.cuptiProfilerDeInitialize(&dp);
	}
	free(pb->uuid);
	free(pb);
}

int pm_busy__ndevices(const struct pm_busy *pb)
{
	return pb->ndev;
}

const char *pm_busy__uuid(const struct pm_busy *pb, int idx)
{
	return idx >= 0 && idx < pb->ndev ? pb->uuid[idx] : "";
}

const char *pm_busy__chip(const struct pm_busy_dev *d)
{
	return d->chip;
}

uint64_t pm_busy__interval_ns(const struct pm_busy_dev *d)
{
	return d->interval_ns;
}

void pm_busy__get_stats(const struct pm_busy_dev *d, struct pm_busy_stats *st)
{
	*st = d->st;
}

static const char *_level(CUpti_Profiler_Support_Level l)
{
	return l == CUPTI_PROFILER_CONFIGURATION_SUPPORTED ? NULL
	       : l == CUPTI_PROFILER_CONFIGURATION_DISABLED ? "disabled"
							    : "unsupported";
}

static int _supported(struct pm_busy_dev *d, struct pm_busy_error *e)
{
	PARAMS(CUpti_Profiler_DeviceSupported_Params, dp);
	static const char *const names[] = { "architecture", "sli", "vgpu", "confidential_compute", "cmp", "wsl" };
	char msg[160];
	size_t len;
	CUptiResult r;

	dp.cuDevice = d->cudev;
	dp.api = CUPTI_PROFILER_PM_SAMPLING;
	r = C.cuptiProfilerDeviceSupported(&dp);
	if (r)
		return _cupti_fail(e, "cuptiProfilerDeviceSupported", r);
	if (dp.isSupported == CUPTI_PROFILER_CONFIGURATION_SUPPORTED)
		return 0;
	/* Says which of CUPTI's reasons (MIG shows as a failed call instead). */
	{
		CUpti_Profiler_Support_Level levels[] = { dp.architecture, dp.sli, dp.vGpu,
							  dp.confidentialCompute, dp.cmp, dp.wsl };

		len = (size_t)snprintf(msg, sizeof(msg), "not supported:");
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			const char *why = _level(levels[i]);

			if (why && len < sizeof(msg))
				len += (size_t)snprintf(msg + len, sizeof(msg) - len, " %s %s", names[i], why);
		}
	}
	_set_error(e, "cuptiProfilerDeviceSupported", CUPTI_ERROR_NOT_SUPPORTED, msg);
	return -EOPNOTSUPP;
}

static int _chip_and_avail(struct pm_busy_dev *d, struct pm_busy_error *e)
{
	PARAMS(CUpti_Device_GetChipName_Params, cp);
	PARAMS(CUpti_PmSampling_GetCounterAvailability_Params, ap);
	CUptiResult r;

	cp.deviceIndex = (size_t)d->idx;
	r = C.cuptiDeviceGetChipName(&cp);
	if (r)
		return _cupti_fail(e, "cuptiDeviceGetChipName", r);
	if (!cp.pChipName || !*cp.pChipName) {
		_set_error(e, "cuptiDeviceGetChipName", 0, "no chip name");
		return -EIO;
	}
	/* The name goes into a line of text: keep it one word of plain characters. */
	snprintf(d->chip, sizeof(d->chip), "%s", cp.pChipName);
	for (char *c = d->chip; *c; c++)
		if (*c <= ' ' || *c > '~')
			*c = '_';
	ap.deviceIndex = (size_t)d->idx;
	r = C.cuptiPmSamplingGetCounterAvailability(&ap);
	if (r)
		return _cupti_fail(e, "cuptiPmSamplingGetCounterAvailability", r);
	if (!ap.counterAvailabilityImageSize || ap.counterAvailabilityImageSize > (64u << 20)) {
		_set_error(e, "cuptiPmSamplingGetCounterAvailability", 0, "implausible image size");
		return -EIO;
	}
	d->avail = calloc(1, ap.counterAvailabilityImageSize);
	if (!d->avail) {
		_set_error(e, "memory", 0, "out of memory");
		return -ENOMEM;
	}
	d->avail_size = ap.counterAvailabilityImageSize;
	ap.pCounterAvailabilityImage = d->avail;
	r = C.cuptiPmSamplingGetCounterAvailability(&ap);
	if (r)
		return _cupti_fail(e, "cuptiPmSamplingGetCounterAvailability", r);
	return 0;
}

static int _host_and_config_n(struct pm_busy_dev *d, size_t nmetrics, struct pm_busy_error *e)
{
	PARAMS(CUpti_Profiler_Host_Initialize_Params, hp);
	PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params, mp);
	PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params, sp);
	PARAMS(CUpti_Profiler_Host_GetConfigImage_Params, gp);
	PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params, pp);
	CUptiResult r;

	hp.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
	hp.pChipName = d->chip;
	hp.pCounterAvailabilityImage = d->avail;
	r = C.cuptiProfilerHostInitialize(&hp);
	if (r)
		return _cupti_fail(e, "cuptiProfilerHostInitialize", r);
	d->host = hp.pHostObject;
	mp.pHostObject = d->host;
	mp.ppMetricNames = _metrics;
	mp.numMetrics = nmetrics;
	r = C.cuptiProfilerHostConfigAddMetrics(&mp);
	if (r)
		return _cupti_fail(e, "cuptiProfilerHostConfigAddMetrics", r);
	sp.pHostObject = d->host;
	r = C.cuptiProfilerHostGetConfigImageSize(&sp);
	if (r)
		return _cupti_fail(e, "cuptiProfilerHostGetConfigImageSize", r);
	if (!sp.configImageSize || sp.configImageSize > (64u << 20)) {
		_set_error(e, "cuptiProfilerHostGetConfigImageSize", 0, "implausible image size");
		return -EIO;
	}
	d->config = calloc(1, sp.configImageSize);
	if (!d->config) {
		_set_error(e, "memory", 0, "out of memory");
		return -ENOMEM;
	}
	d->config_size = sp.configImageSize;
	gp.pHostObject = d->host;
	gp.configImageSize = d->config_size;
	gp.pConfigImage = d->config;
	r = C.cuptiProfilerHostGetConfigImage(&gp);
	if (r)
		return _cupti_fail(e, "cuptiProfilerHostGetConfigImage", r);
	pp.configImageSize = d->config_size;
	pp.pConfigImage = d->config;
	r = C.cuptiProfilerHostGetNumOfPasses(&pp);
	if (r)
		return _cupti_fail(e, "cuptiProfilerHostGetNumOfPasses", r);
	if (pp.numOfPasses != 1) {
		char msg[96];

		snprintf(msg, sizeof(msg), "the metrics need %zu passes; PM sampling takes one", pp.numOfPasses);
		_set_error(e, "cuptiProfilerHostGetNumOfPasses", CUPTI_ERROR_NOT_SUPPORTED, msg);
		return -EOPNOTSUPP;
	}
	d->nmetrics = nmetrics;
	return 0;
}

static void _host_free(struct pm_busy_dev *d)
{
	if (d->host) {
		PARAMS(CUpti_Profiler_Host_Deinitialize_Params, hp);

		hp.pHostObject = d->host;
		C.cuptiProfilerHostDeinitialize(&hp);
		d->host = NULL;
	}
	free(d->config);
	d->config = NULL;
	d->config_size = 0;
}

/* Every metric where the chip offers them in one pass, else the busy ones alone. */
static int _host_and_config(struct pm_busy_dev *d, struct pm_busy_error *e)
{
	if (!_host_and_config_n(d, NMETRICS, e))
		return 0;
	_host_free(d);
	return _host_and_config_n(d, NMETRICS_BASE, e);
}

static int _image_init(struct pm_busy_dev *d, struct pm_busy_error *e)
{
	PARAMS(CUpti_PmSampling_CounterDataImage_Initialize_Params, ip);
	CUptiResult r;

	ip.pPmSamplingObject = d->obj;
	ip.counterDataSize = d->image_size;
	ip.pCounterData = d->image;
	r = C.cuptiPmSamplingCounterDataImageInitialize(&ip);
	return r ? _cupti_fail(e, "cuptiPmSamplingCounterDataImageInitialize", r) : 0;
}

static int _cupti_now(uint64_t *t)
{
	return C.cuptiGetTimestamp(t) == CUPTI_SUCCESS ? 0 : -1;
}

/* CUPTI's clock against CLOCK_REALTIME (clock__offset_ns). */
static int _measure_offset(int64_t *offset, int have_old)
{
	return clock__offset_ns(_cupti_now, offset, have_old) ? -EIO : 0;
}

/* Enable to start: what a restart after an overflow repeats. */
static int _session_open(struct pm_busy_dev *d, struct pm_busy_error *e)
{
	CUptiResult r;
	int rc;

	{
		PARAMS(CUpti_PmSampling_Enable_Params, ep);

		ep.deviceIndex = (size_t)d->idx;
		r = C.cuptiPmSamplingEnable(&ep);
		if (r)
			return _cupti_fail(e, "cuptiPmSamplingEnable", r);
		if (!ep.pPmSamplingObject) {
			_set_error(e, "cuptiPmSamplingEnable", 0, "no sampling object");
			return -EIO;
		}
		d->obj = ep.pPmSamplingObject;
	}
	{
		PARAMS(CUpti_PmSampling_SetConfig_Params, sp);

		sp.pPmSamplingObject = d->obj;
		sp.configSize = d->config_size;
		sp.pConfig = d->config;
		sp.hardwareBufferSize = d->hw_buf_bytes;
		sp.samplingInterval = d->interval_ns;
		sp.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
		/* KEEP_OLDEST reports an overflow; KEEP_LATEST would hide it. */
		sp.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
		r = C.cuptiPmSamplingSetConfig(&sp);
		if (r)
			return _cupti_fail(e, "cuptiPmSamplingSetConfig", r);
	}
	if (!d->image) {
		PARAMS(CUpti_PmSampling_GetCounterDataSize_Params, cp);

		cp.pPmSamplingObject = d->obj;
		cp.pMetricNames = _metrics;
		cp.numMetrics = d->nmetrics;
		cp.maxSamples = d->max_samples;
		r = C.cuptiPmSamplingGetCounterDataSize(&cp);
		if (r)
			return _cupti_fail(e, "cuptiPmSamplingGetCounterDataSize", r);
		if (!cp.counterDataSize || cp.counterDataSize > (1ULL << 30)) {
			_set_error(e, "cuptiPmSamplingGetCounterDataSize", 0, "implausible image size");
			return -EIO;
		}
		d->image = calloc(1, cp.counterDataSize);
		if (!d->image) {
			_set_error(e, "memory", 0, "out of memory");
			return -ENOMEM;
		}
		d->image_size = cp.counterDataSize;
	}
	rc = _image_init(d, e);
	if (rc)
		return rc;
	if (_measure_offset(&d->offset_ns, 0)) {
		_set_error(e, "cuptiGetTimestamp", 0, "no timestamp");
		return -EIO;
	}
	{
		PARAMS(CUpti_PmSampling_Start_Params, sp);

		sp.pPmSamplingObject = d->obj;
		r = C.cuptiPmSamplingStart(&sp);
		if (r)
			return _cupti_fail(e, "cuptiPmSamplingStart", r);
		d->started = 1;
	}
	return 0;
}

static void _session_stop(struct pm_busy_dev *d)
{
	PARAMS(CUpti_PmSampling_Stop_Params, sp);

	if (!d->started)
		return;
	sp.pPmSamplingObject = d->obj;
	C.cuptiPmSamplingStop(&sp);
	d->started = 0;
}

static void _session_disable(struct pm_busy_dev *d)
{
	PARAMS(CUpti_PmSampling_Disable_Params, dp);

	_session_stop(d);
	if (!d->obj)
		return;
	dp.pPmSamplingObject = d->obj;
	C.cuptiPmSamplingDisable(&dp);
	d->obj = NULL;
}

static void _free(struct pm_busy_dev *d)
{
	_session_disable(d);
	_host_free(d);
	free(d->avail);
	free(d->image);
	free(d);
}

struct pm_busy_dev *pm_busy__start(struct pm_busy *pb, int idx, const struct pm_busy_config *cfg,
				   struct pm_busy_error *err)
{
	struct pm_busy_dev *d;
	uint64_t per_decode;
	CUresult cr;
	int rc;

	if (idx < 0 || idx >= pb->ndev || !cfg->interval_ns || cfg->decode_ns < cfg->interval_ns) {
		_set_error(err, "config", 0, "bad device or intervals");
		errno = EINVAL;
		return NULL;
	}
	d = calloc(1, sizeof(*d));
	if (!d) {
		_set_error(err, "memory", 0, "out of memory");
		errno = ENOMEM;
		return NULL;
	}
	d->pb = pb;
	d->idx = idx;
	d->interval_ns = cfg->interval_ns;
	/* The image holds one decode period and half again, so that a late
	 * decode still fits: its size, not the samples, sets the decode's cost. */
	per_decode = (cfg->decode_ns + cfg->interval_ns - 1) / cfg->interval_ns;
	d->max_samples = (uint32_t)(per_decode + per_decode / 2 + 1);
	/* Several decode periods of records: with KEEP_OLDEST a full buffer loses everything. */
	d->hw_buf_bytes = cfg->hw_buf_bytes ? cfg->hw_buf_bytes : PM_BUSY_DEFAULT_HW_BUF_BYTES;
	if (d->hw_buf_bytes < per_decode * 4 * HW_BYTES_PER_SAMPLE)
		d->hw_buf_bytes = per_decode * 4 * HW_BYTES_PER_SAMPLE;
	cr = D.get(&d->cudev, idx);
	if (cr != CUDA_SUCCESS) {
		rc = _cuda_fail(err, "cuDeviceGet", cr);
		goto fail;
	}
	rc = _supported(d, err);
	if (!rc)
		rc = _chip_and_avail(d, err);
	if (!rc)
		rc = _host_and_config(d, err);
	if (!rc)
		rc = _session_open(d, err);
	if (rc)
		goto fail;
	return d;
fail:
	_free(d);
	errno = -rc;
	return NULL;
}

/* The samples of one image, folded into sp. Returns how many it held. */
static size_t _read_image(struct pm_busy_dev *d, struct pm_spans *sp)
{
	PARAMS(CUpti_PmSampling_GetCounterDataInfo_Params, ip);
	CUptiResult r;
	size_t n;

	ip.pCounterDataImage = d->image;
	ip.counterDataImageSize = d->image_size;
	r = C.cuptiPmSamplingGetCounterDataInfo(&ip);
	if (r) {
		d->st.decode_errors++;
		pm_spans__set_lossy(sp);
		return 0;
	}
	n = ip.numCompletedSamples;
	if (n > d->max_samples || n > ip.numTotalSamples || n > ip.numPopulatedSamples) {
		d->st.decode_errors++;
		pm_spans__set_lossy(sp);
		if (n > d->max_samples)
			n = d->max_samples;
	}
	/* Populated but incomplete samples are lost at the reset that follows:
	 * the hole shows between this decode's covered range and the next. */
	for (size_t i = 0; i < n; i++) {
		PARAMS(CUpti_PmSampling_CounterData_GetSampleInfo_Params, si);
		PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params, ev);
		double v[NMETRICS] = { 0 }, frac = 0, dispatches = -1;
		int busy;

		si.pPmSamplingObject = d->obj;
		si.pCounterDataImage = d->image;
		si.counterDataImageSize = d->image_size;
		si.sampleIndex = i;
		ev.pHostObject = d->host;
		ev.pCounterDataImage = d->image;
		ev.counterDataImageSize = d->image_size;
		ev.rangeIndex = i;
		ev.ppMetricNames = _metrics;
		ev.numMetrics = d->nmetrics;
		ev.pMetricValues = v;
		if (C.cuptiPmSamplingCounterDataGetSampleInfo(&si) || C.cuptiProfilerHostEvaluateToGpuValues(&ev)) {
			d->st.decode_errors++;
			pm_spans__set_lossy(sp);
			continue;
		}
		if (si.endTimestamp <= si.startTimestamp) {
			d->st.decode_errors++;
			pm_spans__set_lossy(sp);
			continue;
		}
		if (isfinite(v[0]) && isfinite(v[1]) && v[1] > 0)
			frac = v[0] / v[1];
		if (d->nmetrics > NMETRICS_BASE && isfinite(v[2]) && v[2] >= 0 && v[2] < 1e12) {
			double len = (double)(si.endTimestamp - si.startTimestamp);

			dispatches = v[2];
			d->st.dispatches += (uint64_t)(v[2] + 0.5);
			frac -= v[2] * DISPATCH_EDGE_NS / len;
			if (frac < 0)
				frac = 0;
		}
		busy = frac >= PM_BUSY_MIN_FRACTION;
		d->st.samples++;
		d->st.busy_samples += (uint64_t)busy;
		pm_spans__add(sp, si.startTimestamp, si.endTimestamp, busy, frac, dispatches);
	}
	return n;
}

/*
 * Decodes until the hardware buffer is empty (the image may fill first).
 * Returns 1 when the session must start again: the buffer overflowed or a
 * call failed, and with KEEP_OLDEST CUPTI then decodes nothing more.
 */
static int _drain(struct pm_busy_dev *d, struct pm_spans *sp)
{
	struct pm_busy_error ignored;

	for (int round = 0; round < MAX_DECODE_ROUNDS; round++) {
		PARAMS(CUpti_PmSampling_DecodeData_Params, dp);
		size_t n;

		dp.pPmSamplingObject = d->obj;
		dp.pCounterDataImage = d->image;
		dp.counterDataImageSize = d->image_size;
		if (C.cuptiPmSamplingDecodeData(&dp)) {
			d->st.decode_errors++;
			pm_spans__set_lossy(sp);
			return 1;
		}
		n = _read_image(d, sp);
		/* A sample still being decoded stays in the image for the next pass. */
		if (n && _image_init(d, &ignored)) {
			d->st.decode_errors++;
			pm_spans__set_lossy(sp);
			return 1;
		}
		if (dp.overflow) {
			d->st.overflows++;
			pm_spans__set_lossy(sp);
			return 1;
		}
		if (dp.decodeStopReason != CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL || !n)
			return 0;
	}
	return 0;
}

int pm_busy__decode(struct pm_busy_dev *d, const struct pm_busy_sink *sink, struct pm_busy_error *err)
{
	uint64_t cpu0 = _now(CLOCK_THREAD_CPUTIME_ID);
	struct pm_spans sp;
	int rc = 0;

	if (!d->obj) {
		_set_error(err, "decode", 0, "not sampling");
		return -EINVAL;
	}
	/* Measured at every decode: CLOCK_REALTIME may be stepped or slewed. */
	_measure_offset(&d->offset_ns, 1);
	pm_spans__begin(&sp, sink, d->idx, d->offset_ns, d->interval_ns / 2);
	if (_drain(d, &sp)) {
		pm_spans__end(&sp);
		d->st.restarts++;
		_session_disable(d);
		rc = _session_open(d, err);
		if (rc)
			_session_disable(d);
	} else {
		pm_spans__end(&sp);
	}
	d->st.decode_cpu_ns += _now(CLOCK_THREAD_CPUTIME_ID) - cpu0;
	return rc;
}

void pm_busy__stop(struct pm_busy_dev *d, const struct pm_busy_sink *sink, struct pm_busy_stats *last)
{
	struct pm_spans sp;

	if (last)
		memset(last, 0, sizeof(*last));
	if (!d)
		return;
	if (d->started) {
		_session_stop(d);
		_measure_offset(&d->offset_ns, 1);
		pm_spans__begin(&sp, sink, d->idx, d->offset_ns, d->interval_ns / 2);
		_drain(d, &sp);
		pm_spans__end(&sp);
	}
	if (last)
		*last = d->st;
	_free(d);
}

#endif /* FW_HAVE_CUPTI */
