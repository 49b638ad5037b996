// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "intern.h"
#include "profile.h"

struct batch *batch__new(uint64_t period_ns)
{
	struct batch *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->period_ns = period_ns;
	b->dict = profile__new(period_ns, 0);
	b->series = intern__new();
	if (!b->dict || !b->series) {
		batch__free(b);
		errno = ENOMEM;
		return NULL;
	}
	return b;
}

struct batch *batch__new_shared(uint64_t period_ns, struct profile *dict, struct intern *series,
				uint64_t dict_id, void (*release)(void *owner), void *owner)
{
	struct batch *b;

	if (!dict || !series || !dict_id) {
		errno = EINVAL;
		return NULL;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->period_ns = period_ns;
	b->dict = dict;
	b->series = series;
	b->dict_id = dict_id;
	b->dict_release = release;
	b->dict_owner = owner;
	return b;
}

uint64_t batch__new_dict_id(void)
{
	static uint64_t next;

	return __atomic_add_fetch(&next, 1, __ATOMIC_RELAXED);
}

/* Lets go of the dictionary, owned or shared. */
static void _dict_drop(struct batch *b)
{
	if (b->dict_id) {
		if (b->dict_release)
			b->dict_release(b->dict_owner);
	} else {
		profile__free(b->dict);
		intern__free(b->series);
	}
	b->dict = NULL;
	b->series = NULL;
	b->dict_id = 0;
	b->dict_release = NULL;
	b->dict_owner = NULL;
}

void batch__free(struct batch *b)
{
	if (!b)
		return;
	_dict_drop(b);
	free(b->samples);
	free(b->metrics);
	free(b->cpu_intervals);
	free(b->gpu_intervals);
	free(b);
}

int batch__reset(struct batch *b)
{
	struct profile *dict = profile__new(b->period_ns, 0);
	struct intern *series = intern__new();

	if (!dict || !series) {
		profile__free(dict);
		intern__free(series);
		return -ENOMEM;
	}
	_dict_drop(b);
	b->dict = dict;
	b->series = series;
	b->nsamples = 0;
	b->nmetrics = 0;
	b->ncpu_intervals = 0;
	b->ngpu_intervals = 0;
	return 0;
}

struct label_text {
	const char *name, *value;
};

static int _by_name(const void *a, const void *b)
{
	return strcmp(((const struct label_text *)a)->name, ((const struct label_text *)b)->name);
}

int64_t batch__intern_series(struct batch *b, const char *const *names,
			     const char *const *values, size_t n)
{
	struct label_text *sorted = NULL;
	struct batch_label *key = NULL;
	int64_t id = -ENOMEM;

	sorted = calloc(n + 1, sizeof(*sorted));
	key = calloc(n + 1, sizeof(*key));
	if (!sorted || !key)
		goto out;
	for (size_t i = 0; i < n; i++) {
		if (!names[i] || !names[i][0] || !values[i]) {
			id = -EINVAL;
			goto out;
		}
		sorted[i] = (struct label_text){ names[i], values[i] };
	}
	qsort(sorted, n, sizeof(*sorted), _by_name);
	for (size_t i = 0; i < n; i++) {
		int64_t name, value;

		if (i && !strcmp(sorted[i - 1].name, sorted[i].name)) {
			id = -EINVAL;
			goto out;
		}
		name = profile__intern_string(b->dict, sorted[i].name);
		value = profile__intern_string(b->dict, sorted[i].value);
		if (name < 0 || value < 0)
			goto out;
		key[i] = (struct batch_label){ (uint32_t)name, (uint32_t)value };
	}
	id = intern__add(b->series, key, n * sizeof(*key), NULL);
out:
	free(sorted);
	free(key);
	return id;
}

const struct batch_label *batch__series(const struct batch *b, uint32_t series, size_t *n)
{
	size_t len;
	const struct batch_label *labels = intern__key(b->series, series, &len);

	*n = len / sizeof(*labels);
	return labels;
}

uint32_t batch__nseries(const struct batch *b)
{
	return intern__count(b->series);
}

const char *batch__series_label(const struct batch *b, uint32_t series, const char *name)
{
	size_t n;
	const struct batch_label *labels = batch__series(b, series, &n);

	for (size_t i = 0; i < n; i++)
		if (!strcmp(profile__string(b->dict, labels[i].name), name))
			return profile__string(b->dict, labels[i].value);
	return NULL;
}

/* Makes room for one more element of size elem in *arr (n used of *cap). */
static int _reserve(void **arr, uint32_t n, uint32_t *cap, size_t elem)
{
	uint32_t ncap;
	void *na;

	if (n < *cap)
		return 0;
	if (*cap >= UINT32_MAX / 2)
		return -ENOMEM;
	ncap = *cap ? *cap * 2 : 256;
	na = realloc(*arr, (size_t)ncap * elem);
	if (!na)
		return -ENOMEM;
	*arr = na;
	*cap = ncap;
	return 0;
}

int batch__add_sample(struct batch *b, const struct batch_sample *s)
{
	if (_reserve((void **)&b->samples, b->nsamples, &b->cap_samples, sizeof(*s)))
		return -ENOMEM;
	b->samples[b->nsamples++] = *s;
	return 0;
}

int batch__add_metric(struct batch *b, const struct batch_metric *m)
{
	if (_reserve((void **)&b->metrics, b->nmetrics, &b->cap_metrics, sizeof(*m)))
		return -ENOMEM;
	b->metrics[b->nmetrics++] = *m;
	return 0;
}

int batch__add_cpu_interval(struct batch *b, const struct batch_cpu_interval *iv)
{
	if (_reserve((void **)&b->cpu_intervals, b->ncpu_intervals, &b->cap_cpu_intervals,
		     sizeof(*iv)))
		return -ENOMEM;
	b->cpu_intervals[b->ncpu_intervals++] = *iv;
	return 0;
}

int batch__add_gpu_interval(struct batch *b, const struct batch_gpu_interval *iv)
{
	if (_reserve((void **)&b->gpu_intervals, b->ngpu_intervals, &b->cap_gpu_intervals,
		     sizeof(*iv)))
		return -ENOMEM;
	b->gpu_intervals[b->ngpu_intervals++] = *iv;
	return 0;
}

int batch__empty(const struct batch *b)
{
	return !b->nsamples && !b->nmetrics && !b->ncpu_intervals && !b->ngpu_intervals;
}

const char *gpu_activity_kind__name(uint32_t kind)
{
	static const char *const names[GPU_ACTIVITY_KIND_MAX] = {
		[GPU_KERNEL] = "kernel",
		[GPU_MEMCPY_HTOD] = "memcpy HtoD",
		[GPU_MEMCPY_DTOH] = "memcpy DtoH",
		[GPU_MEMCPY_DTOD] = "memcpy DtoD",
		[GPU_MEMCPY_OTHER] = "memcpy",
		[GPU_MEMSET] = "memset",
		[GPU_BUSY] = "busy",
		[GPU_COVERAGE] = "coverage",
	};

	return kind < GPU_ACTIVITY_KIND_MAX ? names[kind] : "unknown";
}

/* Trims *arr to its n elements; keeps it as it is when n is 0 or realloc fails. */
static void _trim(void **arr, uint32_t n, uint32_t *cap, size_t elem)
{
	void *na;

	if (!n || n == *cap)
		return;
	na = realloc(*arr, (size_t)n * elem);
	if (na) {
		*arr = na;
		*cap = n;
	}
}

int batch__compact(struct batch *b)
{
	struct profile *d = b->dict;
	struct intern *t[6];
	int err = 0;

	_trim((void **)&b->samples, b->nsamples, &b->cap_samples, sizeof(*b->samples));
	_trim((void **)&b->metrics, b->nmetrics, &b->cap_metrics, sizeof(*b->metrics));
	_trim((void **)&b->cpu_intervals, b->ncpu_intervals, &b->cap_cpu_intervals,
	      sizeof(*b->cpu_intervals));
	_trim((void **)&b->gpu_intervals, b->ngpu_intervals, &b->cap_gpu_intervals,
	      sizeof(*b->gpu_intervals));
	if (b->dict_id)
		return 0;
	_trim((void **)&d->mappings, d->nmappings, &d->cap_mappings, sizeof(*d->mappings));
	_trim((void **)&d->frames, d->nframes, &d->cap_frames, sizeof(*d->frames));
	_trim((void **)&d->samples, d->nsamples, &d->cap_samples, sizeof(*d->samples));
	t[0] = d->strings;
	t[1] = d->mapping_keys;
	t[2] = d->frame_keys;
	t[3] = d->stacks;
	t[4] = d->sample_keys;
	t[5] = b->series;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (intern__compact(t[i]))
			err = -ENOMEM;
	return err;
}

size_t batch__memory(const struct batch *b)
{
	const struct profile *d = b->dict;

	return sizeof(*b) + sizeof(*d) + intern__memory(d->strings) +
	       intern__memory(d->mapping_keys) + intern__memory(d->frame_keys) +
	       intern__memory(d->stacks) + intern__memory(d->sample_keys) +
	       (size_t)d->cap_mappings * sizeof(*d->mappings) +
	       (size_t)d->cap_frames * sizeof(*d->frames) +
	       (size_t)d->cap_samples * sizeof(*d->samples) +
	       intern__memory(b->series) + (size_t)b->cap_samples * sizeof(*b->samples) +
	       (size_t)b->cap_metrics * sizeof(*b->metrics) +
	       (size_t)b->cap_cpu_intervals * sizeof(*b->cpu_intervals) +
	       (size_t)b->cap_gpu_intervals * sizeof(*b->gpu_intervals);
}
