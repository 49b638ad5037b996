/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_STORE_STORE_H
#define FW_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Where timestamped samples live once the server has them, and the queries
 * the UI and the exporters ask of them. One interface, several backends
 * chosen by URI: SQLite (embedded, the default) and ClickHouse (scale-out).
 *
 * Time is Unix nanoseconds; windows are half open, [from, to). Samples are
 * kept to the nearest microsecond (store__sample_ts() below). Every call
 * returns 0 or -errno (-EINVAL for bad arguments, -EIO for corrupt stored
 * data, -ENOMEM, ...). Callbacks returning non-zero stop the iteration and
 * their value is returned. A store may be shared between threads: calls are
 * serialized inside it, so a callback must not call into the same store.
 */

struct store;
struct batch;
struct flametree;
struct profile;
struct selector;

/*
 * uri: "sqlite:DIR", "sqlite://DIR" or a plain directory path (SQLite in
 * DIR/flamewatch.db; DIR is created when missing);
 * "clickhouse://[USER[:PASSWORD]@]HOST[:PORT][/DB][?OPTIONS]" (ClickHouse over
 * HTTP, docs/clickhouse.md); other schemes are -EPROTONOSUPPORT. uri is borrowed.
 * Returns an owned store, or NULL with errno set and a one-line message in
 * err (when err_len > 0).
 */
struct store *store__open(const char *uri, char *err, size_t err_len);
/* Accepts NULL. */
void store__close(struct store *s);

/*
 * Writes every sample of b (borrowed) under node (borrowed, non-empty):
 * the label node=NODE is added to each series, replacing one the batch may
 * carry. Atomic: all samples or none (an out-of-range stack or series id is
 * -EINVAL with nothing written). Durable on return: an acknowledged batch
 * survives kill -9 and power loss.
 */
int store__write(struct store *s, const char *node, const struct batch *b);

/*
 * Merged profile of every sample of type with from <= ts < to whose series
 * matches sel (NULL: all), added to out (borrowed; normally fresh from
 * profile__new) by (stack, comm label) as
 * profile__add_sample(out, stack, 0, 0, 0, comm, sum of values). Frames
 * carry kinds, addresses, names, files, lines and mappings. Long windows are
 * answered from rollups; totals equal those of the raw samples exactly.
 *
 * SAMPLE_CPU: each batch's period_ns is kept with its samples. When every
 * sample found has one period, values are sample counts and out->period_ns
 * is set to it; when the window mixes periods (agents with different -F),
 * values are nanoseconds of CPU time (count x period) and out->period_ns is
 * set to 1. Samples of unknown period (stored before periods were kept)
 * count with the out->period_ns the caller passed in.
 */
int store__profile(struct store *s, int64_t from, int64_t to, const struct selector *sel,
		   uint32_t type, struct profile *out);

/*
 * The flame graph of what store__profile() gives for the same arguments,
 * cut to max_nodes as common/flametree.h cuts: the same nodes, totals,
 * selves and trimmed accounting, and out->period_ns set the same way. t
 * (overwritten; release it after) refers to out's ids: comm string ids
 * and frame ids. out may hold only the frames that kept nodes name, not
 * the samples: a backend may cut before it names what the cut drops.
 */
int store__flamegraph(struct store *s, int64_t from, int64_t to, const struct selector *sel,
		      uint32_t type, size_t max_nodes, struct profile *out, struct flametree *t);

/*
 * Time-ordered samples for a flame chart: cb runs for each sample of type
 * in [from, to) matching sel, in ts order (ties in a fixed order), with its
 * stack id in dict (borrowed; the store adds the stacks it references) and
 * its series' comm (borrowed for the call) and pid labels (0 if absent).
 * When the window holds more than max_samples samples (0: no limit), only
 * every k-th is passed on, k the smallest that keeps the count within
 * max_samples; *stride (may be NULL) receives k. Never refuses a window:
 * memory is bounded by the samples of one SQLite block span (5 minutes).
 */
int store__samples(struct store *s, int64_t from, int64_t to, const struct selector *sel,
		   uint32_t type, uint32_t max_samples, struct profile *dict,
		   int (*cb)(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
			     int64_t value, const char *comm, uint32_t pid),
		   void *ctx, uint32_t *stride);

/*
 * Sums of values in buckets [from + i * step, from + (i + 1) * step) clipped
 * to [from, to), grouped by the value of label `by` (NULL: one group "";
 * series without the label fall in group ""). cb runs once per (group,
 * bucket) with a non-zero sum, ordered by group, then bucket; group is
 * borrowed for the call. -E2BIG for more than STORE_MAX_BUCKETS buckets.
 */
#define STORE_MAX_BUCKETS (1 << 20)
int store__series(struct store *s, int64_t from, int64_t to, int64_t step,
		  const struct selector *sel, uint32_t type, const char *by,
		  int (*cb)(void *ctx, const char *group, int64_t bucket_start, int64_t sum),
		  void *ctx);

/*
 * Label names, or the values of label name, of the series with samples in
 * [from, to): each once, in byte order, borrowed for the call.
 */
int store__label_names(struct store *s, int64_t from, int64_t to,
		       int (*cb)(void *ctx, const char *name), void *ctx);
int store__label_values(struct store *s, const char *name, int64_t from, int64_t to,
			int (*cb)(void *ctx, const char *value), void *ctx);

/*
 * Drops in bulk the samples older than cutoff_ns, which a backend may round
 * down to its unit of deletion (SQLite: 5-minute blocks), and their rollups;
 * and metric points older than cutoff_ns (exactly).
 * Queries then agree with what is kept, exactly. Dictionaries (stacks,
 * frames, strings) and series are kept.
 */
int store__retain(struct store *s, int64_t cutoff_ns);

/*
 * CPU busy intervals (CPU strips). One as a query returns it: [start_ns,
 * end_ns) on cpu of node, by thread tid of process pid (0 if the series has
 * no pid label); comm is the thread's. Strings borrowed for the call.
 */
struct store_cpu_interval {
	int64_t start_ns, end_ns;
	uint32_t cpu, pid, tid;
	const char *comm;
	const char *node;
};

/*
 * Writes the CPU intervals of b (borrowed) under node; store__write() does
 * this in the same transaction as the samples, so this is for batches that
 * go nowhere else. Atomic, durable; -EINVAL (nothing written) for a series
 * or comm id out of range or end before start.
 */
int store__write_cpu_intervals(struct store *s, const char *node, const struct batch *b);

/*
 * cb runs for every CPU interval overlapping [from, to) whose series matches
 * sel (NULL: all), clipped to [from, to), ordered by node, cpu, start.
 * Intervals the store split (it keeps pieces of at most
 * STORE_CPU_INTERVAL_CHUNK_NS) come back whole. cpu < 0: every CPU.
 */
#define STORE_CPU_INTERVAL_CHUNK_NS (10LL * 1000000000LL)
int store__cpu_intervals(struct store *s, int64_t from, int64_t to, const struct selector *sel,
			 int64_t cpu,
			 int (*cb)(void *ctx, const struct store_cpu_interval *iv), void *ctx);

struct store_stats {
	uint64_t samples_written;	/* since the store was created */
	uint64_t batches_written;
	uint64_t bytes_on_disk;		/* database files, the write-ahead log included */
	uint64_t series, stacks, frames;
};

int store__stats(struct store *s, struct store_stats *out);

/* A stored GPU activity interval (a kernel, copy or set), as a query returns it. */
#define STORE_NO_STACK UINT32_MAX
struct store_gpu_interval {
	int64_t start_ns, end_ns;
	uint32_t device, stream;
	uint32_t kind;			/* enum gpu_activity_kind */
	uint32_t pid;			/* the series' pid label, 0 if absent */
	const char *name;		/* borrowed for the call */
	const char *comm;		/* borrowed for the call; "" if absent */
	uint32_t stack;			/* launching stack id in dict, or STORE_NO_STACK */
	uint32_t weight;
	uint64_t correlation, bytes;
};

/*
 * GPU intervals starting in [from, to) whose series matches sel (NULL: all),
 * in start order. With dict (may be NULL) each launching stack is added to
 * it and iv->stack is its id there. -E2BIG when more than limit (0: no
 * limit) match: the caller narrows the window.
 */
int store__gpu_intervals(struct store *s, int64_t from, int64_t to, const struct selector *sel,
			 struct profile *dict, uint32_t limit,
			 int (*cb)(void *ctx, const struct store_gpu_interval *iv), void *ctx);

/* ---- metric points (struct batch_metric: NVML gauges and counters) ------ */

/*
 * Writes every metric point of b (borrowed) under node, which is added to
 * each series as for samples. Atomic and durable like store__write();
 * idempotent: a point already stored (same series, name and time) is
 * replaced, so a batch written twice keeps each point once. Separate from
 * store__write() so that each record kind stays self-contained; callers
 * write both and acknowledge only when both succeed.
 */
int store__write_metrics(struct store *s, const char *node, const struct batch *b);

/*
 * Metric series with points in [from, to) matching sel (NULL: all; the
 * label __name__ matches the metric name). For each (series, name), in
 * series then name order, v->series() runs once (labels borrowed for the
 * call, sorted by name, node included), then v->point() once per bucket
 * [from + i * step, from + (i + 1) * step) holding points, with the mean
 * and maximum of its values and their count, in time order. step 0: every
 * point on its own (ts its own time, avg = max = its value, count 1).
 */
struct store_metric_visitor {
	int (*series)(void *ctx, const char *name, const char *const *lnames,
		      const char *const *lvalues, size_t n);
	int (*point)(void *ctx, int64_t ts, double avg, double max, uint32_t count);
	void *ctx;
};
int store__metrics(struct store *s, int64_t from, int64_t to, int64_t step,
		   const struct selector *sel, const struct store_metric_visitor *v);

/*
 * The newest point of every (series, name) whose newest point is at or
 * after since: cb runs once for each, ordered by name, labels borrowed.
 */
int store__metrics_latest(struct store *s, int64_t since,
			  int (*cb)(void *ctx, const char *name, const char *const *lnames,
				    const char *const *lvalues, size_t n, int64_t ts, double value),
			  void *ctx);

/*
 * For backends only: folds the points of one (series, name), given in time
 * order, into v's buckets as store__metrics() defines them. Zero-initialise
 * with v, from and step; add() each point; flush() when the run ends (a new
 * series or name, or the end). Both return 0 or what v->point() returned.
 */
struct store_metric_fold {
	const struct store_metric_visitor *v;
	int64_t from, step;
	int64_t bucket;
	double sum, max;
	uint32_t count;
};
int store_metric_fold__add(struct store_metric_fold *f, int64_t ts, double val);
int store_metric_fold__flush(struct store_metric_fold *f);

/*
 * For backends: both roll samples up by the minute and by the hour, and take
 * timestamps in [0, STORE_TS_LIMIT), Unix nanoseconds with room for bucket
 * arithmetic never to overflow.
 */
#define STORE_NS_MIN	(60LL * 1000000000LL)
#define STORE_NS_HOUR	(60 * STORE_NS_MIN)
#define STORE_TS_LIMIT	(INT64_MAX / 2)

/*
 * For backends: samples (of every type) are kept to the nearest
 * microsecond, rounded at ingest before anything is derived from their
 * timestamps, so that every backend answers alike. Below a microsecond a
 * sample's timestamp is jitter, and whole microseconds store in fewer
 * bytes. Intervals and metric points keep their nanoseconds. ts is in
 * [0, STORE_TS_LIMIT), and so is the result.
 */
#define STORE_SAMPLE_TS_NS	1000
static inline int64_t store__sample_ts(int64_t ts)
{
	int64_t r = (ts + STORE_SAMPLE_TS_NS / 2) / STORE_SAMPLE_TS_NS * STORE_SAMPLE_TS_NS;

	return r < STORE_TS_LIMIT ? r : r - STORE_SAMPLE_TS_NS;
}

/*
 * For backends: a series as store__write() keeps it is b's labels of
 * series with node replacing any node label, sorted by name, and b's
 * period_ns (samples of one process at two -F rates are two series, so
 * that profiles can weigh them); each backend encodes that its own way.
 * Fills *labels (owned: free() it) with the *n labels, their text
 * borrowed from b and node. Returns 0, -EINVAL for a label string id out
 * of range, or -ENOMEM.
 */
struct store_label {
	const char *name, *value;
};
int store__series_labels(const struct batch *b, uint32_t series, const char *node,
			 struct store_label **labels, size_t *n);

/*
 * For backends only: what store.c dispatches to. Each backend exports one
 * of these; open returns the backend's own state, which the others receive.
 */
struct store_backend {
	const char *name;
	void *(*open)(const char *location, char *err, size_t err_len);
	void (*close)(void *impl);
	int (*write)(void *impl, const char *node, const struct batch *b);
	int (*profile)(void *impl, int64_t from, int64_t to, const struct selector *sel,
		       uint32_t type, struct profile *out);
	/* May be NULL: store__flamegraph() then cuts what profile() gives. */
	int (*flamegraph)(void *impl, int64_t from, int64_t to, const struct selector *sel,
			  uint32_t type, size_t max_nodes, struct profile *out,
			  struct flametree *t);
	int (*samples)(void *impl, int64_t from, int64_t to, const struct selector *sel,
		       uint32_t type, uint32_t max_samples, struct profile *dict,
		       int (*cb)(void *ctx, int64_t ts, uint32_t stack, uint32_t tid,
				 uint32_t cpu, int64_t value, const char *comm, uint32_t pid),
		       void *ctx, uint32_t *stride);
	int (*series)(void *impl, int64_t from, int64_t to, int64_t step,
		      const struct selector *sel, uint32_t type, const char *by,
		      int (*cb)(void *ctx, const char *group, int64_t bucket_start, int64_t sum),
		      void *ctx);
	int (*label_names)(void *impl, int64_t from, int64_t to,
			   int (*cb)(void *ctx, const char *name), void *ctx);
	int (*label_values)(void *impl, const char *name, int64_t from, int64_t to,
			    int (*cb)(void *ctx, const char *value), void *ctx);
	int (*retain)(void *impl, int64_t cutoff_ns);
	int (*stats)(void *impl, struct store_stats *out);
	int (*gpu_intervals)(void *impl, int64_t from, int64_t to, const struct selector *sel,
			     struct profile *dict, uint32_t limit,
			     int (*cb)(void *ctx, const struct store_gpu_interval *iv), void *ctx);
	/* metric points */
	int (*write_metrics)(void *impl, const char *node, const struct batch *b);
	int (*metrics)(void *impl, int64_t from, int64_t to, int64_t step,
		       const struct selector *sel, const struct store_metric_visitor *v);
	int (*metrics_latest)(void *impl, int64_t since,
			      int (*cb)(void *ctx, const char *name, const char *const *lnames,
					const char *const *lvalues, size_t n, int64_t ts,
					double value),
			      void *ctx);
	int (*retain_metrics)(void *impl, int64_t cutoff_ns);
	int (*write_cpu_intervals)(void *impl, const char *node, const struct batch *b);
	int (*cpu_intervals)(void *impl, int64_t from, int64_t to, const struct selector *sel,
			     int64_t cpu,
			     int (*cb)(void *ctx, const struct store_cpu_interval *iv), void *ctx);
};

#endif
