// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "agent/collector.h"
#include "agent/continuous.h"
#include "agent/cpu_profile.h"
#include "agent/cpu_strips.h"
#include "agent/gpu_busy.h"
#include "common/batch.h"
#include "common/clock.h"
#include "common/env.h"
#include "common/log.h"
#include "common/timeparse.h"
#include "gpu/nvml.h"
#include "gpu/poller.h"

void continuous__flush(struct continuous *c)
{
	struct batch *b = collector__take_batch(c->collector);

	c->last_flush_ns = clock__mono_ns();
	if (b)
		c->deliver(c->ctx, b);
}

int continuous__parse_gpu_interval(const char *arg, uint64_t *ns)
{
	int64_t v;

	if (!strcmp(arg, "off") || !strcmp(arg, "0")) {
		*ns = 0;
		return 0;
	}
	if (duration__parse(arg, &v) || v < 100000000LL) {
		fprintf(stderr, "flamewatch: error: --gpu-interval: '%s' is not a duration of "
			"100ms or more, nor off\n", arg);
		return -1;
	}
	*ns = (uint64_t)v;
	return 0;
}

int continuous__parse_gpu_costly_interval(const char *flag, const char *arg, uint64_t *ns)
{
	int64_t v;

	if (!strcmp(arg, "0")) {
		*ns = 0;
		return 0;
	}
	if (duration__parse(arg, &v) || v < 0) {
		fprintf(stderr, "flamewatch: error: --%s: '%s' is not a duration (0: every round)\n",
			flag, arg);
		return -1;
	}
	*ns = (uint64_t)v;
	return 0;
}

int continuous__parse_gpu_process_query(const char *flag, const char *arg, int *always)
{
	if (!strcmp(arg, "shared") || !strcmp(arg, "always")) {
		*always = arg[0] == 'a';
		return 0;
	}
	fprintf(stderr, "flamewatch: error: --%s: '%s' is not shared or always\n", flag, arg);
	return -1;
}

/* Moves the points of the GPU thread's rounds into the batch being filled. */
static void _gpu_drain(struct continuous *c, struct batch *b)
{
	uint32_t first = b->nmetrics;
	int rc = gpu_poller__drain(c->gpu, b);

	if (rc < 0)
		pr_warn("nvml: cannot record GPU metrics: %s\n", strerror(-rc));
	if (c->on_gpu_round && b->nmetrics > first)
		c->on_gpu_round(c->ctx, b, first);
}

/* Whether pid's CUDA library collects every record (gpu_busy__steer()). */
static bool _records_complete(void *ctx, uint32_t pid)
{
	struct continuous *c = ctx;

	return collector__cuda_records_complete(c->collector, pid);
}

static void _on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct continuous *c = arg;
	struct batch *b;
	uint64_t since;

	(void)fd;
	(void)what;
	collector__tick(c->collector);
	if (c->strips)
		cpu_strips__drain(c->strips, collector__profile(c->collector));
	b = cpu_profile__batch(collector__profile(c->collector));
	if (c->gpu && b)
		_gpu_drain(c, b);
	if (c->busy) {
		uint64_t now = (uint64_t)clock__unix_ns();

		gpu_busy__steer(c->busy, c->gpu, _records_complete, c, now);
		gpu_busy__drain(c->busy, collector__profile(c->collector), c->gpu,
				collector__dispatch_scale(c->collector), now, false);
	}
	since = clock__mono_ns() - c->last_flush_ns;
	if (since >= c->interval_ns || (b && b->nsamples >= c->max_samples) ||
	    (b && b->ncpu_intervals >= CONTINUOUS_EARLY_INTERVALS &&
	     since >= CONTINUOUS_EARLY_MIN_NS))
		continuous__flush(c);
}

static void _on_ready(evutil_socket_t fd, short what, void *arg)
{
	struct continuous *c = arg;

	(void)fd;
	(void)what;
	collector__drain(c->collector);
}

/*
 * CONTINUOUS_TICK_MS, or the batch interval where that is shorter (a batch
 * goes at a tick), or FLAMEWATCH_TICK_MS: a testing knob, so that a test
 * can show that the ring buffers wake the agent when they fill, not the
 * timer.
 */
static long _tick_ms(uint64_t interval_ns)
{
	const char *s = getenv("FLAMEWATCH_TICK_MS");
	char *end;
	long v;

	if (!s || !*s) {
		v = (long)(interval_ns / 1000000);
		return interval_ns && v < CONTINUOUS_TICK_MS ? (v < 10 ? 10 : v) : CONTINUOUS_TICK_MS;
	}
	v = strtol(s, &end, 10);
	if (*end || v < 10 || v > 3600000) {
		pr_warn("FLAMEWATCH_TICK_MS: '%s' is not a number of milliseconds from 10 to "
			"3600000; the tick is %d ms\n", s, CONTINUOUS_TICK_MS);
		return CONTINUOUS_TICK_MS;
	}
	return v;
}

static void _on_cuda_ready(evutil_socket_t fd, short what, void *arg)
{
	struct continuous *c = arg;

	(void)fd;
	(void)what;
	collector__cuda_ready(c->collector);
}

static void _on_strips_ready(evutil_socket_t fd, short what, void *arg)
{
	struct continuous *c = arg;

	(void)fd;
	(void)what;
	cpu_strips__drain(c->strips, collector__profile(c->collector));
}

/* CONTINUOUS_UNWIND_ON_DEMAND_BYTES, or FLAMEWATCH_UNWIND_ON_DEMAND_KB (0: only files that do not fit). */
static uint64_t _on_demand_bytes(void)
{
	return env__kib("FLAMEWATCH_UNWIND_ON_DEMAND_KB", CONTINUOUS_UNWIND_ON_DEMAND_BYTES, 0);
}

int continuous__start(struct continuous *c, struct event_base *base,
		      const struct continuous_opts *o)
{
	struct collector_opts co = {
		.freq_hz = o->freq_hz,
		.timed = true,
		.unwind_mb = o->unwind_mb,
		.unwind_on_demand_bytes = _on_demand_bytes(),
		.java_perfmap_interval_ns = o->java_perfmap_interval_ns,
		.offcpu_min_ns = o->no_offcpu ? 0 :
				 o->offcpu_min_ns ? o->offcpu_min_ns : CONTINUOUS_OFFCPU_MIN_NS,
		/* The strips' program tail-calls it; attached alone only without them. */
		.offcpu_no_attach = !o->no_cpu_strips,
		.offcpu_skip_self = true,
	};
	long tick_ms = _tick_ms(o->interval_ns);
	struct timeval every = { tick_ms / 1000, (tick_ms % 1000) * 1000 };

	memset(c, 0, sizeof(*c));
	c->interval_ns = o->interval_ns;
	c->max_samples = o->max_samples;
	c->deliver = o->deliver;
	c->ctx = o->ctx;
	c->collector = collector__new(&co, (uint64_t)clock__unix_ns());
	if (!c->collector) {
		fprintf(stderr, "flamewatch: error: cannot start the BPF sampler: %s\n",
			strerror(errno));
		return -1;
	}
	if (!o->no_cpu_strips) {
		struct cpu_strips_opts so = { .chain_fd = collector__offcpu_prog_fd(c->collector) };

		/* Strips are an addition: without them the profiler still runs. */
		so.chain = so.chain_fd >= 0;
		c->strips = cpu_strips__open(&so);
		if (!c->strips)
			pr_warn("CPU strips are off: %s\n", strerror(errno));
	}
	if (!cpu_strips__chained(c->strips)) {
		int err = collector__offcpu_attach(c->collector);

		if (err)
			pr_warn("off-CPU time is off: cannot attach its sched_switch program: %s\n",
				strerror(-err));
	}
	c->tick = event_new(base, -1, EV_PERSIST, _on_tick, c);
	if (!c->tick || event_add(c->tick, &every)) {
		fprintf(stderr, "flamewatch: error: cannot set up the sampling timer\n");
		continuous__stop(c);
		return -1;
	}
	if (collector__fd(c->collector) >= 0) {
		c->ready = event_new(base, collector__fd(c->collector), EV_READ | EV_PERSIST,
				     _on_ready, c);
		if (!c->ready || event_add(c->ready, NULL))
			pr_warn("cannot watch the ring buffer: it is drained every %ld ms only\n",
				tick_ms);
	}
	if (collector__cuda_fd(c->collector) >= 0) {
		c->cuda_ready = event_new(base, collector__cuda_fd(c->collector), EV_READ | EV_PERSIST,
					  _on_cuda_ready, c);
		if (!c->cuda_ready || event_add(c->cuda_ready, NULL))
			pr_warn("cannot watch for loads of the CUDA library: they are seen every "
				"%ld ms only\n", tick_ms);
	}
	if (cpu_strips__fd(c->strips) >= 0) {
		c->strips_ready = event_new(base, cpu_strips__fd(c->strips), EV_READ | EV_PERSIST,
					    _on_strips_ready, c);
		if (!c->strips_ready || event_add(c->strips_ready, NULL))
			pr_warn("cannot watch the CPU strips' ring buffer: it is drained every %ld ms "
				"only\n", tick_ms);
	}
	c->last_flush_ns = clock__mono_ns();
	if (o->gpu_interval_ns) {
		c->gpu_interval_ns = o->gpu_interval_ns;
		c->on_gpu_round = o->on_gpu_round;
		c->gpu = gpu_poller__start(NULL, o->gpu_interval_ns, o->gpu_pcie_interval_ns,
					   o->gpu_process_interval_ns, o->gpu_process_query_always);
	}
	/*
	 * The monitors' spans belong to a process only by NVML's process
	 * lists: no NVML, no GPU or no lists, no child.
	 */
	if (c->gpu && gpu_poller__ngpus(c->gpu) && o->gpu_busy != CONTINUOUS_GPU_BUSY_OFF) {
		char buf[256], *args[9] = { 0 }, *save = NULL;
		const char *knob = getenv("FLAMEWATCH_GPU_BUSY_ARGS");
		size_t n = 0;

		/* A benchmarking knob: the child's sampling and decode periods (its --help). */
		if (knob && strlen(knob) < sizeof(buf)) {
			strcpy(buf, knob);
			for (char *t = strtok_r(buf, " ", &save); t && n < 8; t = strtok_r(NULL, " ", &save))
				args[n++] = t;
		}
		c->busy = gpu_busy__start(base, NULL, (const char *const *)args,
					  o->gpu_busy == CONTINUOUS_GPU_BUSY_AUTO,
					  o->gpu_busy == CONTINUOUS_GPU_BUSY_AUTO);
		if (!c->busy)
			pr_warn("GPU busy timeline: cannot start gpu-busy: %s\n", strerror(errno));
	}
	return 0;
}

void continuous__stop(struct continuous *c)
{
	struct batch *b;

	if (c->tick) {
		event_free(c->tick);
		c->tick = NULL;
	}
	if (c->ready) {
		event_free(c->ready);
		c->ready = NULL;
	}
	if (c->strips_ready) {
		event_free(c->strips_ready);
		c->strips_ready = NULL;
	}
	if (c->cuda_ready) {
		event_free(c->cuda_ready);
		c->cuda_ready = NULL;
	}
	if (!c->collector)
		return;
	collector__tick(c->collector);
	if (c->strips) {
		cpu_strips__drain(c->strips, collector__profile(c->collector));
		cpu_strips__report(c->strips);
		cpu_strips__close(c->strips);
		c->strips = NULL;
	}
	collector__report(c->collector);
	/*
	 * Deliver what is in hand before detaching the BPF programs: each
	 * uprobe detach waits for RCU (long on a loaded host), and a supervisor that loses patience and sends SIGKILL
	 * in that time then takes nothing already drained with it.
	 */
	if (c->busy) {
		struct gpu_busy_stats st;

		gpu_busy__stop(c->busy);	/* its last lines first */
		gpu_busy__drain(c->busy, collector__profile(c->collector), c->gpu,
				collector__dispatch_scale(c->collector), (uint64_t)clock__unix_ns(), true);
		gpu_busy__stats(c->busy, &st);
		pr_info("GPU busy timeline: %llu busy and %llu coverage spans from the GPUs' monitors, "
			"%llu with no sole process on their GPU, %llu bad lines; %llu kernels "
			"dispatched, %.3f s of CPU decoding the samples\n",
			(unsigned long long)st.busy_spans, (unsigned long long)st.cover_spans,
			(unsigned long long)st.unowned_spans, (unsigned long long)st.bad_lines,
			(unsigned long long)st.dispatches, (double)st.decode_cpu_ns / 1e9);
		gpu_busy__free(c->busy);
		c->busy = NULL;
	}
	if (c->gpu) {
		struct nvml_stats st;

		b = cpu_profile__batch(collector__profile(c->collector));
		if (b)
			_gpu_drain(c, b);
		gpu_poller__stats(c->gpu, &st);
		if (st.rounds)
			pr_info("nvml: %llu rounds, %llu points, %.1f us CPU per round (max %.1f), "
				"%.2f ms wall per round (max %.2f)\n",
				(unsigned long long)st.rounds, (unsigned long long)st.points,
				st.cpu_ns / 1e3 / st.rounds, st.max_cpu_ns / 1e3, st.wall_ns / 1e6 / st.rounds,
				st.max_wall_ns / 1e6);
		gpu_poller__free(c->gpu);
		c->gpu = NULL;
	}
	continuous__flush(c);
	/* Then the slow part, and what came in meanwhile. */
	collector__stop(c->collector);
	continuous__flush(c);
	collector__free(c->collector);
	c->collector = NULL;
}
