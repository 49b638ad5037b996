// SPDX-License-Identifier: Apache-2.0
/*
 * CUPTI PM sampling of one device (see pms.h). The order of calls follows
 * NVIDIA's documentation: profiler initialise, chip name, counter
 * availability, host object with the metrics, config image (one pass is
 * all PM sampling takes), enable, set config, counter data image, start;
 * then decode periodically, evaluate each completed sample and reset the
 * image; stop, a last decode, disable.
 *
 * cupti_profiler_host.h includes <string>; src/gpu/cshim/ holds an empty one
 * so that the header, which is otherwise C, compiles as C.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cupti_result.h>
#include <cupti_activity.h>
#include <cupti_target.h>
#include <cupti_profiler_target.h>
#include <cupti_profiler_host.h>
#include <cupti_pmsampling.h>

#include "pms.h"

#define SYM(name) __typeof__(name) *name
static struct {
	void *handle;
	SYM(cuptiGetResultString);
	SYM(cuptiGetTimestamp);
	SYM(cuptiProfilerInitialize);
	SYM(cuptiProfilerDeInitialize);
	SYM(cuptiProfilerDeviceSupported);
	SYM(cuptiDeviceGetChipName);
	SYM(cuptiPmSamplingGetCounterAvailability);
	SYM(cuptiProfilerHostInitialize);
	SYM(cuptiProfilerHostDeinitialize);
	SYM(cuptiProfilerHostGetBaseMetrics);
	SYM(cuptiProfilerHostGetMetricProperties);
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

/* Names in the order of C's pointers after handle: pms__load fills them by index. */
static const char *const _symbols[] = {
	"cuptiGetResultString", "cuptiGetTimestamp",
	"cuptiProfilerInitialize", "cuptiProfilerDeInitialize",
	"cuptiProfilerDeviceSupported", "cuptiDeviceGetChipName",
	"cuptiPmSamplingGetCounterAvailability",
	"cuptiProfilerHostInitialize", "cuptiProfilerHostDeinitialize",
	"cuptiProfilerHostGetBaseMetrics", "cuptiProfilerHostGetMetricProperties",
	"cuptiProfilerHostConfigAddMetrics", "cuptiProfilerHostGetConfigImageSize",
	"cuptiProfilerHostGetConfigImage", "cuptiProfilerHostGetNumOfPasses",
	"cuptiProfilerHostEvaluateToGpuValues",
	"cuptiPmSamplingEnable", "cuptiPmSamplingDisable", "cuptiPmSamplingSetConfig",
	"cuptiPmSamplingGetCounterDataSize", "cuptiPmSamplingCounterDataImageInitialize",
	"cuptiPmSamplingStart", "cuptiPmSamplingStop", "cuptiPmSamplingDecodeData",
	"cuptiPmSamplingGetCounterDataInfo", "cuptiPmSamplingCounterDataGetSampleInfo",
	NULL,
};

struct pms {
	struct pms_config cfg;
	char chip[32];
	char *metric_buf;
	const char *metrics[PMS_MAX_METRICS];
	size_t nmetrics;
	uint8_t *avail, *config, *counter_data;
	size_t avail_size, config_size, counter_data_size;
	CUpti_Profiler_Host_Object *host;
	CUpti_PmSampling_Object *obj;
	int profiler_initialized, started;

	pthread_t thread;
	int thread_running;
	pthread_mutex_t lock;
	int stop_requested;

	struct pms_sample *samples;
	size_t n, cap;
	FILE *stream;
	struct pms_stats st;
	struct pms_error err;
};

#define PARAMS(type, var) type var; memset(&var, 0, sizeof(var)); var.structSize = type##_STRUCT_SIZE

const char *pms__strerror(int code)
{
	const char *s = NULL;

	if (C.cuptiGetResultString && C.cuptiGetResultString((CUptiResult)code, &s) == CUPTI_SUCCESS && s)
		return s;
	return "unknown";
}

static int _fail(struct pms_error *e, const char *step, CUptiResult r)
{
	if (e) {
		snprintf(e->step, sizeof(e->step), "%s", step);
		e->code = (int)r;
		snprintf(e->msg, sizeof(e->msg), "%s", pms__strerror(r));
	}
	return r == CUPTI_ERROR_INSUFFICIENT_PRIVILEGES ? -EPERM : -EIO;
}

static uint64_t _now(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

const char *const *pms__symbols(void)
{
	return _symbols;
}

int pms__load(const char *path)
{
	static const char *const defaults[] = {
		"libcupti.so.13", "libcupti.so",
		"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
		"/usr/local/cuda/targets/x86_64-linux/lib/libcupti.so.13",
		"/usr/local/cuda/lib64/libcupti.so.13",
		NULL,
	};
	void **slot = (void **)&C.cuptiGetResultString;
	size_t i;

	_Static_assert(sizeof(C) == sizeof(void *) * (sizeof(_symbols) / sizeof(_symbols[0])),
		       "one pointer per name, plus the handle");
	if (C.handle)
		return 0;
	if (!path)
		path = getenv("PMS_CUPTI_PATH");
	if (path && *path) {
		C.handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	} else {
		for (i = 0; defaults[i] && !C.handle; i++)
			C.handle = dlopen(defaults[i], RTLD_NOW | RTLD_LOCAL);
	}
	if (!C.handle) {
		fprintf(stderr, "pms: cannot load CUPTI: %s\n", dlerror());
		return -ENOENT;
	}
	/* The struct's pointers follow _symbols' order. */
	for (i = 0; _symbols[i]; i++) {
		slot[i] = dlsym(C.handle, _symbols[i]);
		if (!slot[i]) {
			fprintf(stderr, "pms: CUPTI lacks %s\n", _symbols[i]);
			return -ENOSYS;
		}
	}
	return 0;
}

uint64_t pms__cupti_now(void)
{
	uint64_t t = 0;

	if (C.cuptiGetTimestamp && C.cuptiGetTimestamp(&t) != CUPTI_SUCCESS)
		t = 0;
	return t;
}

static int _profiler_init(struct pms_error *e)
{
	PARAMS(CUpti_Profiler_Initialize_Params, ip);
	CUptiResult r = C.cuptiProfilerInitialize(&ip);

	return r ? _fail(e, "cuptiProfilerInitialize", r) : 0;
}

static int _host_open(const char *chip, const uint8_t *avail, CUpti_Profiler_Host_Object **host,
		      struct pms_error *e)
{
	PARAMS(CUpti_Profiler_Host_Initialize_Params, hp);
	CUptiResult r;

	hp.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
	hp.pChipName = chip;
	hp.pCounterAvailabilityImage = avail;
	r = C.cuptiProfilerHostInitialize(&hp);
	if (r)
		return _fail(e, "cuptiProfilerHostInitialize", r);
	*host = hp.pHostObject;
	return 0;
}

static void _host_close(CUpti_Profiler_Host_Object *host)
{
	PARAMS(CUpti_Profiler_Host_Deinitialize_Params, dp);

	if (!host)
		return;
	dp.pHostObject = host;
	C.cuptiProfilerHostDeinitialize(&dp);
}

static int _chip_name(int device, char *chip, size_t len, struct pms_error *e)
{
	PARAMS(CUpti_Device_GetChipName_Params, cp);
	CUptiResult r;

	cp.deviceIndex = (size_t)device;
	r = C.cuptiDeviceGetChipName(&cp);
	if (r)
		return _fail(e, "cuptiDeviceGetChipName", r);
	snprintf(chip, len, "%s", cp.pChipName);
	return 0;
}

static int _avail_image(int device, uint8_t **img, size_t *size, struct pms_error *e)
{
	PARAMS(CUpti_PmSampling_GetCounterAvailability_Params, ap);
	CUptiResult r;

	ap.deviceIndex = (size_t)device;
	r = C.cuptiPmSamplingGetCounterAvailability(&ap);
	if (r)
		return _fail(e, "cuptiPmSamplingGetCounterAvailability(size)", r);
	*img = calloc(1, ap.counterAvailabilityImageSize);
	if (!*img)
		return -ENOMEM;
	ap.pCounterAvailabilityImage = *img;
	r = C.cuptiPmSamplingGetCounterAvailability(&ap);
	if (r)
		return _fail(e, "cuptiPmSamplingGetCounterAvailability", r);
	*size = ap.counterAvailabilityImageSize;
	return 0;
}

/* Splits "a,b,c" into at most PMS_MAX_METRICS names inside an owned copy. */
static char *_split(const char *list, const char **out, size_t *n)
{
	char *buf = strdup(list), *save = NULL, *tok;

	*n = 0;
	if (!buf)
		return NULL;
	for (tok = strtok_r(buf, ",", &save); tok && *n < PMS_MAX_METRICS; tok = strtok_r(NULL, ",", &save))
		out[(*n)++] = tok;
	return buf;
}

static int _config_image(CUpti_Profiler_Host_Object *host, const char **metrics, size_t n, uint8_t **img,
			 size_t *size, size_t *passes, struct pms_error *e)
{
	PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params, mp);
	PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params, sp);
	PARAMS(CUpti_Profiler_Host_GetConfigImage_Params, gp);
	PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params, pp);
	CUptiResult r;

	mp.pHostObject = host;
	mp.ppMetricNames = metrics;
	mp.numMetrics = n;
	r = C.cuptiProfilerHostConfigAddMetrics(&mp);
	if (r)
		return _fail(e, "cuptiProfilerHostConfigAddMetrics", r);
	sp.pHostObject = host;
	r = C.cuptiProfilerHostGetConfigImageSize(&sp);
	if (r)
		return _fail(e, "cuptiProfilerHostGetConfigImageSize", r);
	*img = calloc(1, sp.configImageSize);
	if (!*img)
		return -ENOMEM;
	gp.pHostObject = host;
	gp.configImageSize = sp.configImageSize;
	gp.pConfigImage = *img;
	r = C.cuptiProfilerHostGetConfigImage(&gp);
	if (r)
		return _fail(e, "cuptiProfilerHostGetConfigImage", r);
	*size = sp.configImageSize;
	pp.configImageSize = *size;
	pp.pConfigImage = *img;
	r = C.cuptiProfilerHostGetNumOfPasses(&pp);
	if (r)
		return _fail(e, "cuptiProfilerHostGetNumOfPasses", r);
	*passes = pp.numOfPasses;
	return 0;
}

int pms__passes(const char *chip, const char *metrics, size_t *passes, struct pms_error *e)
{
	CUpti_Profiler_Host_Object *host = NULL;
	const char *names[PMS_MAX_METRICS];
	uint8_t *img = NULL;
	size_t n, size;
	char *buf;
	int err;

	buf = _split(metrics, names, &n);
	if (!buf)
		return -ENOMEM;
	/* The host API needs no profiler initialisation, nor a GPU. */
	err = _host_open(chip, NULL, &host, e);
	if (!err)
		err = _config_image(host, names, n, &img, &size, passes, e);
	_host_close(host);
	free(img);
	free(buf);
	return err;
}

static const char *_type_name(CUpti_MetricType t)
{
	return t == CUPTI_METRIC_TYPE_COUNTER ? "counter" : t == CUPTI_METRIC_TYPE_RATIO ? "ratio" : "throughput";
}

int pms__list(const char *chip, int device, const char *pattern, int describe)
{
	CUpti_Profiler_Host_Object *host = NULL;
	struct pms_error e = { 0 };
	uint8_t *avail = NULL;
	size_t avail_size = 0;
	char name[32];
	int err = 0, t;

	if (!chip) {
		err = _profiler_init(&e);
		if (!err)
			err = _chip_name(device, name, sizeof(name), &e);
		if (!err)
			err = _avail_image(device, &avail, &avail_size, &e);
		chip = name;
	}
	if (!err)
		err = _host_open(chip, avail, &host, &e);
	if (err) {
		printf("list: %s failed: %s (%d)\n", e.step, e.msg, e.code);
		free(avail);
		return err;
	}
	printf("chip %s, counter availability image %zu bytes\n", chip, avail_size);
	for (t = 0; t < CUPTI_METRIC_TYPE__COUNT; t++) {
		PARAMS(CUpti_Profiler_Host_GetBaseMetrics_Params, bp);
		size_t i;

		bp.pHostObject = host;
		bp.metricType = (CUpti_MetricType)t;
		if (C.cuptiProfilerHostGetBaseMetrics(&bp))
			continue;
		for (i = 0; i < bp.numMetrics; i++) {
			PARAMS(CUpti_Profiler_Host_GetMetricProperties_Params, mp);
			const char *m = bp.ppMetricNames[i];

			if (pattern && !strstr(m, pattern))
				continue;
			if (!describe) {
				printf("%s %s\n", _type_name((CUpti_MetricType)t), m);
				continue;
			}
			mp.pHostObject = host;
			mp.pMetricName = m;
			if (C.cuptiProfilerHostGetMetricProperties(&mp) == CUPTI_SUCCESS)
				printf("%s %s [%s, %s]: %s\n", _type_name((CUpti_MetricType)t), m,
				       mp.pHwUnit ? mp.pHwUnit : "", mp.pDimUnit ? mp.pDimUnit : "",
				       mp.pDescription ? mp.pDescription : "");
		}
	}
	_host_close(host);
	free(avail);
	return 0;
}

static int _counter_data_init(struct pms *p)
{
	PARAMS(CUpti_PmSampling_CounterDataImage_Initialize_Params, ip);
	CUptiResult r;

	ip.pPmSamplingObject = p->obj;
	ip.counterDataSize = p->counter_data_size;
	ip.pCounterData = p->counter_data;
	r = C.cuptiPmSamplingCounterDataImageInitialize(&ip);
	return r ? _fail(&p->err, "cuptiPmSamplingCounterDataImageInitialize", r) : 0;
}

struct pms *pms__open(const struct pms_config *cfg, struct pms_error *err)
{
	struct pms *p = calloc(1, sizeof(*p));
	struct pms_error *e;
	CUptiResult r;
	size_t passes = 0;
	int rc;

	if (!p) {
		errno = ENOMEM;
		return NULL;
	}
	e = &p->err;
	p->cfg = *cfg;
	pthread_mutex_init(&p->lock, NULL);
	p->metric_buf = _split(cfg->metrics, p->metrics, &p->nmetrics);
	if (!p->metric_buf || !p->nmetrics) {
		rc = -EINVAL;
		snprintf(e->step, sizeof(e->step), "metrics");
		goto fail;
	}
	rc = _profiler_init(e);
	if (rc)
		goto fail;
	p->profiler_initialized = 1;
	{
		PARAMS(CUpti_Profiler_DeviceSupported_Params, dp);

		dp.cuDevice = (CUdevice)cfg->device;
		dp.api = CUPTI_PROFILER_PM_SAMPLING;
		r = C.cuptiProfilerDeviceSupported(&dp);
		if (r) {
			rc = _fail(e, "cuptiProfilerDeviceSupported", r);
			goto fail;
		}
		if (dp.isSupported != CUPTI_PROFILER_CONFIGURATION_SUPPORTED) {
			snprintf(e->step, sizeof(e->step), "cuptiProfilerDeviceSupported");
			snprintf(e->msg, sizeof(e->msg),
				 "not supported: arch %d sli %d vgpu %d cc %d cmp %d wsl %d",
				 dp.architecture, dp.sli, dp.vGpu, dp.confidentialCompute, dp.cmp, dp.wsl);
			rc = -EOPNOTSUPP;
			goto fail;
		}
	}
	rc = _chip_name(cfg->device, p->chip, sizeof(p->chip), e);
	if (!rc)
		rc = _avail_image(cfg->device, &p->avail, &p->avail_size, e);
	if (!rc)
		rc = _host_open(p->chip, p->avail, &p->host, e);
	if (!rc)
		rc = _config_image(p->host, p->metrics, p->nmetrics, &p->config, &p->config_size, &passes, e);
	if (rc)
		goto fail;
	if (passes != 1) {
		snprintf(e->step, sizeof(e->step), "passes");
		snprintf(e->msg, sizeof(e->msg), "the metrics need %zu passes; PM sampling takes one", passes);
		rc = -EINVAL;
		goto fail;
	}
	{
		PARAMS(CUpti_PmSampling_Enable_Params, ep);

		ep.deviceIndex = (size_t)cfg->device;
		r = C.cuptiPmSamplingEnable(&ep);
		if (r) {
			rc = _fail(e, "cuptiPmSamplingEnable", r);
			goto fail;
		}
		p->obj = ep.pPmSamplingObject;
	}
	{
		PARAMS(CUpti_PmSampling_SetConfig_Params, sp);

		sp.pPmSamplingObject = p->obj;
		sp.configSize = p->config_size;
		sp.pConfig = p->config;
		sp.hardwareBufferSize = cfg->hw_buf_bytes;
		sp.samplingInterval = cfg->interval_ns;
		sp.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
		sp.hwBufferAppendMode = cfg->keep_latest ? CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_LATEST
							 : CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_OLDEST;
		r = C.cuptiPmSamplingSetConfig(&sp);
		if (r) {
			rc = _fail(e, "cuptiPmSamplingSetConfig", r);
			goto fail;
		}
	}
	{
		PARAMS(CUpti_PmSampling_GetCounterDataSize_Params, cp);

		cp.pPmSamplingObject = p->obj;
		cp.pMetricNames = p->metrics;
		cp.numMetrics = p->nmetrics;
		cp.maxSamples = cfg->max_samples;
		r = C.cuptiPmSamplingGetCounterDataSize(&cp);
		if (r) {
			rc = _fail(e, "cuptiPmSamplingGetCounterDataSize", r);
			goto fail;
		}
		p->counter_data_size = cp.counterDataSize;
		p->counter_data = calloc(1, cp.counterDataSize);
		if (!p->counter_data) {
			rc = -ENOMEM;
			goto fail;
		}
	}
	rc = _counter_data_init(p);
	if (rc)
		goto fail;
	p->st.config_image_bytes = p->config_size;
	p->st.counter_data_bytes = p->counter_data_size;
	p->st.counter_avail_bytes = p->avail_size;
	return p;
fail:
	if (err)
		*err = *e;
	pms__close(p);
	errno = -rc;
	return NULL;
}

static int _append(struct pms *p, const struct pms_sample *s)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 4096;
		struct pms_sample *n = realloc(p->samples, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		p->samples = n;
		p->cap = cap;
	}
	p->samples[p->n++] = *s;
	if (p->stream) {
		size_t i;

		fprintf(p->stream, "%llu,%llu", (unsigned long long)s->start, (unsigned long long)s->end);
		for (i = 0; i < p->nmetrics; i++)
			fprintf(p->stream, ",%.6g", s->v[i]);
		fputc('\n', p->stream);
	}
	return 0;
}

/*
 * One drain of the hardware buffer: decode into the counter data image,
 * evaluate its completed samples, reset the image, again while CUPTI says
 * the image was full. Returns 0, or -EIO after a failed decode (the
 * hardware buffer overflowed when CUPTI says OUT_OF_MEMORY).
 */
static int _drain(struct pms *p)
{
	for (;;) {
		PARAMS(CUpti_PmSampling_DecodeData_Params, dp);
		PARAMS(CUpti_PmSampling_GetCounterDataInfo_Params, ip);
		uint64_t t0;
		CUptiResult r;
		size_t i;

		dp.pPmSamplingObject = p->obj;
		dp.pCounterDataImage = p->counter_data;
		dp.counterDataImageSize = p->counter_data_size;
		r = C.cuptiPmSamplingDecodeData(&dp);
		p->st.decode_calls++;
		if (r) {
			p->st.decode_errors++;
			return _fail(&p->err, "cuptiPmSamplingDecodeData", r);
		}
		if (dp.overflow)
			p->st.overflow++;
		ip.pCounterDataImage = p->counter_data;
		ip.counterDataImageSize = p->counter_data_size;
		r = C.cuptiPmSamplingGetCounterDataInfo(&ip);
		if (r)
			return _fail(&p->err, "cuptiPmSamplingGetCounterDataInfo", r);
		t0 = _now(CLOCK_THREAD_CPUTIME_ID);
		for (i = 0; i < ip.numCompletedSamples; i++) {
			PARAMS(CUpti_PmSampling_CounterData_GetSampleInfo_Params, sp);
			PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params, ep);
			struct pms_sample s;

			memset(&s, 0, sizeof(s));
			sp.pPmSamplingObject = p->obj;
			sp.pCounterDataImage = p->counter_data;
			sp.counterDataImageSize = p->counter_data_size;
			sp.sampleIndex = i;
			r = C.cuptiPmSamplingCounterDataGetSampleInfo(&sp);
			if (r)
				return _fail(&p->err, "cuptiPmSamplingCounterDataGetSampleInfo", r);
			ep.pHostObject = p->host;
			ep.pCounterDataImage = p->counter_data;
			ep.counterDataImageSize = p->counter_data_size;
			ep.rangeIndex = i;
			ep.ppMetricNames = p->metrics;
			ep.numMetrics = p->nmetrics;
			ep.pMetricValues = s.v;
			r = C.cuptiProfilerHostEvaluateToGpuValues(&ep);
			if (r)
				return _fail(&p->err, "cuptiProfilerHostEvaluateToGpuValues", r);
			s.start = sp.startTimestamp;
			s.end = sp.endTimestamp;
			if (_append(p, &s))
				return -ENOMEM;
		}
		p->st.eval_ns += _now(CLOCK_THREAD_CPUTIME_ID) - t0;
		p->st.samples += ip.numCompletedSamples;
		if (ip.numPopulatedSamples > ip.numCompletedSamples)
			p->st.incomplete += ip.numPopulatedSamples - ip.numCompletedSamples;
		if (ip.numCompletedSamples > p->st.max_per_decode)
			p->st.max_per_decode = ip.numCompletedSamples;
		/* A sample still being decoded stays in the image for the next pass. */
		if (ip.numCompletedSamples) {
			int rc = _counter_data_init(p);

			if (rc)
				return rc;
		}
		if (dp.decodeStopReason != CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL)
			return 0;
		p->st.decode_full++;
	}
}

static void *_decode_main(void *arg)
{
	struct pms *p = arg;
	uint64_t w0 = _now(CLOCK_MONOTONIC), next = w0;
	int stop = 0;

	while (!stop) {
		struct timespec at;

		next += (uint64_t)p->cfg.decode_ms * 1000000ull;
		at.tv_sec = (time_t)(next / 1000000000ull);
		at.tv_nsec = (long)(next % 1000000000ull);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
		pthread_mutex_lock(&p->lock);
		stop = p->stop_requested;
		pthread_mutex_unlock(&p->lock);
		if (stop)
			break;
		/* A failed decode is counted; the next one may succeed. */
		_drain(p);
		if (p->stream)
			fflush(p->stream);
	}
	p->st.decode_cpu_ns = _now(CLOCK_THREAD_CPUTIME_ID);
	p->st.decode_wall_ns = _now(CLOCK_MONOTONIC) - w0;
	return NULL;
}

int pms__start(struct pms *p)
{
	PARAMS(CUpti_PmSampling_Start_Params, sp);
	CUptiResult r;

	sp.pPmSamplingObject = p->obj;
	r = C.cuptiPmSamplingStart(&sp);
	if (r)
		return _fail(&p->err, "cuptiPmSamplingStart", r);
	p->started = 1;
	p->stop_requested = 0;
	if (pthread_create(&p->thread, NULL, _decode_main, p))
		return -EAGAIN;
	p->thread_running = 1;
	return 0;
}

int pms__stop(struct pms *p)
{
	PARAMS(CUpti_PmSampling_Stop_Params, sp);
	uint64_t cpu;
	CUptiResult r;
	int rc = 0;

	if (!p || !p->started)
		return 0;
	if (p->thread_running) {
		pthread_mutex_lock(&p->lock);
		p->stop_requested = 1;
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
		p->thread_running = 0;
	}
	sp.pPmSamplingObject = p->obj;
	r = C.cuptiPmSamplingStop(&sp);
	if (r)
		rc = _fail(&p->err, "cuptiPmSamplingStop", r);
	p->started = 0;
	/* The last records, decoded on this thread: its CPU counts too. */
	cpu = _now(CLOCK_THREAD_CPUTIME_ID);
	_drain(p);
	p->st.decode_cpu_ns += _now(CLOCK_THREAD_CPUTIME_ID) - cpu;
	if (p->stream)
		fflush(p->stream);
	return rc;
}

void pms__close(struct pms *p)
{
	if (!p)
		return;
	pms__stop(p);
	if (p->obj) {
		PARAMS(CUpti_PmSampling_Disable_Params, dp);

		dp.pPmSamplingObject = p->obj;
		C.cuptiPmSamplingDisable(&dp);
	}
	_host_close(p->host);
	if (p->profiler_initialized) {
		PARAMS(CUpti_Profiler_DeInitialize_Params, dp);

		C.cuptiProfilerDeInitialize(&dp);
	}
	free(p->avail);
	free(p->config);
	free(p->counter_data);
	free(p->samples);
	free(p->metric_buf);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

const struct pms_sample *pms__samples(const struct pms *p, size_t *n)
{
	*n = p->n;
	return p->samples;
}

size_t pms__nmetrics(const struct pms *p)
{
	return p->nmetrics;
}

const char *pms__metric(const struct pms *p, size_t i)
{
	return i < p->nmetrics ? p->metrics[i] : NULL;
}

void pms__get_stats(const struct pms *p, struct pms_stats *st)
{
	*st = p->st;
}

const struct pms_error *pms__last_error(const struct pms *p)
{
	return &p->err;
}

const char *pms__chip(const struct pms *p)
{
	return p->chip;
}

void pms__set_stream(struct pms *p, void *file)
{
	p->stream = file;
}

/*
 * Activity records beside PM sampling: the probe's check that both work in
 * one process, and a second truth on CUPTI's own clock. Not part of what a
 * PM sampling client needs, so looked up apart from _symbols.
 */
static struct {
	SYM(cuptiActivityRegisterCallbacks);
	SYM(cuptiActivityEnable);
	SYM(cuptiActivityDisable);
	SYM(cuptiActivityFlushAll);
	SYM(cuptiActivityGetNextRecord);
	FILE *out;
} A;

#define ACT_BUF (8u << 20)

static void CUPTIAPI _act_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
	*buf = aligned_alloc(8, ACT_BUF);
	*size = *buf ? ACT_BUF : 0;
	*max_records = 0;
}

static void CUPTIAPI _act_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size, size_t valid)
{
	CUpti_Activity *rec = NULL;

	(void)ctx;
	(void)stream;
	(void)size;
	while (A.cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS) {
		if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) {
			const CUpti_ActivityKernel10 *k = (const void *)rec;

			fprintf(A.out, "kernel,%llu,%llu\n", (unsigned long long)k->start, (unsigned long long)k->end);
		} else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
			const CUpti_ActivityMemcpy6 *m = (const void *)rec;

			fprintf(A.out, "memcpy,%llu,%llu\n", (unsigned long long)m->start, (unsigned long long)m->end);
		}
	}
	free(buf);
}

int pms__activity_start(void *file)
{
	CUptiResult r;

	if (!C.handle)
		return -ENOENT;
	A.cuptiActivityRegisterCallbacks = dlsym(C.handle, "cuptiActivityRegisterCallbacks");
	A.cuptiActivityEnable = dlsym(C.handle, "cuptiActivityEnable");
	A.cuptiActivityDisable = dlsym(C.handle, "cuptiActivityDisable");
	A.cuptiActivityFlushAll = dlsym(C.handle, "cuptiActivityFlushAll");
	A.cuptiActivityGetNextRecord = dlsym(C.handle, "cuptiActivityGetNextRecord");
	if (!A.cuptiActivityRegisterCallbacks || !A.cuptiActivityEnable || !A.cuptiActivityDisable ||
	    !A.cuptiActivityFlushAll || !A.cuptiActivityGetNextRecord)
		return -ENOSYS;
	A.out = file;
	fprintf(A.out, "kind,start,end\n");
	r = A.cuptiActivityRegisterCallbacks(_act_requested, _act_completed);
	if (!r)
		r = A.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (!r)
		r = A.cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
	if (r) {
		fprintf(stderr, "pms: activity: %s\n", pms__strerror(r));
		return -EIO;
	}
	return 0;
}

int pms__activity_stop(void)
{
	if (!A.out)
		return 0;
	A.cuptiActivityFlushAll(1);
	A.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	A.cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY);
	A.out = NULL;
	return 0;
}
