/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_STORE_SQLITE_INT_H
#define FW_STORE_SQLITE_INT_H

/*
 * Private to the SQLite backend (src/store/sqlite/): what its files share.
 * sqlite.c describes the layout, creates, opens and closes the database and
 * holds store_sqlite_backend; dict.c and write.c write batches; read.c has
 * what every query uses, query.c and samples.c answer the sample queries;
 * intervals.c and metrics.c keep CPU and GPU intervals and metric points;
 * retain.c drops old data. Helpers used by several files carry the sqlite__
 * prefix; the others stay static in their file.
 */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sqlite3.h>

#include "common/dict_xlate.h"
#include "common/u64map.h"
#include "store/blockcodec.h"
#include "store/sqlite.h"

struct flametree;

struct intern;

#define SPAN		STORE_SQLITE_BLOCK_SPAN_NS

enum { RU_MIN, RU_HOUR, RU_NTABLES };

enum stmt_id {
	ST_BEGIN, ST_BEGIN_READ, ST_COMMIT, ST_ROLLBACK,
	ST_STR_GET, ST_STR_INS, ST_STR_TEXT,
	ST_MAP_GET, ST_MAP_INS, ST_MAP_ROW,
	ST_FRAME_GET, ST_FRAME_INS, ST_FRAME_ROW,
	ST_STACK_GET, ST_STACK_INS, ST_STACK_ROW,
	ST_SERIES_GET, ST_SERIES_INS, ST_LABEL_INS, ST_SERIES_LABELS,
	ST_BLOCK_INS, ST_BLOCKS_RANGE, ST_BLOCKS_WINDOW, ST_BLOCK_DEL, ST_NEXT_T_MAX,
	ST_BLOCKS_SWEEP, ST_MAX_T_MAX,
	ST_RU_GET_M, ST_RU_GET_H, ST_RU_PUT_M, ST_RU_PUT_H, ST_RU_RANGE_M, ST_RU_RANGE_H,
	ST_META_ADD, ST_META_GET,
	ST_RETAIN_BLOCKS, ST_RETAIN_M, ST_RETAIN_H, ST_RU_DEL_H,
	ST_MAX_SERIES, ST_MAX_STACK, ST_MAX_FRAME, ST_FRAME_SCAN, ST_STACK_SCAN,
	ST_SERIES_PERIOD,
	ST_GPU_INS, ST_GPU_RANGE, ST_GPU_RETAIN,
	ST_RU_ROLL_M, ST_META_SET,
	ST_COUNT,
};

/* The SQL of each statement, prepared when the store is opened. */
extern const char *const sqlite__sql[ST_COUNT];

/* ---- small containers (containers.c) ------------------------------------- */

/* Byte-string keys to store ids; dropped whole when it outgrows CACHE_BYTES. */
struct cache {
	struct intern *keys;
	uint32_t *ids;
	uint32_t cap;
};

struct range {
	int64_t a, b;
};

struct ranges {
	struct range *r;
	uint32_t n, cap;
};

void sqlite__cache_free(struct cache *c);
int64_t sqlite__cache_find(const struct cache *c, const void *key, size_t len);
void sqlite__cache_put(struct cache *c, const void *key, size_t len, uint32_t id);
int sqlite__ranges_add(struct ranges *rs, int64_t a, int64_t b);

static inline int64_t sqlite__floor_to(int64_t t, int64_t unit)
{
	return t - t % unit;	/* t >= 0 */
}

static inline int64_t sqlite__ceil_to(int64_t t, int64_t unit)
{
	int64_t f = sqlite__floor_to(t, unit);

	return f == t ? t : f + unit;
}

static inline void sqlite__put_varint(uint8_t *buf, size_t *len, uint64_t v)
{
	while (v >= 0x80) {
		buf[(*len)++] = (uint8_t)v | 0x80;
		v >>= 7;
	}
	buf[(*len)++] = (uint8_t)v;
}

int64_t sqlite__stack_decode(const uint8_t *p, size_t len, uint32_t *frames, size_t cap);

/* ---- the store (sqlite.c) ------------------------------------------------ */

/*
 * How the ids of one shared dictionary (struct batch's dict_id: an agent's
 * wire session) translate to store ids, kept across writes: a batch then
 * costs lookups only for the entries it is the first to use.
 */
struct dxlate {
	uint64_t dict_id;
	char *node;			/* series ids translate with the node label */
	uint64_t period_ns;		/* and the batch's period */
	uint64_t used;			/* write counter at last use, for eviction */
	struct dict_ids ids[DICT_NKINDS];
};
#define DXLATE_MAX 4096
#define DXLATE_BYTES (256u << 20)

struct series_info {
	uint32_t nlabels;
	const char **names, **values;	/* sorted by name */
	const char *comm;		/* "" when absent */
	uint32_t pid;
	uint64_t period_ns;		/* 0: unknown */
};

/*
 * Per store id, what flame graphs merge by (shapes.c): each stack's frame
 * ids, and each frame's (function, mapping path, kind) as a key id.
 */
struct shapes {
	uint64_t *stack;		/* per stack id: (arena offset + 1) << 24 | frames; 0: not loaded */
	uint32_t nstack;
	uint32_t *frames;		/* the arena of stacks' frame ids */
	size_t nframes, cap_frames;
	uint32_t *fkey;			/* per frame id: key id + 1; 0: not loaded */
	uint32_t nfkey;
	struct intern *keys;		/* struct { int64_t function, path, kind } */
	struct u64map mpath;		/* mapping id -> path string id */
};

/* Work due on (series, type, window): merging its small blocks. */
struct due {
	int64_t series, window;
	uint32_t type;
};

struct sqlite_store {
	sqlite3 *db;
	char *db_path, *wal_path;
	sqlite3_stmt *st[ST_COUNT];
	struct blockcodec *codec;

	struct cache strings, mappings, frames, stacks, series;

	struct dxlate **dx;
	uint32_t ndx;
	uint64_t dx_bytes, dx_clock;

	struct shapes shapes;		/* for flame graphs, kept across queries */

	/* series id -> struct series_info *, for queries */
	struct u64map series_info;
	struct series_info **infos;
	uint32_t ninfos, cap_infos;

	/* (series << 32 | type) -> the newest window written, for compaction */
	struct u64map open_window;
	int64_t sweep_from;
	/*
	 * rollup_1h holds every hour before this one (meta 'hours_through');
	 * later hours are read from rollup_1m until sqlite__roll_hours()
	 * builds them.
	 */
	int64_t hours_through;

	/* scratch */
	uint32_t *fbuf;
	size_t cap_fbuf;
	struct rollup_entry *merge;
	size_t cap_merge;

	/* metric points: statements prepared on first use (see _mx_prepare) */
	sqlite3_stmt *mx[6];
	sqlite3_stmt *civ_st[3];	/* CPU intervals; prepared on first use */
};

int sqlite__fail(struct sqlite_store *st, int rc, const char *what);
int sqlite__exec(struct sqlite_store *st, enum stmt_id id);
int sqlite__exec_int(struct sqlite_store *st, enum stmt_id id, int64_t dflt, int64_t *out);
void sqlite__dx_remove(struct sqlite_store *st, uint32_t i);
void sqlite__drop_caches(struct sqlite_store *st);
void sqlite__drop_series_info(struct sqlite_store *st);

/* ---- writing: dictionaries (dict.c) -------------------------------------- */

/*
 * Batch-local ids to store ids for one write, each translated on first
 * use by dict_xlate__id(&x->dx, DICT_..., id), inserting what the store
 * lacks: in tables of the write's own, or in the kept ones of the batch's
 * shared dictionary (struct dxlate).
 */
struct xlate {
	struct sqlite_store *st;
	const struct batch *b;
	const struct profile *d;
	const char *node;		/* series translate with the node label */
	struct dict_xlate dx;
	struct dict_ids own[DICT_NKINDS];
};

/* Sets x up for b written under node; it has no tables yet (dx.ids: own, empty). */
void sqlite__x_init(struct sqlite_store *st, struct xlate *x, const struct batch *b,
		    const char *node);
/*
 * Gives x tables of its own for the kinds in mask (1 << DICT_...); the
 * others are not translated. 0 or -ENOMEM.
 */
int sqlite__x_own(struct xlate *x, unsigned kinds);
/* Frees x's own tables. */
void sqlite__x_release(struct xlate *x);
int64_t sqlite__store_string(struct sqlite_store *st, const char *text);
int sqlite__fbuf_reserve(struct sqlite_store *st, size_t n);

/* ---- writing: samples and rollups (write.c) ------------------------------ */

struct rsample {
	int64_t bucket;
	uint32_t series, type, stack;
	int64_t sum;
};

int sqlite__due_add(struct due **due, uint32_t *n, uint32_t *cap, int64_t series,
		    uint32_t type, int64_t window);
int sqlite__by_rollup(const void *pa, const void *pb);
int sqlite__rollup_merge(struct sqlite_store *st, int table, int64_t bucket, uint32_t series,
			 const struct rollup_entry *add, uint32_t nadd);
int sqlite__meta_add(struct sqlite_store *st, const char *key, int64_t v);
int sqlite__meta_get(struct sqlite_store *st, const char *key, int64_t dflt, int64_t *v);
void sqlite__compact(struct sqlite_store *st, struct due *due, uint32_t n);
/*
 * Builds rollup_1h rows for the hours that closed before newest (less a
 * grace for late batches, and never past the clock) from rollup_1m, in a
 * transaction of its own, and advances hours_through. A failure is logged
 * and tried again at the next write.
 */
void sqlite__roll_hours(struct sqlite_store *st, int64_t newest);

/* ---- reading: series, selection, dictionaries, the time plan (read.c) ---- */

/* What a query knows about one series: whether it matches, and a tag. */
struct qseries {
	const struct series_info *info;
	uint32_t tag;
	bool match;
};

struct query {
	struct sqlite_store *st;
	const struct selector *sel;
	int64_t type;
	struct u64map smap;		/* series id -> index in qs */
	struct qseries *qs;
	uint32_t nqs, cap_qs;
	/* Sets the tag of a newly matched series. */
	int (*tag)(struct query *q, struct qseries *s);

	/* profile */
	struct profile *out;
	struct u64map agg;		/* stack << 32 | tag -> sum */
	uint64_t **dense;		/* or, while they fit: per tag, sums by stack id */
	uint32_t ndense, dense_stacks;
	bool use_dense;
	struct intern *ptags;		/* tag: struct ptag */
	uint64_t fallback_period;	/* for series of unknown period */
	/* series */
	int64_t from, step;
	struct intern *groups;
	const char *by;
};

/*
 * Copies store dictionary entries into an output profile, each once per
 * query.
 */
struct exporter {
	struct sqlite_store *st;
	struct profile *out;
	struct u64map strings, mappings, frames, stacks;
};

/*
 * How [from, to), cut into buckets of step, is read: whole hours from
 * rollup_1h, whole minutes from rollup_1m, the rest from raw blocks. Each
 * range lies within one bucket, so a rollup row or a sample finds its
 * bucket from its own start time.
 */
struct plan {
	struct ranges hours, minutes, raw;
	int64_t hours_through;		/* hours from here on are read as minutes */
};

/* Called for every rollup entry and raw sample of the plan, matched series only. */
struct visitor {
	/* Gets per-type totals with stack 0 when totals is set, else every stack. */
	int (*rollup)(struct query *q, struct qseries *s, int64_t bucket,
		      const struct rollup_entry *e, uint32_t n);
	bool totals;
	int (*sample)(struct query *q, struct qseries *s, const struct block_sample *bs);
};

static inline int64_t sqlite__sat_add(int64_t a, int64_t b)
{
	int64_t r;

	return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

const char *sqlite__info_get(void *ctx, const char *name);
int sqlite__series_info(struct sqlite_store *st, int64_t series, const struct series_info **out);
void sqlite__query_free(struct query *q);
struct qseries *sqlite__qseries(struct query *q, int64_t series, int *err);
void sqlite__exporter_free(struct exporter *ex);
int64_t sqlite__ex_stack(struct exporter *ex, uint32_t id);
int64_t sqlite__ex_frame(struct exporter *ex, int64_t id);

/*
 * What a profile query's per-tag arrays may take (query.c); past it they
 * go into a hash table. A variable so that tests can take both ways.
 */
extern size_t sqlite__profile_dense_bytes;

/* ---- reading: stack shapes for flame graphs (shapes.c) ------------------- */

/*
 * Loads the frame ids of the n stacks ids[] into st->shapes where they are
 * not there; at[i] then locates ids[i]'s for sqlite__shape_frames() until
 * the cache is dropped. 0, -EIO (a missing or corrupt row) or -ENOMEM.
 */
int sqlite__shape_stacks(struct sqlite_store *st, const uint32_t *ids, uint32_t n, uint64_t *at);
/*
 * Loads the merge keys (st->shapes.fkey) of every frame of the n stacks
 * at[] locates. 0, -EIO or -ENOMEM.
 */
int sqlite__shape_keys(struct sqlite_store *st, const uint64_t *at, uint32_t n);
/* Borrows the frame ids of a loaded stack; valid until the next load. */
const uint32_t *sqlite__shape_frames(const struct shapes *sh, uint64_t at, uint32_t *n);
/* Drops the cache when it has outgrown its budget; between queries only. */
void sqlite__shapes_trim(struct sqlite_store *st);
void sqlite__shapes_free(struct shapes *sh);
void sqlite__plan_free(struct plan *p);
/* Sets p->hours_through from the store, inside the query's read transaction. */
int sqlite__plan_init(struct sqlite_store *st, struct plan *p);
int sqlite__plan_bucket(struct plan *p, int64_t a, int64_t b);
int sqlite__decode_row(struct sqlite_store *st, sqlite3_stmt *s, int col, int64_t id,
		       const struct block_sample **bs, uint32_t *n);
int sqlite__scan_plan(struct query *q, const struct plan *p, const struct visitor *v);
int sqlite__begin_read(struct sqlite_store *st);
int sqlite__end_read(struct sqlite_store *st, int err);
bool sqlite__clamp(int64_t *from, int64_t *to);
void sqlite__query_begin(struct sqlite_store *st);

/* ---- CPU busy intervals, inside a write (intervals.c) -------------------- */

int sqlite__civ_check(const char *node, const struct batch *b);
int sqlite__civ_write(struct sqlite_store *st, struct xlate *x, const struct batch *b);

/* ---- the interface, as struct store_backend takes it --------------------- */

/* write.c */
int sqlite__write(void *impl, const char *node, const struct batch *b);
/* query.c */
int sqlite__profile(void *impl, int64_t from, int64_t to, const struct selector *sel,
		    uint32_t type, struct profile *out);
int sqlite__flamegraph(void *impl, int64_t from, int64_t to, const struct selector *sel,
		       uint32_t type, size_t max_nodes, struct profile *out, struct flametree *t);
int sqlite__series(void *impl, int64_t from, int64_t to, int64_t step,
		   const struct selector *sel, uint32_t type, const char *by,
		   int (*cb)(void *ctx, const char *group, int64_t bucket_start, int64_t sum),
		   void *ctx);
int sqlite__label_names(void *impl, int64_t from, int64_t to,
			int (*cb)(void *ctx, const char *name), void *ctx);
int sqlite__label_values(void *impl, const char *name, int64_t from, int64_t to,
			 int (*cb)(void *ctx, const char *value), void *ctx);
/* samples.c */
int sqlite__samples(void *impl, int64_t from, int64_t to, const struct selector *sel,
		    uint32_t type, uint32_t max_samples, struct profile *dict,
		    int (*cb)(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
			      int64_t value, const char *comm, uint32_t pid),
		    void *ctx, uint32_t *stride);
/* retain.c */
int sqlite__retain(void *impl, int64_t cutoff);
int sqlite__stats(void *impl, struct store_stats *out);
/* intervals.c */
int sqlite__gpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
			  struct profile *dict, uint32_t limit,
			  int (*cb)(void *ctx, const struct store_gpu_interval *iv),
			  void *ctx);
int sqlite__write_cpu_intervals(void *impl, const char *node, const struct batch *b);
int sqlite__cpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
			  int64_t cpu,
			  int (*cb)(void *ctx, const struct store_cpu_interval *iv), void *ctx);
/* metrics.c */
int sqlite__write_metrics(void *impl, const char *node, const struct batch *b);
int sqlite__metrics(void *impl, int64_t from, int64_t to, int64_t step,
		    const struct selector *sel, const struct store_metric_visitor *v);
int sqlite__metrics_latest(void *impl, int64_t since,
			   int (*cb)(void *ctx, const char *name, const char *const *lnames,
				     const char *const *lvalues, size_t n, int64_t ts,
				     double value),
			   void *ctx);
int sqlite__retain_metrics(void *impl, int64_t cutoff);

#endif
