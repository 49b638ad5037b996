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
	SAMPLE_OFFCPU = 2,	/* value: nanoseconds a thread was blocked, from ts_ns on */
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

/*
 * A metric point: one value of one gauge or counter at one instant, e.g. a
 * GPU's utilisation. The series says whose it is (node is added by the
 * store; NVML points carry gpu, uuid, name, and per process pid and comm).
 * name is the Prometheus name, e.g. "flamewatch_gpu_power_watts".
 */
struct batch_metric {
	int64_t ts_ns;
	uint32_t series;	/* series id in the batch */
	uint32_t name;		/* string id in dict */
	double value;
};

/*
 * A CPU busy interval: thread tid of the series' process ran on cpu during
 * [start_ns, end_ns). Idle time is the gaps; pid 0 never appears.
 */
struct batch_cpu_interval {
	int64_t start_ns, end_ns;
	uint32_t series;	/* the process's labels, as for its CPU samples */
	uint32_t cpu;
	uint32_t tid;
	uint32_t comm;		/* string id in dict: the thread's comm */
};

enum gpu_activity_kind {
	GPU_KERNEL = 0,
	GPU_MEMCPY_HTOD = 1,
	GPU_MEMCPY_DTOH = 2,
	GPU_MEMCPY_DTOD = 3,
	GPU_MEMCPY_OTHER = 4,	/* peer, array, host to host, ... */
	GPU_MEMSET = 5,
	/* The busy timeline (cuda/probes.h): no work of its own, no stack. */
	GPU_BUSY = 6,
	GPU_COVERAGE = 7,
	GPU_ACTIVITY_KIND_MAX,
};

/*
 * The names of busy-timeline intervals: from the process's own activity
 * records, or from the GPU's hardware monitors (agent/gpu_busy.h), whose
 * bytes hold the sampling interval instead of the merge gap.
 */
#define GPU_BUSY_NAME "[busy]"
#define GPU_COVERAGE_NAME "[coverage]"
#define GPU_BUSY_NAME_MONITORS "[busy: gpu monitors]"
#define GPU_COVERAGE_NAME_MONITORS "[coverage: gpu monitors]"

#define BATCH_NO_STACK UINT32_MAX

/*
 * A GPU activity interval: a kernel, copy or set that ran on device/stream
 * during [start_ns, end_ns) (GPU clock converted to Unix ns), launched by
 * the series' process from the CPU stack `stack`.
 */
struct batch_gpu_interval {
	int64_t start_ns, end_ns;
	uint32_t series;	/* the launching process's labels */
	uint32_t device, stream;
	uint32_t kind;		/* enum gpu_activity_kind */
	uint32_t name;		/* string id in dict: demangled kernel name, "[memcpy HtoD]", ... */
	uint32_t stack;		/* launching stack id in dict, or BATCH_NO_STACK */
	uint64_t correlation;	/* CUPTI correlation id; GPU_BUSY spans: ns idle inside */
	uint64_t bytes;		/* copies and sets; 0 for kernels */
	uint32_t weight;	/* 1, or N when one launch in N was recorded */
	uint32_t pad;
};

struct profile;
struct intern;

struct batch {
	struct profile *dict;
	struct intern *series;		/* keys: struct batch_label arrays, sorted by name text */
	uint64_t period_ns;		/* of SAMPLE_CPU samples */
	struct batch_sample *samples;
	uint32_t nsamples, cap_samples;
	struct batch_metric *metrics;
	uint32_t nmetrics, cap_metrics;
	struct batch_cpu_interval *cpu_intervals;
	uint32_t ncpu_intervals, cap_cpu_intervals;
	struct batch_gpu_interval *gpu_intervals;
	uint32_t ngpu_intervals, cap_gpu_intervals;

	/*
	 * Non-zero when dict and series are not the batch's own but an
	 * append-only dictionary that several batches share (a wire session's
	 * on the server): every later batch with the same dict_id holds every
	 * entry this one holds, at the same ids. A store may then remember how
	 * it translated those ids instead of looking entries up again. Unique
	 * within the process (batch__new_dict_id()). 0: the batch's own.
	 */
	uint64_t dict_id;
	/* With dict_id: batch__free() calls this instead of freeing dict and series. */
	void (*dict_release)(void *owner);
	void *dict_owner;
};

/* Returns an empty batch, or NULL with errno set. */
struct batch *batch__new(uint64_t period_ns);
/*
 * Returns an empty batch that borrows dict and series from their owner
 * under dict_id (see struct batch); release(owner) runs when the batch is
 * freed or reset. Or NULL with errno set (release is not called then).
 */
struct batch *batch__new_shared(uint64_t period_ns, struct profile *dict, struct intern *series,
				uint64_t dict_id, void (*release)(void *owner), void *owner);
/* A fresh process-unique dict_id (never 0). */
uint64_t batch__new_dict_id(void);
/* Accepts NULL. */
void batch__free(struct batch *b);
/* Forgets every record, series and the dictionary: a fresh batch. Returns 0 or -ENOMEM. */
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

/* Bytes the batch holds: dictionary, series and every record. */
size_t batch__memory(const struct batch *b);

/*
 * Gives back what the batch's arrays and dictionary reserved for growth, so
 * that batch__memory() is what its content takes: for a batch that is done
 * being filled and waits (to be shipped). A shared dictionary is left as it
 * is. Invalidates every pointer into the dictionary (profile__string(),
 * profile__stack(), ...) and the arrays. Returns 0, or -ENOMEM with the
 * batch whole and partly compacted.
 */
int batch__compact(struct batch *b);

/* Append one record (copied). Each returns 0 or -ENOMEM. */
int batch__add_sample(struct batch *b, const struct batch_sample *s);
int batch__add_metric(struct batch *b, const struct batch_metric *m);
int batch__add_cpu_interval(struct batch *b, const struct batch_cpu_interval *iv);
int batch__add_gpu_interval(struct batch *b, const struct batch_gpu_interval *iv);

/* True when the batch holds no record of any kind. */
int batch__empty(const struct batch *b);

/* "kernel", "memcpy HtoD", ...; "unknown" out of range. */
const char *gpu_activity_kind__name(uint32_t kind);

#endif
