// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/flametree.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "clickhouse.h"
#include "sqlite.h"
#include "store.h"

/*
 * Arguments are checked here once for every backend, and calls serialized
 * here, so that backends may keep unsynchronized caches.
 */
struct store {
	const struct store_backend *ops;
	void *impl;
	pthread_mutex_t lock;
};

struct store *store__open(const char *uri, char *err, size_t err_len)
{
	const struct store_backend *ops = &store_sqlite_backend;
	const char *location = uri;
	struct store *s = NULL;
	char msg[256] = "";
	int e;

	if (!uri || !uri[0]) {
		snprintf(msg, sizeof(msg), "empty store URI");
		e = EINVAL;
		goto err;
	}
	if (!strncmp(uri, "clickhouse://", 13)) {
		ops = &store_clickhouse_backend;
		location = uri + 13;
	} else if (!strncmp(uri, "sqlite:", 7)) {
		location = uri + 7;
		if (!strncmp(location, "//", 2))
			location += 2;
	} else if (strstr(uri, "://")) {
		snprintf(msg, sizeof(msg), "unsupported store URI scheme in \"%s\"", uri);
		e = EPROTONOSUPPORT;
		goto err;
	}
	if (!location[0]) {
		snprintf(msg, sizeof(msg), "no %s in store URI \"%s\"",
			 ops == &store_sqlite_backend ? "directory" : "host", uri);
		e = EINVAL;
		goto err;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(msg, sizeof(msg), "out of memory");
		e = ENOMEM;
		goto err;
	}
	s->ops = ops;
	pthread_mutex_init(&s->lock, NULL);
	errno = 0;
	s->impl = ops->open(location, msg, sizeof(msg));
	if (!s->impl) {
		e = errno ? errno : EIO;
		pthread_mutex_destroy(&s->lock);
		free(s);
		goto err;
	}
	if (err && err_len)
		err[0] = '\0';
	return s;
err:
	pr_warn("store: cannot open %s: %s\n", uri ? uri : "(null)", msg);
	if (err && err_len)
		snprintf(err, err_len, "%s", msg);
	errno = e;
	return NULL;
}

void store__close(struct store *s)
{
	if (!s)
		return;
	s->ops->close(s->impl);
	pthread_mutex_destroy(&s->lock);
	free(s);
}

#define LOCKED(s, call)                         \
	({                                      \
		int __r;                        \
		pthread_mutex_lock(&(s)->lock); \
		__r = (call);                   \
		pthread_mutex_unlock(&(s)->lock); \
		__r;                            \
	})

int store__write(struct store *s, const char *node, const struct batch *b)
{
	if (!s || !node || !node[0] || !b)
		return -EINVAL;
	return LOCKED(s, s->ops->write(s->impl, node, b));
}

int store__profile(struct store *s, int64_t from, int64_t to, const struct selector *sel,
		   uint32_t type, struct profile *out)
{
	if (!s || !out)
		return -EINVAL;
	if (from >= to)
		return 0;
	return LOCKED(s, s->ops->profile(s->impl, from, to, sel, type, out));
}

int store__flamegraph(struct store *s, int64_t from, int64_t to, const struct selector *sel,
		      uint32_t type, size_t max_nodes, struct profile *out, struct flametree *t)
{
	int err;

	if (!s || !out || !t)
		return -EINVAL;
	memset(t, 0, sizeof(*t));
	if (from >= to)
		return flametree__build_profile(t, out, max_nodes);
	if (s->ops->flamegraph)
		return LOCKED(s, s->ops->flamegraph(s->impl, from, to, sel, type, max_nodes, out, t));
	err = LOCKED(s, s->ops->profile(s->impl, from, to, sel, type, out));
	return err ?: flametree__build_profile(t, out, max_nodes);
}

int store__samples(struct store *s, int64_t from, int64_t to, const struct selector *sel,
		   uint32_t type, uint32_t max_samples, struct profile *dict,
		   int (*cb)(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
			     int64_t value, const char *comm, uint32_t pid),
		   void *ctx, uint32_t *stride)
{
	uint32_t k = 1;

	if (!stride)
		stride = &k;
	*stride = 1;
	if (!s || !dict || !cb)
		return -EINVAL;
	if (from >= to)
		return 0;
	return LOCKED(s, s->ops->samples(s->impl, from, to, sel, type, max_samples, dict,
					 cb, ctx, stride));
}

int store__series(struct store *s, int64_t from, int64_t to, int64_t step,
		  const struct selector *sel, uint32_t type, const char *by,
		  int (*cb)(void *ctx, const char *group, int64_t bucket_start, int64_t sum),
		  void *ctx)
{
	if (!s || !cb || step <= 0)
		return -EINVAL;
	if (from >= to)
		return 0;
	if (((uint64_t)to - (uint64_t)from) / (uint64_t)step >= STORE_MAX_BUCKETS)
		return -E2BIG;
	return LOCKED(s, s->ops->series(s->impl, from, to, step, sel, type, by, cb, ctx));
}

int store__label_names(struct store *s, int64_t from, int64_t to,
		       int (*cb)(void *ctx, const char *name), void *ctx)
{
	if (!s || !cb)
		return -EINVAL;
	if (from >= to)
		return 0;
	return LOCKED(s, s->ops->label_names(s->impl, from, to, cb, ctx));
}

int store__label_values(struct store *s, const char *name, int64_t from, int64_t to,
			int (*cb)(void *ctx, const char *value), void *ctx)
{
	if (!s || !name || !name[0] || !cb)
		return -EINVAL;
	if (from >= to)
		return 0;
	return LOCKED(s, s->ops->label_values(s->impl, name, from, to, cb, ctx));
}

int store__retain(struct store *s, int64_t cutoff_ns)
{
	int err;

	if (!s)
		return -EINVAL;
	err = LOCKED(s, s->ops->retain(s->impl, cutoff_ns));
	if (!err && s->ops->retain_metrics)
		err = LOCKED(s, s->ops->retain_metrics(s->impl, cutoff_ns));
	return err;
}

int store__stats(struct store *s, struct store_stats *out)
{
	if (!s || !out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	return LOCKED(s, s->ops->stats(s->impl, out));
}

int store__gpu_intervals(struct store *s, int64_t from, int64_t to, const struct selector *sel,
			 struct profile *dict, uint32_t limit,
			 int (*cb)(void *ctx, const struct store_gpu_interval *iv), void *ctx)
{
	if (!s || !cb)
		return -EINVAL;
	if (!s->ops->gpu_intervals)
		return -EOPNOTSUPP;
	if (from >= to)
		return 0;
	return LOCKED(s, s->ops->gpu_intervals(s->impl, from, to, sel, dict, limit, cb, ctx));
}

/* ---- metric points ---------------------------------------------------------- */

int store__write_metrics(struct store *s, const char *node, const struct batch *b)
{
	if (!s || !node || !node[0] || !b)
		return -EINVAL;
	if (!b->nmetrics)
		return 0;
	if (!s->ops->write_metrics)
		return -EOPNOTSUPP;
	return LOCKED(s, s->ops->write_metrics(s->impl, node, b));
}

int store__metrics(struct store *s, int64_t from, int64_t to, int64_t step,
		   const struct selector *sel, const struct store_metric_visitor *v)
{
	if (!s || !v || !v->series || !v->point || step < 0)
		return -EINVAL;
	if (from >= to)
		return 0;
	if (step && ((uint64_t)to - (uint64_t)from) / (uint64_t)step >= STORE_MAX_BUCKETS)
		return -E2BIG;
	if (!s->ops->metrics)
		return -EOPNOTSUPP;
	return LOCKED(s, s->ops->metrics(s->impl, from, to, step, sel, v));
}

int store__metrics_latest(struct store *s, int64_t since,
			  int (*cb)(void *ctx, const char *name, const char *const *lnames,
				    const char *const *lvalues, size_t n, int64_t ts, double value),
			  void *ctx)
{
	if (!s || !cb)
		return -EINVAL;
	if (!s->ops->metrics_latest)
		return -EOPNOTSUPP;
	return LOCKED(s, s->ops->metrics_latest(s->impl, since, cb, ctx));
}

int store__write_cpu_intervals(struct store *s, const char *node, const struct batch *b)
{
	if (!s || !node || !node[0] || !b)
		return -EINVAL;
	if (!s->ops->write_cpu_intervals)
		return -EOPNOTSUPP;
	return LOCKED(s, s->ops->write_cpu_intervals(s->impl, node, b));
}

int store__cpu_intervals(struct store *s, int64_t from, int64_t to, const struct selector *sel,
			 int64_t cpu,
			 int (*cb)(void *ctx, const struct store_cpu_interval *iv), void *ctx)
{
	if (!s || !cb)
		return -EINVAL;
	if (from >= to)
		return 0;
	if (!s->ops->cpu_intervals)
		return -EOPNOTSUPP;
	return LOCKED(s, s->ops->cpu_intervals(s->impl, from, to, sel, cpu, cb, ctx));
}

int store_metric_fold__flush(struct store_metric_fold *f)
{
	uint32_t n = f->count;

	if (!n)
		return 0;
	f->count = 0;
	return f->v->point(f->v->ctx, f->bucket, f->sum / n, f->max, n);
}

int store_metric_fold__add(struct store_metric_fold *f, int64_t ts, double val)
{
	int64_t b = f->step > 0 ? f->from + (ts - f->from) / f->step * f->step : ts;
	int err = 0;

	if (f->count && b != f->bucket)
		err = store_metric_fold__flush(f);
	if (!f->count) {
		f->bucket = b;
		f->sum = 0;
		f->max = val;
	}
	f->sum += val;
	if (val > f->max)
		f->max = val;
	f->count++;
	return err;
}

static int _by_label_name(const void *a, const void *b)
{
	return strcmp(((const struct store_label *)a)->name, ((const struct store_label *)b)->name);
}

int store__series_labels(const struct batch *b, uint32_t series, const char *node,
			 struct store_label **labels, size_t *n)
{
	uint32_t nstrings = intern__count(b->dict->strings);
	const struct batch_label *bl;
	struct store_label *l;
	size_t nb, nl = 0;

	bl = batch__series(b, series, &nb);
	l = calloc(nb + 1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	for (size_t i = 0; i < nb; i++) {
		if (bl[i].name >= nstrings || bl[i].value >= nstrings) {
			free(l);
			return -EINVAL;
		}
		l[nl] = (struct store_label){ profile__string(b->dict, bl[i].name),
					      profile__string(b->dict, bl[i].value) };
		if (strcmp(l[nl].name, "node"))
			nl++;
	}
	l[nl++] = (struct store_label){ "node", node };
	qsort(l, nl, sizeof(*l), _by_label_name);
	*labels = l;
	*n = nl;
	return 0;
}
