// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/batch.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/profile.h"
#include "gpu/nvml.h"
#include "gpu/poller.h"

/* Staged points beyond this are dropped (the event loop stopped draining). */
#define MAX_STAGED 200000
#define MAX_OCCUPANTS 64

struct gpu_poller {
	struct nvml *nvml;
	uint64_t interval_ns;
	pthread_t thread;
	bool started, stop;
	pthread_mutex_t lock;
	pthread_cond_t wake;
	struct batch *work;		/* the thread's own, filled without the lock */
	struct batch *staged;		/* under lock */
	struct nvml_stats stats;	/* under lock: a copy after each round */
	struct nvml_occupant occ[MAX_OCCUPANTS];	/* under lock: the same */
	size_t nocc;
	uint64_t dropped;
};

/*
 * Appends src's points from index from to dst, interning names and labels
 * in dst. Returns the index reached (src->nmetrics when all), and sets *err.
 */
static uint32_t _copy_points(struct batch *dst, const struct batch *src, uint32_t from, int *err)
{
	const char *names[64], *values[64];
	uint32_t i = from;

	*err = 0;
	for (; i < src->nmetrics; i++) {
		const struct batch_metric *m = &src->metrics[i];
		const struct batch_label *l;
		struct batch_metric out = *m;
		int64_t series, name;
		size_t n;

		l = batch__series(src, m->series, &n);
		if (n > 64)
			n = 64;
		for (size_t k = 0; k < n; k++) {
			names[k] = profile__string(src->dict, l[k].name);
			values[k] = profile__string(src->dict, l[k].value);
		}
		series = batch__intern_series(dst, names, values, n);
		name = series < 0 ? series :
		       profile__intern_string(dst->dict, profile__string(src->dict, m->name));
		if (series < 0 || name < 0) {
			*err = (int)(series < 0 ? series : name);
			break;
		}
		out.series = (uint32_t)series;
		out.name = (uint32_t)name;
		*err = batch__add_metric(dst, &out);
		if (*err)
			break;
	}
	return i;
}

static void _advance(struct timespec *next, uint64_t interval_ns)
{
	struct timespec now;

	next->tv_sec += (time_t)(interval_ns / 1000000000ULL);
	next->tv_nsec += (long)(interval_ns % 1000000000ULL);
	if (next->tv_nsec >= 1000000000L) {
		next->tv_sec++;
		next->tv_nsec -= 1000000000L;
	}
	/* Fell behind by more than a round: count again from now. */
	clock_gettime(CLOCK_MONOTONIC, &now);
	if ((now.tv_sec - next->tv_sec) * 1000000000LL + (now.tv_nsec - next->tv_nsec) >
	    (long long)interval_ns)
		*next = now;
}

static void *_run(void *arg)
{
	struct gpu_poller *p = arg;
	struct timespec next;
	bool stop = false;

	clock_gettime(CLOCK_MONOTONIC, &next);
	while (!stop) {
		int rc, err = 0;

		/* NVML without the lock: a round may take tens of ms per GPU. */
		batch__reset(p->work);
		rc = nvml__collect(p->nvml, p->work, clock__unix_ns());
		if (rc < 0)
			pr_warn("nvml: cannot record GPU metrics: %s\n", strerror(-rc));
		pthread_mutex_lock(&p->lock);
		if (p->staged->nmetrics < MAX_STAGED)
			_copy_points(p->staged, p->work, 0, &err);
		else
			p->dropped++;
		if (err)
			pr_warn("nvml: cannot stage GPU metrics: %s\n", strerror(-err));
		nvml__stats(p->nvml, &p->stats);
		p->nocc = nvml__occupants(p->nvml, p->occ, MAX_OCCUPANTS);
		_advance(&next, p->interval_ns);
		while (!p->stop &&
		       pthread_cond_timedwait(&p->wake, &p->lock, &next) != ETIMEDOUT)
			;
		stop = p->stop;
		pthread_mutex_unlock(&p->lock);
	}
	return NULL;
}

struct gpu_poller *gpu_poller__start(const char *lib, uint64_t interval_ns, uint64_t pcie_ns,
				     uint64_t process_ns, int process_query_always)
{
	struct gpu_poller *p = calloc(1, sizeof(*p));
	pthread_condattr_t ca;
	int e = ENOMEM;

	if (!p)
		goto err;
	pthread_mutex_init(&p->lock, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&p->wake, &ca);
	pthread_condattr_destroy(&ca);
	p->interval_ns = interval_ns;
	p->nvml = nvml__open(lib);
	if (!p->nvml) {
		e = errno;
		goto err;
	}
	nvml__set_interval(p->nvml, interval_ns);
	nvml__set_costly_intervals(p->nvml, pcie_ns, process_ns);
	nvml__set_process_query_always(p->nvml, process_query_always);
	p->staged = batch__new(1);
	p->work = batch__new(1);
	if (!p->staged || !p->work)
		goto err;
	e = pthread_create(&p->thread, NULL, _run, p);
	if (e) {
		pr_warn("nvml: cannot start the GPU metrics thread: %s\n", strerror(e));
		goto err;
	}
	p->started = true;
	return p;
err:
	gpu_poller__free(p);
	errno = e;
	return NULL;
}

void gpu_poller__free(struct gpu_poller *p)
{
	if (!p)
		return;
	if (p->started) {
		pthread_mutex_lock(&p->lock);
		p->stop = true;
		pthread_cond_signal(&p->wake);
		pthread_mutex_unlock(&p->lock);
		pthread_join(p->thread, NULL);
	}
	if (p->dropped)
		pr_warn("nvml: %llu rounds skipped: points were not taken\n",
			(unsigned long long)p->dropped);
	nvml__close(p->nvml);
	batch__free(p->staged);
	batch__free(p->work);
	pthread_cond_destroy(&p->wake);
	pthread_mutex_destroy(&p->lock);
	free(p);
}

int gpu_poller__drain(struct gpu_poller *p, struct batch *b)
{
	struct batch *s;
	uint32_t i;
	int err;

	if (!p || !b)
		return -EINVAL;
	pthread_mutex_lock(&p->lock);
	s = p->staged;
	i = _copy_points(b, s, 0, &err);
	if (i == s->nmetrics) {
		if (batch__reset(s))
			err = -ENOMEM;
	} else if (i) {
		/* Keep the rest for the next drain. */
		memmove(s->metrics, s->metrics + i, (s->nmetrics - i) * sizeof(*s->metrics));
		s->nmetrics -= i;
	}
	pthread_mutex_unlock(&p->lock);
	return err ? err : (int)i;
}

void gpu_poller__stats(struct gpu_poller *p, struct nvml_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	*out = p->stats;
	pthread_mutex_unlock(&p->lock);
}

unsigned int gpu_poller__ngpus(const struct gpu_poller *p)
{
	return p ? nvml__ngpus(p->nvml) : 0;
}

size_t gpu_poller__occupants(struct gpu_poller *p, struct nvml_occupant *out, size_t max)
{
	size_t n;

	if (!p)
		return 0;
	pthread_mutex_lock(&p->lock);
	n = p->nocc < max ? p->nocc : max;
	memcpy(out, p->occ, n * sizeof(*out));
	pthread_mutex_unlock(&p->lock);
	return n;
}
