/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_STORE_CLICKHOUSE_IMPL_H
#define FW_STORE_CLICKHOUSE_IMPL_H

/*
 * Private to the ClickHouse backend (src/store/clickhouse/): clickhouse.c
 * (talking to ClickHouse, the series cache, schema, opening, retention),
 * write.c (writing), read.c (what every query uses) and the queries:
 * query.c, intervals.c, metrics.c. See docs/clickhouse.md for the schema.
 */
#include <stdbool.h>
#include <stdint.h>

#include "common/strbuf.h"
#include "common/u64map.h"
#include "store/chhttp.h"
#include "store/rowbinary.h"
#include "store/store.h"

#define CH_NS_DAY	(24 * STORE_NS_HOUR)

struct intern;

/*
 * What flame graphs need of stored stacks and frames, kept across queries
 * (flame.c): each stack's frames as indexes of frames[], each frame's
 * merge key (function, binary path, kind) and what names it. Ids are
 * hashes of content, so what was read once stays right.
 */
struct ch_frame {
	uint64_t addr;
	uint32_t path, build_id, function, file, line;	/* strings: ids in strs */
	uint32_t key;		/* merge key + 1; 0: not read yet */
	uint8_t kind, has_mapping;
};

struct ch_shapes {
	struct u64map sidx;	/* stack hash -> index in soff/slen */
	uint64_t *soff;		/* a stack's frames: arena[soff[i]], slen[i] of them */
	uint32_t *slen, nstack, cap_stack;
	uint32_t *arena;
	size_t narena, cap_arena;
	struct u64map fidx;	/* frame hash -> index in frames/fhash/fkey */
	struct ch_frame *frames;
	uint64_t *fhash;
	uint32_t *fkey;		/* merge key per frame, as flametree__build() takes them */
	uint32_t nframes, cap_frames;
	struct intern *strs, *keys;
};

/* A series as queries see it: its labels, node included, sorted by name. */
struct ch_series {
	uint64_t id;
	uint64_t period_ns;	/* of its CPU samples; 0: unknown */
	uint32_t pid;		/* its pid label, 0 if absent */
	size_t nlabels;
	const char **names, **values;
	const char *comm;	/* its comm label, "" if absent */
};

struct ch_store {
	struct chhttp *http;
	char db[64];
	char err[512];		/* the last ClickHouse error */
	uint64_t batches_written;	/* by this process */

	/*
	 * Ids this process has inserted into the dictionary tables. Only
	 * a saving: a server that forgets them inserts the rows again and
	 * ReplacingMergeTree folds the copies. Cleared when large.
	 */
	struct intern *seen_frames, *seen_stacks, *seen_series;

	/* Session dictionaries' hashes, kept across their batches (write.c). */
	struct ch_dhash **dh;
	uint32_t ndh;
	uint64_t dh_clock, dh_bytes;

	/* Series read back from ClickHouse, by id (8-byte keys) -> index. */
	struct intern *series_idx;
	struct ch_series **series;
	uint32_t nseries, cap_series;

	struct ch_shapes shapes;	/* flame.c */
};

/* Frees the kept session hashes (write.c). */
void ch__dhash_free_all(struct ch_store *st);

/* DDL and other statements without a result. */
int ch__exec(struct ch_store *st, const char *sql);
/* A SELECT (sql ends in FORMAT RowBinary) into resp (appended). */
int ch__select(struct ch_store *st, const char *sql, struct strbuf *resp);
/* One integer from a SELECT ... FORMAT RowBinary of one Int64 column; dflt when no row. */
int ch__select_i64(struct ch_store *st, const char *sql, int64_t dflt, int64_t *out);
/* The retention watermark of samples (and intervals) or of metric points: kept rows have ts >= it. */
int ch__watermark(struct ch_store *st, const char *what, int64_t *out);
/*
 * From when samples_1h and sample_spans hold every sample (hour-aligned;
 * INT64_MAX when not known yet): earlier times are read as before.
 */
int ch__rollups_from(struct ch_store *st, int64_t *out);
/*
 * The series with this id (borrowed from the store's cache, valid until
 * the store is closed), reading the series table again once when it is
 * unknown. -EIO when ClickHouse has no such series.
 */
int ch__series(struct ch_store *st, uint64_t id, const struct ch_series **out);
/* Reads every series ClickHouse holds into the cache. */
int ch__series_load(struct ch_store *st);

/* INSERT INTO table FORMAT RowBinary of rows; nothing to do when there are none. */
int ch__insert(struct ch_store *st, const char *table, const struct strbuf *rows);

static inline struct rbr ch__reader(struct strbuf *b)
{
	return (struct rbr){ (uint8_t *)b->buf, (uint8_t *)b->buf + b->len, false };
}

/* Reading (read.c). */
bool ch__clamp(int64_t *from, int64_t *to);
const char *ch__label_get(void *ctx, const char *name);
bool ch__matches(const struct selector *sel, const struct ch_series *s);
int ch__series_filter(struct ch_store *st, const struct selector *sel, struct strbuf *sql,
		      bool *none);
bool ch__plan(struct strbuf *roll, struct strbuf *raw, int64_t from, int64_t rfrom,
	      int64_t to, int64_t step);

/*
 * " WHERE id IN (...)" for the n ids wanted from table, or nothing when
 * they are an eighth of its rows or more (read.c).
 */
int ch__where_ids(struct ch_store *st, const char *table, const uint64_t *ids, uint32_t n,
		  struct strbuf *sql);

/* Frees the flame graph cache (flame.c). */
void ch__shapes_free(struct ch_shapes *sh);

/* Stack hash -> id in out, for one query. */
struct exporter {
	struct ch_store *st;
	struct profile *out;
	struct intern *ids;		/* stack hash (8 bytes) -> index in out_ids */
	uint32_t *out_ids;
	uint32_t cap;
	uint64_t *todo;			/* hashes to look up */
	uint32_t ntodo, cap_todo;
};

void ch__ex_free(struct exporter *ex);
int ch__ex_want(struct exporter *ex, uint64_t h);
uint32_t ch__ex_id(const struct exporter *ex, uint64_t h);
int ch__ex_run(struct exporter *ex);

/* The writes (write.c), as struct store_backend takes them. */
int ch__write(void *impl, const char *node, const struct batch *b);
int ch__write_cpu_intervals(void *impl, const char *node, const struct batch *b);
int ch__write_metrics(void *impl, const char *node, const struct batch *b);

/* The queries (query.c, intervals.c, metrics.c), as struct store_backend takes them. */
int ch__profile(void *impl, int64_t from, int64_t to, const struct selector *sel, uint32_t type,
		struct profile *out);
struct flametree;
int ch__flamegraph(void *impl, int64_t from, int64_t to, const struct selector *sel,
		   uint32_t type, size_t max_nodes, struct profile *out, struct flametree *t);
int ch__samples(void *impl, int64_t from, int64_t to, const struct selector *sel, uint32_t type,
		uint32_t max_samples, struct profile *dict,
		int (*cb)(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
			  int64_t value, const char *comm, uint32_t pid),
		void *ctx, uint32_t *stride);
int ch__query_series(void *impl, int64_t from, int64_t to, int64_t step,
		     const struct selector *sel, uint32_t type, const char *by,
		     int (*cb)(void *ctx, const char *group, int64_t bucket_start, int64_t sum),
		     void *ctx);
int ch__label_names(void *impl, int64_t from, int64_t to,
		    int (*cb)(void *ctx, const char *name), void *ctx);
int ch__label_values(void *impl, const char *name, int64_t from, int64_t to,
		     int (*cb)(void *ctx, const char *value), void *ctx);
int ch__gpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
		      struct profile *dict, uint32_t limit,
		      int (*cb)(void *ctx, const struct store_gpu_interval *iv), void *ctx);
int ch__metrics(void *impl, int64_t from, int64_t to, int64_t step, const struct selector *sel,
		const struct store_metric_visitor *v);
int ch__metrics_latest(void *impl, int64_t since,
		       int (*cb)(void *ctx, const char *name, const char *const *lnames,
				 const char *const *lvalues, size_t n, int64_t ts, double value),
		       void *ctx);
int ch__cpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
		      int64_t cpu, int (*cb)(void *ctx, const struct store_cpu_interval *iv),
		      void *ctx);

#endif
