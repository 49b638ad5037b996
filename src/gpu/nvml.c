// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "agent/cgroup.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/profile.h"
#include "gpu/nvml.h"
#include "gpu/nvml_api.h"


/* Per-process labels, looked up once while the process stays on a GPU. */
struct proc_info {
	unsigned int pid;
	uint64_t seen;		/* round */
	char comm[17];
	char container[80], pod[48];
};

struct gpu {
	nvmlDevice_t dev;
	char index[12], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	uint32_t unavailable;		/* bit per enum nvml_metric */
	unsigned long long last_util_us, last_mem_util_us, last_proc_us;
	bool samples_ok;		/* nvmlDeviceGetSamples works here */
};

struct nvml {
	void *lib;
	struct {
		nvmlShutdown_fn shutdown;
		nvmlErrorString_fn error_string;
		nvmlDeviceGetUtilizationRates_fn utilization_rates;
		nvmlDeviceGetSamples_fn samples;
		nvmlDeviceGetMemoryInfo_fn memory_info;
		nvmlDeviceGetMemoryInfo_v2_fn memory_info_v2;
		nvmlDeviceGetClock_fn clock_info, max_clock_info;
		nvmlDeviceGetUInt_fn power_usage, power_limit;
		nvmlDeviceGetTemperature_fn temperature;
		nvmlDeviceGetTemperatureThreshold_fn temperature_threshold;
		nvmlDeviceGetPcieThroughput_fn pcie_throughput;
		nvmlDeviceGetULL_fn clock_reasons, energy;
		nvmlDeviceGetMigMode_fn mig_mode;
		nvmlDeviceGetProcessUtilization_fn process_utilization;
		nvmlDeviceGetRunningProcesses_fn compute_procs, graphics_procs;
	} f;
	struct gpu *gpus;
	unsigned int ngpus;
	struct proc_info *procs;
	size_t nprocs, cap_procs;
	nvmlProcessUtilizationSample_t *putil;
	unsigned int cap_putil;
	nvmlProcessInfo_t *pinfo;
	unsigned int cap_pinfo;
	nvmlSample_t *samples;
	unsigned int cap_samples;
	struct nvml_stats stats;
};

static void *_sym(void *lib, const char *const *names)
{
	for (; *names; names++) {
		void *p = dlsym(lib, *names);

		if (p)
			return p;
	}
	return NULL;
}

#define SYM(lib, ...) _sym(lib, (const char *const[]){ __VA_ARGS__, NULL })

static const char *_err(const struct nvml *n, nvmlReturn_t r)
{
	const char *s = n->f.error_string ? n->f.error_string(r) : NULL;

	return s ? s : "unknown error";
}

static void _unavailable(struct nvml *n, struct gpu *g, enum nvml_metric m, const char *why)
{
	if (g->unavailable & (1u << m))
		return;
	g->unavailable |= 1u << m;
	pr_info("nvml: GPU %s: %s unavailable (%s)\n", g->index, gpu_metric__name(m), why);
}

/* Whether the answer r to the query of metric m means "never ask again". */
static bool _check(struct nvml *n, struct gpu *g, enum nvml_metric m, nvmlReturn_t r)
{
	if (r == NVML_SUCCESS)
		return true;
	if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_NO_PERMISSION ||
	    r == NVML_ERROR_INVALID_ARGUMENT)
		_unavailable(n, g, m, _err(n, r));
	else
		pr_debug("nvml: GPU %s: %s: %s\n", g->index, gpu_metric__name(m), _err(n, r));
	return false;
}

static bool _want(const struct gpu *g, enum nvml_metric m)
{
	return !(g->unavailable & (1u << m));
}

struct nvml *nvml__open(const char *path)
{
	struct nvml *n = calloc(1, sizeof(*n));
	nvmlInit_fn init;
	nvmlDeviceGetCount_fn count;
	nvmlDeviceGetHandleByIndex_fn handle;
	nvmlDeviceGetString_fn get_uuid, get_name;
	nvmlReturn_t r;
	unsigned int cnt = 0;
	int e = ENOMEM;

	if (!n)
		goto err;
	if (!path)
		path = "libnvidia-ml.so.1";
	n->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!n->lib) {
		pr_info("nvml: no GPU metrics: cannot load %s (%s)\n", path, dlerror());
		e = ENOENT;
		goto err;
	}
	init = SYM(n->lib, "nvmlInit_v2", "nvmlInit");
	count = SYM(n->lib, "nvmlDeviceGetCount_v2", "nvmlDeviceGetCount");
	handle = SYM(n->lib, "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex");
	get_uuid = SYM(n->lib, "nvmlDeviceGetUUID");
	get_name = SYM(n->lib, "nvmlDeviceGetName");
	n->f.shutdown = SYM(n->lib, "nvmlShutdown");
	n->f.error_string = SYM(n->lib, "nvmlErrorString");
	if (!init || !count || !handle) {
		pr_warn("nvml: no GPU metrics: %s lacks nvmlInit/nvmlDeviceGetCount/"
			"nvmlDeviceGetHandleByIndex\n", path);
		e = ENOENT;
		goto err;
	}
	n->f.utilization_rates = SYM(n->lib, "nvmlDeviceGetUtilizationRates");
	n->f.samples = SYM(n->lib, "nvmlDeviceGetSamples");
	n->f.memory_info = SYM(n->lib, "nvmlDeviceGetMemoryInfo");
	n->f.memory_info_v2 = SYM(n->lib, "nvmlDeviceGetMemoryInfo_v2");
	n->f.clock_info = SYM(n->lib, "nvmlDeviceGetClockInfo");
	n->f.max_clock_info = SYM(n->lib, "nvmlDeviceGetMaxClockInfo");
	n->f.power_usage = SYM(n->lib, "nvmlDeviceGetPowerUsage");
	n->f.power_limit = SYM(n->lib, "nvmlDeviceGetEnforcedPowerLimit");
	n->f.temperature = SYM(n->lib, "nvmlDeviceGetTemperature");
	n->f.temperature_threshold = SYM(n->lib, "nvmlDeviceGetTemperatureThreshold");
	n->f.pcie_throughput = SYM(n->lib, "nvmlDeviceGetPcieThroughput");
	/* Renamed in CUDA 12.2's NVML; the old name stays for older drivers. */
	n->f.clock_reasons = SYM(n->lib, "nvmlDeviceGetCurrentClocksEventReasons",
				 "nvmlDeviceGetCurrentClocksThrottleReasons");
	n->f.energy = SYM(n->lib, "nvmlDeviceGetTotalEnergyConsumption");
	n->f.mig_mode = SYM(n->lib, "nvmlDeviceGetMigMode");
	n->f.process_utilization = SYM(n->lib, "nvmlDeviceGetProcessUtilization");
	n->f.compute_procs = SYM(n->lib, "nvmlDeviceGetComputeRunningProcesses_v3",
				 "nvmlDeviceGetComputeRunningProcesses_v2");
	n->f.graphics_procs = SYM(n->lib, "nvmlDeviceGetGraphicsRunningProcesses_v3",
				  "nvmlDeviceGetGraphicsRunningProcesses_v2");

	r = init();
	if (r != NVML_SUCCESS) {
		pr_warn("nvml: no GPU metrics: nvmlInit: %s\n", _err(n, r));
		n->f.shutdown = NULL;
		e = EIO;
		goto err;
	}
	r = count(&cnt);
	if (r != NVML_SUCCESS) {
		pr_warn("nvml: no GPU metrics: nvmlDeviceGetCount: %s\n", _err(n, r));
		e = EIO;
		goto err;
	}
	n->gpus = calloc(cnt ? cnt : 1, sizeof(*n->gpus));
	if (!n->gpus)
		goto err;
	for (unsigned int i = 0; i < cnt; i++) {
		struct gpu *g = &n->gpus[n->ngpus];

		r = handle(i, &g->dev);
		if (r != NVML_SUCCESS) {
			pr_warn("nvml: GPU %u skipped: %s\n", i, _err(n, r));
			continue;
		}
		snprintf(g->index, sizeof(g->index), "%u", i);
		if (!get_uuid || get_uuid(g->dev, g->uuid, sizeof(g->uuid)) != NVML_SUCCESS)
			g->uuid[0] = '\0';
		if (!get_name || get_name(g->dev, g->name, sizeof(g->name)) != NVML_SUCCESS)
			g->name[0] = '\0';
		g->uuid[sizeof(g->uuid) - 1] = g->name[sizeof(g->name) - 1] = '\0';
		g->samples_ok = n->f.samples != NULL;
		n->ngpus++;
	}

	/* Missing symbols: unavailable everywhere, said once per metric. */
	{
		static const struct {
			size_t off;
			enum nvml_metric m[4];
		} need[] = {
#define F(x) offsetof(struct nvml, f.x)
			{ F(memory_info), { NVML_M_MEM_USED, NVML_M_MEM_TOTAL } }, /* v1 always exists */
			{ F(clock_info), { NVML_M_SM_CLOCK, NVML_M_MEM_CLOCK } },
			{ F(max_clock_info), { NVML_M_SM_CLOCK_MAX, NVML_M_MEM_CLOCK_MAX } },
			{ F(power_usage), { NVML_M_POWER } },
			{ F(power_limit), { NVML_M_POWER_LIMIT } },
			{ F(temperature), { NVML_M_TEMP } },
			{ F(temperature_threshold), { NVML_M_TEMP_SLOWDOWN } },
			{ F(pcie_throughput), { NVML_M_PCIE_TX, NVML_M_PCIE_RX } },
			{ F(clock_reasons), { NVML_M_THROTTLE } },
			{ F(energy), { NVML_M_ENERGY } },
			{ F(mig_mode), { NVML_M_MIG_MODE } },
			{ F(process_utilization), { NVML_M_PROC_UTIL, NVML_M_PROC_MEM_UTIL } },
#undef F
		};

		for (size_t k = 0; k < sizeof(need) / sizeof(need[0]); k++) {
			if (*(void **)((char *)n + need[k].off))
				continue;
			for (int j = 0; j < 4 && (j == 0 || need[k].m[j]); j++) {
				pr_info("nvml: %s unavailable (%s has no such function)\n",
					gpu_metric__name(need[k].m[j]), path);
				for (unsigned int i = 0; i < n->ngpus; i++)
					n->gpus[i].unavailable |= 1u << need[k].m[j];
			}
		}
		if (!n->f.utilization_rates && !n->f.samples)
			for (unsigned int i = 0; i < n->ngpus; i++)
				n->gpus[i].unavailable |= 1u << NVML_M_UTIL | 1u << NVML_M_MEM_UTIL;
		if (!n->f.compute_procs && !n->f.graphics_procs)
			for (unsigned int i = 0; i < n->ngpus; i++)
				n->gpus[i].unavailable |= 1u << NVML_M_PROC_MEM_USED;
	}
	pr_info("nvml: %u GPU%s%s%s\n", n->ngpus, n->ngpus == 1 ? "" : "s",
		n->ngpus ? ", first: " : "", n->ngpus ? n->gpus[0].name : "");
	return n;
err:
	nvml__close(n);
	errno = e;
	return NULL;
}

void nvml__close(struct nvml *n)
{
	if (!n)
		return;
	if (n->lib) {
		if (n->f.shutdown)
			n->f.shutdown();
		dlclose(n->lib);
	}
	free(n->gpus);
	free(n->procs);
	free(n->putil);
	free(n->pinfo);
	free(n->samples);
	free(n);
}

unsigned int nvml__ngpus(const struct nvml *n)
{
	return n ? n->ngpus : 0;
}

int nvml__available(const struct nvml *n, unsigned int gpu, enum nvml_metric m)
{
	return n && gpu < n->ngpus && (unsigned)m < NVML_M_MAX && _want(&n->gpus[gpu], m);
}

void nvml__stats(const struct nvml *n, struct nvml_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (n)
		*out = n->stats;
}

/* ---- one round ------------------------------------------------------------ */

struct round {
	struct nvml *n;
	struct batch *b;
	int64_t now_ns;
	int64_t gpu_series;		/* this GPU's series in b */
	uint32_t names[NVML_M_MAX];	/* string ids in b->dict, UINT32_MAX: not yet */
	int added;
	int err;
};

static void _point(struct round *r, int64_t series, enum nvml_metric m, int64_t ts, double v)
{
	struct batch_metric bm;

	if (r->err)
		return;
	if (r->names[m] == UINT32_MAX) {
		int64_t id = profile__intern_string(r->b->dict, gpu_metric__name(m));

		if (id < 0) {
			r->err = (int)id;
			return;
		}
		r->names[m] = (uint32_t)id;
	}
	bm = (struct batch_metric){ .ts_ns = ts, .series = (uint32_t)series,
				    .name = r->names[m], .value = v };
	r->err = batch__add_metric(r->b, &bm);
	if (!r->err)
		r->added++;
}

/* A driver sample time (Unix µs) as ns, or now when it is not plausible. */
static int64_t _sample_ns(const struct round *r, unsigned long long us)
{
	int64_t ns = (int64_t)us * 1000;

	if (us > (unsigned long long)INT64_MAX / 1000 || ns > r->now_ns + 60000000000LL ||
	    ns < r->now_ns - 3600000000000LL)
		return r->now_ns;
	return ns;
}

static double _value(nvmlValueType_t t, nvmlValue_t v)
{
	switch (t) {
	case NVML_VALUE_TYPE_DOUBLE: return v.dVal;
	case NVML_VALUE_TYPE_UNSIGNED_INT: return v.uiVal;
	case NVML_VALUE_TYPE_UNSIGNED_LONG: return (double)v.ulVal;
	case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return (double)v.ullVal;
	case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return (double)v.sllVal;
	case NVML_VALUE_TYPE_SIGNED_INT: return v.siVal;
	default: return v.uiVal;
	}
}

/*
 * Sub-second utilisation: every sample the driver took since the last one
 * we saw, each with its own time. The first round takes only the newest,
 * not the driver's whole history. Returns false when the caller should fall
 * back to nvmlDeviceGetUtilizationRates.
 */
static bool _sampled(struct round *r, struct gpu *g, nvmlSamplingType_t type,
		     enum nvml_metric m, unsigned long long *last)
{
	struct nvml *n = r->n;
	nvmlValueType_t vt = NVML_VALUE_TYPE_UNSIGNED_INT;
	unsigned int cnt = 0;
	nvmlReturn_t ret;

	ret = n->f.samples(g->dev, type, *last, &vt, &cnt, NULL);
	if (ret == NVML_ERROR_NOT_FOUND)
		return true;	/* no new sample since last */
	if (ret != NVML_SUCCESS && ret != NVML_ERROR_INSUFFICIENT_SIZE)
		goto fail;
	if (cnt > n->cap_samples) {
		nvmlSample_t *s = realloc(n->samples, cnt * sizeof(*s));

		if (!s) {
			r->err = -ENOMEM;
			return true;
		}
		n->samples = s;
		n->cap_samples = cnt;
	}
	ret = n->f.samples(g->dev, type, *last, &vt, &cnt, n->samples);
	if (ret == NVML_ERROR_NOT_FOUND)
		return true;
	if (ret != NVML_SUCCESS)
		goto fail;
	{
		unsigned long long newest = *last;
		unsigned int from = 0;

		if (!*last) {
			for (unsigned int i = 1; i < cnt; i++)
				if (n->samples[i].timeStamp > n->samples[from].timeStamp)
					from = i;
		}
		for (unsigned int i = from; i < cnt; i++) {
			const nvmlSample_t *s = &n->samples[i];

			if (s->timeStamp <= *last)
				continue;
			_point(r, r->gpu_series, m, _sample_ns(r, s->timeStamp),
			       _value(vt, s->sampleValue));
			if (s->timeStamp > newest)
				newest = s->timeStamp;
			if (!*last)
				break;
		}
		*last = newest;
	}
	return true;
fail:
	if (ret == NVML_ERROR_NOT_SUPPORTED || ret == NVML_ERROR_NO_PERMISSION ||
	    ret == NVML_ERROR_INVALID_ARGUMENT) {
		pr_info("nvml: GPU %s: nvmlDeviceGetSamples: %s; utilisation from "
			"nvmlDeviceGetUtilizationRates instead\n", g->index, _err(n, ret));
		g->samples_ok = false;
		return false;
	}
	pr_debug("nvml: GPU %s: nvmlDeviceGetSamples: %s\n", g->index, _err(n, ret));
	return true;
}

static void _utilization(struct round *r, struct gpu *g)
{
	struct nvml *n = r->n;
	bool done_util = !_want(g, NVML_M_UTIL), done_mem = !_want(g, NVML_M_MEM_UTIL);
	nvmlUtilization_t u;
	nvmlReturn_t ret;

	if (g->samples_ok) {
		if (!done_util)
			done_util = _sampled(r, g, NVML_GPU_UTILIZATION_SAMPLES, NVML_M_UTIL,
					     &g->last_util_us);
		if (!done_mem && g->samples_ok)
			done_mem = _sampled(r, g, NVML_MEMORY_UTILIZATION_SAMPLES,
					    NVML_M_MEM_UTIL, &g->last_mem_util_us);
	}
	if (done_util && done_mem)
		return;
	if (!n->f.utilization_rates) {
		_unavailable(n, g, NVML_M_UTIL, "no nvmlDeviceGetUtilizationRates");
		_unavailable(n, g, NVML_M_MEM_UTIL, "no nvmlDeviceGetUtilizationRates");
		return;
	}
	ret = n->f.utilization_rates(g->dev, &u);
	if (!done_util && _check(n, g, NVML_M_UTIL, ret))
		_point(r, r->gpu_series, NVML_M_UTIL, r->now_ns, u.gpu);
	if (!done_mem && _check(n, g, NVML_M_MEM_UTIL, ret))
		_point(r, r->gpu_series, NVML_M_MEM_UTIL, r->now_ns, u.memory);
}

/* Milliwatts to watts: divided, so that 250123 mW is exactly the double 250.123. */
static void _milli_metric(struct round *r, struct gpu *g, enum nvml_metric m,
			  nvmlDeviceGetUInt_fn fn)
{
	unsigned int v;

	if (_want(g, m) && _check(r->n, g, m, fn(g->dev, &v)))
		_point(r, r->gpu_series, m, r->now_ns, v / 1000.0);
}

static void _device(struct round *r, struct gpu *g)
{
	struct nvml *n = r->n;
	unsigned int v, v2;
	unsigned long long ull;

	_utilization(r, g);
	if (_want(g, NVML_M_MEM_USED) || _want(g, NVML_M_MEM_TOTAL)) {
		nvmlMemory_t mem;
		nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };
		nvmlReturn_t ret = NVML_ERROR_NOT_SUPPORTED;

		/*
		 * v2 leaves the driver's reserved memory out of used, as
		 * nvidia-smi does; v1's used includes it.
		 */
		if (n->f.memory_info_v2 && n->f.memory_info_v2(g->dev, &m2) == NVML_SUCCESS &&
		    m2.total && m2.used <= m2.total) {
			mem.total = m2.total;
			mem.used = m2.used;
			ret = NVML_SUCCESS;
		} else if (n->f.memory_info) {
			ret = n->f.memory_info(g->dev, &mem);
		}

		if (_want(g, NVML_M_MEM_USED) && _check(n, g, NVML_M_MEM_USED, ret))
			_point(r, r->gpu_series, NVML_M_MEM_USED, r->now_ns, (double)mem.used);
		if (_want(g, NVML_M_MEM_TOTAL) && _check(n, g, NVML_M_MEM_TOTAL, ret))
			_point(r, r->gpu_series, NVML_M_MEM_TOTAL, r->now_ns, (double)mem.total);
	}
	if (_want(g, NVML_M_SM_CLOCK) &&
	    _check(n, g, NVML_M_SM_CLOCK, n->f.clock_info(g->dev, NVML_CLOCK_SM, &v)))
		_point(r, r->gpu_series, NVML_M_SM_CLOCK, r->now_ns, v * 1e6);
	if (_want(g, NVML_M_MEM_CLOCK) &&
	    _check(n, g, NVML_M_MEM_CLOCK, n->f.clock_info(g->dev, NVML_CLOCK_MEM, &v)))
		_point(r, r->gpu_series, NVML_M_MEM_CLOCK, r->now_ns, v * 1e6);
	if (_want(g, NVML_M_SM_CLOCK_MAX) &&
	    _check(n, g, NVML_M_SM_CLOCK_MAX, n->f.max_clock_info(g->dev, NVML_CLOCK_SM, &v)))
		_point(r, r->gpu_series, NVML_M_SM_CLOCK_MAX, r->now_ns, v * 1e6);
	if (_want(g, NVML_M_MEM_CLOCK_MAX) &&
	    _check(n, g, NVML_M_MEM_CLOCK_MAX, n->f.max_clock_info(g->dev, NVML_CLOCK_MEM, &v)))
		_point(r, r->gpu_series, NVML_M_MEM_CLOCK_MAX, r->now_ns, v * 1e6);
	if (_want(g, NVML_M_POWER))
		_milli_metric(r, g, NVML_M_POWER, n->f.power_usage);
	if (_want(g, NVML_M_POWER_LIMIT))
		_milli_metric(r, g, NVML_M_POWER_LIMIT, n->f.power_limit);
	if (_want(g, NVML_M_TEMP) &&
	    _check(n, g, NVML_M_TEMP, n->f.temperature(g->dev, NVML_TEMPERATURE_GPU, &v)))
		_point(r, r->gpu_series, NVML_M_TEMP, r->now_ns, v);
	if (_want(g, NVML_M_TEMP_SLOWDOWN) &&
	    _check(n, g, NVML_M_TEMP_SLOWDOWN,
		   n->f.temperature_threshold(g->dev, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN, &v)))
		_point(r, r->gpu_series, NVML_M_TEMP_SLOWDOWN, r->now_ns, v);
	/* NVML reports KB/s (1024 bytes) over a 20 ms window. */
	if (_want(g, NVML_M_PCIE_TX) &&
	    _check(n, g, NVML_M_PCIE_TX,
		   n->f.pcie_throughput(g->dev, NVML_PCIE_UTIL_TX_BYTES, &v)))
		_point(r, r->gpu_series, NVML_M_PCIE_TX, r->now_ns, v * 1024.0);
	if (_want(g, NVML_M_PCIE_RX) &&
	    _check(n, g, NVML_M_PCIE_RX,
		   n->f.pcie_throughput(g->dev, NVML_PCIE_UTIL_RX_BYTES, &v)))
		_point(r, r->gpu_series, NVML_M_PCIE_RX, r->now_ns, v * 1024.0);
	if (_want(g, NVML_M_THROTTLE) &&
	    _check(n, g, NVML_M_THROTTLE, n->f.clock_reasons(g->dev, &ull)))
		_point(r, r->gpu_series, NVML_M_THROTTLE, r->now_ns, (double)ull);
	if (_want(g, NVML_M_ENERGY) && _check(n, g, NVML_M_ENERGY, n->f.energy(g->dev, &ull)))
		_point(r, r->gpu_series, NVML_M_ENERGY, r->now_ns, ull / 1000.0);
	if (_want(g, NVML_M_MIG_MODE) &&
	    _check(n, g, NVML_M_MIG_MODE, n->f.mig_mode(g->dev, &v, &v2)))
		_point(r, r->gpu_series, NVML_M_MIG_MODE, r->now_ns, v);
}

static void _read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t got = fd < 0 ? -1 : read(fd, buf, len - 1);

	if (fd >= 0)
		close(fd);
	buf[got > 0 ? got : 0] = '\0';
}

static struct proc_info *_proc(struct nvml *n, unsigned int pid, uint64_t round)
{
	char path[64], text[4096];
	struct proc_info *p;

	for (size_t i = 0; i < n->nprocs; i++) {
		if (n->procs[i].pid == pid) {
			n->procs[i].seen = round;
			return &n->procs[i];
		}
	}
	if (n->nprocs == n->cap_procs) {
		size_t cap = n->cap_procs ? 2 * n->cap_procs : 16;

		p = realloc(n->procs, cap * sizeof(*p));
		if (!p)
			return NULL;
		n->procs = p;
		n->cap_procs = cap;
	}
	p = &n->procs[n->nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->seen = round;
	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	_read_small(path, p->comm, sizeof(p->comm));
	p->comm[strcspn(p->comm, "\n")] = '\0';
	snprintf(path, sizeof(path), "/proc/%u/cgroup", pid);
	_read_small(path, text, sizeof(text));
	cgroup__parse(text, p->container, sizeof(p->container), p->pod, sizeof(p->pod));
	return p;
}

static int64_t _proc_series(struct round *r, struct gpu *g, unsigned int pid)
{
	const char *names[7] = { "gpu", "uuid", "name", "pid", "comm" };
	const char *values[7] = { g->index, g->uuid, g->name };
	struct proc_info *p = _proc(r->n, pid, r->n->stats.rounds);
	char pidtxt[12];
	size_t nl = 5;
	int64_t id;

	if (!p) {
		r->err = -ENOMEM;
		return -ENOMEM;
	}
	snprintf(pidtxt, sizeof(pidtxt), "%u", pid);
	values[3] = pidtxt;
	values[4] = p->comm;
	if (p->container[0]) {
		names[nl] = "container";
		values[nl++] = p->container;
	}
	if (p->pod[0]) {
		names[nl] = "pod";
		values[nl++] = p->pod;
	}
	id = batch__intern_series(r->b, names, values, nl);
	if (id < 0)
		r->err = (int)id;
	return id;
}

/* Used memory of each process on the GPU: the compute and graphics lists. */
static void _proc_memory(struct round *r, struct gpu *g)
{
	struct nvml *n = r->n;
	nvmlDeviceGetRunningProcesses_fn fns[2] = { n->f.compute_procs, n->f.graphics_procs };
	unsigned int total = 0;
	bool any_ok = false;

	for (int k = 0; k < 2; k++) {
		unsigned int cnt;
		nvmlReturn_t ret;

		if (!fns[k])
			continue;
		/* The list can grow between the two calls: retry a few times. */
		for (int tries = 0; tries < 3; tries++) {
			cnt = n->cap_pinfo - total;
			ret = fns[k](g->dev, &cnt, n->pinfo + total);
			if (ret != NVML_ERROR_INSUFFICIENT_SIZE)
				break;
			{
				unsigned int cap = total + cnt + 16;
				nvmlProcessInfo_t *a = realloc(n->pinfo, cap * sizeof(*a));

				if (!a) {
					r->err = -ENOMEM;
					return;
				}
				n->pinfo = a;
				n->cap_pinfo = cap;
			}
		}
		if (ret == NVML_SUCCESS) {
			any_ok = true;
			total += cnt;
		} else if (ret == NVML_ERROR_NOT_SUPPORTED || ret == NVML_ERROR_NO_PERMISSION) {
			if (k == 0)
				n->f.compute_procs = NULL;
			else
				n->f.graphics_procs = NULL;
			pr_info("nvml: GPU %s: %s running processes: %s\n", g->index,
				k ? "graphics" : "compute", _err(n, ret));
		}
	}
	if (!n->f.compute_procs && !n->f.graphics_procs && !any_ok) {
		_unavailable(n, g, NVML_M_PROC_MEM_USED, "no running-process list");
		return;
	}
	/* A process in both lists uses one address space: its larger figure. */
	for (unsigned int i = 0; i < total; i++) {
		unsigned int pid = n->pinfo[i].pid;
		unsigned long long used = 0;
		bool first = true, known = false;
		int64_t series;

		for (unsigned int j = 0; j < total && first; j++) {
			if (n->pinfo[j].pid != pid)
				continue;
			if (j < i)
				first = false;
			else if (n->pinfo[j].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) {
				known = true;
				if (n->pinfo[j].usedGpuMemory > used)
					used = n->pinfo[j].usedGpuMemory;
			}
		}
		if (!first || !known)
			continue;
		series = _proc_series(r, g, pid);
		if (series < 0)
			return;
		_point(r, series, NVML_M_PROC_MEM_USED, r->now_ns, (double)used);
	}
}

/*
 * Per-process utilisation: one call per device with the last time seen;
 * each sample names its own pid (a process absent from the running lists
 * may still have samples, and vice versa).
 */
static void _proc_util(struct round *r, struct gpu *g)
{
	struct nvml *n = r->n;
	unsigned long long last = g->last_proc_us, newest;
	unsigned int cnt = 0;
	nvmlReturn_t ret;

	/* First round: only what ran since the previous second, not the whole buffer. */
	if (!last)
		last = (unsigned long long)(r->now_ns / 1000) - 1000000ULL;
	ret = n->f.process_utilization(g->dev, NULL, &cnt, last);
	if (ret == NVML_ERROR_NOT_FOUND)
		goto none;
	if (ret != NVML_SUCCESS && ret != NVML_ERROR_INSUFFICIENT_SIZE) {
		_check(n, g, NVML_M_PROC_UTIL, ret);
		if (!_want(g, NVML_M_PROC_UTIL))
			_unavailable(n, g, NVML_M_PROC_MEM_UTIL, _err(n, ret));
		return;
	}
	if (!cnt)
		goto none;
	if (cnt > n->cap_putil) {
		nvmlProcessUtilizationSample_t *a = realloc(n->putil, cnt * sizeof(*a));

		if (!a) {
			r->err = -ENOMEM;
			return;
		}
		n->putil = a;
		n->cap_putil = cnt;
	}
	ret = n->f.process_utilization(g->dev, n->putil, &cnt, last);
	if (ret == NVML_ERROR_NOT_FOUND)
		goto none;
	if (ret != NVML_SUCCESS) {
		_check(n, g, NVML_M_PROC_UTIL, ret);
		return;
	}
	newest = last;
	for (unsigned int i = 0; i < cnt; i++) {
		const nvmlProcessUtilizationSample_t *s = &n->putil[i];
		int64_t series, ts;

		if (s->timeStamp <= last && g->last_proc_us)
			continue;
		series = _proc_series(r, g, s->pid);
		if (series < 0)
			return;
		ts = _sample_ns(r, s->timeStamp);
		_point(r, series, NVML_M_PROC_UTIL, ts, s->smUtil);
		_point(r, series, NVML_M_PROC_MEM_UTIL, ts, s->memUtil);
		if (s->timeStamp > newest)
			newest = s->timeStamp;
	}
	g->last_proc_us = newest;
	return;
none:
	if (!g->last_proc_us)
		g->last_proc_us = last;
}

static uint64_t _thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static uint64_t _mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

int nvml__collect(struct nvml *n, struct batch *b, int64_t now_ns)
{
	struct round r = { .n = n, .b = b, .now_ns = now_ns };
	uint64_t t0 = _thread_cpu_ns(), w0 = _mono_ns(), w;
	size_t k = 0;

	if (!n || !b)
		return -EINVAL;
	memset(r.names, 0xff, sizeof(r.names));
	n->stats.rounds++;
	for (unsigned int i = 0; i < n->ngpus && !r.err; i++) {
		struct gpu *g = &n->gpus[i];
		const char *names[3] = { "gpu", "uuid", "name" };
		const char *values[3] = { g->index, g->uuid, g->name };

		r.gpu_series = batch__intern_series(b, names, values, 3);
		if (r.gpu_series < 0) {
			r.err = (int)r.gpu_series;
			break;
		}
		_device(&r, g);
		if (_want(g, NVML_M_PROC_UTIL))
			_proc_util(&r, g);
		if (_want(g, NVML_M_PROC_MEM_USED))
			_proc_memory(&r, g);
	}
	/* Forget processes that were on no GPU this round. */
	for (size_t i = 0; i < n->nprocs; i++)
		if (n->procs[i].seen == n->stats.rounds)
			n->procs[k++] = n->procs[i];
	n->nprocs = k;
	n->stats.points += r.added;
	n->stats.cpu_ns += _thread_cpu_ns() - t0;
	w = _mono_ns() - w0;
	n->stats.wall_ns += w;
	if (w > n->stats.max_wall_ns)
		n->stats.max_wall_ns = w;
	return r.err ? r.err : r.added;
}
