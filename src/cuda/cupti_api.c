// SPDX-License-Identifier: Apache-2.0
/* Loading CUPTI and classifying its callback ids (see cupti_api.h). */
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cuda/cupti_api.h"
#include "cuda/fwc.h"

static void *_sym(void *handle, const char *name, int required, int *missing)
{
	void *p = dlsym(handle, name);

	if (!p && required)
		(*missing)++;
	return p;
}

int fwc_cupti_load(struct fwc_cupti *api, const char *path, char *why, size_t len)
{
	static const char *const defaults[] = {
		"libcupti.so.13", "libcupti.so",
		"/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
		"/usr/local/cuda/lib64/libcupti.so.13",
	};
	int missing = 0;

	if (path && *path) {
		api->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!api->handle) {
			snprintf(why, len, "cannot load CUPTI from FLAMEWATCH_CUPTI_PATH: %s", dlerror());
			return -ENOENT;
		}
	} else {
		/* A CUPTI already in the process (PyTorch brings its own) first:
		 * two copies in one process would fight over the driver. */
		for (size_t i = 0; i < 2 && !api->handle; i++)
			api->handle = dlopen(defaults[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
		for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]) && !api->handle; i++)
			api->handle = dlopen(defaults[i], RTLD_NOW | RTLD_LOCAL);
		if (!api->handle) {
			snprintf(why, len,
				 "cannot load CUPTI (libcupti.so.13; set FLAMEWATCH_CUPTI_PATH): %s",
				 dlerror());
			return -ENOENT;
		}
	}
	api->Subscribe = _sym(api->handle, "cuptiSubscribe", 1, &missing);
	api->Subscribe_v2 = _sym(api->handle, "cuptiSubscribe_v2", 0, &missing);
	api->Unsubscribe = _sym(api->handle, "cuptiUnsubscribe", 1, &missing);
	api->EnableCallback = _sym(api->handle, "cuptiEnableCallback", 1, &missing);
	api->EnableDomain = _sym(api->handle, "cuptiEnableDomain", 0, &missing);
	api->GetCallbackName = _sym(api->handle, "cuptiGetCallbackName", 0, &missing);
	api->ActivityRegisterCallbacks = _sym(api->handle, "cuptiActivityRegisterCallbacks", 1, &missing);
	api->ActivityEnable = _sym(api->handle, "cuptiActivityEnable", 1, &missing);
	api->ActivityDisable = _sym(api->handle, "cuptiActivityDisable", 1, &missing);
	api->ActivityFlushAll = _sym(api->handle, "cuptiActivityFlushAll", 1, &missing);
	api->ActivityGetNextRecord = _sym(api->handle, "cuptiActivityGetNextRecord", 1, &missing);
	api->ActivityGetNumDroppedRecords = _sym(api->handle, "cuptiActivityGetNumDroppedRecords", 0, &missing);
	api->GetTimestamp = _sym(api->handle, "cuptiGetTimestamp", 0, &missing);
	api->GetResultString = _sym(api->handle, "cuptiGetResultString", 0, &missing);
	if (missing) {
		snprintf(why, len,
			 "the CUPTI library lacks %d required functions; GPU time is not collected",
			 missing);
		return -ENOSYS;
	}
	return 0;
}

static enum fwc_class _classify(CUpti_CallbackDomain dom, const char *name)
{
	int rt = dom == CUPTI_CB_DOMAIN_RUNTIME_API;
	const char *launch = rt ? "cudaLaunch" : "cuLaunch";
	const char *host = rt ? "cudaLaunchHostFunc" : "cuLaunchHostFunc";
	const char *graph = rt ? "cudaGraphLaunch" : "cuGraphLaunch";
	const char *cpy = rt ? "cudaMemcpy" : "cuMemcpy";
	const char *set = rt ? "cudaMemset" : "cuMemset";

	if (!strncmp(name, host, strlen(host)))
		return FWC_NONE;
	if (!strncmp(name, launch, strlen(launch)) || !strncmp(name, graph, strlen(graph)))
		return FWC_KERNEL;
	if (!strncmp(name, cpy, strlen(cpy)))
		return FWC_MEMCPY;
	if (!strncmp(name, set, strlen(set)))
		return FWC_MEMSET;
	return FWC_NONE;
}

void fwc_cupti_classes(const struct fwc_cupti *api, uint8_t rt_class[RT_IDS],
		       uint8_t drv_class[DRV_IDS])
{
	static const uint32_t rt_kernel[] = {
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunch_ptsz_v7000,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernelMultiDevice_v9000,
		CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
		CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
	};
	static const uint32_t drv_kernel[] = {
		CUPTI_DRIVER_TRACE_CBID_cuLaunch,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice,
		CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
		CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
	};
	static const uint32_t rt_copy[] = {
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000,
	};
	static const uint32_t drv_copy[] = {
		CUPTI_DRIVER_TRACE_CBID_cuMemcpy,
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2,
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeer,
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync,
	};
	static const uint32_t rt_set[] = {
		CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemset2D_v3020,
		CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_v3020,
	};
	static const uint32_t drv_set[] = {
		CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2,
		CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2,
		CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
		CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
	};
	const char *name;
	int named = 0;

	for (uint32_t i = 1; api->GetCallbackName && i < RT_IDS; i++)
		if (api->GetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, i, &name) == CUPTI_SUCCESS && name) {
			rt_class[i] = (uint8_t)_classify(CUPTI_CB_DOMAIN_RUNTIME_API, name);
			named++;
		}
	for (uint32_t i = 1; api->GetCallbackName && i < DRV_IDS; i++)
		if (api->GetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, i, &name) == CUPTI_SUCCESS && name) {
			drv_class[i] = (uint8_t)_classify(CUPTI_CB_DOMAIN_DRIVER_API, name);
			named++;
		}
	if (!named) {
		for (size_t i = 0; i < sizeof(rt_kernel) / sizeof(rt_kernel[0]); i++)
			rt_class[rt_kernel[i]] = FWC_KERNEL;
		for (size_t i = 0; i < sizeof(drv_kernel) / sizeof(drv_kernel[0]); i++)
			drv_class[drv_kernel[i]] = FWC_KERNEL;
		for (size_t i = 0; i < sizeof(rt_copy) / sizeof(rt_copy[0]); i++)
			rt_class[rt_copy[i]] = FWC_MEMCPY;
		for (size_t i = 0; i < sizeof(drv_copy) / sizeof(drv_copy[0]); i++)
			drv_class[drv_copy[i]] = FWC_MEMCPY;
		for (size_t i = 0; i < sizeof(rt_set) / sizeof(rt_set[0]); i++)
			rt_class[rt_set[i]] = FWC_MEMSET;
		for (size_t i = 0; i < sizeof(drv_set) / sizeof(drv_set[0]); i++)
			drv_class[drv_set[i]] = FWC_MEMSET;
	}
}
