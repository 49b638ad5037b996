// SPDX-License-Identifier: Apache-2.0
/*
 * libflamewatch-cuda.so: a CUPTI injection library (CUDA_INJECTION64_PATH)
 * that reports every CUDA launch and the GPU time of its work through the
 * USDT probes of probes.h. It runs inside someone else's process: it never
 * aborts, never writes to stdout, writes one line to stderr when something
 * fails, and whatever fails, the application goes on as if it were absent.
 *
 * Life cycle. InitializeInjection (called by the CUDA driver in cuInit)
 * dlopens CUPTI and starts one control thread; nothing else happens until a
 * tracer raises the activity probe's semaphore (the agent attaching), or
 * FLAMEWATCH_CUDA_SUMMARY asks for collection without one. Only then does
 * the library subscribe to CUPTI; it unsubscribes again a second after the
 * last tracer left, so that torch.profiler or Nsight can have CUPTI (one
 * subscriber per process) whenever no agent is looking. A subscription
 * refused because another client holds CUPTI is reported (stderr and the
 * conflict probe) and retried every few seconds.
 *
 * Overhead. CUPTI's own work per API call and per record is most of what
 * collection costs a process, and no cleverness on our side removes it
 * (docs/gpu-time.md has the figures). So the launch callbacks are
 * duty-cycled: time is cut into windows of FLAMEWATCH_CUDA_WINDOW_MS
 * (10 ms); of every FLAMEWATCH_CUDA_DUTY_CYCLE (30) consecutive windows one,
 * chosen at random, has the callbacks enabled, the others run without
 * them. Every instant is thus collected with probability exactly 1/D (a
 * random window per group, not a fixed phase, so that no periodic workload
 * aliases with the windows). Inside a window, launches above
 * FLAMEWATCH_CUDA_LAUNCH_BUDGET kept launches per second of window time
 * are sampled (fwc_sampler_take), so the agent's cost per launch (a uprobe
 * and a stack walk) stays bounded too. Records of launches not kept are
 * not emitted: their GPU time rides on the next kept record of the same
 * name.
 *
 * The activity kinds stay on between windows (FLAMEWATCH_CUDA_ACTIVITY_ALL,
 * default 1): every kernel's record arrives, and the GPU time of those no
 * window saw launched is carried (x 1) to kept records of their name, so the
 * totals are exact, not estimated. A record costs the launching thread
 * time, which a launch-bound loop pays on every step,
 * so above FLAMEWATCH_CUDA_EXACT_MAX_RATE launches a second (30,000) the
 * activity is duty-cycled with the callbacks (_choose_activity) and every
 * launch seen stands for D launches: weights carry D, so weighted totals
 * estimate the whole run.
 *
 * The budget is per second of window, not of wall time: the probes then
 * take the same small share of a window whatever D. Spread over wall time,
 * D times as many probes fell into each window, slowed the launching
 * thread inside it, and the window saw fewer launches than the time around
 * it: duty-cycled totals came out low. What CUPTI itself costs a launch
 * inside a window slows it the same way; the library does not correct
 * that part (the agent does, from the GPU's own kernel counts, for a
 * process alone on its GPU). FLAMEWATCH_CUDA_COUNT_ALL=1 leaves the
 * callbacks on between windows to count every launch, and scales a
 * window's records by the launches counted over those seen instead of D
 * (_update_scale). That
 * removes the bias, but costs every launch a callback: too much on a loop
 * of tiny kernels (docs/gpu-time.md).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cupti.h>

#define _SDT_HAS_SEMAPHORES 1
#include <sys/sdt.h>

#include "common/clock.h"
#include "cuda/cupti_api.h"
#include "cuda/fwc.h"

/* The semaphores sys/sdt.h refers to as <provider>_<probe>_semaphore; the
 * kernel increments them for every attached uprobe (ref_ctr_offset). */
__extension__ volatile unsigned short flamewatch_launch_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));
__extension__ volatile unsigned short flamewatch_activity_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));
__extension__ volatile unsigned short flamewatch_conflict_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));
__extension__ volatile unsigned short flamewatch_name_semaphore
	__attribute__((unused)) __attribute__((section(".probes")));

#define EXPORT __attribute__((visibility("default")))

#define BUF_SIZE	(128u << 10)	/* small: records reach the agent soon */
#define BUF_MAX		128		/* outstanding; beyond, CUPTI drops */
#define BUF_KEEP	8		/* kept for reuse */
#define IDLE_STOP_NS	1000000000LL	/* unsubscribe this long after the last tracer left */
#define RETRY_NS	5000000000LL	/* retry a refused subscription */
#define CARRY_FLUSH_SLOTS 1000		/* windows between flushes of the carries (activity_all) */
#define COVER_EMIT_NS	1000000000LL	/* coverage goes out at least this often */
#define TIMELINE_SECONDS 128		/* the summary's seconds; later ones add to the last */



static const CUpti_ActivityKind _kinds[] = {
	CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
	CUPTI_ACTIVITY_KIND_MEMCPY,
	CUPTI_ACTIVITY_KIND_MEMCPY2,
	CUPTI_ACTIVITY_KIND_MEMSET,
};

static struct {
	struct fwc_cupti api;
	int initialized;
	_Atomic int inert;		/* forked child, fatal CUPTI error: do nothing */
	_Atomic int exiting;		/* exit() has begun: the control thread stops */

	/* configuration */
	uint64_t budget;		/* kept launches per second */
	uint32_t duty;			/* D: one window in D collects */
	uint32_t window_ms;
	int count_all;			/* callbacks always on, counting every launch */
	int activity_all_cfg;		/* FLAMEWATCH_CUDA_ACTIVITY_ALL */
	uint64_t exact_max_rate;	/* FLAMEWATCH_CUDA_EXACT_MAX_RATE: the launch rate ceiling */
	uint64_t max_cost_ppm;		/* what every record may cost the process, per million */
	int activity_all;		/* now: activity always on, only the callbacks duty-cycled */
	uint64_t activity_switches;	/* between the two, by the launch rate */
	/*
	 * For the summary: when the last switch came (ms after subscribing)
	 * and how many records had been read then, buffers CUPTI completed,
	 * and whether the flush at exit was made (it is given up when CUPTI
	 * holds the control thread).
	 */
	int64_t subscribed_ns, switch_ms;
	uint64_t records_at_switch;
	_Atomic uint64_t buffers_done;
	int exit_flushed;
	uint64_t exit_records;		/* records read by the flush at exit */
	uint64_t buffer_errors;		/* buffers whose reading stopped on an error */
	int last_buffer_error;
	int close_flush;		/* FLAMEWATCH_CUDA_CLOSE_FLUSH: forced flush as a window closes */
	/*
	 * Per second since subscribing, for the summary: launches the windows
	 * saw, records read (and of them, those of launches a window saw),
	 * buffers completed. Where records go missing, this says from when.
	 */
	struct {
		uint32_t seen, records, windowed, buffers;
	} timeline[TIMELINE_SECONDS];
	uint64_t rate_avg;		/* launches a second in windows, decaying mean */
	int64_t cost_ppm;		/* every record's cost as measured, per million; -1: unknown */
	int64_t cost_bound_ppm;		/* its upper bound: whole launch calls; -1: unknown */
	int duty_by_rate;		/* the rate ceiling, not the cost, decided */
	uint64_t probes;		/* probe windows opened */
	uint64_t probe_every;		/* FLAMEWATCH_CUDA_PROBE_GROUPS; 0: as the cost needs */
	uint64_t seed;
	const char *summary_path;
	const char *listen_file;	/* FLAMEWATCH_CUDA_LISTEN_FILE (benchmarks) */
	int listen_file_there;		/* it existed at the last tick */

	/* control (the control thread and exit, under ctl) */
	pthread_mutex_t ctl;
	CUpti_SubscriberHandle sub;
	int subscribed;
	int on;				/* callbacks and activity enabled */
	int activity_on;		/* the activity kinds are enabled */
	int counting;			/* count_all: the callbacks are on between windows */
	int conflict_reported;		/* said on stderr */
	char conflict[160];		/* the last refusal, while not subscribed */
	int conflict_told;		/* ...fired with a tracer on the conflict probe */
	int64_t retry_at, idle_since;
	uint64_t slot;
	uint32_t on_slot;
	uint32_t probe_slot;		/* UINT32_MAX: no probe window in this group */
	int probe_on;			/* the probe window's callbacks are on */
	int mode_told;			/* the collection record went out since a tracer came */
	uint64_t mode_told_slot;	/* ...at this slot */
	uint64_t ctl_rng;
	uint64_t last_window_seen;
	int64_t on_since;		/* when the window's callbacks came on */
	uint64_t windows;		/* collecting windows opened */
	int64_t late_ns;		/* their callbacks' delay after the tick, summed */
	int tracer_seen;		/* the name probe had a tracer at the last tick */
	int64_t cover_from;		/* CLOCK_REALTIME since when every record is read; 0: not */
	uint64_t cover_lost;		/* records lost (dropped, refused) when it was checked */
	int cover_clean;		/* the probe window just closed launched nothing */
	int sync_watch;			/* the synchronising calls' callbacks are on */
	uint8_t rt_class[RT_IDS], drv_class[DRV_IDS];
	int classes_known;

	/* hot path */
	_Atomic int collecting;		/* a window is open: launches are taken */
	_Atomic int probing;		/* a probe window: launch calls timed, activity off */
	_Atomic uint32_t window_id;	/* bumped at every window's open and close */
	_Atomic uint32_t gen;		/* bumped whenever callbacks are (re)enabled */
	_Atomic uint64_t p_fixed;	/* keep probability, 1/2^32 */
	_Atomic uint64_t window_seen;
	_Atomic uint64_t seen[FWC_NCLASS], kept[FWC_NCLASS], weight_sum[FWC_NCLASS];
	_Atomic uint64_t all[FWC_NCLASS];	/* every launch, with count_all */
	uint64_t all_then[FWC_NCLASS], seen_then[FWC_NCLASS];	/* at the last scale update */
	double all_avg[FWC_NCLASS], seen_avg[FWC_NCLASS];	/* their decaying sums */
	_Atomic int64_t offset_ns;
	int offset_known;	/* offset_ns measured once (clock__offset_ns keeps it) */
	_Atomic uint32_t last_corr;	/* the last launch's id a callback saw */
	_Atomic uint64_t probe_launches;	/* launches in the probe window open */
	_Atomic int64_t cover_wait_from;	/* CLOCK_REALTIME: coverage waits for a fence; 0: not */
	_Atomic uint32_t cover_after_corr;	/* a fence is a record launched after this id */
	_Atomic int64_t cover_fence;	/* the earliest fence seen while it waits */

	/* records (under rec) */
	pthread_mutex_t rec;
	struct fwc_names names;
	struct fwc_batch batch;
	struct fwc_stats stats;
	void *free_bufs[BUF_KEEP];
	int nfree;
	_Atomic int outstanding;
	_Atomic uint64_t refused_bufs;

	struct fwc_weights weights;
	struct fwc_fresh fresh;
	struct fwc_cost cost;
	_Atomic int64_t window_ns;	/* CLOCK_MONOTONIC when the open window began */
	int warned[8];
} G = {
	.ctl = PTHREAD_MUTEX_INITIALIZER,
	.rec = PTHREAD_MUTEX_INITIALIZER,
};

enum { W_LOAD, W_SYM, W_SUB, W_CALL, W_FATAL, W_THREAD, W_SUMMARY, W_ENV };

/* Per launching thread: the sampler and the runtime call that may wrap a
 * driver call, so that the pair counts once. */
struct tls {
	int seeded;
	struct fwc_thread_sampler s;
	uint32_t gen;
	int rt_active;
	uint32_t rt_corr, rt_weight;
	uint32_t drv_corr, drv_weight;
	int drv_active;
	int timed;			/* the outer kernel launch in progress is timed */
	int timed_on;			/* ...with the activity kinds on */
	uint32_t timed_window;
	int64_t timed_from;
};

static __thread struct tls _t;

static void _warn_once(int which, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void _warn_once(int which, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	if (G.warned[which])
		return;
	G.warned[which] = 1;
	n = snprintf(line, sizeof(line), "flamewatch-cuda[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	strcat(line, "\n");
	/* write(2), not stdio: the application may own stderr's buffer. */
	if (write(2, line, strlen(line)) < 0) {
		/* nothing else to do */
	}
}

static const char *_err(CUptiResult r)
{
	const char *s = NULL;

	if (G.api.GetResultString && G.api.GetResultString(r, &s) == CUPTI_SUCCESS && s)
		return s;
	return "unknown CUPTI error";
}

static int64_t _now(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The summary's timeline slot of now: seconds since subscribing. */
static uint32_t _second(void)
{
	int64_t s = (_now(CLOCK_MONOTONIC) - G.subscribed_ns) / 1000000000LL;

	return s < 0 ? 0 : s >= TIMELINE_SECONDS ? TIMELINE_SECONDS - 1 : (uint32_t)s;
}

static uint64_t _env_u64(const char *name, uint64_t def, uint64_t min, uint64_t max)
{
	const char *s = getenv(name);
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return def;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < min || v > max) {
		_warn_once(W_ENV, "%s=%s is not a whole number from %llu to %llu; using %llu", name, s,
			   (unsigned long long)min, (unsigned long long)max, (unsigned long long)def);
		return def;
	}
	return v;
}

/* ---- probes ------------------------------------------------------------- */

static void _emit(const struct fw_cuda_record *recs, uint32_t count, void *ctx)
{
	if (flamewatch_activity_semaphore)
		STAP_PROBE2(flamewatch, activity, recs, count);
}

static int _announce(void *ctx, const char *s)
{
	if (!flamewatch_name_semaphore)
		return 0;
	STAP_PROBE2(flamewatch, name, (uint64_t)(uintptr_t)s, s);
	return 1;
}

/*
 * Fires the conflict probe for the last refusal once per tracer: also when
 * the tracer's conflict probe is attached only after the refusal (a tracer
 * attaches its probes one by one, see _listening).
 */
static void _conflict(void)
{
	if (!flamewatch_conflict_semaphore) {
		G.conflict_told = 0;
		return;
	}
	if (!G.conflict[0] || G.conflict_told)
		return;
	STAP_PROBE1(flamewatch, conflict, G.conflict);
	G.conflict_told = 1;
}

/*
 * A tracer listens once it takes the records: the activity probe. A tracer
 * attaches its probes one by one, and the agent attaches that one last, so
 * a library that starts collecting finds every probe of it in place. When
 * the launch probe alone started collection, a short process could finish
 * its work and hand its records over before the activity probe was there.
 */
static int _listening(void)
{
	if (G.listen_file && !G.listen_file_there)
		return 0;
	return flamewatch_activity_semaphore || G.summary_path;
}

/* ---- launch callbacks (the application's threads) ------------------------ */

/* Launches kept per window: the budget's share of one window (see the top). */
static uint64_t _window_quota(void)
{
	uint64_t q = G.budget * G.window_ms / 1000;

	return q ? q : 1;
}

/*
 * What tells this launch's work apart for fwc_fresh: the kernel (CUPTI's
 * symbol name, stable per kernel), else the call and, for the copies
 * PyTorch makes, their direction; 0: nothing to tell.
 */
static uint64_t _fresh_key(CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
			   const CUpti_CallbackData *cb, enum fwc_class cls)
{
	uint64_t key = (uint64_t)dom << 40 | (uint64_t)cbid << 8;

	if (cls == FWC_KERNEL && cb->symbolName)
		return (uint64_t)(uintptr_t)cb->symbolName;
	if (dom == CUPTI_CB_DOMAIN_RUNTIME_API && cb->functionParams) {
		if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020)
			key |= ((const cudaMemcpy_v3020_params *)cb->functionParams)->kind & 0xff;
		else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020)
			key |= ((const cudaMemcpyAsync_v3020_params *)cb->functionParams)->kind & 0xff;
	}
	return key;
}

static uint32_t _take(struct tls *t, enum fwc_class cls, uint64_t key)
{
	uint64_t p = atomic_load_explicit(&G.p_fixed, memory_order_relaxed);
	int64_t now = atomic_load_explicit(&G.window_ns, memory_order_relaxed);
	uint64_t n = atomic_fetch_add_explicit(&G.window_seen, 1, memory_order_relaxed) + 1;
	uint64_t quota = _window_quota();
	uint32_t w;

	/* A burst far above what the last window saw: sample now, not next window. */
	if (n > 2 * quota + 64 && n > 2 * G.last_window_seen && p > fwc_sampler_probability(quota, n))
		atomic_store_explicit(&G.p_fixed, p = fwc_sampler_probability(quota, 2 * n),
				      memory_order_relaxed);
	if (!t->seeded) {
		fwc_sampler_seed(&t->s, G.seed ^ ((uint64_t)syscall(SYS_gettid) << 32) ^
					(G.seed ? 0 : (uint64_t)_now(CLOCK_MONOTONIC)));
		t->seeded = 1;
	}
	atomic_fetch_add_explicit(&G.seen[cls], 1, memory_order_relaxed);
	w = fwc_sampler_take(&t->s, cls, fwc_fresh_due(&G.fresh, key, now) ? UINT32_MAX : p,
			     G.duty);
	if (w) {
		fwc_fresh_mark(&G.fresh, key, now);
		atomic_fetch_add_explicit(&G.kept[cls], 1, memory_order_relaxed);
		atomic_fetch_add_explicit(&G.weight_sum[cls], w, memory_order_relaxed);
	}
	return w;
}

static void _launch_probe(uint32_t corr, uint32_t weight)
{
	if (flamewatch_launch_semaphore)
		STAP_PROBE2(flamewatch, launch, (uint64_t)corr, weight);
}

/*
 * Kernel launch calls inside a window are timed from the end of their entry
 * callback to their exit callback, for what records cost (fwc_cost): with
 * the activity kinds on in a collecting window, off in a probe window. Our
 * own work at entry (sampling, the launch probe) is left out: a probe
 * window does none of it, and it is no cost of the records. A call that
 * outlives its window is not counted: the window it ended in may have had
 * the other setting.
 */
static void _time_call(struct tls *t, enum fwc_class cls)
{
	int probing = atomic_load_explicit(&G.probing, memory_order_relaxed);

	t->timed = 0;
	if (cls != FWC_KERNEL ||
	    !(probing || atomic_load_explicit(&G.collecting, memory_order_relaxed)))
		return;
	t->timed = 1;
	t->timed_on = !probing;
	t->timed_window = atomic_load_explicit(&G.window_id, memory_order_relaxed);
}

static void _time_call_end(struct tls *t)
{
	if (!t->timed)
		return;
	t->timed = 0;
	if (t->timed_window != atomic_load_explicit(&G.window_id, memory_order_relaxed))
		return;
	fwc_cost_call(&G.cost, t->timed_on, (uint64_t)(_now(CLOCK_MONOTONIC) - t->timed_from));
}

static void _on_api(CUpti_CallbackDomain dom, CUpti_CallbackId cbid, const CUpti_CallbackData *cb)
{
	struct tls *t = &_t;
	uint32_t gen = atomic_load_explicit(&G.gen, memory_order_relaxed);
	enum fwc_class cls;
	uint32_t w;

	if (dom == CUPTI_CB_DOMAIN_RUNTIME_API)
		cls = cbid < RT_IDS ? G.rt_class[cbid] : FWC_NONE;
	else
		cls = cbid < DRV_IDS ? G.drv_class[cbid] : FWC_NONE;
	if (cls == FWC_NONE)
		return;
	if (t->gen != gen) {	/* callbacks were off: forget calls whose exit we missed */
		t->gen = gen;
		t->rt_active = t->drv_active = t->timed = 0;
	}
	if (cb->callbackSite == CUPTI_API_ENTER) {
		if (t->rt_active || t->drv_active) {
			/* The runtime call's own driver call (or any call nested in
			 * the one in progress): counted with the outer call, but its
			 * records may carry this id. */
			uint32_t oc = t->rt_active ? t->rt_corr : t->drv_corr;
			uint32_t ow = t->rt_active ? t->rt_weight : t->drv_weight;

			atomic_store_explicit(&G.last_corr, cb->correlationId, memory_order_relaxed);
			if (atomic_load_explicit(&G.collecting, memory_order_relaxed))
				fwc_weights_put(&G.weights, cb->correlationId, oc, ow);
			return;
		}
		if (G.count_all)
			atomic_fetch_add_explicit(&G.all[cls], 1, memory_order_relaxed);
		/* For the coverage's restart (_coverage): what came before it. */
		atomic_store_explicit(&G.last_corr, cb->correlationId, memory_order_relaxed);
		if (atomic_load_explicit(&G.probing, memory_order_relaxed))
			atomic_fetch_add_explicit(&G.probe_launches, 1, memory_order_relaxed);
		_time_call(t, cls);
		if (atomic_load_explicit(&G.collecting, memory_order_relaxed)) {
			/* Not kept (w == FWC_UNKEPT) too: its records' GPU time is carried. */
			w = _take(t, cls, _fresh_key(dom, cbid, cb, cls));
			fwc_weights_put(&G.weights, cb->correlationId, cb->correlationId, w);
		} else {
			w = 0;	/* count_all, between windows */
		}
		if (dom == CUPTI_CB_DOMAIN_RUNTIME_API) {
			t->rt_active = 1;
			t->rt_corr = cb->correlationId;
			t->rt_weight = w;
		} else {
			t->drv_active = 1;
			t->drv_corr = cb->correlationId;
			t->drv_weight = w;
		}
		/*
		 * The probe fires on entry, not on exit: a window may close while
		 * the call runs (a synchronous copy of 40 ms against windows of
		 * 10 ms nearly always does), and its exit callback then never
		 * comes, while its records do. A call that fails leaves a launch
		 * no record joins; the agent lets it go.
		 */
		if (w)
			_launch_probe(cb->correlationId, w);
		if (t->timed)
			t->timed_from = _now(CLOCK_MONOTONIC);
		return;
	}
	/* The exit only ends the call, so that a nested call is told apart. */
	if (dom == CUPTI_CB_DOMAIN_RUNTIME_API) {
		if (t->rt_active && cb->correlationId == t->rt_corr) {
			t->rt_active = 0;
			_time_call_end(t);
		}
	} else if (!t->rt_active && t->drv_active && cb->correlationId == t->drv_corr) {
		t->drv_active = 0;
		_time_call_end(t);
	}
}

/* Lowers the coverage's fence to t, if it waits and t is after it began to. */
static void _fence(int64_t t)
{
	int64_t from = atomic_load(&G.cover_wait_from), f = atomic_load(&G.cover_fence);

	while (from && t >= from && t < f && !atomic_compare_exchange_weak(&G.cover_fence, &f, t))
		;
}

static int _is_sync(CUpti_CallbackDomain dom, CUpti_CallbackId cbid)
{
	return (dom == CUPTI_CB_DOMAIN_RUNTIME_API && cbid == CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020) ||
	       (dom == CUPTI_CB_DOMAIN_DRIVER_API && cbid == CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize);
}

static void CUPTIAPI _on_callback(void *ud, CUpti_CallbackDomain dom, CUpti_CallbackId cbid,
				  const void *data)
{
	if (atomic_load_explicit(&G.inert, memory_order_relaxed) || !data)
		return;
	if (_is_sync(dom, cbid)) {
		/* Every GPU work launched before it is done: a fence. */
		if (((const CUpti_CallbackData *)data)->callbackSite == CUPTI_API_EXIT)
			_fence(_now(CLOCK_REALTIME));
		return;
	}
	if (dom == CUPTI_CB_DOMAIN_RUNTIME_API || dom == CUPTI_CB_DOMAIN_DRIVER_API) {
		_on_api(dom, cbid, data);
	} else if (dom == CUPTI_CB_DOMAIN_STATE && cbid == CUPTI_CBID_STATE_FATAL_ERROR) {
		const CUpti_StateData *s = data;

		_warn_once(W_FATAL, "CUPTI reported a fatal error (%s); GPU time is no longer collected",
			   s->notification.message ? s->notification.message : _err(s->notification.result));
		atomic_store(&G.inert, 1);
	}
}

/* ---- activity buffers (CUPTI's threads) --------------------------------- */

static void CUPTIAPI _buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
	void *b = NULL;

	*max_records = 0;
	pthread_mutex_lock(&G.rec);
	if (G.nfree)
		b = G.free_bufs[--G.nfree];
	pthread_mutex_unlock(&G.rec);
	if (!b && atomic_load(&G.outstanding) < BUF_MAX && posix_memalign(&b, 8, BUF_SIZE))
		b = NULL;
	if (!b) {
		/* CUPTI drops records rather than waiting: the application goes on. */
		atomic_fetch_add(&G.refused_bufs, 1);
		*buffer = NULL;
		*size = 0;
		return;
	}
	atomic_fetch_add(&G.outstanding, 1);
	*buffer = b;
	*size = BUF_SIZE;
}

static void CUPTIAPI _buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				       size_t valid)
{
	CUpti_Activity *rec = NULL;
	size_t dropped = 0;
	int64_t offset = atomic_load(&G.offset_ns);

	if (!buffer)
		return;
	pthread_mutex_lock(&G.rec);
	if (!atomic_load(&G.inert)) {
		int64_t cpu = _now(CLOCK_THREAD_CPUTIME_ID), start;
		int waits = !!atomic_load(&G.cover_wait_from);
		uint32_t after = atomic_load(&G.cover_after_corr), corr, sec = _second();
		uint64_t n = G.stats.records, win = G.stats.kept + G.stats.carried;
		CUptiResult r;

		while ((r = G.api.ActivityGetNextRecord(buffer, valid, &rec)) == CUPTI_SUCCESS && rec) {
			if (waits && fwc_record_start(rec, offset, &corr, &start) && corr > after)
				_fence(start);
			fwc_record_add(rec, &G.weights, &G.names, offset, &G.batch, &G.stats);
		}
		if (r != CUPTI_SUCCESS && r != CUPTI_ERROR_MAX_LIMIT_REACHED) {
			G.buffer_errors++;
			G.last_buffer_error = (int)r;
		}
		G.timeline[sec].records += (uint32_t)(G.stats.records - n);
		G.timeline[sec].windowed += (uint32_t)(G.stats.kept + G.stats.carried - win);
		G.timeline[sec].buffers++;
		fwc_busy_flush(&G.batch, offset, &G.stats);
		fwc_batch_flush(&G.batch);
		fwc_cost_own(&G.cost, (uint64_t)(_now(CLOCK_THREAD_CPUTIME_ID) - cpu),
			     G.stats.records - n);
		if (G.api.ActivityGetNumDroppedRecords &&
		    G.api.ActivityGetNumDroppedRecords(ctx, stream, &dropped) == CUPTI_SUCCESS)
			G.stats.cupti_dropped += dropped;
	}
	atomic_fetch_add(&G.buffers_done, 1);
	if (G.nfree < BUF_KEEP) {
		G.free_bufs[G.nfree++] = buffer;
		buffer = NULL;
	}
	pthread_mutex_unlock(&G.rec);
	free(buffer);
	atomic_fetch_sub(&G.outstanding, 1);
}

/* ---- control (the control thread, and exit) ----------------------------- */

/* The ids by name, once per process (fwc_cupti_classes). */
static void _classes(void)
{
	if (G.classes_known)
		return;
	fwc_cupti_classes(&G.api, G.rt_class, G.drv_class);
	G.classes_known = 1;
}

static int _cupti_now(uint64_t *t)
{
	return G.api.GetTimestamp(t) == CUPTI_SUCCESS ? 0 : -1;
}

/* Called by one thread at a time: at subscribe, then from the ticker. */
static void _update_offset(void)
{
	int64_t offset = atomic_load(&G.offset_ns);

	if (!G.api.GetTimestamp || clock__offset_ns(_cupti_now, &offset, G.offset_known))
		return;
	atomic_store(&G.offset_ns, offset);
	G.offset_known = 1;
}

/* Enables or disables our callbacks; returns the first error. */
static CUptiResult _callbacks(uint32_t enable)
{
	CUptiResult first = CUPTI_SUCCESS, r;

	for (uint32_t i = 1; i < RT_IDS; i++)
		if (G.rt_class[i] && (r = G.api.EnableCallback(enable, G.sub, CUPTI_CB_DOMAIN_RUNTIME_API, i)) &&
		    first == CUPTI_SUCCESS)
			first = r;
	for (uint32_t i = 1; i < DRV_IDS; i++)
		if (G.drv_class[i] && (r = G.api.EnableCallback(enable, G.sub, CUPTI_CB_DOMAIN_DRIVER_API, i)) &&
		    first == CUPTI_SUCCESS)
			first = r;
	return first;
}

/*
 * Activity comes on: the coverage waits for a fence (_coverage), a record
 * launched after the last launch seen so far, or a synchronisation, from
 * now on. Set before the kinds are enabled: a launch in between has no
 * record, and runs before any later one on its stream.
 */
static void _cover_wait(void)
{
	atomic_store(&G.cover_after_corr, atomic_load(&G.last_corr));
	atomic_store(&G.cover_fence, INT64_MAX);
	atomic_store(&G.cover_wait_from, _now(CLOCK_REALTIME));
}

/* Enables or disables the activity kinds; 0 if none could be enabled. */
static int _activity(int enable)
{
	CUptiResult r;
	int any = 0;

	if (enable && !G.activity_on)
		_cover_wait();
	for (size_t i = 0; i < sizeof(_kinds) / sizeof(_kinds[0]); i++) {
		if (!enable) {
			G.api.ActivityDisable(_kinds[i]);
			continue;
		}
		r = G.api.ActivityEnable(_kinds[i]);
		if (r == CUPTI_SUCCESS)
			any = 1;
		else if (_kinds[i] == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
			_warn_once(W_CALL, "cuptiActivityEnable: %s", _err(r));
	}
	G.activity_on = any;
	return any;
}

static void _turn_on(void)
{
	CUptiResult r;

	if (!G.activity_on && !_activity(1))
		return;
	atomic_fetch_add(&G.window_id, 1);
	atomic_store(&G.collecting, 1);
	if (!G.count_all) {
		atomic_fetch_add(&G.gen, 1);
		r = _callbacks(1);
		if (r != CUPTI_SUCCESS)
			_warn_once(W_CALL, "cuptiEnableCallback: %s", _err(r));
	}
	G.on = 1;
	G.on_since = _now(CLOCK_MONOTONIC);
	atomic_store(&G.window_ns, G.on_since);
	G.windows++;
}

/*
 * With count_all, what a launch seen in a window stands for is measured: the
 * launches counted since the last update over those seen, as decaying sums
 * (a window's records are scaled by about the launches of its last ~16
 * groups of D windows over those its windows saw). Without it, the scale
 * stays D, as set at start. Called under ctl when a window closes and at
 * exit, before the records of the window are read.
 */
static void _update_scale(void)
{
	uint64_t scale[FWC_NCLASS];

	if (!G.count_all)
		return;
	for (int c = 0; c < FWC_NCLASS; c++) {
		uint64_t all = atomic_load(&G.all[c]), seen = atomic_load(&G.seen[c]);

		scale[c] = (uint64_t)G.duty * FWC_SCALE_ONE;
		G.all_avg[c] = G.all_avg[c] * 15 / 16 + (double)(all - G.all_then[c]);
		G.seen_avg[c] = G.seen_avg[c] * 15 / 16 + (double)(seen - G.seen_then[c]);
		G.all_then[c] = all;
		G.seen_then[c] = seen;
		if (G.seen_avg[c] >= 1 && G.all_avg[c] >= G.seen_avg[c])
			scale[c] = (uint64_t)(G.all_avg[c] / G.seen_avg[c] * FWC_SCALE_ONE);
	}
	pthread_mutex_lock(&G.rec);
	memcpy(G.batch.scale, scale, sizeof(scale));
	pthread_mutex_unlock(&G.rec);
}

/*
 * Disables the activity kinds after the callbacks: a launch whose entry
 * callback just ran reaches the GPU with activity still enabled first, so
 * its kept weight finds its record.
 */
static void _activity_off_after_callbacks(void)
{
	struct timespec grace = { 0, 1000000 };

	nanosleep(&grace, NULL);
	_activity(0);
}

static void _turn_off(void)
{
	if (!G.on)
		return;
	G.on = 0;
	atomic_store(&G.collecting, 0);
	atomic_fetch_add(&G.window_id, 1);
	if (!G.count_all)
		_callbacks(0);
	if (G.activity_all)
		return;		/* activity stays on until nobody listens */
	_activity_off_after_callbacks();
	if (G.close_flush)
		G.api.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	_update_scale();
}

/*
 * Exact totals (activity always on: every record x 1, those no window saw
 * carried) or estimated ones (activity duty-cycled: records of windows x D,
 * the others dropped). Under rec, or before any record is read.
 */
static void _set_exact(int exact)
{
	G.activity_all = exact;
	G.batch.carry_unseen = exact;
	for (int c = 0; c < FWC_NCLASS; c++)
		G.batch.scale[c] = (exact ? 1 : (uint64_t)G.duty) * FWC_SCALE_ONE;
}

/*
 * The collection record (probes.h) with the mode in force and the cost as
 * measured; under ctl. Sent when the mode changes and every
 * CARRY_FLUSH_SLOTS windows, so that an agent that attaches late learns it.
 */
static void _tell_mode(void)
{
	int64_t per = -1;

	pthread_mutex_lock(&G.rec);
	if (G.cost_ppm >= 0)
		per = fwc_cost_per_record(&G.cost, NULL, NULL);
	fwc_collection_add(&G.batch, _now(CLOCK_REALTIME), G.activity_all, G.cost_ppm, per,
			   (uint32_t)G.max_cost_ppm, G.duty_by_rate && !G.activity_all, G.rate_avg);
	fwc_batch_flush(&G.batch);
	pthread_mutex_unlock(&G.rec);
	G.mode_told = 1;
	G.mode_told_slot = G.slot;
}

/*
 * What every record would cost the process, from the launch rate and the
 * cost of one record (fwc_cost): G.cost_ppm once both histograms hold
 * enough calls, and G.cost_bound_ppm, its upper bound from whole launch
 * calls with records on, as soon as that one does. Under ctl.
 */
static void _estimate_cost(void)
{
	int64_t per, on;

	pthread_mutex_lock(&G.rec);
	fwc_cost_decay(&G.cost);
	per = fwc_cost_per_record(&G.cost, NULL, NULL);
	on = fwc_cost_median(&G.cost, 1);
	if (on >= 0)
		on += fwc_cost_own_per_record(&G.cost);
	pthread_mutex_unlock(&G.rec);
	G.cost_ppm = per < 0 ? -1 : per * (int64_t)G.rate_avg / 1000;
	G.cost_bound_ppm = on < 0 ? -1 : on * (int64_t)G.rate_avg / 1000;
}

/*
 * Activity always on gives exact totals and a complete busy timeline, but
 * CUPTI's record of every kernel costs the launching thread, which a
 * launch-bound loop pays on every step. So every record is collected while
 * that costs the process at most max_cost_ppm of its time, as measured
 * (_estimate_cost); above it the activity is duty-cycled with the
 * callbacks, the totals estimated (x D) and the busy timeline left to the
 * GPU's own monitors; back under 2/3 of it, always on again. A cost not
 * yet measured keeps the mode, unless its bound already allows every
 * record. The measure sees what a record costs the launching thread, not
 * what it costs the GPU: a loop of tiny kernels whose records slow the
 * GPU's own work pays far more than its launch calls show. So above
 * FLAMEWATCH_CUDA_EXACT_MAX_RATE launches a second (30,000) records are
 * duty-cycled whatever they were measured to cost (back under 2/3 of it),
 * and the collection record says which rule decided. The rate is a decaying mean over
 * windows (1/8 each), starting from 0: one window falls in a burst or in a
 * pause (a training loop queues many steps of launches in a few ms, then
 * waits), the mean over a few seconds of windows does not. Called under
 * ctl as a window closes. Records in flight at a switch are read under the
 * new rule: a window's worth at most, rarely (hysteresis).
 */
static void _choose_activity(void)
{
	uint64_t rate = G.last_window_seen * 1000 / G.window_ms;
	int64_t lim = (int64_t)G.max_cost_ppm;
	int want, rate_ok, cost_ok;

	if (!G.activity_all_cfg)
		return;
	G.rate_avg = (G.rate_avg * 7 + rate) / 8;
	_estimate_cost();
	rate_ok = G.activity_all ? G.rate_avg <= G.exact_max_rate :
				   G.rate_avg < G.exact_max_rate / 3 * 2;
	if (G.cost_ppm >= 0)
		cost_ok = G.activity_all ? G.cost_ppm <= lim : G.cost_ppm < lim / 3 * 2;
	else
		cost_ok = G.activity_all || (G.cost_bound_ppm >= 0 && G.cost_bound_ppm < lim / 3 * 2);
	want = rate_ok && cost_ok;
	G.duty_by_rate = !rate_ok;
	if (want == G.activity_all)
		return;
	pthread_mutex_lock(&G.rec);
	_set_exact(want);
	G.records_at_switch = G.stats.records;
	pthread_mutex_unlock(&G.rec);
	G.switch_ms = (_now(CLOCK_MONOTONIC) - G.subscribed_ns) / 1000000;
	G.activity_switches++;
	if (!want && G.activity_on)
		_activity_off_after_callbacks();	/* the tick turns it on again when wanted */
	_tell_mode();
}

/*
 * Probe windows time launch calls with the activity kinds off, the other
 * half of what a record costs (fwc_cost). Duty-cycled, one group of D
 * windows in PROBE_GROUPS_DUTY has one: activity is off there anyway, and
 * a probe costs a callback per launch and no probe fire. With every record
 * collected, a probe window's records are lost, so there is one only while
 * the cost could be over the limit (its bound is not under it): every
 * PROBE_GROUPS_NEW groups until the cost is known, then rarely
 * (PROBE_GROUPS_EXACT), since a record's cost depends on the GPU and the
 * driver more than on what the process launches.
 */
#define PROBE_GROUPS_DUTY	4
#define PROBE_GROUPS_NEW	2
#define PROBE_GROUPS_EXACT	1024

static int _probe_due(uint64_t group)
{
	if (G.duty < 2 || !G.activity_all_cfg)
		return 0;
	if (G.probe_every)
		return group % G.probe_every == 0;
	if (!G.activity_all)
		return group % PROBE_GROUPS_DUTY == 0;
	if (G.cost_bound_ppm < 0 || G.cost_bound_ppm <= (int64_t)G.max_cost_ppm)
		return 0;
	return group % (G.cost_ppm < 0 ? PROBE_GROUPS_NEW : PROBE_GROUPS_EXACT) == 0;
}

/*
 * The callbacks come on before the activity goes off, and the activity on
 * again before they go off: every launch without a record is counted in
 * probe_launches, so that the coverage may go on at once after a window
 * that launched nothing (_coverage). The window's id moves after each
 * switch: a call timed across one is not counted.
 */
static void _probe_open(void)
{
	CUptiResult r;

	atomic_store(&G.probe_launches, 0);
	atomic_store(&G.probing, 1);
	if (!G.count_all) {
		atomic_fetch_add(&G.gen, 1);
		r = _callbacks(1);
		if (r != CUPTI_SUCCESS)
			_warn_once(W_CALL, "cuptiEnableCallback: %s", _err(r));
	}
	if (G.activity_on)
		_activity(0);	/* the timeline's coverage breaks here (_coverage) */
	atomic_fetch_add(&G.window_id, 1);
	G.probe_on = 1;
	G.probes++;
}

static void _probe_close(void)
{
	if (!G.probe_on)
		return;
	G.probe_on = 0;
	if (G.activity_all && !G.activity_on && _listening())
		_activity(1);
	atomic_store(&G.probing, 0);
	atomic_fetch_add(&G.window_id, 1);
	if (!G.count_all)
		_callbacks(0);
	G.cover_clean = G.activity_on && atomic_load(&G.probe_launches) == 0;
}

static void _subscribe(int64_t now)
{
	char old[CUPTI_OLD_SUBSCRIBER_NAME_MIN_LEN + 8] = "";
	CUptiResult r;

	if (G.api.Subscribe_v2) {
		CUpti_SubscriberParams p = {
			.structSize = CUpti_SubscriberParams_STRUCT_SIZE,
			.subscriberName = "flamewatch",
			.oldSubscriberName = old,
			.oldSubscriberSize = sizeof(old) - 1,
		};

		r = G.api.Subscribe_v2(&G.sub, _on_callback, NULL, &p);
	} else {
		r = G.api.Subscribe(&G.sub, _on_callback, NULL);
	}
	if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
		snprintf(G.conflict, sizeof(G.conflict), "another CUPTI client (%s) holds this process",
			 old[0] ? old : "torch.profiler, Nsight or similar");
		if (!G.conflict_reported) {
			char line[256];

			snprintf(line, sizeof(line), "flamewatch-cuda[%d]: %s: GPU time is not collected\n",
				 (int)getpid(), G.conflict);
			if (write(2, line, strlen(line)) < 0) {
				/* nothing else to do */
			}
			G.conflict_reported = 1;
		}
		G.conflict_told = 0;
		_conflict();
		G.retry_at = now + RETRY_NS;
		return;
	}
	if (r != CUPTI_SUCCESS) {
		_warn_once(W_SUB, "cuptiSubscribe: %s; GPU time is not collected", _err(r));
		G.retry_at = now + RETRY_NS;
		return;
	}
	G.conflict_reported = 0;
	G.conflict[0] = '\0';
	G.subscribed = 1;
	_classes();
	r = G.api.ActivityRegisterCallbacks(_buffer_requested, _buffer_completed);
	if (r != CUPTI_SUCCESS) {
		_warn_once(W_SUB, "cuptiActivityRegisterCallbacks: %s; GPU time is not collected", _err(r));
		G.api.Unsubscribe(G.sub);
		G.subscribed = 0;
		G.retry_at = now + RETRY_NS;
		return;
	}
	if (G.api.EnableDomain)
		G.api.EnableDomain(1, G.sub, CUPTI_CB_DOMAIN_STATE);
	G.subscribed_ns = _now(CLOCK_MONOTONIC);
	_update_offset();
	G.slot = 0;
	G.mode_told = 0;
	atomic_store(&G.p_fixed, UINT32_MAX);
	G.last_window_seen = 0;
}

/* count_all: the callbacks stay on while anyone listens, windows or not. */
static void _count_callbacks(int on)
{
	CUptiResult r;

	if (!G.count_all || G.counting == on)
		return;
	if (on) {
		atomic_fetch_add(&G.gen, 1);
		r = _callbacks(1);
		if (r != CUPTI_SUCCESS)
			_warn_once(W_CALL, "cuptiEnableCallback: %s", _err(r));
	} else {
		_callbacks(0);
	}
	G.counting = on;
}

/* The synchronising calls' callbacks, on while the coverage waits for a fence. */
static void _sync_watch(int on)
{
	/* At exit CUPTI may be torn down under a tick that was stuck in it. */
	if (G.sync_watch == on || atomic_load(&G.exiting))
		return;
	G.api.EnableCallback(on, G.sub, CUPTI_CB_DOMAIN_RUNTIME_API,
			     CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020);
	G.api.EnableCallback(on, G.sub, CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize);
	G.sync_watch = on;
}

/*
 * The busy timeline is complete while activity is on throughout and no
 * record is lost: that time goes out as FW_CUDA_COVERAGE, so that the
 * agent can tell a gap between busy spans (idle) from time nobody
 * recorded (duty-cycled activity). A span in which a record was lost is
 * not claimed. Called under ctl at every tick and when collection stops.
 *
 * When activity comes back on, work launched while it was off (a probe
 * window's, or any before the subscription) may still run, and has no
 * record: claimed from the moment activity came on, that time would look
 * idle. So the coverage starts at a fence instead: the start of the first
 * record launched after the last launch a callback saw (on its stream, it
 * runs after everything launched before it), or the return of a
 * device-wide synchronisation, whichever comes first. After a probe window
 * that launched nothing, it starts at once. Work left on another stream
 * than the fence's is not waited for.
 */
static void _coverage(int covered)
{
	int64_t now = _now(CLOCK_REALTIME), from = atomic_load(&G.cover_wait_from);
	int64_t fence = atomic_load(&G.cover_fence);
	uint64_t lost;

	pthread_mutex_lock(&G.rec);
	lost = G.stats.cupti_dropped + atomic_load(&G.refused_bufs);
	if (from && fence != INT64_MAX) {
		G.cover_from = fence > from ? fence : from;
		G.cover_lost = lost;
		atomic_store(&G.cover_wait_from, from = 0);
	}
	if (G.cover_from && (!covered || now - G.cover_from >= COVER_EMIT_NS)) {
		if (lost == G.cover_lost)
			fwc_coverage_add(&G.batch, G.cover_from, now);
		fwc_batch_flush(&G.batch);
		G.cover_from = covered ? now : 0;	/* still covered: on from here */
		G.cover_lost = lost;
	}
	if (!covered) {
		atomic_store(&G.cover_wait_from, 0);
	} else if (!G.cover_from && from && G.cover_clean) {
		G.cover_from = from;
		G.cover_lost = lost;
		atomic_store(&G.cover_wait_from, 0);
	} else if (!G.cover_from && !from) {
		_cover_wait();	/* not after activity came on: from now */
	}
	G.cover_clean = 0;
	pthread_mutex_unlock(&G.rec);
	_sync_watch(!!atomic_load(&G.cover_wait_from));
}

static void _unsubscribe(void)
{
	_probe_close();
	_coverage(0);
	_turn_off();
	_count_callbacks(0);
	if (G.activity_on)
		_activity(0);
	G.api.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	G.api.Unsubscribe(G.sub);
	G.subscribed = 0;
}

/* One window: decide whether it collects, set the sampling rate from the
 * last collecting window, and hand CUPTI's finished records to the agent. */
static void _tick(void)
{
	int64_t now = _now(CLOCK_MONOTONIC);
	int was_on = G.on;
	uint64_t x;

	if (atomic_load(&G.inert)) {
		if (G.subscribed)
			_unsubscribe();
		return;
	}
	/* A tracer that attached anew knows none of the names it missed. */
	if (!!flamewatch_name_semaphore != G.tracer_seen) {
		G.tracer_seen = !!flamewatch_name_semaphore;
		if (G.tracer_seen) {
			G.mode_told = 0;
			pthread_mutex_lock(&G.rec);
			fwc_names_reannounce(&G.names);
			pthread_mutex_unlock(&G.rec);
		}
	}
	if (!G.subscribed)
		_conflict();
	/* A benchmark turns collection on and off inside one process with this
	 * file, to measure its cost against the same process idle. */
	if (G.listen_file)
		G.listen_file_there = access(G.listen_file, F_OK) == 0;
	if (!_listening()) {
		if (!G.subscribed)
			return;
		_count_callbacks(0);
		if (G.activity_all && G.activity_on)
			_activity(0);
		if (!G.idle_since)
			G.idle_since = now;
		if (now - G.idle_since >= IDLE_STOP_NS) {
			_unsubscribe();
			G.idle_since = 0;
			return;
		}
	} else {
		G.idle_since = 0;
		if (!G.subscribed && now >= G.retry_at)
			_subscribe(now);
		if (G.subscribed)
			_count_callbacks(1);
		if (G.subscribed && G.activity_all && !G.activity_on && !G.probe_on)
			_activity(1);
	}
	if (!G.subscribed)
		return;
	if (G.slot % G.duty == 0) {
		x = G.ctl_rng;	/* xorshift: pick the collecting window of this group */
		x ^= x << 13, x ^= x >> 7, x ^= x << 17;
		G.ctl_rng = x;
		G.on_slot = (uint32_t)(x % G.duty);
		G.probe_slot = UINT32_MAX;
		if (_probe_due(G.slot / G.duty)) {	/* and the probe window, another one */
			G.probe_slot = (uint32_t)((x >> 32) % (G.duty - 1));
			G.probe_slot += G.probe_slot >= G.on_slot;
		}
	}
	if (G.probe_on && G.slot % G.duty != G.probe_slot)
		_probe_close();
	if (G.slot % G.duty == G.on_slot && _listening()) {
		if (G.on)
			G.last_window_seen = atomic_exchange(&G.window_seen, 0);
		atomic_store(&G.p_fixed, fwc_sampler_probability(_window_quota(), G.last_window_seen));
		if (!G.on)
			_turn_on();
	} else if (G.on) {
		G.last_window_seen = atomic_exchange(&G.window_seen, 0);
		G.timeline[_second()].seen += (uint32_t)G.last_window_seen;
		_turn_off();
		_choose_activity();
	}
	if (G.slot % G.duty == G.probe_slot && !G.probe_on && !G.on && _listening())
		_probe_open();
	if ((!G.mode_told || G.slot - G.mode_told_slot >= CARRY_FLUSH_SLOTS) && _listening())
		_tell_mode();
	G.slot++;
	if (was_on || G.on || G.activity_on)
		G.api.ActivityFlushAll(0);
	_coverage(G.activity_all && G.activity_on);
	if (G.activity_all && G.slot % CARRY_FLUSH_SLOTS == 0) {
		/* GPU time of names no window saw a launch of: out as it is. */
		pthread_mutex_lock(&G.rec);
		fwc_carry_flush(&G.names, &G.batch, atomic_load(&G.offset_ns), &G.stats);
		pthread_mutex_unlock(&G.rec);
	}
	if (G.slot % 16 == 0 && !atomic_load(&G.exiting))
		_update_offset();
}

static struct timespec _ts(int64_t ns)
{
	return (struct timespec){ .tv_sec = ns / 1000000000LL, .tv_nsec = ns % 1000000000LL };
}

/*
 * Ticks every window on a fixed grid. A window's launches count from when
 * its callbacks came on, and enabling CUPTI's activity kinds first takes
 * time (a window cut short by it made duty-cycled totals come out short):
 * the window therefore closes that much after its grid tick, and the next
 * slot is as much shorter, so that the callbacks stay on one window's
 * length in every D.
 */
static void *_control(void *arg)
{
	int64_t window = (int64_t)G.window_ms * 1000000LL, next, late = 0;
	struct timespec at;

	next = _now(CLOCK_MONOTONIC);
	while (!atomic_load(&G.inert) && !atomic_load(&G.exiting)) {
		next += window;
		at = _ts(next + late);
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
		pthread_mutex_lock(&G.ctl);
		if (!atomic_load(&G.exiting)) {
			int was_on = G.on;

			_tick();
			if (G.on && !was_on) {
				late = G.on_since - next;
				late = late < 0 ? 0 : late > window / 2 ? window / 2 : late;
				G.late_ns += late;
			} else if (!G.on) {
				late = 0;
			}
		}
		pthread_mutex_unlock(&G.ctl);
	}
	return NULL;
}

static void _write_summary(void)
{
	FILE *f;
	static const char *kinds[] = { "kernel", "memcpy_htod", "memcpy_dtoh", "memcpy_dtod",
				       "memcpy_other", "memset" };

	f = fopen(G.summary_path, "a");
	if (!f) {
		_warn_once(W_SUMMARY, "cannot write %s: %s", G.summary_path, strerror(errno));
		return;
	}
	fprintf(f, "{\"pid\":%d,\"duty_cycle\":%u,\"window_ms\":%u,\"launch_budget\":%llu",
		(int)getpid(), G.duty, G.window_ms, (unsigned long long)G.budget);
	fprintf(f, ",\"launches_seen\":%llu,\"launches_kept\":%llu,\"launch_weight\":%llu",
		(unsigned long long)atomic_load(&G.seen[FWC_KERNEL]),
		(unsigned long long)atomic_load(&G.kept[FWC_KERNEL]),
		(unsigned long long)atomic_load(&G.weight_sum[FWC_KERNEL]));
	if (G.count_all)
		fprintf(f, ",\"launches_all\":%llu,\"kernel_scale\":%.3f",
			(unsigned long long)atomic_load(&G.all[FWC_KERNEL]),
			(double)G.batch.scale[FWC_KERNEL] / FWC_SCALE_ONE);
	fprintf(f, ",\"windows\":%llu,\"window_late_us\":%lld", (unsigned long long)G.windows,
		(long long)(G.windows ? G.late_ns / (int64_t)G.windows / 1000 : 0));
	fprintf(f, ",\"activity_all\":%d,\"activity_switches\":%llu,\"launch_rate\":%llu"
		   ",\"outside\":%llu",
		G.activity_all, (unsigned long long)G.activity_switches,
		(unsigned long long)G.rate_avg,
		(unsigned long long)G.stats.outside);
	fprintf(f, ",\"switch_ms\":%lld,\"records_at_switch\":%llu,\"buffers_done\":%llu"
		   ",\"exit_flushed\":%d",
		(long long)(G.activity_switches ? G.switch_ms : -1),
		(unsigned long long)G.records_at_switch,
		(unsigned long long)atomic_load(&G.buffers_done), G.exit_flushed);
	fprintf(f, ",\"exit_records\":%llu,\"buffer_errors\":%llu,\"last_buffer_error\":%d"
		   ",\"close_flush\":%d,\"timeline\":[",
		(unsigned long long)G.exit_records, (unsigned long long)G.buffer_errors,
		G.last_buffer_error, G.close_flush);
	for (int i = 0, first = 1; i < TIMELINE_SECONDS; i++) {
		if (!G.timeline[i].seen && !G.timeline[i].records && !G.timeline[i].buffers)
			continue;
		fprintf(f, "%s[%d,%u,%u,%u,%u]", first ? "" : ",", i, G.timeline[i].seen,
			G.timeline[i].records, G.timeline[i].windowed, G.timeline[i].buffers);
		first = 0;
	}
	fprintf(f, "]");
	{
		int64_t call = -1, own = -1, per = fwc_cost_per_record(&G.cost, &call, &own);

		fprintf(f, ",\"max_cost_ppm\":%llu,\"cost_ppm\":%lld,\"cost_bound_ppm\":%lld"
			   ",\"record_cost_ns\":%lld,\"record_cost_in_call_ns\":%lld"
			   ",\"record_cost_own_ns\":%lld,\"launch_call_on_ns\":%lld"
			   ",\"launch_call_off_ns\":%lld,\"probe_windows\":%llu"
			   ",\"duty_by_rate\":%d,\"exact_max_rate\":%llu",
			(unsigned long long)G.max_cost_ppm, (long long)G.cost_ppm,
			(long long)G.cost_bound_ppm, (long long)per, (long long)call, (long long)own,
			(long long)fwc_cost_median(&G.cost, 1), (long long)fwc_cost_median(&G.cost, 0),
			(unsigned long long)G.probes, G.duty_by_rate && !G.activity_all,
			(unsigned long long)G.exact_max_rate);
	}
	fprintf(f, ",\"busy_spans\":%llu,\"busy_untracked\":%llu",
		(unsigned long long)G.stats.busy_spans, (unsigned long long)G.stats.busy_untracked);
	fprintf(f, ",\"records\":%llu,\"kept\":%llu,\"carried\":%llu,\"unsampled\":%llu"
		   ",\"untimed\":%llu,\"cupti_dropped\":%llu,\"refused_buffers\":%llu,\"kernel_names\":%u",
		(unsigned long long)G.stats.records, (unsigned long long)G.stats.kept,
		(unsigned long long)G.stats.carried,
		(unsigned long long)G.stats.unsampled, (unsigned long long)G.stats.untimed,
		(unsigned long long)G.stats.cupti_dropped, (unsigned long long)atomic_load(&G.refused_bufs),
		G.names.count);
	for (int k = 0; k < 6; k++)
		fprintf(f, ",\"%s_ns\":%llu,\"%s_count\":%llu", kinds[k],
			(unsigned long long)G.stats.weighted_ns[k], kinds[k],
			(unsigned long long)G.stats.weighted_count[k]);
	fprintf(f, "}\n");
	fclose(f);
}

/*
 * exit(): one last flush, then nothing. The control thread is detached and
 * keeps running while the C library runs the destructors of every shared
 * object, CUPTI's and the driver's included; a CUPTI call of ours after
 * those would crash the application at exit. So the control thread is told
 * first (exiting), and stops before its next call into CUPTI. If it is
 * inside CUPTI for more than a second, we give up the final flush rather
 * than hang the exit, and the flag still keeps it from making another call.
 */
static void _at_exit(void)
{
	struct timespec until;

	atomic_store(&G.exiting, 1);
	if (atomic_load(&G.inert))
		return;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 1;
	if (pthread_mutex_timedlock(&G.ctl, &until)) {
		atomic_store(&G.inert, 1);
		return;
	}
	if (G.subscribed) {
		uint64_t before;

		_probe_close();
		_turn_off();
		_update_scale();	/* the launches after the last window too */
		pthread_mutex_lock(&G.rec);
		before = G.stats.records;
		pthread_mutex_unlock(&G.rec);
		G.api.ActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
		pthread_mutex_lock(&G.rec);
		G.exit_records = G.stats.records - before;
		pthread_mutex_unlock(&G.rec);
		_coverage(0);
		pthread_mutex_lock(&G.rec);
		fwc_carry_flush(&G.names, &G.batch, atomic_load(&G.offset_ns), &G.stats);
		pthread_mutex_unlock(&G.rec);
		G.exit_flushed = 1;
	}
	atomic_store(&G.inert, 1);
	pthread_mutex_unlock(&G.ctl);
	if (G.summary_path) {
		pthread_mutex_lock(&G.rec);
		_write_summary();
		pthread_mutex_unlock(&G.rec);
	}
}

/* CUDA cannot be used in a child forked after it was initialised, and the
 * control thread is not there: the child stays as if we were absent. */
static void _at_fork_child(void)
{
	atomic_store(&G.inert, 1);
	G.summary_path = NULL;
}

static int _load_cupti(void)
{
	char why[256];
	int err = fwc_cupti_load(&G.api, getenv("FLAMEWATCH_CUPTI_PATH"), why, sizeof(why));

	if (err)
		_warn_once(err == -ENOENT ? W_LOAD : W_SYM, "%s", why);
	return err;
}

EXPORT int InitializeInjection(void)
{
	sigset_t all, old;
	pthread_t tid;
	pthread_attr_t attr;
	int err;

	if (G.initialized)
		return 1;
	G.initialized = 1;
	G.budget = _env_u64("FLAMEWATCH_CUDA_LAUNCH_BUDGET", 500, 1, 100000000);
	G.duty = (uint32_t)_env_u64("FLAMEWATCH_CUDA_DUTY_CYCLE", 30, 1, 1000);
	G.window_ms = (uint32_t)_env_u64("FLAMEWATCH_CUDA_WINDOW_MS", 10, 1, 10000);
	G.count_all = (int)_env_u64("FLAMEWATCH_CUDA_COUNT_ALL", 0, 0, 1);
	G.activity_all_cfg = (int)_env_u64("FLAMEWATCH_CUDA_ACTIVITY_ALL", 1, 0, 1);
	G.exact_max_rate = _env_u64("FLAMEWATCH_CUDA_EXACT_MAX_RATE", 30000, 0, UINT32_MAX);
	G.max_cost_ppm = _env_u64("FLAMEWATCH_CUDA_MAX_COST_PPM", 10000, 0, 1000000);
	G.probe_every = _env_u64("FLAMEWATCH_CUDA_PROBE_GROUPS", 0, 0, 1000000);
	G.close_flush = (int)_env_u64("FLAMEWATCH_CUDA_CLOSE_FLUSH", 0, 0, 1);
	G.cost_ppm = G.cost_bound_ppm = -1;
	if (G.count_all)
		G.activity_all_cfg = 0;	/* counting is the other way to correct D */

	/* A kept launch's weight must still be in the direct-mapped table when
	 * its records arrive (a window or two later): at most 1/8 of the slots
	 * are written per window. */
	if (G.budget > (uint64_t)FWC_WEIGHT_SLOTS / 8 * 1000 / ((uint64_t)G.window_ms * G.duty))
		G.budget = (uint64_t)FWC_WEIGHT_SLOTS / 8 * 1000 / ((uint64_t)G.window_ms * G.duty) ?: 1;
	G.seed = _env_u64("FLAMEWATCH_CUDA_SEED", 0, 0, UINT64_MAX);
	G.ctl_rng = G.seed ? G.seed : (uint64_t)_now(CLOCK_MONOTONIC) ^ ((uint64_t)getpid() << 40);
	if (!G.ctl_rng)
		G.ctl_rng = 1;
	G.summary_path = getenv("FLAMEWATCH_CUDA_SUMMARY");
	if (G.summary_path && !*G.summary_path)
		G.summary_path = NULL;
	G.listen_file = getenv("FLAMEWATCH_CUDA_LISTEN_FILE");
	if (G.listen_file && !*G.listen_file)
		G.listen_file = NULL;
	G.batch.emit = _emit;
	_set_exact(G.activity_all_cfg);
	G.names.announce = _announce;
	atomic_store(&G.p_fixed, UINT32_MAX);

	if (_load_cupti()) {
		atomic_store(&G.inert, 1);
		return 1;
	}
	pthread_atfork(NULL, NULL, _at_fork_child);
	atexit(_at_exit);

	/* The control thread takes none of the application's signals. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256u << 10);
	err = pthread_create(&tid, &attr, _control, NULL);
	pthread_attr_destroy(&attr);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err) {
		_warn_once(W_THREAD, "cannot start a thread: %s; GPU time is not collected", strerror(err));
		atomic_store(&G.inert, 1);
		return 1;
	}
	pthread_setname_np(tid, "flamewatch-cuda");
	return 1;
}
