// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "agent/collector.h"
#include "agent/cpu_profile.h"
#include "cmd/continuous.h"
#include "common/batch.h"
#include "common/log.h"

static uint64_t _mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static uint64_t _unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void continuous__flush(struct continuous *c)
{
	struct batch *b = collector__take_batch(c->collector);

	c->last_flush_ns = _mono_ns();
	if (b)
		c->deliver(c->ctx, b);
}

static void _on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct continuous *c = arg;
	struct batch *b;

	(void)fd;
	(void)what;
	collector__tick(c->collector);
	b = cpu_profile__batch(collector__profile(c->collector));
	if (_mono_ns() - c->last_flush_ns >= c->interval_ns ||
	    (b && b->nsamples >= c->max_samples))
		continuous__flush(c);
}

static void _on_ready(evutil_socket_t fd, short what, void *arg)
{
	struct continuous *c = arg;

	(void)fd;
	(void)what;
	collector__drain(c->collector);
}

int continuous__start(struct continuous *c, struct event_base *base,
		      const struct continuous_opts *o)
{
	struct collector_opts co = {
		.freq_hz = o->freq_hz,
		.timed = true,
		.unwind_mb = o->unwind_mb,
	};
	struct timeval every = { 0, COLLECTOR_TICK_MS * 1000 };

	memset(c, 0, sizeof(*c));
	c->interval_ns = o->interval_ns;
	c->max_samples = o->max_samples;
	c->deliver = o->deliver;
	c->ctx = o->ctx;
	c->collector = collector__new(&co, _unix_ns());
	if (!c->collector) {
		fprintf(stderr, "flamewatch: error: cannot start the BPF sampler: %s\n",
			strerror(errno));
		return -1;
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
			pr_warn("cannot watch the ring buffer: it is drained every %d ms only\n",
				COLLECTOR_TICK_MS);
	}
	c->last_flush_ns = _mono_ns();
	return 0;
}

void continuous__stop(struct continuous *c)
{
	if (c->tick) {
		event_free(c->tick);
		c->tick = NULL;
	}
	if (c->ready) {
		event_free(c->ready);
		c->ready = NULL;
	}
	if (!c->collector)
		return;
	collector__tick(c->collector);
	collector__report(c->collector);
	collector__stop(c->collector);
	continuous__flush(c);
	collector__free(c->collector);
	c->collector = NULL;
}
