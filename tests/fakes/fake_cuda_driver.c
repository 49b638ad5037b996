// SPDX-License-Identifier: Apache-2.0
/*
 * A fake libcuda.so.1 (build/fakes/libcuda.so.1): the few driver calls that
 * `flamewatch gpu-busy` makes before CUPTI takes over. FAKE_CUDA_DEVICES
 * devices (default 1); device i's UUID reads, in NVML's notation,
 * GPU-fa4e0000-0000-4000-8000-00000000000<i>, as fake_nvml.c reports GPU i,
 * so that a test can match the two. FAKE_CUDA_INIT_FAIL=N makes cuInit
 * return N.
 */
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#define API __attribute__((visibility("default")))
#define MAX_DEVICES 8

static int _ndev(void)
{
	const char *s = getenv("FAKE_CUDA_DEVICES");
	int n = s ? atoi(s) : 1;

	return n < 0 ? 0 : n > MAX_DEVICES ? MAX_DEVICES : n;
}

static int _inited;

API CUresult cuInit(unsigned int flags)
{
	const char *s = getenv("FAKE_CUDA_INIT_FAIL");

	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (s && atoi(s))
		return (CUresult)atoi(s);
	_inited = 1;
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGetCount(int *n)
{
	if (!_inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!n)
		return CUDA_ERROR_INVALID_VALUE;
	*n = _ndev();
	return CUDA_SUCCESS;
}

API CUresult cuDeviceGet(CUdevice *dev, int ordinal)
{
	if (!_inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!dev || ordinal < 0 || ordinal >= _ndev())
		return CUDA_ERROR_INVALID_DEVICE;
	*dev = ordinal;
	return CUDA_SUCCESS;
}

static CUresult _uuid(CUuuid *u, CUdevice dev)
{
	static const unsigned char base[16] = { 0xfa, 0x4e, 0, 0, 0, 0, 0x40, 0, 0x80, 0, 0, 0, 0, 0, 0, 0 };

	if (!_inited)
		return CUDA_ERROR_NOT_INITIALIZED;
	if (!u || dev < 0 || dev >= _ndev())
		return CUDA_ERROR_INVALID_DEVICE;
	memcpy(u->bytes, base, sizeof(base));
	u->bytes[15] = (char)dev;
	return CUDA_SUCCESS;
}

/* cuda.h maps cuDeviceGetUuid to _v2; the plain symbol is defined by hand. */
#undef cuDeviceGetUuid
API CUresult cuDeviceGetUuid(CUuuid *u, CUdevice dev)
{
	return _uuid(u, dev);
}

API CUresult cuDeviceGetUuid_v2(CUuuid *u, CUdevice dev)
{
	return _uuid(u, dev);
}

API CUresult cuGetErrorName(CUresult r, const char **name)
{
	if (!name)
		return CUDA_ERROR_INVALID_VALUE;
	switch (r) {
	case CUDA_SUCCESS:
		*name = "CUDA_SUCCESS";
		break;
	case CUDA_ERROR_NO_DEVICE:
		*name = "CUDA_ERROR_NO_DEVICE";
		break;
	case CUDA_ERROR_NOT_INITIALIZED:
		*name = "CUDA_ERROR_NOT_INITIALIZED";
		break;
	default:
		*name = "CUDA_ERROR_UNKNOWN";
		break;
	}
	return CUDA_SUCCESS;
}
