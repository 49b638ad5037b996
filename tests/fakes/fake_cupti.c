// SPDX-License-Identifier: Apache-2.0
/*
 * A fake CUPTI (build/fakes/libcupti.so) for the tests of
 * libflamewatch-cuda.so, which loads it through FLAMEWATCH_CUPTI_PATH. It
 * follows the real API's contracts as far as the library depends on them:
 * one subscriber at a time, callbacks only for enabled ids, ENTER then EXIT
 * with one correlation id per API call (a runtime call's nested driver call
 * gets its own), activity records only while their kind is enabled, buffers
 * requested from and handed back to the client on flush, records walked with
 * cuptiActivityGetNextRecord. See fake_cupti.h for the control side.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#include "fake_cupti.h"

#define API __attribute__((visibility("default")))
#define MAXQ (1u << 20)

union rec {
	CUpti_Activity a;
	CUpti_ActivityKernel10 k;
	CUpti_ActivityMemcpy6 m;
	CUpti_ActivityMemset4 s;
};

static pthread_mutex_t _mu = PTHREAD_MUTEX_INITIALIZER;
static int _mode_fail, _mode_conflict, _other_client;
static int _subscribed;
static CUpti_CallbackFunc _cb;
static void *_cb_ud;
static uint8_t _rt_on[CUPTI_RUNTIME_TRACE_CBID_SIZE], _drv_on[CUPTI_DRIVER_TRACE_CBID_SIZE];
static int _kind_on[64];
static CUpti_BuffersCallbackRequestFunc _req;
static CUpti_BuffersCallbackCompleteFunc _done;
static union rec *_q;
static size_t _nq;
static uint32_t _next_corr = 1;
static uint64_t _gpu_cursor;
static uint64_t _dropped;
/* Records held back (fake_cupti_hold) until released or a forced flush. */
#define MAXHQ 4096
static union rec _hq[MAXHQ];
static size_t _nhq;
static int _hold;
static struct fake_cupti_truth _truth;
static int _inited;
static long _record_cost_ns;	/* FAKE_CUPTI_RECORD_COST_NS */
static long _launch_cost_ns;	/* FAKE_CUPTI_LAUNCH_COST_NS */
static uint64_t _kernel_gap_ns;	/* FAKE_CUPTI_KERNEL_GAP_NS */
static uint64_t _keep_one_in;	/* FAKE_CUPTI_KEEP_ONE_IN: kernel records CUPTI loses silently */

static void _init(void)
{
	const char *m;

	if (_inited)
		return;
	_inited = 1;
	m = getenv("FAKE_CUPTI_MODE");
	if (m)
		fake_cupti_set_mode(m);
	m = getenv("FAKE_CUPTI_RECORD_COST_NS");
	_record_cost_ns = m ? atol(m) : 0;
	m = getenv("FAKE_CUPTI_LAUNCH_COST_NS");
	_launch_cost_ns = m ? atol(m) : 0;
	m = getenv("FAKE_CUPTI_KERNEL_GAP_NS");
	_kernel_gap_ns = m ? strtoull(m, NULL, 10) : 0;
	m = getenv("FAKE_CUPTI_KEEP_ONE_IN");
	_keep_one_in = m ? strtoull(m, NULL, 10) : 0;
}

static void _spin_ns(long ns)
{
	struct timespec t0, t;

	if (ns <= 0)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do
		clock_gettime(CLOCK_MONOTONIC, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + t.tv_nsec - t0.tv_nsec < ns);
}

/* What recording an activity costs the launching thread (the H200: windows
 * saw fewer launches than the time around them): a busy wait, so that the
 * thread launches less while activity is on. */
static void _record_cost(void)
{
	_spin_ns(_record_cost_ns);
}

static uint64_t _now(void)
{
	return fake_cupti_now();
}

uint64_t fake_cupti_now(void)
{
	struct timespec ts;
	const char *s = getenv("FAKE_CUPTI_SKEW_NS");
	long long skew = s ? atoll(s) : -1000000000LL;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)((long long)ts.tv_sec * 1000000000LL + ts.tv_nsec + skew);
}

/*
 * The real CUPTI is torn down by its destructor at exit while a client's
 * threads may still run: a call after that is a crash in the application.
 * Here it is a loud abort, so that a test sees it. FAKE_CUPTI_DTOR_LINGER_MS
 * keeps the process in that state a while (the real teardown takes time),
 * and FAKE_CUPTI_FLUSH_BLOCKS=1 makes a periodic flush (flag 0) block until
 * that teardown begins, as a flush stuck in the driver at exit would.
 */
static volatile int _dead;

static void _dead_check(void)
{
	static const char msg[] = "fake CUPTI: called after its destructor ran\n";

	if (!_dead)
		return;
	if (write(2, msg, sizeof(msg) - 1) < 0) {
		/* aborting anyway */
	}
	abort();
}

__attribute__((destructor)) static void _destructor(void)
{
	const char *s = getenv("FAKE_CUPTI_DTOR_LINGER_MS");

	_dead = 1;
	if (s)
		usleep((useconds_t)atoi(s) * 1000);
}

#define FAIL_CHECK() do { _dead_check(); _init(); if (_mode_fail) return CUPTI_ERROR_UNKNOWN; } while (0)

int fake_cupti_failing(void)
{
	_dead_check();
	_init();
	return _mode_fail;
}

API CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{
	FAIL_CHECK();
	/* The real names of what the PM sampling fake (fake_cupti_pm.c) returns. */
	switch (r) {
	case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
		*s = "fake: multiple subscribers";
		break;
	case CUPTI_ERROR_OUT_OF_MEMORY:
		*s = "CUPTI_ERROR_OUT_OF_MEMORY";
		break;
	case CUPTI_ERROR_HARDWARE_BUSY:
		*s = "CUPTI_ERROR_HARDWARE_BUSY";
		break;
	case CUPTI_ERROR_NOT_SUPPORTED:
		*s = "CUPTI_ERROR_NOT_SUPPORTED";
		break;
	case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
		*s = "CUPTI_ERROR_INSUFFICIENT_PRIVILEGES";
		break;
	case CUPTI_ERROR_INVALID_PARAMETER:
		*s = "CUPTI_ERROR_INVALID_PARAMETER";
		break;
	default:
		*s = "fake: error";
		break;
	}
	return CUPTI_SUCCESS;
}

static CUptiResult _subscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb, void *ud,
			      CUpti_SubscriberParams *p)
{
	CUptiResult r = CUPTI_SUCCESS;

	FAIL_CHECK();
	pthread_mutex_lock(&_mu);
	if (_subscribed || _mode_conflict || _other_client) {
		if (p && p->oldSubscriberName && p->oldSubscriberSize > 0) {
			strncpy(p->oldSubscriberName, "CUPTI for fake profiler", p->oldSubscriberSize - 1);
			p->oldSubscriberName[p->oldSubscriberSize - 1] = 0;
		}
		r = CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
		_truth.refusals++;
	} else {
		_subscribed = 1;
		_cb = cb;
		_cb_ud = ud;
		*sub = (CUpti_SubscriberHandle)&_subscribed;
		_truth.subscribes++;
	}
	pthread_mutex_unlock(&_mu);
	return r;
}

API CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb, void *ud)
{
	return _subscribe(sub, cb, ud, NULL);
}

API CUptiResult cuptiSubscribe_v2(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb, void *ud,
				  CUpti_SubscriberParams *p)
{
	return _subscribe(sub, cb, ud, p);
}

API CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle sub)
{
	FAIL_CHECK();
	pthread_mutex_lock(&_mu);
	if (!_subscribed || sub != (CUpti_SubscriberHandle)&_subscribed) {
		pthread_mutex_unlock(&_mu);
		return CUPTI_ERROR_INVALID_PARAMETER;
	}
	_subscribed = 0;
	_cb = NULL;
	memset(_rt_on, 0, sizeof(_rt_on));
	memset(_drv_on, 0, sizeof(_drv_on));
	_truth.unsubscribes++;
	pthread_mutex_unlock(&_mu);
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle sub, CUpti_CallbackDomain d,
				    CUpti_CallbackId id)
{
	FAIL_CHECK();
	if (!_subscribed || sub != (CUpti_SubscriberHandle)&_subscribed)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (d == CUPTI_CB_DOMAIN_RUNTIME_API && id < CUPTI_RUNTIME_TRACE_CBID_SIZE)
		_rt_on[id] = !!enable;
	else if (d == CUPTI_CB_DOMAIN_DRIVER_API && id < CUPTI_DRIVER_TRACE_CBID_SIZE)
		_drv_on[id] = !!enable;
	else
		return CUPTI_ERROR_INVALID_PARAMETER;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle sub, CUpti_CallbackDomain d)
{
	FAIL_CHECK();
	return d == CUPTI_CB_DOMAIN_STATE ? CUPTI_SUCCESS : CUPTI_ERROR_NOT_SUPPORTED;
}

static const struct {
	CUpti_CallbackDomain d;
	uint32_t id;
	const char *name;
} _names[] = {
	{ CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, "cudaLaunchKernel" },
	{ CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000, "cudaLaunchKernel_ptsz" },
	{ CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch" },
	{ CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, "cudaMemcpyAsync" },
	{ CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, "cudaMemcpy" },
	{ CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, "cudaMemsetAsync" },
	{ CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020, "cudaGetLastError" },
	{ CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchHostFunc_v10000, "cudaLaunchHostFunc" },
	{ CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cuLaunchKernel" },
	{ CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, "cuLaunchKernelEx" },
	{ CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, "cuGraphLaunch" },
	{ CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2, "cuMemcpyHtoDAsync_v2" },
	{ CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2, "cuMemcpyDtoH_v2" },
	{ CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, "cuMemsetD8Async" },
	{ CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent, "cuCtxGetCurrent" },
};

API CUptiResult cuptiGetCallbackName(CUpti_CallbackDomain d, uint32_t id, const char **name)
{
	FAIL_CHECK();
	for (size_t i = 0; i < sizeof(_names) / sizeof(_names[0]); i++)
		if (_names[i].d == d && _names[i].id == id) {
			*name = _names[i].name;
			return CUPTI_SUCCESS;
		}
	return CUPTI_ERROR_INVALID_PARAMETER;
}

API CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc req,
					       CUpti_BuffersCallbackCompleteFunc done)
{
	FAIL_CHECK();
	if (!req || !done)
		return CUPTI_ERROR_INVALID_PARAMETER;
	_req = req;
	_done = done;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityEnable(CUpti_ActivityKind k)
{
	FAIL_CHECK();
	if ((unsigned)k >= 64)
		return CUPTI_ERROR_INVALID_KIND;
	if (!_req)
		return CUPTI_ERROR_INVALID_OPERATION;
	pthread_mutex_lock(&_mu);
	if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && !_kind_on[k])
		_truth.toggles_on++;
	_kind_on[k] = 1;
	pthread_mutex_unlock(&_mu);
	/* Enabling took milliseconds on the H200 (FAKE_CUPTI_ENABLE_DELAY_US):
	 * the kind is on, the caller is not back yet, the application runs. */
	if (k == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && getenv("FAKE_CUPTI_ENABLE_DELAY_US"))
		usleep((useconds_t)atoi(getenv("FAKE_CUPTI_ENABLE_DELAY_US")));
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityDisable(CUpti_ActivityKind k)
{
	FAIL_CHECK();
	if ((unsigned)k >= 64)
		return CUPTI_ERROR_INVALID_KIND;
	pthread_mutex_lock(&_mu);
	_kind_on[k] = 0;
	pthread_mutex_unlock(&_mu);
	return CUPTI_SUCCESS;
}

static size_t _size(const CUpti_Activity *a)
{
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return sizeof(CUpti_ActivityKernel10);
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_MEMSET:
		return sizeof(CUpti_ActivityMemset4);
	default:
		return sizeof(union rec);
	}
}

API CUptiResult cuptiActivityGetNextRecord(uint8_t *buf, size_t valid, CUpti_Activity **rec)
{
	uint8_t *p;

	FAIL_CHECK();
	p = *rec ? (uint8_t *)*rec + ((_size(*rec) + 7) & ~(size_t)7) : buf;
	if (p + sizeof(CUpti_Activity) > buf + valid || p + _size((CUpti_Activity *)p) > buf + valid) {
		*rec = NULL;
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	}
	*rec = (CUpti_Activity *)p;
	return CUPTI_SUCCESS;
}

API CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext ctx, uint32_t stream, size_t *n)
{
	FAIL_CHECK();
	pthread_mutex_lock(&_mu);
	*n = _dropped;
	_dropped = 0;
	pthread_mutex_unlock(&_mu);
	return CUPTI_SUCCESS;
}

/* Moves the held records to the queue, under _mu. */
static void _release_held(void)
{
	if (_nhq && !_q)
		_q = malloc(MAXQ * sizeof(*_q));
	for (size_t i = 0; _q && i < _nhq && _nq < MAXQ; i++)
		_q[_nq++] = _hq[i];
	_nhq = 0;
}

/* Hands the queued records over in as many buffers as they need, outside
 * our lock (the client's callbacks may call back into us). */
API CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	union rec *q;
	size_t n, i = 0;

	FAIL_CHECK();
	/* FAKE_CUPTI_FLUSH_SPIN_US: a periodic flush burns that much CPU, as a
	 * real one with many records does, on the caller's thread. */
	if (flag == 0 && getenv("FAKE_CUPTI_FLUSH_SPIN_US")) {
		struct timespec t0, t;
		long us = atol(getenv("FAKE_CUPTI_FLUSH_SPIN_US"));

		clock_gettime(CLOCK_MONOTONIC, &t0);
		do
			clock_gettime(CLOCK_MONOTONIC, &t);
		while ((t.tv_sec - t0.tv_sec) * 1000000L + (t.tv_nsec - t0.tv_nsec) / 1000 < us);
	}
	if (flag == 0 && getenv("FAKE_CUPTI_FLUSH_BLOCKS")) {
		for (int i = 0; i < 1000 && !_dead; i++)
			usleep(10000);
		return CUPTI_SUCCESS;
	}
	pthread_mutex_lock(&_mu);
	if (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED)
		_release_held();
	q = _q;
	n = _nq;
	_q = NULL;
	_nq = 0;
	_truth.flushes++;
	pthread_mutex_unlock(&_mu);
	while (i < n && _req && _done) {
		uint8_t *buf = NULL;
		size_t size = 0, max = 0, used = 0;

		_req(&buf, &size, &max);
		pthread_mutex_lock(&_mu);
		_truth.buffers_requested++;
		pthread_mutex_unlock(&_mu);
		if (!buf || size < sizeof(union rec)) {
			pthread_mutex_lock(&_mu);
			_dropped += n - i;
			_truth.refused += n - i;
			pthread_mutex_unlock(&_mu);
			break;
		}
		while (i < n) {
			size_t sz = (_size(&q[i].a) + 7) & ~(size_t)7;

			if (used + sz > size || (max && i >= max))
				break;
			memcpy(buf + used, &q[i], _size(&q[i].a));
			used += sz;
			i++;
		}
		pthread_mutex_lock(&_mu);
		_truth.buffers_completed++;
		_truth.delivered += 0;
		pthread_mutex_unlock(&_mu);
		_done(NULL, 0, buf, size, used);
	}
	pthread_mutex_lock(&_mu);
	_truth.delivered += i;
	pthread_mutex_unlock(&_mu);
	free(q);
	return CUPTI_SUCCESS;
}

/*
 * FAKE_CUPTI_TS_STALL_EVERY=N: every Nth read returns 200 us late, as when
 * the caller is preempted between reading the clock and getting back.
 */
API CUptiResult cuptiGetTimestamp(uint64_t *t)
{
	static unsigned long calls;
	const char *s = getenv("FAKE_CUPTI_TS_STALL_EVERY");
	long every = s ? atol(s) : 0;

	FAIL_CHECK();
	*t = _now();
	if (every > 0 && __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) % (unsigned long)every == 0)
		nanosleep(&(struct timespec){ .tv_nsec = 200000 }, NULL);
	return CUPTI_SUCCESS;
}

/* ---- control side -------------------------------------------------------- */

void fake_cupti_set_mode(const char *m)
{
	_inited = 1;
	_mode_fail = !strcmp(m, "fail");
	_mode_conflict = !strcmp(m, "conflict");
}

void fake_cupti_other_client(int hold)
{
	pthread_mutex_lock(&_mu);
	_other_client = hold;
	pthread_mutex_unlock(&_mu);
}

int fake_cupti_subscribed(void)
{
	int s;

	pthread_mutex_lock(&_mu);
	s = _subscribed;
	pthread_mutex_unlock(&_mu);
	return s;
}

int fake_cupti_callbacks_on(void)
{
	int on;

	/* The launch's: a synchronisation's may be on alone. */
	pthread_mutex_lock(&_mu);
	on = _subscribed && _rt_on[CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000];
	pthread_mutex_unlock(&_mu);
	return on;
}

int fake_cupti_activity_enabled(void)
{
	return _kind_on[CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL];
}

void fake_cupti_get_truth(struct fake_cupti_truth *t)
{
	pthread_mutex_lock(&_mu);
	*t = _truth;
	pthread_mutex_unlock(&_mu);
}

/* When the fake GPU has run everything queued, on the fake's clock. */
static uint64_t _gpu_idle(void)
{
	uint64_t c;

	pthread_mutex_lock(&_mu);
	c = _gpu_cursor;
	pthread_mutex_unlock(&_mu);
	return c;
}

uint64_t fake_cupti_gpu_idle_at(void)
{
	const char *s = getenv("FAKE_CUPTI_SKEW_NS");
	long long skew = s ? atoll(s) : -1000000000LL;

	return (uint64_t)((long long)_gpu_idle() - skew);
}

static void _call_sym(CUpti_CallbackDomain d, uint32_t id, CUpti_ApiCallbackSite site,
		      uint32_t corr, const char *fn, const char *sym, void *params)
{
	CUpti_CallbackData cd;
	CUpti_CallbackFunc cb;
	void *ud;
	int on, ret = 0;

	pthread_mutex_lock(&_mu);
	on = _subscribed && (d == CUPTI_CB_DOMAIN_RUNTIME_API ? _rt_on[id] : _drv_on[id]);
	cb = _cb;
	ud = _cb_ud;
	if (on)
		_truth.callbacks++;
	pthread_mutex_unlock(&_mu);
	if (!on || !cb)
		return;
	memset(&cd, 0, sizeof(cd));
	cd.callbackSite = site;
	cd.functionName = fn;
	cd.correlationId = corr;
	cd.symbolName = sym;
	cd.functionParams = params;
	cd.functionReturnValue = site == CUPTI_API_EXIT ? &ret : NULL;
	cb(ud, d, id, &cd);
}

static void _call(CUpti_CallbackDomain d, uint32_t id, CUpti_ApiCallbackSite site, uint32_t corr,
		  const char *fn)
{
	_call_sym(d, id, site, corr, fn, NULL, NULL);
}

/* Queues a record if its kind is enabled now, as CUPTI decides at launch. */
static void _queue(const union rec *r)
{
	static uint64_t kernels;
	int queued = 0;

	pthread_mutex_lock(&_mu);
	/* Lost as an H100's CUPTI lost them: no drop counted, nothing said. */
	if (_keep_one_in > 1 && r->a.kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
	    _kind_on[r->a.kind] && kernels++ % _keep_one_in) {
		pthread_mutex_unlock(&_mu);
		return;
	}
	if (_kind_on[r->a.kind] && _hold && _nhq < MAXHQ) {
		_hq[_nhq++] = *r;
		_truth.recorded++;
		queued = 1;
	} else if (_kind_on[r->a.kind] && _nq < MAXQ) {
		if (!_q)
			_q = malloc(MAXQ * sizeof(*_q));
		if (_q) {
			_q[_nq++] = *r;
			_truth.recorded++;
			queued = 1;
		}
	}
	pthread_mutex_unlock(&_mu);
	if (queued)
		_record_cost();
}

static uint32_t _corr(void)
{
	return __atomic_fetch_add(&_next_corr, 1, __ATOMIC_RELAXED);
}

static void _gpu_span(uint64_t dur, uint64_t *start, uint64_t *end)
{
	uint64_t now = _now();

	_init();
	pthread_mutex_lock(&_mu);
	/* Queued behind the last item, after the idle gap a launch leaves. */
	if (_gpu_cursor && _gpu_cursor + _kernel_gap_ns > now)
		now = _gpu_cursor + _kernel_gap_ns;
	if (_gpu_cursor < now)
		_gpu_cursor = now;
	*start = _gpu_cursor;
	_gpu_cursor += dur;
	*end = _gpu_cursor;
	pthread_mutex_unlock(&_mu);
}

uint64_t *fake_dispatch_counter(const char *env)
{
	const char *path = getenv(env);
	void *p;
	int fd;

	if (!path || (fd = open(path, O_RDWR | O_CLOEXEC)) < 0)
		return NULL;
	p = mmap(NULL, sizeof(uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	return p == MAP_FAILED ? NULL : p;
}

static uint64_t *_dispatch_counter;
static pthread_once_t _dispatch_once = PTHREAD_ONCE_INIT;

static void _dispatch_open(void)
{
	_dispatch_counter = fake_dispatch_counter("FAKE_CUPTI_DISPATCH_FILE");
}

/* One kernel more for the monitors of another process to count. */
static void _dispatched(void)
{
	pthread_once(&_dispatch_once, _dispatch_open);
	if (_dispatch_counter)
		__atomic_fetch_add(_dispatch_counter, 1, __ATOMIC_RELAXED);
}

static void _kernel_record_graph(uint32_t corr, const char *name, uint64_t dur, uint32_t stream,
				 uint32_t graph)
{
	union rec r;

	memset(&r, 0, sizeof(r));
	r.k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	r.k.graphId = graph;
	_gpu_span(dur, &r.k.start, &r.k.end);
	r.k.deviceId = 0;
	r.k.streamId = stream;
	r.k.correlationId = corr;
	r.k.name = name;
	_queue(&r);
	_dispatched();
	pthread_mutex_lock(&_mu);
	_truth.kernel_ns += dur;
	pthread_mutex_unlock(&_mu);
}

static void _kernel_record(uint32_t corr, const char *name, uint64_t dur, uint32_t stream)
{
	_kernel_record_graph(corr, name, dur, stream, 0);
}

void fake_cupti_launch(const char *name, uint64_t dur_ns, int record_driver_corr)
{
	uint32_t rt = _corr(), drv = _corr();

	_call_sym(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
		  CUPTI_API_ENTER, rt, "cudaLaunchKernel", name, NULL);
	_call_sym(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER,
		  drv, "cuLaunchKernel", name, NULL);
	/* The launch's own work, records or not (a launch queue that is full). */
	_spin_ns(_launch_cost_ns);
	_kernel_record(record_driver_corr ? drv : rt, name, dur_ns, 7);
	_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_EXIT, drv,
	      "cuLaunchKernel");
	_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_EXIT,
	      rt, "cudaLaunchKernel");
	pthread_mutex_lock(&_mu);
	_truth.launches++;
	pthread_mutex_unlock(&_mu);
}

void fake_cupti_driver_launch(const char *name, uint64_t dur_ns)
{
	uint32_t drv = _corr();

	_call_sym(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER,
		  drv, "cuLaunchKernel", name, NULL);
	_kernel_record(drv, name, dur_ns, 9);
	_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_EXIT, drv,
	      "cuLaunchKernel");
	pthread_mutex_lock(&_mu);
	_truth.launches++;
	pthread_mutex_unlock(&_mu);
}

void fake_cupti_graph_launch(const char *name, int n, uint64_t dur_ns)
{
	uint32_t rt = _corr(), drv = _corr();

	_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_API_ENTER,
	      rt, "cudaGraphLaunch");
	_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_API_ENTER, drv,
	      "cuGraphLaunch");
	for (int i = 0; i < n; i++)
		_kernel_record_graph(rt, name, dur_ns, 7, FAKE_CUPTI_GRAPH_ID);
	_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_API_EXIT, drv,
	      "cuGraphLaunch");
	_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_API_EXIT,
	      rt, "cudaGraphLaunch");
	pthread_mutex_lock(&_mu);
	_truth.launches++;
	pthread_mutex_unlock(&_mu);
}

void fake_cupti_device_synchronize(void)
{
	uint32_t rt = _corr(), drv = _corr();

	_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
	      CUPTI_API_ENTER, rt, "cudaDeviceSynchronize");
	_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, CUPTI_API_ENTER, drv,
	      "cuCtxSynchronize");
	/* Spinning, as the runtime's own wait does by default. */
	while (_now() < _gpu_idle())
		__asm__ volatile("" ::: "memory");
	_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, CUPTI_API_EXIT, drv,
	      "cuCtxSynchronize");
	_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
	      CUPTI_API_EXIT, rt, "cudaDeviceSynchronize");
}

/* One copy: the runtime call (params as CUPTI passes them) around its driver call. */
struct copy_call {
	uint32_t rt_cbid, drv_cbid;
	const char *rt_name, *drv_name;
	void *params;
	uint8_t kind;		/* CUPTI_ACTIVITY_MEMCPY_KIND_* */
	int sync;		/* returns once the fake GPU ran it */
};

static void _copy(const struct copy_call *c, uint64_t bytes, uint64_t dur_ns)
{
	uint32_t rt = _corr(), drv = _corr();
	union rec r;

	_call_sym(CUPTI_CB_DOMAIN_RUNTIME_API, c->rt_cbid, CUPTI_API_ENTER, rt, c->rt_name, NULL,
		  c->params);
	_call(CUPTI_CB_DOMAIN_DRIVER_API, c->drv_cbid, CUPTI_API_ENTER, drv, c->drv_name);
	memset(&r, 0, sizeof(r));
	r.m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
	r.m.copyKind = c->kind;
	r.m.bytes = bytes;
	_gpu_span(dur_ns, &r.m.start, &r.m.end);
	r.m.streamId = 7;
	r.m.correlationId = drv;
	r.m.runtimeCorrelationId = rt;
	_queue(&r);
	if (c->sync) {
		const char *s = getenv("FAKE_CUPTI_SKEW_NS");
		long long end = (long long)r.m.end - (s ? atoll(s) : -1000000000LL);
		struct timespec until = { end / 1000000000LL, end % 1000000000LL };

		clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &until, NULL);
	}
	_call(CUPTI_CB_DOMAIN_DRIVER_API, c->drv_cbid, CUPTI_API_EXIT, drv, c->drv_name);
	_call_sym(CUPTI_CB_DOMAIN_RUNTIME_API, c->rt_cbid, CUPTI_API_EXIT, rt, c->rt_name, NULL,
		  c->params);
	pthread_mutex_lock(&_mu);
	_truth.memcpy_calls++;
	_truth.memcpy_ns += dur_ns;
	_truth.memcpy_bytes += bytes;
	pthread_mutex_unlock(&_mu);
}

void fake_cupti_memcpy_htod(uint64_t bytes, uint64_t dur_ns)
{
	cudaMemcpyAsync_v3020_params params = { .count = bytes, .kind = cudaMemcpyHostToDevice };
	struct copy_call c = {
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
		"cudaMemcpyAsync", "cuMemcpyHtoDAsync_v2", &params, CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 0,
	};

	_copy(&c, bytes, dur_ns);
}

void fake_cupti_memcpy_dtoh(uint64_t bytes, uint64_t dur_ns)
{
	cudaMemcpy_v3020_params params = { .count = bytes, .kind = cudaMemcpyDeviceToHost };
	struct copy_call c = {
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
		"cudaMemcpy", "cuMemcpyDtoH_v2", &params, CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, 1,
	};

	_copy(&c, bytes, dur_ns);
}

void fake_cupti_hold(int on)
{
	pthread_mutex_lock(&_mu);
	_hold = on;
	if (!on)
		_release_held();
	pthread_mutex_unlock(&_mu);
}

void fake_cupti_memset(uint64_t bytes, uint64_t dur_ns)
{
	uint32_t rt = _corr(), drv = _corr();
	union rec r;

	_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, CUPTI_API_ENTER,
	      rt, "cudaMemsetAsync");
	_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, CUPTI_API_ENTER, drv,
	      "cuMemsetD8Async");
	memset(&r, 0, sizeof(r));
	r.s.kind = CUPTI_ACTIVITY_KIND_MEMSET;
	r.s.bytes = bytes;
	_gpu_span(dur_ns, &r.s.start, &r.s.end);
	r.s.streamId = 7;
	r.s.correlationId = drv;
	_queue(&r);
	_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, CUPTI_API_EXIT, drv,
	      "cuMemsetD8Async");
	_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, CUPTI_API_EXIT,
	      rt, "cudaMemsetAsync");
	pthread_mutex_lock(&_mu);
	_truth.memset_calls++;
	_truth.memset_ns += dur_ns;
	pthread_mutex_unlock(&_mu);
}

void fake_cupti_other_call(void)
{
	uint32_t rt = _corr();

	_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020, CUPTI_API_ENTER,
	      rt, "cudaGetLastError");
	_call(CUPTI_CB_DOMAIN_RUNTIME_API, CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020, CUPTI_API_EXIT,
	      rt, "cudaGetLastError");
}
