/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_GPU_NVML_IMPL_H
#define FW_GPU_NVML_IMPL_H

/*
 * Private to nvml.c (loading NVML, finding the GPUs, the settings) and
 * nvml_round.c (one round of queries: each GPU's metrics and its
 * processes').
 */
#include <stdbool.h>
#include <stdint.h>

#include "gpu/nvml.h"
#include "gpu/nvml_api.h"

/* Per-process labels, looked up once while the process stays on a GPU. */
struct proc_info {
	unsigned int pid;
	uint64_t seen;		/* round */
	char comm[17];
	char container[80], pod[48];
};

/*
 * A cumulative counter read through nvmlDeviceGetFieldValues: the rate is
 * the difference between two reads over the driver's timestamps.
 */
struct counter {
	unsigned long long value;
	long long us;			/* the driver's time of value */
	bool have;
	double rate;			/* bytes/s between the last two reads */
	bool have_rate;
};

/* The slots of the one nvmlDeviceGetFieldValues call a round makes per GPU. */
enum { FV_PCIE_TX, FV_PCIE_RX, FV_ENERGY, FV_MAX };

struct gpu {
	nvmlDevice_t dev;
	char index[12], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE], name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
	uint32_t unavailable;		/* bit per enum nvml_metric */
	unsigned long long last_util_us, last_mem_util_us, last_proc_us;
	bool samples_ok;		/* nvmlDeviceGetSamples works here */
	/* Values that hardly change, asked every STATIC_REFRESH_NS, exported every round. */
	double statics[NVML_M_MAX];
	uint32_t have_static;		/* bit per enum nvml_metric */
	int64_t static_due_ns;
	uint32_t fv_unsupported;	/* bit per FV_*: the older query instead */
	struct counter pcie[2];		/* FV_PCIE_TX, FV_PCIE_RX */
	int64_t pcie_due_ns, proc_util_due_ns;
	bool pcie_wraps;		/* 32-bit counters: read as often as _wrap_safe_ns says */
	unsigned int pcie_reads;	/* rounds that read them, up to 2 */
	double energy_j;		/* the last energy reading, exported every round */
	bool have_energy;
	int64_t energy_due_ns;
	unsigned int empty_lists;	/* running-process reads in a row that found none */
	/* For a GPU with one process on it (_sole_process_util). */
	unsigned int sole_pid;		/* the one pid of the last lists read, 0: none or several */
	int64_t lists_ns;		/* when the lists were last read */
	double util, mem_util;		/* the GPU's newest utilisation samples */
	int64_t util_ns, mem_util_ns;	/* their times; 0: none yet */
	int64_t sole_util_ns;		/* util_ns already given to the process */
};

struct nvml_query_cost {
	uint64_t calls, cpu_ns;
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
		nvmlDeviceGetFieldValues_fn field_values;
		nvmlDeviceGetULL_fn clock_reasons, energy;
		nvmlDeviceGetMigMode_fn mig_mode;
		nvmlDeviceGetProcessUtilization_fn process_utilization;
		nvmlDeviceGetRunningProcesses_fn compute_procs, graphics_procs;
	} f;
	struct gpu *gpus;
	unsigned int ngpus;
	uint64_t interval_ns;
	bool use_samples;		/* rounds less than a second apart */
	unsigned int every_second;	/* rounds between the once-a-second queries */
	uint64_t pcie_interval_ns, process_interval_ns;
	bool process_query_always;	/* the driver's per-process query even for one process */
	bool profile;			/* CPU time per query kind */
	struct proc_info *procs;
	size_t nprocs, cap_procs;
	nvmlProcessUtilizationSample_t *putil;
	unsigned int cap_putil;
	nvmlProcessInfo_t *pinfo;
	unsigned int cap_pinfo;
	nvmlSample_t *samples;
	unsigned int cap_samples;
	struct nvml_stats stats;
	struct nvml_query_cost cost[NVML_Q_MAX];
};

/*
 * nvmlDeviceGetSamples costs hundreds of times what
 * nvmlDeviceGetUtilizationRates does; it pays only when rounds are less
 * than a second apart, and there once a second is enough: it
 * returns every sample the driver took since, each at its own time. The
 * running-process lists are read once a second too.
 */
#define SAMPLES_BELOW_NS 1000000000ULL
#define SECOND_NS 1000000000ULL

static inline const char *_err(const struct nvml *n, nvmlReturn_t r)
{
	const char *s = n->f.error_string ? n->f.error_string(r) : NULL;

	return s ? s : "unknown error";
}

static inline bool _want(const struct gpu *g, enum nvml_metric m)
{
	return !(g->unavailable & (1u << m));
}

#endif
