// SPDX-License-Identifier: Apache-2.0
#include <stddef.h>
#include <string.h>

#include "format/gpu_metrics.h"

static const struct {
	const char *name, *type, *help;
} _metrics[NVML_M_MAX] = {
	[NVML_M_UTIL] = { "flamewatch_gpu_utilization_percent", "gauge",
			  "Percent of time a kernel ran on the GPU (NVML samples)." },
	[NVML_M_MEM_UTIL] = { "flamewatch_gpu_memory_utilization_percent", "gauge",
			      "Percent of time device memory was read or written." },
	[NVML_M_MEM_USED] = { "flamewatch_gpu_memory_used_bytes", "gauge",
			      "Device memory in use, bytes." },
	[NVML_M_MEM_TOTAL] = { "flamewatch_gpu_memory_total_bytes", "gauge",
			       "Device memory installed, bytes." },
	[NVML_M_SM_CLOCK] = { "flamewatch_gpu_sm_clock_hertz", "gauge", "SM clock, hertz." },
	[NVML_M_MEM_CLOCK] = { "flamewatch_gpu_memory_clock_hertz", "gauge",
			       "Memory clock, hertz." },
	[NVML_M_SM_CLOCK_MAX] = { "flamewatch_gpu_sm_clock_max_hertz", "gauge",
				  "Highest SM clock the GPU supports, hertz." },
	[NVML_M_MEM_CLOCK_MAX] = { "flamewatch_gpu_memory_clock_max_hertz", "gauge",
				   "Highest memory clock the GPU supports, hertz." },
	[NVML_M_POWER] = { "flamewatch_gpu_power_watts", "gauge", "Power draw, watts." },
	[NVML_M_POWER_LIMIT] = { "flamewatch_gpu_power_limit_watts", "gauge",
				 "Enforced power limit, watts." },
	[NVML_M_TEMP] = { "flamewatch_gpu_temperature_celsius", "gauge",
			  "GPU core temperature, degrees Celsius." },
	[NVML_M_TEMP_SLOWDOWN] = { "flamewatch_gpu_temperature_slowdown_celsius", "gauge",
				   "Temperature at which the GPU slows down, degrees Celsius." },
	[NVML_M_PCIE_TX] = { "flamewatch_gpu_pcie_tx_bytes_per_second", "gauge",
			     "PCIe transmit throughput, bytes per second." },
	[NVML_M_PCIE_RX] = { "flamewatch_gpu_pcie_rx_bytes_per_second", "gauge",
			     "PCIe receive throughput, bytes per second." },
	[NVML_M_THROTTLE] = { "flamewatch_gpu_throttle_reasons", "gauge",
			      "Clock event (throttle) reasons, NVML's bit mask." },
	[NVML_M_ENERGY] = { "flamewatch_gpu_energy_joules_total", "counter",
			    "Energy used since the driver was loaded, joules." },
	[NVML_M_MIG_MODE] = { "flamewatch_gpu_mig_mode", "gauge",
			      "Multi-Instance GPU mode: 1 enabled, 0 disabled." },
	[NVML_M_PROC_UTIL] = { "flamewatch_gpu_process_utilization_percent", "gauge",
			       "Percent of time the process's kernels ran on the GPU's SMs." },
	[NVML_M_PROC_MEM_UTIL] = { "flamewatch_gpu_process_memory_utilization_percent", "gauge",
				   "Percent of time the process read or wrote device memory." },
	[NVML_M_PROC_MEM_USED] = { "flamewatch_gpu_process_memory_used_bytes", "gauge",
				   "Device memory the process uses, bytes." },
};

const char *gpu_metric__name(enum nvml_metric m)
{
	return (unsigned)m < NVML_M_MAX ? _metrics[m].name : NULL;
}

static int _metric_by_name(const char *name)
{
	for (int i = 0; name && i < NVML_M_MAX; i++)
		if (!strcmp(_metrics[i].name, name))
			return i;
	return -1;
}

const char *gpu_metric__help(const char *name)
{
	int i = _metric_by_name(name);

	return i < 0 ? "GPU metric." : _metrics[i].help;
}

const char *gpu_metric__type(const char *name)
{
	int i = _metric_by_name(name);

	return i < 0 ? "gauge" : _metrics[i].type;
}

