/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The CUPTI functions libflamewatch-cuda.so calls, found with dlsym in the
 * CUPTI the process already has (or one it can load), and which callback
 * ids are calls that put work on the GPU.
 */
#ifndef FW_CUDA_CUPTI_API_H
#define FW_CUDA_CUPTI_API_H

#include <stddef.h>
#include <stdint.h>

#include <cupti.h>

struct fwc_cupti {
	void *handle;
	CUptiResult (*Subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
	CUptiResult (*Subscribe_v2)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *,
				    CUpti_SubscriberParams *);
	CUptiResult (*Unsubscribe)(CUpti_SubscriberHandle);
	CUptiResult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
				      CUpti_CallbackId);
	CUptiResult (*EnableDomain)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
	CUptiResult (*GetCallbackName)(CUpti_CallbackDomain, uint32_t, const char **);
	CUptiResult (*ActivityRegisterCallbacks)(CUpti_BuffersCallbackRequestFunc,
						 CUpti_BuffersCallbackCompleteFunc);
	CUptiResult (*ActivityEnable)(CUpti_ActivityKind);
	CUptiResult (*ActivityDisable)(CUpti_ActivityKind);
	CUptiResult (*ActivityFlushAll)(uint32_t);
	CUptiResult (*ActivityGetNextRecord)(uint8_t *, size_t, CUpti_Activity **);
	CUptiResult (*ActivityGetNumDroppedRecords)(CUcontext, uint32_t, size_t *);
	CUptiResult (*GetTimestamp)(uint64_t *);
	CUptiResult (*GetResultString)(CUptiResult, const char **);
};

/* Callback ids per domain. */
#define RT_IDS  CUPTI_RUNTIME_TRACE_CBID_SIZE
#define DRV_IDS CUPTI_DRIVER_TRACE_CBID_SIZE

/*
 * Loads CUPTI from path (NULL or "": the one already in the process, else
 * the usual places) and finds its functions. Returns 0, or -ENOENT (not
 * loaded) / -ENOSYS (required functions missing) with why filled in.
 */
int fwc_cupti_load(struct fwc_cupti *api, const char *path, char *why, size_t len);

/*
 * Sets each callback id's enum fwc_class: launches, copies and sets, by
 * the names CUPTI gives them (so that calls added in later versions of
 * the same major are found too), else from a fixed list.
 */
void fwc_cupti_classes(const struct fwc_cupti *api, uint8_t rt_class[RT_IDS],
		       uint8_t drv_class[DRV_IDS]);

#endif
