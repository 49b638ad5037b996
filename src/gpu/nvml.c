// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "gpu/nvml.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_impl.h"

/*
 * Two queries cost far more CPU than the rest of a round together (figures
 * in bench/README.md, "NVML's costly queries"):
 * nvmlDeviceGetProcessUtilization, all of it system time in the driver's
 * ioctl (nvmlDeviceGetProcessesUtilizationInfo, the newer form, costs the
 * same, and so does any sample count), and nvmlDeviceGetFieldValues for
 * the two PCIe counters.
 *
 * The driver keeps one utilisation sample per process, its latest, renewed
 * about every 500 ms: reading it more than once a second gains little, and
 * once a second is the default. It is not asked:
 *  - while the running-process lists of the GPU have been empty twice in a
 *    row (an idle GPU);
 *  - while they name one process (the usual training or inference node,
 *    one process per GPU): that process's utilisation is then the GPU's,
 *    which the round reads anyway (_sole_process_util); at partial load
 *    the GPU's figure was even the closer to the load's own busy share.
 *    The driver is asked again as soon as a second process appears, and
 *    always with nvml__set_process_query_always().
 * A round with one process on the GPU then costs a fraction of one with
 * the per-process query.
 * The PCIe counters are cumulative, so reading them every 5 s loses no
 * traffic, only resolution; 32-bit counters, which could wrap more than
 * once between reads, are read sooner the faster they move (_wrap_safe_ns).
 */

static const char *const _query_names[NVML_Q_MAX] = {
	[NVML_Q_UTILIZATION] = "nvmlDeviceGetUtilizationRates",
	[NVML_Q_SAMPLES] = "nvmlDeviceGetSamples",
	[NVML_Q_MEMORY] = "nvmlDeviceGetMemoryInfo",
	[NVML_Q_CLOCK] = "nvmlDeviceGetClockInfo",
	[NVML_Q_MAX_CLOCK] = "nvmlDeviceGetMaxClockInfo",
	[NVML_Q_POWER] = "nvmlDeviceGetPowerUsage",
	[NVML_Q_POWER_LIMIT] = "nvmlDeviceGetEnforcedPowerLimit",
	[NVML_Q_TEMPERATURE] = "nvmlDeviceGetTemperature",
	[NVML_Q_TEMPERATURE_THRESHOLD] = "nvmlDeviceGetTemperatureThreshold",
	[NVML_Q_PCIE_THROUGHPUT] = "nvmlDeviceGetPcieThroughput",
	[NVML_Q_FIELD_VALUES] = "nvmlDeviceGetFieldValues",
	[NVML_Q_CLOCK_REASONS] = "nvmlDeviceGetCurrentClocksEventReasons",
	[NVML_Q_ENERGY] = "nvmlDeviceGetTotalEnergyConsumption",
	[NVML_Q_MIG_MODE] = "nvmlDeviceGetMigMode",
	[NVML_Q_PROCESS_UTILIZATION] = "nvmlDeviceGetProcessUtilization",
	[NVML_Q_RUNNING_PROCESSES] = "nvmlDeviceGet{Compute,Graphics}RunningProcesses",
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
	n->f.field_values = SYM(n->lib, "nvmlDeviceGetFieldValues");
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
			{ F(clock_reasons), { NVML_M_THROTTLE } },
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
		/* These two have a field value, else their own query. */
		if (!n->f.field_values && !n->f.pcie_throughput)
			for (unsigned int i = 0; i < n->ngpus; i++)
				n->gpus[i].unavailable |= 1u << NVML_M_PCIE_TX | 1u << NVML_M_PCIE_RX;
		if (!n->f.field_values && !n->f.energy)
			for (unsigned int i = 0; i < n->ngpus; i++)
				n->gpus[i].unavailable |= 1u << NVML_M_ENERGY;
		if (!n->f.compute_procs && !n->f.graphics_procs)
			for (unsigned int i = 0; i < n->ngpus; i++)
				n->gpus[i].unavailable |= 1u << NVML_M_PROC_MEM_USED;
	}
	nvml__set_interval(n, 1000000000ULL);
	nvml__set_costly_intervals(n, NVML_PCIE_INTERVAL_NS, NVML_PROCESS_INTERVAL_NS);
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

size_t nvml__occupants(const struct nvml *n, struct nvml_occupant *out, size_t max)
{
	size_t k = 0;

	for (unsigned int i = 0; n && i < n->ngpus && k < max; i++, k++) {
		const struct gpu *g = &n->gpus[i];

		snprintf(out[k].uuid, sizeof(out[k].uuid), "%s", g->uuid);
		out[k].index = i;
		out[k].sole_pid = g->sole_pid;
		out[k].lists_ns = g->lists_ns;
	}
	return k;
}

int nvml__available(const struct nvml *n, unsigned int gpu, enum nvml_metric m)
{
	return n && gpu < n->ngpus && (unsigned)m < NVML_M_MAX && _want(&n->gpus[gpu], m);
}

void nvml__set_interval(struct nvml *n, uint64_t interval_ns)
{
	if (!n)
		return;
	n->interval_ns = interval_ns;
	n->use_samples = interval_ns < SAMPLES_BELOW_NS;
	n->every_second = interval_ns && interval_ns < SECOND_NS ?
			  (unsigned int)((SECOND_NS + interval_ns / 2) / interval_ns) : 1;
}

void nvml__set_costly_intervals(struct nvml *n, uint64_t pcie_ns, uint64_t process_ns)
{
	if (!n)
		return;
	n->pcie_interval_ns = pcie_ns;
	n->process_interval_ns = process_ns;
}

void nvml__set_process_query_always(struct nvml *n, int always)
{
	if (n)
		n->process_query_always = always;
}

void nvml__set_profile(struct nvml *n, int on)
{
	if (n)
		n->profile = on;
}

const char *nvml__query_cost(const struct nvml *n, enum nvml_query q, uint64_t *calls,
			     uint64_t *cpu_ns)
{
	if (!n || (unsigned)q >= NVML_Q_MAX)
		return NULL;
	*calls = n->cost[q].calls;
	*cpu_ns = n->cost[q].cpu_ns;
	return _query_names[q];
}

void nvml__stats(const struct nvml *n, struct nvml_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (n)
		*out = n->stats;
}
