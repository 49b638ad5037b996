/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_BATCH_H
#define FW_COMMON_BATCH_H

#include <stddef.h>
#include <stdint.h>

/*
 * A batch: what an agent ships and a store writes. Unlike a profile it
 * keeps every sample with its timestamp, so that flame charts, CPU strips
 * and "what ran while the GPU was idle" can be answered later.
 *
 * The dictionary (strings, mappings, frames, stacks) is a struct profile
 * whose own samples are unused. Samples refer to a stack and to a series:
 * the set of labels that identifies where they come from (node, pid, comm,
 * exe, container, pod, or any labels an ingested pprof carries). Thread id
 * and CPU vary from sample to sample and are columns, not labels, so that
 * series stay few.
 */

enum sample_type {
	SAMPLE_CPU = 0,		/* value: samples; each stands for period_ns of CPU */
	SAMPLE_GPU_TIME = 1,	/* value: nanoseconds of GPU time */
	SAMPLE_TYPE_MAX,
};

struct batch_sample {
	int64_t ts_ns;		/* Unix nanoseconds */
	uint32_t stack;		/* stack id in dict */
	uint32_t series;	/* series id in the batch */
	uint32_t tid;
	uint32_t cpu;
	uint32_t type;		/* enum sample_type */
	uint32_t pad;
	int64_t value;
};

struct batch_label {
	uint32_t name;		/* string id in dict */
	uint32_t value;		/* string id in dict */
};

struct profile;
struct intern;

struct batch {
	struct profile *dict;
	struct intern *series;		/* keys: struct batch_label arrays, sorted by name text */
	uint64_t period_ns;		/* of SAMPLE_CPU samples */
	struct batch_sample *samples;
	uint32_t nsamples, cap_samples;
};

/* Returns an empty batch, or NULL with errno set. */
struct batch *batch__new(uint64_t period_ns);
/* Accepts NULL. */
void batch__free(struct batch *b);
/* Forgets samples and series but keeps nothing else either: a fresh batch. Returns 0 or -ENOMEM. */
int batch__reset(struct batch *b);

/*
 * Returns the id of the series with these labels (n pairs of name, value
 * text; any order, names unique), or -EINVAL for a duplicate or empty name,
 * or -ENOMEM.
 */
int64_t batch__intern_series(struct batch *b, const char *const *names,
			     const char *const *values, size_t n);
/* Borrows the labels of a series, sorted by name; *n receives their number. */
const struct batch_label *batch__series(const struct batch *b, uint32_t series, size_t *n);
uint32_t batch__nseries(const struct batch *b);
/* Returns the value of label name in series, or NULL. Borrowed. */
const char *batch__series_label(const struct batch *b, uint32_t series, const char *name);

/* Bytes the batch holds: dictionary, series and samples. */
size_t batch__memory(const struct batch *b);

/* Appends a sample. Returns 0 or -ENOMEM. */
int batch__add_sample(struct batch *b, const struct batch_sample *s);

#endif
