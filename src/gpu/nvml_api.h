/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_GPU_NVML_API_H
#define FW_GPU_NVML_API_H

/*
 * The subset of NVML's C API that flamewatch calls, declared from the
 * published API reference (no nvml.h on build machines). Types, enum values
 * and struct layouts are NVML's ABI; only what we use is here. The fake
 * library the tests load (tests/fakes/fake_nvml.c) implements the same
 * declarations.
 */

typedef int nvmlReturn_t;
enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_NOT_SUPPORTED = 3,
	NVML_ERROR_NO_PERMISSION = 4,
	NVML_ERROR_NOT_FOUND = 6,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_GPU_IS_LOST = 15,
	NVML_ERROR_NO_DATA = 21,
	NVML_ERROR_UNKNOWN = 999,
};

typedef struct nvmlDevice_st *nvmlDevice_t;

#define NVML_DEVICE_UUID_V2_BUFFER_SIZE 96
#define NVML_DEVICE_NAME_V2_BUFFER_SIZE 96
/* usedGpuMemory when the driver cannot tell (e.g. Windows WDDM, no permission) */
#define NVML_VALUE_NOT_AVAILABLE (~0ULL)

typedef struct {
	unsigned int gpu;	/* percent of the last sample period a kernel ran */
	unsigned int memory;	/* percent of it device memory was read or written */
} nvmlUtilization_t;

typedef struct {
	unsigned long long total, free, used;	/* bytes */
} nvmlMemory_t;

/*
 * Since driver 510: reserved memory apart, as nvidia-smi shows it; version
 * is the struct's size | 2 << 24.
 */
typedef struct {
	unsigned int version;
	unsigned long long total, reserved, free, used;	/* bytes */
} nvmlMemory_v2_t;
#define nvmlMemory_v2 ((unsigned int)(sizeof(nvmlMemory_v2_t) | 2u << 24))

typedef enum {
	NVML_CLOCK_GRAPHICS = 0,
	NVML_CLOCK_SM = 1,
	NVML_CLOCK_MEM = 2,
	NVML_CLOCK_VIDEO = 3,
} nvmlClockType_t;

typedef enum { NVML_TEMPERATURE_GPU = 0 } nvmlTemperatureSensors_t;

typedef enum {
	NVML_TEMPERATURE_THRESHOLD_SHUTDOWN = 0,
	NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = 1,
} nvmlTemperatureThresholds_t;

typedef enum {
	NVML_PCIE_UTIL_TX_BYTES = 0,
	NVML_PCIE_UTIL_RX_BYTES = 1,
} nvmlPcieUtilCounter_t;

typedef enum {
	NVML_TOTAL_POWER_SAMPLES = 0,
	NVML_GPU_UTILIZATION_SAMPLES = 1,
	NVML_MEMORY_UTILIZATION_SAMPLES = 2,
} nvmlSamplingType_t;

typedef enum {
	NVML_VALUE_TYPE_DOUBLE = 0,
	NVML_VALUE_TYPE_UNSIGNED_INT = 1,
	NVML_VALUE_TYPE_UNSIGNED_LONG = 2,
	NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3,
	NVML_VALUE_TYPE_SIGNED_LONG_LONG = 4,
	NVML_VALUE_TYPE_SIGNED_INT = 5,
} nvmlValueType_t;

typedef union {
	double dVal;
	int siVal;
	unsigned int uiVal;
	unsigned long ulVal;
	unsigned long long ullVal;
	signed long long sllVal;
} nvmlValue_t;

typedef struct {
	unsigned long long timeStamp;	/* CPU timestamp, microseconds */
	nvmlValue_t sampleValue;
} nvmlSample_t;

typedef struct {
	unsigned int pid;
	unsigned long long timeStamp;	/* CPU timestamp, microseconds */
	unsigned int smUtil, memUtil, encUtil, decUtil;
} nvmlProcessUtilizationSample_t;

/*
 * nvmlDeviceGetFieldValues: the caller fills fieldId (scopeId 0: the whole
 * device); the driver fills the rest, its answer per field in nvmlReturn.
 */
typedef struct {
	unsigned int fieldId;
	unsigned int scopeId;
	long long timestamp;		/* CPU time of the value, Unix microseconds */
	long long latencyUsec;
	nvmlValueType_t valueType;
	nvmlReturn_t nvmlReturn;
	nvmlValue_t value;
} nvmlFieldValue_t;
_Static_assert(sizeof(nvmlFieldValue_t) == 40, "NVML's field value layout");

/* Field ids (NVML_FI_DEV_...) */
#define NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION 83	/* mJ since the driver was loaded */
#define NVML_FI_DEV_PCIE_COUNT_TX_BYTES 197	/* cumulative bytes the GPU sent over PCIe */
#define NVML_FI_DEV_PCIE_COUNT_RX_BYTES 198	/* cumulative bytes it received */

/* The layout of the _v2 and _v3 running-process queries. */
typedef struct {
	unsigned int pid;
	unsigned long long usedGpuMemory;	/* bytes */
	unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

typedef nvmlReturn_t (*nvmlInit_fn)(void);
typedef nvmlReturn_t (*nvmlShutdown_fn)(void);
typedef const char *(*nvmlErrorString_fn)(nvmlReturn_t);
typedef nvmlReturn_t (*nvmlDeviceGetCount_fn)(unsigned int *);
typedef nvmlReturn_t (*nvmlDeviceGetHandleByIndex_fn)(unsigned int, nvmlDevice_t *);
typedef nvmlReturn_t (*nvmlDeviceGetString_fn)(nvmlDevice_t, char *, unsigned int);
typedef nvmlReturn_t (*nvmlDeviceGetUtilizationRates_fn)(nvmlDevice_t, nvmlUtilization_t *);
typedef nvmlReturn_t (*nvmlDeviceGetSamples_fn)(nvmlDevice_t, nvmlSamplingType_t,
						unsigned long long, nvmlValueType_t *,
						unsigned int *, nvmlSample_t *);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_fn)(nvmlDevice_t, nvmlMemory_t *);
typedef nvmlReturn_t (*nvmlDeviceGetMemoryInfo_v2_fn)(nvmlDevice_t, nvmlMemory_v2_t *);
typedef nvmlReturn_t (*nvmlDeviceGetClock_fn)(nvmlDevice_t, nvmlClockType_t, unsigned int *);
typedef nvmlReturn_t (*nvmlDeviceGetUInt_fn)(nvmlDevice_t, unsigned int *);
typedef nvmlReturn_t (*nvmlDeviceGetULL_fn)(nvmlDevice_t, unsigned long long *);
typedef nvmlReturn_t (*nvmlDeviceGetTemperature_fn)(nvmlDevice_t, nvmlTemperatureSensors_t,
						    unsigned int *);
typedef nvmlReturn_t (*nvmlDeviceGetTemperatureThreshold_fn)(nvmlDevice_t,
							     nvmlTemperatureThresholds_t,
							     unsigned int *);
typedef nvmlReturn_t (*nvmlDeviceGetPcieThroughput_fn)(nvmlDevice_t, nvmlPcieUtilCounter_t,
						       unsigned int *);
typedef nvmlReturn_t (*nvmlDeviceGetMigMode_fn)(nvmlDevice_t, unsigned int *, unsigned int *);
typedef nvmlReturn_t (*nvmlDeviceGetProcessUtilization_fn)(nvmlDevice_t,
							   nvmlProcessUtilizationSample_t *,
							   unsigned int *, unsigned long long);
typedef nvmlReturn_t (*nvmlDeviceGetFieldValues_fn)(nvmlDevice_t, int, nvmlFieldValue_t *);
typedef nvmlReturn_t (*nvmlDeviceGetRunningProcesses_fn)(nvmlDevice_t, unsigned int *,
							 nvmlProcessInfo_t *);

#endif
