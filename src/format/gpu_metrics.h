/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_FORMAT_GPU_METRICS_H
#define FW_FORMAT_GPU_METRICS_H

/*
 * The GPU metrics flamewatch exports, by the names Prometheus sees: shared
 * by the NVML collector (which records them) and every /metrics writer
 * (which describes them), so that neither depends on the other.
 */
enum nvml_metric {
	NVML_M_UTIL,		/* flamewatch_gpu_utilization_percent */
	NVML_M_MEM_UTIL,	/* flamewatch_gpu_memory_utilization_percent */
	NVML_M_MEM_USED,
	NVML_M_MEM_TOTAL,
	NVML_M_SM_CLOCK,
	NVML_M_MEM_CLOCK,
	NVML_M_SM_CLOCK_MAX,
	NVML_M_MEM_CLOCK_MAX,
	NVML_M_POWER,
	NVML_M_POWER_LIMIT,
	NVML_M_TEMP,
	NVML_M_TEMP_SLOWDOWN,
	NVML_M_PCIE_TX,
	NVML_M_PCIE_RX,
	NVML_M_THROTTLE,
	NVML_M_ENERGY,
	NVML_M_MIG_MODE,
	NVML_M_PROC_UTIL,	/* per process */
	NVML_M_PROC_MEM_UTIL,	/* per process */
	NVML_M_PROC_MEM_USED,	/* per process */
	NVML_M_MAX,
};

/* The Prometheus name of a metric; NULL out of range. */
const char *gpu_metric__name(enum nvml_metric m);
/* Help text and type ("gauge", "counter") by Prometheus name; generic for unknown names. */
const char *gpu_metric__help(const char *name);
const char *gpu_metric__type(const char *name);

#endif
