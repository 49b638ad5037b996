// SPDX-License-Identifier: Apache-2.0
// The probe's GPU work; see workload.h.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>

#include "workload.h"

static unsigned long long *d_start, *d_end;
static float *d_buf;
static int n_slots, sm_count;
static char err_buf[256];

static int fail(const char *what, cudaError_t e)
{
	snprintf(err_buf, sizeof(err_buf), "%s: %s", what, cudaGetErrorString(e));
	return -1;
}

#define CK(what, call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) return fail(what, e_); } while (0)

static __device__ __forceinline__ unsigned long long gtime(void)
{
	unsigned long long t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* One warp a block, one thread spinning: every SM the grid reaches is busy
 * for ns; the slot keeps the first start and the last end. */
static __global__ void spin_k(unsigned long long ns, unsigned long long *st, unsigned long long *en)
{
	unsigned long long t0;

	if (threadIdx.x)
		return;
	t0 = gtime();
	atomicMin(st, t0);
	while (gtime() - t0 < ns)
		;
	atomicMax(en, gtime());
}

static __global__ void clock_k(unsigned long long *out)
{
	*out = gtime();
}

static __global__ void fma_k(float *buf, int iters)
{
	float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 1e-4f;
	int i;

	for (i = 0; i < iters; i++) {
		a = fmaf(a, b, c);
		b = fmaf(b, 0.99999f, c);
	}
	if (a == 12345.0f)
		buf[blockIdx.x] = a + b;
}

static __global__ void tiny_k(float *buf, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		buf[i] = buf[i] * 0.5f + 1.0f;
}

extern "C" int wl_driver_init(void)
{
	CUresult r = cuInit(0);

	if (r != CUDA_SUCCESS) {
		snprintf(err_buf, sizeof(err_buf), "cuInit: %d", (int)r);
		return -1;
	}
	return 0;
}

extern "C" int wl_init(int device, int slots)
{
	CK("cudaSetDevice", cudaSetDevice(device));
	CK("cudaFree(0)", cudaFree(0));
	CK("cudaDeviceGetAttribute", cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
	n_slots = slots;
	CK("cudaMalloc", cudaMalloc(&d_start, sizeof(*d_start) * (slots + 1)));
	CK("cudaMalloc", cudaMalloc(&d_end, sizeof(*d_end) * slots));
	CK("cudaMalloc", cudaMalloc(&d_buf, sizeof(float) * (1 << 20)));
	CK("cudaMemset", cudaMemset(d_buf, 0, sizeof(float) * (1 << 20)));
	return wl_reset();
}

extern "C" int wl_sm_count(void)
{
	return sm_count;
}

extern "C" int wl_reset(void)
{
	CK("cudaMemset", cudaMemset(d_start, 0xff, sizeof(*d_start) * n_slots));
	CK("cudaMemset", cudaMemset(d_end, 0, sizeof(*d_end) * n_slots));
	CK("cudaDeviceSynchronize", cudaDeviceSynchronize());
	return 0;
}

extern "C" int wl_spin(int blocks, uint64_t ns, int slot)
{
	if (slot < 0 || slot >= n_slots) {
		snprintf(err_buf, sizeof(err_buf), "slot %d out of %d", slot, n_slots);
		return -1;
	}
	spin_k<<<blocks, 32>>>(ns, d_start + slot, d_end + slot);
	CK("spin_k", cudaGetLastError());
	return 0;
}

extern "C" int wl_sync(void)
{
	CK("cudaDeviceSynchronize", cudaDeviceSynchronize());
	return 0;
}

extern "C" int wl_fetch(uint64_t *start, uint64_t *end, int n)
{
	CK("cudaMemcpy", cudaMemcpy(start, d_start, sizeof(*start) * n, cudaMemcpyDeviceToHost));
	CK("cudaMemcpy", cudaMemcpy(end, d_end, sizeof(*end) * n, cudaMemcpyDeviceToHost));
	return 0;
}

extern "C" int wl_clock(uint64_t *gpu_ns)
{
	unsigned long long v;

	clock_k<<<1, 1>>>(d_start + n_slots);
	CK("clock_k", cudaGetLastError());
	CK("cudaMemcpy", cudaMemcpy(&v, d_start + n_slots, sizeof(v), cudaMemcpyDeviceToHost));
	*gpu_ns = v;
	return 0;
}

extern "C" int wl_fma(int blocks, int iters)
{
	fma_k<<<blocks, 256>>>(d_buf, iters);
	CK("fma_k", cudaGetLastError());
	return 0;
}

extern "C" int wl_tiny(void)
{
	tiny_k<<<64, 256>>>(d_buf, 64 * 256);
	CK("tiny_k", cudaGetLastError());
	return 0;
}

static void *h_copy, *d_copy;
static size_t copy_bytes;
static cudaEvent_t ev0, ev1;

extern "C" int wl_copy_init(size_t bytes)
{
	CK("cudaMallocHost", cudaMallocHost(&h_copy, bytes));
	CK("cudaMalloc", cudaMalloc(&d_copy, bytes));
	CK("cudaMemset", cudaMemset(d_copy, 1, bytes));
	CK("cudaEventCreate", cudaEventCreate(&ev0));
	CK("cudaEventCreate", cudaEventCreate(&ev1));
	copy_bytes = bytes;
	return 0;
}

extern "C" int wl_copy(int to_device, float *ms)
{
	CK("cudaEventRecord", cudaEventRecord(ev0, 0));
	if (to_device)
		CK("cudaMemcpyAsync", cudaMemcpyAsync(d_copy, h_copy, copy_bytes, cudaMemcpyHostToDevice, 0));
	else
		CK("cudaMemcpyAsync", cudaMemcpyAsync(h_copy, d_copy, copy_bytes, cudaMemcpyDeviceToHost, 0));
	CK("cudaEventRecord", cudaEventRecord(ev1, 0));
	CK("cudaEventSynchronize", cudaEventSynchronize(ev1));
	CK("cudaEventElapsedTime", cudaEventElapsedTime(ms, ev0, ev1));
	return 0;
}

extern "C" int wl_mem(size_t *free_b, size_t *total_b)
{
	CK("cudaMemGetInfo", cudaMemGetInfo(free_b, total_b));
	return 0;
}

extern "C" const char *wl_error(void)
{
	return err_buf;
}
