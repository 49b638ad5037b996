// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend.
 *
 * Layout (see SCHEMA below):
 *   - Dictionaries, deduplicated across batches: strings, mappings, frames
 *     and stacks (a stack is a blob of varint frame ids, found by a hash of
 *     its frames). In-memory caches keyed by content translate a batch's
 *     local ids into store ids without asking SQLite for known entries.
 *   - series: one row per label set (its canonical text as key) and its
 *     labels as rows of series_labels.
 *   - sample_blocks: the samples of one (series, type) within one aligned
 *     5-minute window, encoded by blockcodec. A block never crosses a window
 *     boundary, so t_max - t_min < BLOCK_SPAN: time queries use the index on
 *     t_max alone, and a window's blocks can be merged later. Each write adds
 *     one small block per (series, type, window); once a window has closed,
 *     its small blocks are merged into one (compaction), which is what keeps
 *     a sample at about 5-6 bytes.
 *   - rollup_1m, rollup_1h: per (bucket, series) the (stack, type, sum)
 *     triples of the bucket and, apart, its per-type totals; merged into
 *     (read, add, write back) in the same transaction as the samples, so they
 *     always agree with the raw data, also after a crash. Retention rebuilds
 *     the hour it cuts through from the minutes that remain.
 *
 * A profile over [from, to) reads whole hours from rollup_1h, whole minutes
 * at the edges from rollup_1m and decodes blocks only for the partial
 * minutes at both ends.
 *
 * Timestamps must lie in [0, TS_LIMIT): Unix nanoseconds, with room for
 * bucket arithmetic never to overflow.
 */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <sqlite3.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "store/blockcodec.h"
#include "store/selector.h"
#include "store/sqlite.h"

#define NS_MIN		(60LL * 1000000000LL)
#define NS_HOUR		(60 * NS_MIN)
#define SPAN		STORE_SQLITE_BLOCK_SPAN_NS
#define TS_LIMIT	(INT64_MAX / 2)

/*
 * 1: the first; rollup tables gained their totals column without a version
 * change (such files are upgraded too). 2: series.period_ns.
 */
#define SCHEMA_VERSION	2
#define ZSTD_LEVEL	1
/* A compaction never builds a block larger than this. */
#define MAX_BLOCK	(1u << 20)
/* Bytes a content cache may hold before it is dropped and refilled. */
#define CACHE_BYTES	(32u << 20)
#define SERIES_CACHE_MAX 100000
#define OPEN_WINDOWS_MAX (1u << 20)

enum { RU_MIN, RU_HOUR, RU_NTABLES };
static const int64_t _ru_unit[RU_NTABLES] = { NS_MIN, NS_HOUR };

static const char SCHEMA[] =
	"CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;"
	"INSERT OR IGNORE INTO meta VALUES('samples', 0), ('batches', 0);"
	"CREATE TABLE IF NOT EXISTS strings(id INTEGER PRIMARY KEY, text TEXT NOT NULL UNIQUE);"
	/* mapping 0 in frames: none; string ids for path and build id */
	"CREATE TABLE IF NOT EXISTS mappings(id INTEGER PRIMARY KEY, path INTEGER NOT NULL,"
	" build_id INTEGER NOT NULL, UNIQUE(path, build_id));"
	"CREATE TABLE IF NOT EXISTS frames(id INTEGER PRIMARY KEY, kind INTEGER NOT NULL,"
	" mapping INTEGER NOT NULL, addr INTEGER NOT NULL, function INTEGER NOT NULL,"
	" file INTEGER NOT NULL, line INTEGER NOT NULL,"
	" UNIQUE(kind, mapping, addr, function, file, line));"
	"CREATE TABLE IF NOT EXISTS stacks(id INTEGER PRIMARY KEY, hash INTEGER NOT NULL UNIQUE,"
	" frames BLOB NOT NULL);"
	/*
	 * period_ns: the CPU time one SAMPLE_CPU sample of the series stands
	 * for (0: unknown, data from before version 2); part of the key, so
	 * agents with different -F never share a series.
	 */
	"CREATE TABLE IF NOT EXISTS series(id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE,"
	" period_ns INTEGER NOT NULL DEFAULT 0);"
	"CREATE TABLE IF NOT EXISTS series_labels(series INTEGER NOT NULL, name TEXT NOT NULL,"
	" value TEXT NOT NULL, PRIMARY KEY(series, name)) WITHOUT ROWID;"
	"CREATE INDEX IF NOT EXISTS series_labels_name ON series_labels(name, value);"
	"CREATE TABLE IF NOT EXISTS sample_blocks(id INTEGER PRIMARY KEY, series INTEGER NOT NULL,"
	" type INTEGER NOT NULL, t_min INTEGER NOT NULL, t_max INTEGER NOT NULL,"
	" n INTEGER NOT NULL, data BLOB NOT NULL);"
	"CREATE INDEX IF NOT EXISTS sample_blocks_t_max ON sample_blocks(t_max);"
	"CREATE INDEX IF NOT EXISTS sample_blocks_series ON sample_blocks(series, t_min);"
	"CREATE TABLE IF NOT EXISTS rollup_1m(bucket INTEGER NOT NULL, series INTEGER NOT NULL,"
	" totals BLOB NOT NULL, data BLOB NOT NULL, UNIQUE(bucket, series));"
	"CREATE TABLE IF NOT EXISTS rollup_1h(bucket INTEGER NOT NULL, series INTEGER NOT NULL,"
	" totals BLOB NOT NULL, data BLOB NOT NULL, UNIQUE(bucket, series));"
	/* GPU activity intervals (struct batch_gpu_interval); stack NULL: launch not seen. */
	"CREATE TABLE IF NOT EXISTS gpu_intervals(start INTEGER NOT NULL, end INTEGER NOT NULL,"
	" series INTEGER NOT NULL, device INTEGER NOT NULL, stream INTEGER NOT NULL,"
	" kind INTEGER NOT NULL, name INTEGER NOT NULL, stack INTEGER, correlation INTEGER NOT NULL,"
	" bytes INTEGER NOT NULL, weight INTEGER NOT NULL);"
	"CREATE INDEX IF NOT EXISTS gpu_intervals_start ON gpu_intervals(start);";

/*
 * CPU busy intervals: one row each, keyed by start first so that a time
 * window and retention are one range of the primary key. An interval is
 * kept in pieces of at most STORE_CPU_INTERVAL_CHUNK_NS, which bounds how
 * far before a window an overlapping row can start; reads join the pieces.
 * Integers only (node and comm are string ids): about 20 bytes a row.
 */
static const char SCHEMA_CPU_INTERVALS[] =
	"CREATE TABLE IF NOT EXISTS cpu_intervals(start INTEGER NOT NULL, node INTEGER NOT NULL,"
	" cpu INTEGER NOT NULL, dur INTEGER NOT NULL, series INTEGER NOT NULL,"
	" tid INTEGER NOT NULL, comm INTEGER NOT NULL, PRIMARY KEY(start, node, cpu)) WITHOUT ROWID;"
	"INSERT OR IGNORE INTO meta VALUES('cpu_intervals', 0);";

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
	ST_MAX_SERIES, ST_MAX_STACK, ST_MAX_FRAME,
	ST_SERIES_PERIOD,
	ST_GPU_INS, ST_GPU_RANGE, ST_GPU_RETAIN,
	ST_COUNT,
};

static const char *const _sql[ST_COUNT] = {
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_BEGIN_READ] = "BEGIN",
	[ST_COMMIT] = "COMMIT",
	[ST_ROLLBACK] = "ROLLBACK",
	[ST_STR_GET] = "SELECT id FROM strings WHERE text = ?1",
	[ST_STR_INS] = "INSERT INTO strings(text) VALUES(?1)",
	[ST_STR_TEXT] = "SELECT text FROM strings WHERE id = ?1",
	[ST_MAP_GET] = "SELECT id FROM mappings WHERE path = ?1 AND build_id = ?2",
	[ST_MAP_INS] = "INSERT INTO mappings(path, build_id) VALUES(?1, ?2)",
	[ST_MAP_ROW] = "SELECT path, build_id FROM mappings WHERE id = ?1",
	[ST_FRAME_GET] = "SELECT id FROM frames WHERE kind = ?1 AND mapping = ?2 AND addr = ?3"
			 " AND function = ?4 AND file = ?5 AND line = ?6",
	[ST_FRAME_INS] = "INSERT INTO frames(kind, mapping, addr, function, file, line)"
			 " VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
	[ST_FRAME_ROW] = "SELECT kind, mapping, addr, function, file, line FROM frames WHERE id = ?1",
	[ST_STACK_GET] = "SELECT id, frames FROM stacks WHERE hash = ?1",
	[ST_STACK_INS] = "INSERT INTO stacks(hash, frames) VALUES(?1, ?2)",
	[ST_STACK_ROW] = "SELECT frames FROM stacks WHERE id = ?1",
	[ST_SERIES_GET] = "SELECT id FROM series WHERE key = ?1",
	[ST_SERIES_INS] = "INSERT INTO series(key, period_ns) VALUES(?1, ?2)",
	[ST_LABEL_INS] = "INSERT INTO series_labels(series, name, value) VALUES(?1, ?2, ?3)",
	[ST_SERIES_LABELS] = "SELECT name, value FROM series_labels WHERE series = ?1 ORDER BY name",
	[ST_BLOCK_INS] = "INSERT INTO sample_blocks(series, type, t_min, t_max, n, data)"
			 " VALUES(?1, ?2, ?3, ?4, ?5, ?6)",
	/*
	 * Blocks overlapping [?1, ?2): t_max >= from and t_min < to; as a
	 * block spans less than SPAN, t_max < to + SPAN (?3) bounds the index
	 * range. ?4 < 0 takes every type. data comes last so that SQLite only
	 * reads a blob's overflow pages when we ask for it.
	 */
	[ST_BLOCKS_RANGE] = "SELECT id, series, t_min, t_max, n, data FROM sample_blocks"
			    " WHERE t_max >= ?1 AND t_max < ?3 AND t_min < ?2"
			    " AND (?4 < 0 OR type = ?4)",
	[ST_BLOCKS_WINDOW] = "SELECT id, n, data FROM sample_blocks"
			     " WHERE series = ?1 AND t_min >= ?2 AND t_min < ?3 AND type = ?4",
	[ST_BLOCK_DEL] = "DELETE FROM sample_blocks WHERE id = ?1",
	[ST_NEXT_T_MAX] = "SELECT min(t_max) FROM sample_blocks WHERE t_max >= ?1",
	[ST_BLOCKS_SWEEP] = "SELECT series, type, t_min - t_min % ?3 AS w FROM sample_blocks"
			    " WHERE t_max >= ?1 AND t_max < ?2 GROUP BY series, type, w"
			    " HAVING count(*) > 1",
	[ST_MAX_T_MAX] = "SELECT max(t_max) FROM sample_blocks",
	[ST_RU_GET_M] = "SELECT data FROM rollup_1m WHERE bucket = ?1 AND series = ?2",
	[ST_RU_GET_H] = "SELECT data FROM rollup_1h WHERE bucket = ?1 AND series = ?2",
	[ST_RU_PUT_M] = "INSERT INTO rollup_1m(bucket, series, totals, data) VALUES(?1, ?2, ?3, ?4)"
			" ON CONFLICT(bucket, series) DO UPDATE SET totals = excluded.totals,"
			" data = excluded.data",
	[ST_RU_PUT_H] = "INSERT INTO rollup_1h(bucket, series, totals, data) VALUES(?1, ?2, ?3, ?4)"
			" ON CONFLICT(bucket, series) DO UPDATE SET totals = excluded.totals,"
			" data = excluded.data",
	[ST_RU_RANGE_M] = "SELECT bucket, series, totals, data FROM rollup_1m"
			  " WHERE bucket >= ?1 AND bucket < ?2",
	[ST_RU_RANGE_H] = "SELECT bucket, series, totals, data FROM rollup_1h"
			  " WHERE bucket >= ?1 AND bucket < ?2",
	[ST_META_ADD] = "UPDATE meta SET value = value + ?2 WHERE key = ?1",
	[ST_META_GET] = "SELECT value FROM meta WHERE key = ?1",
	[ST_RETAIN_BLOCKS] = "DELETE FROM sample_blocks WHERE t_max < ?1",
	[ST_RETAIN_M] = "DELETE FROM rollup_1m WHERE bucket < ?1",
	[ST_RETAIN_H] = "DELETE FROM rollup_1h WHERE bucket <= ?1",
	[ST_RU_DEL_H] = "DELETE FROM rollup_1h WHERE bucket = ?1",
	[ST_MAX_SERIES] = "SELECT max(id) FROM series",
	[ST_MAX_STACK] = "SELECT max(id) FROM stacks",
	[ST_MAX_FRAME] = "SELECT max(id) FROM frames",
	[ST_SERIES_PERIOD] = "SELECT period_ns FROM series WHERE id = ?1",
	[ST_GPU_INS] = "INSERT INTO gpu_intervals(start, end, series, device, stream, kind, name,"
		       " stack, correlation, bytes, weight)"
		       " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
	[ST_GPU_RANGE] = "SELECT g.start, g.end, g.series, g.device, g.stream, g.kind, s.text,"
			 " g.stack, g.correlation, g.bytes, g.weight FROM gpu_intervals g"
			 " JOIN strings s ON s.id = g.name"
			 " WHERE g.start >= ?1 AND g.start < ?2 ORDER BY g.start, g.rowid",
	[ST_GPU_RETAIN] = "DELETE FROM gpu_intervals WHERE start < ?1",
};

/* ---- small containers ----------------------------------------------------- */

/* Open addressing, u64 keys to u64 values; small and only what this file needs. */
struct u64map {
	struct u64slot { uint64_t key, val; bool used; } *slots;
	uint32_t cap, count;
};

static inline uint32_t _u64hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (uint32_t)k;
}

static void _map_free(struct u64map *m)
{
	free(m->slots);
	memset(m, 0, sizeof(*m));
}

static uint64_t *_map_get(const struct u64map *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	for (uint32_t i = _u64hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->slots[i].used)
			return NULL;
		if (m->slots[i].key == key)
			return &m->slots[i].val;
	}
}

/* Returns the value slot of key, inserting it with value 0, or NULL for ENOMEM. */
static uint64_t *_map_upsert(struct u64map *m, uint64_t key, bool *added)
{
	uint32_t i;

	if ((m->count + 1) * 2 > m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 64;
		struct u64slot *slots = calloc(cap, sizeof(*slots));

		if (!slots)
			return NULL;
		for (uint32_t j = 0; j < m->cap; j++) {
			if (!m->slots[j].used)
				continue;
			for (i = _u64hash(m->slots[j].key) & (cap - 1); slots[i].used; i = (i + 1) & (cap - 1))
				;
			slots[i] = m->slots[j];
		}
		free(m->slots);
		m->slots = slots;
		m->cap = cap;
	}
	for (i = _u64hash(key) & (m->cap - 1); m->slots[i].used; i = (i + 1) & (m->cap - 1)) {
		if (m->slots[i].key == key) {
			if (added)
				*added = false;
			return &m->slots[i].val;
		}
	}
	m->slots[i] = (struct u64slot){ .key = key, .used = true };
	m->count++;
	if (added)
		*added = true;
	return &m->slots[i].val;
}

/* Byte-string keys to store ids; dropped whole when it outgrows CACHE_BYTES. */
struct cache {
	struct intern *keys;
	uint32_t *ids;
	uint32_t cap;
};

static void _cache_free(struct cache *c)
{
	intern__free(c->keys);
	free(c->ids);
	memset(c, 0, sizeof(*c));
}

static int64_t _cache_find(const struct cache *c, const void *key, size_t len)
{
	int64_t i;

	if (!c->keys)
		return -ENOENT;
	i = intern__find(c->keys, key, len);
	return i < 0 ? i : c->ids[i];
}

static void _cache_put(struct cache *c, const void *key, size_t len, uint32_t id)
{
	int64_t i;

	/* A cache is an optimization: failing to fill it is not an error. */
	if (c->keys && intern__memory(c->keys) > CACHE_BYTES)
		_cache_free(c);
	if (!c->keys && !(c->keys = intern__new()))
		return;
	i = intern__add(c->keys, key, len, NULL);
	if (i < 0)
		return;
	if ((uint32_t)i >= c->cap) {
		uint32_t cap = c->cap ? c->cap * 2 : 1024;
		uint32_t *ids = realloc(c->ids, cap * sizeof(*ids));

		if (!ids) {
			_cache_free(c);
			return;
		}
		c->ids = ids;
		c->cap = cap;
	}
	c->ids[i] = id;
}

struct range {
	int64_t a, b;
};

struct ranges {
	struct range *r;
	uint32_t n, cap;
};

static int _ranges_add(struct ranges *rs, int64_t a, int64_t b)
{
	if (a >= b)
		return 0;
	if (rs->n && rs->r[rs->n - 1].b == a) {
		rs->r[rs->n - 1].b = b;
		return 0;
	}
	if (rs->n == rs->cap) {
		uint32_t cap = rs->cap ? rs->cap * 2 : 16;
		struct range *r = realloc(rs->r, cap * sizeof(*r));

		if (!r)
			return -ENOMEM;
		rs->r = r;
		rs->cap = cap;
	}
	rs->r[rs->n++] = (struct range){ a, b };
	return 0;
}

static inline int64_t _floor_to(int64_t t, int64_t unit)
{
	return t - t % unit;	/* t >= 0 */
}

static inline int64_t _ceil_to(int64_t t, int64_t unit)
{
	int64_t f = _floor_to(t, unit);

	return f == t ? t : f + unit;
}

static inline void _put_varint(uint8_t *buf, size_t *len, uint64_t v)
{
	while (v >= 0x80) {
		buf[(*len)++] = (uint8_t)v | 0x80;
		v >>= 7;
	}
	buf[(*len)++] = (uint8_t)v;
}

/* Decodes a stack blob into frames (cap entries). Returns the count or -EIO. */
static int64_t _stack_decode(const uint8_t *p, size_t len, uint32_t *frames, size_t cap)
{
	size_t n = 0, i = 0;

	while (i < len) {
		uint64_t v = 0;
		int shift = 0;

		for (;;) {
			if (i >= len || shift > 28)
				return -EIO;
			v |= (uint64_t)(p[i] & 0x7f) << shift;
			shift += 7;
			if (!(p[i++] & 0x80))
				break;
		}
		if (v > UINT32_MAX || n >= cap)
			return -EIO;
		frames[n++] = (uint32_t)v;
	}
	return (int64_t)n;
}

/* ---- the store ------------------------------------------------------------ */

/*
 * How the ids of one shared dictionary (struct batch's dict_id: an agent's
 * wire session) translate to store ids, kept across writes: a batch then
 * costs lookups only for the entries it is the first to use. 0: not yet
 * translated (store ids start at 1).
 */
struct dxlate {
	uint64_t dict_id;
	char *node;			/* series ids translate with the node label */
	uint64_t period_ns;		/* and the batch's period */
	uint64_t used;			/* write counter at last use, for eviction */
	uint32_t *ids[5];		/* strings, mappings, frames, stacks, series */
	uint32_t n[5], cap[5];
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

	/* series id -> struct series_info *, for queries */
	struct u64map series_info;
	struct series_info **infos;
	uint32_t ninfos, cap_infos;

	/* (series << 32 | type) -> the newest window written, for compaction */
	struct u64map open_window;
	int64_t sweep_from;

	/* scratch */
	uint32_t *fbuf;
	size_t cap_fbuf;
	void *kbuf;
	size_t cap_kbuf;
	struct rollup_entry *merge;
	size_t cap_merge;

	/* metric points: statements prepared on first use (see _mx_prepare) */
	sqlite3_stmt *mx[6];
	sqlite3_stmt *civ_st[3];	/* CPU intervals; prepared on first use */
};

static int _sq_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EPERM;
	case SQLITE_CANTOPEN:
		return -EACCES;
	case SQLITE_TOOBIG:
		return -E2BIG;
	case SQLITE_CONSTRAINT:
	case SQLITE_MISMATCH:
	case SQLITE_RANGE:
		return -EINVAL;
	default:
		return -EIO;
	}
}

static int _sq_fail(struct sqlite_store *st, int rc, const char *what)
{
	pr_warn("store: sqlite: %s: %s (%d)\n", what, sqlite3_errmsg(st->db), rc);
	return _sq_errno(rc);
}

/* Runs a statement that returns no rows. */
static int _exec(struct sqlite_store *st, enum stmt_id id)
{
	int rc = sqlite3_step(st->st[id]);

	sqlite3_reset(st->st[id]);
	if (rc != SQLITE_DONE)
		return _sq_fail(st, rc, _sql[id]);
	return 0;
}

/* Runs a statement returning one integer (NULL or no row: dflt). */
static int _exec_int(struct sqlite_store *st, enum stmt_id id, int64_t dflt, int64_t *out)
{
	sqlite3_stmt *s = st->st[id];
	int rc = sqlite3_step(s);

	*out = dflt;
	if (rc == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
		*out = sqlite3_column_int64(s, 0);
	if (rc == SQLITE_ROW)
		rc = SQLITE_DONE;
	sqlite3_reset(s);
	if (rc != SQLITE_DONE)
		return _sq_fail(st, rc, _sql[id]);
	return 0;
}

static void _dx_free(struct dxlate *d)
{
	if (!d)
		return;
	for (int k = 0; k < 5; k++)
		free(d->ids[k]);
	free(d->node);
	free(d);
}

static uint64_t _dx_bytes(const struct dxlate *d)
{
	uint64_t n = sizeof(*d);

	for (int k = 0; k < 5; k++)
		n += (uint64_t)d->cap[k] * sizeof(uint32_t);
	return n;
}

static void _dx_remove(struct sqlite_store *st, uint32_t i)
{
	st->dx_bytes -= _dx_bytes(st->dx[i]);
	_dx_free(st->dx[i]);
	st->dx[i] = st->dx[--st->ndx];
}

static void _drop_caches(struct sqlite_store *st)
{
	while (st->ndx)
		_dx_remove(st, st->ndx - 1);

	_cache_free(&st->strings);
	_cache_free(&st->mappings);
	_cache_free(&st->frames);
	_cache_free(&st->stacks);
	_cache_free(&st->series);
}

static void _drop_series_info(struct sqlite_store *st)
{
	for (uint32_t i = 0; i < st->ninfos; i++)
		free(st->infos[i]);
	st->ninfos = 0;
	_map_free(&st->series_info);
}

static void _sqlite_close(void *impl)
{
	struct sqlite_store *st = impl;

	if (!st)
		return;
	for (int i = 0; i < ST_COUNT; i++)
		sqlite3_finalize(st->st[i]);
	for (size_t i = 0; i < sizeof(st->mx) / sizeof(st->mx[0]); i++)
		sqlite3_finalize(st->mx[i]);
	for (size_t i = 0; i < sizeof(st->civ_st) / sizeof(st->civ_st[0]); i++)
		sqlite3_finalize(st->civ_st[i]);
	if (st->db && sqlite3_close(st->db) != SQLITE_OK)
		pr_warn("store: sqlite: close: %s\n", sqlite3_errmsg(st->db));
	blockcodec__free(st->codec);
	_drop_caches(st);
	free(st->dx);
	_drop_series_info(st);
	free(st->infos);
	_map_free(&st->open_window);
	free(st->fbuf);
	free(st->kbuf);
	free(st->merge);
	free(st->db_path);
	free(st->wal_path);
	free(st);
}

/* mkdir -p */
static int _mkdirs(const char *dir)
{
	char *p = strdup(dir);
	int err = 0;

	if (!p)
		return -ENOMEM;
	for (char *q = p + 1;; q++) {
		bool end = !*q;

		if (*q != '/' && !end)
			continue;
		*q = '\0';
		if (mkdir(p, 0755) && errno != EEXIST) {
			err = -errno;
			break;
		}
		if (end)
			break;
		*q = '/';
	}
	free(p);
	return err;
}

#define FW_STR_(x) #x
#define FW_STR(x) FW_STR_(x)

/* Runs one statement of SQL text (no rows), or says why not. */
static int _exec_sql(struct sqlite_store *st, const char *sql)
{
	int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : _sq_fail(st, rc, sql);
}

/* 1 when table has the column, 0 when not, or -errno. */
static int _has_column(struct sqlite_store *st, const char *table, const char *column)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(st->db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2",
				    -1, &s, NULL);

	if (rc != SQLITE_OK)
		return _sq_fail(st, rc, "pragma_table_info");
	sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, column, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : _sq_fail(st, rc, "pragma_table_info");
}

/*
 * Version 1 files written before the rollups' totals column existed get it,
 * filled from each row's entries (the series queries read only totals).
 */
static int _migrate_totals(struct sqlite_store *st, const char *table)
{
	char sql[160];
	sqlite3_stmt *get = NULL, *put = NULL;
	struct rollup_entry *tot = NULL;
	size_t cap = 0;
	int rc, err = _has_column(st, table, "totals");

	if (err)
		return err < 0 ? err : 0;
	snprintf(sql, sizeof(sql), "ALTER TABLE %s ADD COLUMN totals BLOB NOT NULL DEFAULT x''",
		 table);
	err = _exec_sql(st, sql);
	if (err)
		return err;
	snprintf(sql, sizeof(sql), "SELECT rowid, data FROM %s", table);
	rc = sqlite3_prepare_v2(st->db, sql, -1, &get, NULL);
	if (rc == SQLITE_OK) {
		snprintf(sql, sizeof(sql), "UPDATE %s SET totals = ?2 WHERE rowid = ?1", table);
		rc = sqlite3_prepare_v2(st->db, sql, -1, &put, NULL);
	}
	if (rc != SQLITE_OK) {
		err = _sq_fail(st, rc, "migrating rollups");
		goto out;
	}
	while ((rc = sqlite3_step(get)) == SQLITE_ROW) {
		const struct rollup_entry *e;
		const uint8_t *enc;
		uint32_t n, nt = 0;
		size_t len;

		err = blockcodec__decode_rollup(st->codec, sqlite3_column_blob(get, 1),
						sqlite3_column_bytes(get, 1), &e, &n);
		if (err) {
			err = err == -ENOMEM ? err : -EIO;
			goto out;
		}
		if (n > cap) {
			struct rollup_entry *t = realloc(tot, n * sizeof(*t));

			if (!t) {
				err = -ENOMEM;
				goto out;
			}
			tot = t;
			cap = n;
		}
		for (uint32_t k = 0; k < n; k++) {
			if (nt && tot[nt - 1].type == e[k].type)
				tot[nt - 1].sum += e[k].sum;
			else
				tot[nt++] = (struct rollup_entry){ 0, e[k].type, e[k].sum };
		}
		err = blockcodec__encode_rollup(st->codec, tot, nt, &enc, &len);
		if (err)
			goto out;
		sqlite3_bind_int64(put, 1, sqlite3_column_int64(get, 0));
		sqlite3_bind_blob(put, 2, enc, (int)len, SQLITE_STATIC);
		rc = sqlite3_step(put);
		sqlite3_reset(put);
		if (rc != SQLITE_DONE) {
			err = _sq_fail(st, rc, "migrating rollups");
			goto out;
		}
	}
	if (rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "migrating rollups");
out:
	sqlite3_finalize(get);
	sqlite3_finalize(put);
	free(tot);
	return err;
}

/* Upgrades a file of an older schema version in the open transaction. */
static int _migrate(struct sqlite_store *st, int64_t version)
{
	int err = 0;

	if (version < 2) {
		err = _migrate_totals(st, "rollup_1m");
		if (!err)
			err = _migrate_totals(st, "rollup_1h");
		if (!err)
			err = _has_column(st, "series", "period_ns");
		if (err == 0)
			err = _exec_sql(st, "ALTER TABLE series ADD COLUMN period_ns INTEGER NOT NULL"
					" DEFAULT 0");
		else if (err == 1)
			err = 0;
	}
	if (!err)
		pr_info("store: sqlite: %s upgraded from schema version %lld to %d\n",
			st->db_path, (long long)version, SCHEMA_VERSION);
	return err;
}

static void *_sqlite_open(const char *dir, char *err, size_t err_len)
{
	struct sqlite_store *st = calloc(1, sizeof(*st));
	int64_t version;
	int rc, e = ENOMEM;

	if (!st)
		goto err;
	if (asprintf(&st->db_path, "%s/flamewatch.db", dir) < 0 ||
	    asprintf(&st->wal_path, "%s/flamewatch.db-wal", dir) < 0) {
		st->db_path = st->wal_path = NULL;
		goto err;
	}
	st->sweep_from = 0;
	st->codec = blockcodec__new(ZSTD_LEVEL);
	if (!st->codec)
		goto err;
	rc = _mkdirs(dir);
	if (rc) {
		e = -rc;
		snprintf(err, err_len, "cannot create %s: %s", dir, strerror(e));
		goto err;
	}
	rc = sqlite3_open_v2(st->db_path, &st->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK)
		goto sqlerr;
	sqlite3_extended_result_codes(st->db, 1);
	sqlite3_busy_timeout(st->db, 5000);
	/*
	 * WAL with synchronous=NORMAL may lose the last transactions on power
	 * loss; FULL syncs the log at every commit, which is what makes an
	 * acknowledged batch durable. journal_size_limit keeps the log from
	 * staying large after a burst.
	 */
	{
		sqlite3_stmt *s;
		const char *mode;

		rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode=WAL", -1, &s, NULL);
		if (rc != SQLITE_OK)
			goto sqlerr;
		rc = sqlite3_step(s);
		mode = rc == SQLITE_ROW ? (const char *)sqlite3_column_text(s, 0) : NULL;
		if (!mode || strcmp(mode, "wal"))
			pr_warn("store: sqlite: %s: no write-ahead log on this file system (%s); "
				"writes will be slower\n", st->db_path, mode ? mode : sqlite3_errmsg(st->db));
		sqlite3_finalize(s);
	}
	rc = sqlite3_exec(st->db,
			  "PRAGMA synchronous=FULL;"
			  "PRAGMA journal_size_limit=67108864;"
			  "PRAGMA cache_size=-65536;"
			  "PRAGMA temp_store=MEMORY;"
			  "PRAGMA foreign_keys=OFF;", NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		goto sqlerr;
	{
		sqlite3_stmt *s;

		rc = sqlite3_prepare_v2(st->db, "PRAGMA user_version", -1, &s, NULL);
		if (rc != SQLITE_OK)
			goto sqlerr;
		rc = sqlite3_step(s);
		version = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
		sqlite3_finalize(s);
	}
	if (version > SCHEMA_VERSION) {
		snprintf(err, err_len, "%s has schema version %lld, newer than this program's %d",
			 st->db_path, (long long)version, SCHEMA_VERSION);
		e = EPROTO;
		goto err;
	}
	rc = sqlite3_exec(st->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	if (rc == SQLITE_OK && version > 0 && version < SCHEMA_VERSION) {
		int merr = _migrate(st, version);

		if (merr) {
			sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
			snprintf(err, err_len, "%s: cannot upgrade schema version %lld to %d: %s",
				 st->db_path, (long long)version, SCHEMA_VERSION, strerror(-merr));
			e = -merr;
			goto err;
		}
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(st->db, SCHEMA, NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(st->db, SCHEMA_CPU_INTERVALS, NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(st->db, "PRAGMA user_version=" FW_STR(SCHEMA_VERSION) "; COMMIT",
				  NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
		goto sqlerr;
	}
	for (int i = 0; i < ST_COUNT; i++) {
		rc = sqlite3_prepare_v3(st->db, _sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->st[i], NULL);
		if (rc != SQLITE_OK)
			goto sqlerr;
	}
	return st;
sqlerr:
	e = -_sq_errno(rc);
	snprintf(err, err_len, "sqlite: %s: %s", st->db_path,
		 st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc));
err:
	if (e == ENOMEM && err && err_len && !err[0])
		snprintf(err, err_len, "out of memory");
	_sqlite_close(st);
	errno = e;
	return NULL;
}

/* ---- writing: dictionaries ------------------------------------------------ */

/*
 * Batch-local ids to store ids for one write, filled lazily; 0 means not
 * yet translated (store ids start at 1).
 */
struct xlate {
	const struct batch *b;
	const struct profile *d;
	uint32_t *strings, *mappings, *frames, *stacks, *series;
	uint32_t nstrings;
};

static int _id32(int64_t id)
{
	return id > 0 && id <= UINT32_MAX ? 0 : -EOVERFLOW;
}

static int64_t _store_string(struct sqlite_store *st, const char *text)
{
	size_t len = strlen(text);
	sqlite3_stmt *s;
	int64_t id = _cache_find(&st->strings, text, len);
	int rc;

	if (id >= 0)
		return id;
	s = st->st[ST_STR_GET];
	sqlite3_bind_text(s, 1, text, (int)len, SQLITE_STATIC);
	rc = sqlite3_step(s);
	id = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
	sqlite3_reset(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return _sq_fail(st, rc, "strings");
	if (!id) {
		s = st->st[ST_STR_INS];
		sqlite3_bind_text(s, 1, text, (int)len, SQLITE_STATIC);
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE)
			return _sq_fail(st, rc, "strings");
		id = sqlite3_last_insert_rowid(st->db);
	}
	if (_id32(id))
		return -EOVERFLOW;
	_cache_put(&st->strings, text, len, (uint32_t)id);
	return id;
}

static int64_t _x_string(struct sqlite_store *st, struct xlate *x, uint32_t local)
{
	int64_t id;

	if (local >= x->nstrings)
		return -EINVAL;
	if (x->strings[local])
		return x->strings[local];
	id = _store_string(st, profile__string(x->d, local));
	if (id > 0)
		x->strings[local] = (uint32_t)id;
	return id;
}

/* Looks up or inserts a dictionary row keyed by n integer columns. */
static int64_t _store_row(struct sqlite_store *st, struct cache *c, enum stmt_id get,
			  enum stmt_id ins, const int64_t *cols, int n)
{
	int64_t id = c ? _cache_find(c, cols, n * sizeof(*cols)) : -ENOENT;
	sqlite3_stmt *s;
	int rc;

	if (id >= 0)
		return id;
	s = st->st[get];
	for (int i = 0; i < n; i++)
		sqlite3_bind_int64(s, i + 1, cols[i]);
	rc = sqlite3_step(s);
	id = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
	sqlite3_reset(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return _sq_fail(st, rc, _sql[get]);
	if (!id) {
		s = st->st[ins];
		for (int i = 0; i < n; i++)
			sqlite3_bind_int64(s, i + 1, cols[i]);
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE)
			return _sq_fail(st, rc, _sql[ins]);
		id = sqlite3_last_insert_rowid(st->db);
	}
	if (_id32(id))
		return -EOVERFLOW;
	if (c)
		_cache_put(c, cols, n * sizeof(*cols), (uint32_t)id);
	return id;
}

static int64_t _x_mapping(struct sqlite_store *st, struct xlate *x, uint32_t local)
{
	const struct profile_mapping *m;
	int64_t cols[2], id;

	if (local == PROFILE_NO_MAPPING)
		return 0;
	if (local >= x->d->nmappings)
		return -EINVAL;
	if (x->mappings[local])
		return x->mappings[local];
	m = &x->d->mappings[local];
	if ((cols[0] = _x_string(st, x, m->path)) < 0)
		return cols[0];
	if ((cols[1] = _x_string(st, x, m->build_id)) < 0)
		return cols[1];
	id = _store_row(st, &st->mappings, ST_MAP_GET, ST_MAP_INS, cols, 2);
	if (id > 0)
		x->mappings[local] = (uint32_t)id;
	return id;
}

/*
 * Frames are cached by their content, names as text, so that a frame the
 * store knows costs one lookup rather than one per string: every batch
 * brings its own dictionary, and translating it is most of a write's work.
 */
struct frame_key {
	uint64_t addr;
	uint32_t kind, line, mapping, fn_len;
	char text[];		/* function, NUL, file, NUL */
};

static int64_t _x_frame(struct sqlite_store *st, struct xlate *x, uint32_t local)
{
	const struct profile_frame *f;
	struct frame_key *k;
	const char *fn, *file;
	size_t fn_len, file_len, klen;
	int64_t cols[6], id, mapping;

	if (local >= x->d->nframes)
		return -EINVAL;
	if (x->frames[local])
		return x->frames[local];
	f = &x->d->frames[local];
	if (f->function >= x->nstrings || f->file >= x->nstrings)
		return -EINVAL;
	if ((mapping = _x_mapping(st, x, f->mapping)) < 0)
		return mapping;
	fn = profile__string(x->d, f->function);
	file = profile__string(x->d, f->file);
	fn_len = strlen(fn);
	file_len = strlen(file);
	klen = sizeof(*k) + fn_len + file_len + 2;
	if (klen > st->cap_kbuf) {
		void *p = realloc(st->kbuf, klen * 2);

		if (!p)
			return -ENOMEM;
		st->kbuf = p;
		st->cap_kbuf = klen * 2;
	}
	k = st->kbuf;
	memset(k, 0, sizeof(*k));
	k->addr = f->addr;
	k->kind = f->kind;
	k->line = f->line;
	k->mapping = (uint32_t)mapping;
	k->fn_len = (uint32_t)fn_len;
	memcpy(k->text, fn, fn_len + 1);
	memcpy(k->text + fn_len + 1, file, file_len + 1);
	id = _cache_find(&st->frames, k, klen);
	if (id < 0) {
		cols[0] = f->kind;
		cols[1] = mapping;
		cols[2] = (int64_t)f->addr;
		if ((cols[3] = _x_string(st, x, f->function)) < 0)
			return cols[3];
		if ((cols[4] = _x_string(st, x, f->file)) < 0)
			return cols[4];
		cols[5] = f->line;
		id = _store_row(st, NULL, ST_FRAME_GET, ST_FRAME_INS, cols, 6);
		if (id < 0)
			return id;
		/* Neither _x_string() nor _store_row() touches kbuf. */
		_cache_put(&st->frames, k, klen, (uint32_t)id);
	}
	x->frames[local] = (uint32_t)id;
	return id;
}

static int _fbuf_reserve(struct sqlite_store *st, size_t n)
{
	uint32_t *f;

	if (n <= st->cap_fbuf)
		return 0;
	f = realloc(st->fbuf, n * sizeof(*f));
	if (!f)
		return -ENOMEM;
	st->fbuf = f;
	st->cap_fbuf = n;
	return 0;
}

/*
 * Stacks are found by a 64-bit hash of their frame ids; on the (unlikely)
 * collision of two different stacks the next hash value is tried, so a
 * collision costs a probe, never a wrong stack.
 */
static int64_t _x_stack(struct sqlite_store *st, struct xlate *x, uint32_t local)
{
	const uint32_t *lf;
	uint32_t n, *frames;
	uint8_t *blob = NULL;
	size_t blen = 0;
	int64_t id = 0;
	uint64_t hash;
	int rc;

	if (x->stacks[local])
		return x->stacks[local];
	lf = profile__stack(x->d, local, &n);
	if (_fbuf_reserve(st, n + 1))
		return -ENOMEM;
	frames = st->fbuf;
	for (uint32_t i = 0; i < n; i++) {
		int64_t f = _x_frame(st, x, lf[i]);

		if (f < 0)
			return f;
		frames[i] = (uint32_t)f;
	}
	id = _cache_find(&st->stacks, frames, n * sizeof(*frames));
	if (id >= 0)
		goto out;
	blob = malloc((size_t)n * 5 + 1);
	if (!blob)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(blob, &blen, frames[i]);
	for (hash = hash__bytes(frames, n * sizeof(*frames));; hash++) {
		sqlite3_stmt *s = st->st[ST_STACK_GET];
		bool same = false;

		sqlite3_bind_int64(s, 1, (int64_t)hash);
		rc = sqlite3_step(s);
		if (rc == SQLITE_ROW) {
			const void *b = sqlite3_column_blob(s, 1);
			size_t len = sqlite3_column_bytes(s, 1);

			id = sqlite3_column_int64(s, 0);
			same = len == blen && (!len || !memcmp(b, blob, len));
		}
		sqlite3_reset(s);
		if (rc == SQLITE_DONE)
			break;
		if (rc != SQLITE_ROW) {
			id = _sq_fail(st, rc, "stacks");
			goto out;
		}
		if (same)
			goto cache;
	}
	{
		sqlite3_stmt *s = st->st[ST_STACK_INS];

		sqlite3_bind_int64(s, 1, (int64_t)hash);
		sqlite3_bind_blob(s, 2, blob, (int)blen, SQLITE_STATIC);
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE) {
			id = _sq_fail(st, rc, "stacks");
			goto out;
		}
		id = sqlite3_last_insert_rowid(st->db);
	}
cache:
	if (_id32(id)) {
		id = -EOVERFLOW;
		goto out;
	}
	_cache_put(&st->stacks, frames, n * sizeof(*frames), (uint32_t)id);
out:
	free(blob);
	if (id > 0)
		x->stacks[local] = (uint32_t)id;
	return id;
}

struct label_pair {
	const char *name, *value;
};

static int _by_label_name(const void *a, const void *b)
{
	return strcmp(((const struct label_pair *)a)->name, ((const struct label_pair *)b)->name);
}

struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};

static void _sb_put(struct sbuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		char *p;

		while (cap < b->len + n + 1)
			cap *= 2;
		p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

/* Appends s quoted like a Prometheus label value. */
static void _sb_quoted(struct sbuf *b, const char *s)
{
	_sb_put(b, "\"", 1);
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			_sb_put(b, "\\", 1);
		if (*s == '\n')
			_sb_put(b, "\\n", 2);
		else
			_sb_put(b, s, 1);
	}
	_sb_put(b, "\"", 1);
}

/*
 * The canonical text of a label set, {a="x",b="y"} sorted by name, is the
 * series' identity; node replaces any node label of the batch.
 */
static int64_t _x_series(struct sqlite_store *st, struct xlate *x, const char *node, uint32_t local)
{
	const struct batch_label *bl;
	struct label_pair *labels;
	struct sbuf key = { 0 };
	size_t n, nl = 0, len;
	int64_t id;
	int rc;

	if (x->series[local])
		return x->series[local];
	bl = batch__series(x->b, local, &n);
	labels = calloc(n + 1, sizeof(*labels));
	if (!labels)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		if (bl[i].name >= x->nstrings || bl[i].value >= x->nstrings) {
			id = -EINVAL;
			goto out;
		}
		labels[nl].name = profile__string(x->d, bl[i].name);
		labels[nl].value = profile__string(x->d, bl[i].value);
		if (strcmp(labels[nl].name, "node"))
			nl++;
	}
	labels[nl++] = (struct label_pair){ "node", node };
	qsort(labels, nl, sizeof(*labels), _by_label_name);
	_sb_put(&key, "{", 1);
	for (size_t i = 0; i < nl; i++) {
		if (i)
			_sb_put(&key, ",", 1);
		_sb_put(&key, labels[i].name, strlen(labels[i].name));
		_sb_put(&key, "=", 1);
		_sb_quoted(&key, labels[i].value);
	}
	_sb_put(&key, "}", 1);
	if (x->b->period_ns) {
		char pbuf[32];

		snprintf(pbuf, sizeof(pbuf), "@%llu", (unsigned long long)x->b->period_ns);
		_sb_put(&key, pbuf, strlen(pbuf));
	}
	id = -ENOMEM;
	if (key.oom)
		goto out;
	len = key.len;
	id = _cache_find(&st->series, key.p, len);
	if (id >= 0)
		goto done;
	{
		sqlite3_stmt *s = st->st[ST_SERIES_GET];

		sqlite3_bind_text(s, 1, key.p, (int)len, SQLITE_STATIC);
		rc = sqlite3_step(s);
		id = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
		sqlite3_reset(s);
		if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
			id = _sq_fail(st, rc, "series");
			goto out;
		}
	}
	if (!id) {
		sqlite3_stmt *s = st->st[ST_SERIES_INS];

		sqlite3_bind_text(s, 1, key.p, (int)len, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, x->b->period_ns > INT64_MAX ? 0 : (int64_t)x->b->period_ns);
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE) {
			id = _sq_fail(st, rc, "series");
			goto out;
		}
		id = sqlite3_last_insert_rowid(st->db);
		s = st->st[ST_LABEL_INS];
		for (size_t i = 0; i < nl; i++) {
			sqlite3_bind_int64(s, 1, id);
			sqlite3_bind_text(s, 2, labels[i].name, -1, SQLITE_STATIC);
			sqlite3_bind_text(s, 3, labels[i].value, -1, SQLITE_STATIC);
			rc = sqlite3_step(s);
			sqlite3_reset(s);
			if (rc != SQLITE_DONE) {
				id = _sq_fail(st, rc, "series_labels");
				goto out;
			}
		}
	}
	if (_id32(id)) {
		id = -EOVERFLOW;
		goto out;
	}
	_cache_put(&st->series, key.p, len, (uint32_t)id);
done:
	x->series[local] = (uint32_t)id;
out:
	free(labels);
	free(key.p);
	return id;
}

/* ---- writing: samples and rollups ----------------------------------------- */

struct wsample {
	int64_t ts, value;
	uint32_t series, type, stack, tid, cpu;
};

static int _by_block(const void *pa, const void *pb)
{
	const struct wsample *a = pa, *b = pb;
	int64_t wa = _floor_to(a->ts, SPAN), wb = _floor_to(b->ts, SPAN);

	if (a->series != b->series)
		return a->series < b->series ? -1 : 1;
	if (a->type != b->type)
		return a->type < b->type ? -1 : 1;
	if (wa != wb)
		return wa < wb ? -1 : 1;
	return (a->ts > b->ts) - (a->ts < b->ts);
}

static int _insert_block(struct sqlite_store *st, uint32_t series, uint32_t type,
			 const struct block_sample *bs, uint32_t n)
{
	sqlite3_stmt *s = st->st[ST_BLOCK_INS];
	int64_t t_min = INT64_MAX, t_max = INT64_MIN;
	const uint8_t *enc;
	size_t len;
	int rc = SQLITE_DONE, err;

	for (uint32_t i = 0; i < n; i++) {
		if (bs[i].ts_ns < t_min)
			t_min = bs[i].ts_ns;
		if (bs[i].ts_ns > t_max)
			t_max = bs[i].ts_ns;
	}
	err = blockcodec__encode(st->codec, bs, n, &enc, &len);
	if (err)
		return err;
	sqlite3_bind_int64(s, 1, series);
	sqlite3_bind_int64(s, 2, type);
	sqlite3_bind_int64(s, 3, t_min);
	sqlite3_bind_int64(s, 4, t_max);
	sqlite3_bind_int64(s, 5, n);
	rc = sqlite3_bind_blob(s, 6, enc, (int)len, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	if (rc != SQLITE_DONE)
		return _sq_fail(st, rc, "sample_blocks");
	return 0;
}

static int _due_add(struct due **due, uint32_t *n, uint32_t *cap, int64_t series,
		    uint32_t type, int64_t window)
{
	if (window < 0)
		return 0;
	if (*n == *cap) {
		uint32_t ncap = *cap ? *cap * 2 : 16;
		struct due *d = realloc(*due, ncap * sizeof(*d));

		if (!d)
			return -ENOMEM;
		*due = d;
		*cap = ncap;
	}
	(*due)[(*n)++] = (struct due){ series, window, type };
	return 0;
}

/*
 * Which windows of this (series, type) have closed, now that a block went
 * into window w: the one that was open before, or w itself when it is
 * older than the open one (late data). The first write after open also
 * checks the window before w, which a restart may have left unmerged.
 */
static int _note_window(struct sqlite_store *st, uint32_t series, uint32_t type, int64_t w,
			struct due **due, uint32_t *ndue, uint32_t *cap_due)
{
	uint64_t key = (uint64_t)series << 32 | type;
	bool added;
	uint64_t *open;
	int64_t cur;

	/* Series come and go with processes: forgetting costs one check each. */
	if (st->open_window.count > OPEN_WINDOWS_MAX)
		_map_free(&st->open_window);
	open = _map_upsert(&st->open_window, key, &added);

	if (!open)
		return -ENOMEM;
	if (added) {
		*open = (uint64_t)w;
		return _due_add(due, ndue, cap_due, series, type, w - SPAN);
	}
	cur = (int64_t)*open;
	if (w > cur) {
		*open = (uint64_t)w;
		return _due_add(due, ndue, cap_due, series, type, cur);
	}
	if (w < cur)
		return _due_add(due, ndue, cap_due, series, type, w);
	return 0;
}

static int _write_blocks(struct sqlite_store *st, struct wsample *ws, uint32_t n,
			 struct due **due, uint32_t *ndue, uint32_t *cap_due)
{
	struct block_sample *bs = malloc((n ? n : 1) * sizeof(*bs));
	int err = 0;

	if (!bs)
		return -ENOMEM;
	qsort(ws, n, sizeof(*ws), _by_block);
	for (uint32_t i = 0, j; i < n; i = j) {
		int64_t w = _floor_to(ws[i].ts, SPAN);
		uint32_t m = 0;

		for (j = i; j < n && ws[j].series == ws[i].series && ws[j].type == ws[i].type &&
			    _floor_to(ws[j].ts, SPAN) == w && m < MAX_BLOCK; j++, m++)
			bs[m] = (struct block_sample){
				.ts_ns = ws[j].ts, .value = ws[j].value, .stack = ws[j].stack,
				.tid = ws[j].tid, .cpu = ws[j].cpu, .type = ws[j].type,
			};
		err = _insert_block(st, ws[i].series, ws[i].type, bs, m);
		if (!err)
			err = _note_window(st, ws[i].series, ws[i].type, w, due, ndue, cap_due);
		if (err)
			break;
	}
	free(bs);
	return err;
}

struct rsample {
	int64_t bucket;
	uint32_t series, type, stack;
	int64_t sum;
};

static int _by_rollup(const void *pa, const void *pb)
{
	const struct rsample *a = pa, *b = pb;

	if (a->series != b->series)
		return a->series < b->series ? -1 : 1;
	if (a->bucket != b->bucket)
		return a->bucket < b->bucket ? -1 : 1;
	if (a->type != b->type)
		return a->type < b->type ? -1 : 1;
	return (a->stack > b->stack) - (a->stack < b->stack);
}

/* Adds entries (sorted by type, stack) into the rollup row (table, bucket, series). */
static int _rollup_merge(struct sqlite_store *st, int table, int64_t bucket, uint32_t series,
			 const struct rollup_entry *add, uint32_t nadd)
{
	sqlite3_stmt *s = st->st[table == RU_MIN ? ST_RU_GET_M : ST_RU_GET_H];
	const struct rollup_entry *old = NULL;
	uint32_t nold = 0, n = 0, i = 0, j = 0;
	const uint8_t *enc;
	size_t len;
	int rc = SQLITE_DONE, err = 0;

	sqlite3_bind_int64(s, 1, bucket);
	sqlite3_bind_int64(s, 2, series);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		err = blockcodec__decode_rollup(st->codec, sqlite3_column_blob(s, 0),
						sqlite3_column_bytes(s, 0), &old, &nold);
		if (err) {
			pr_warn("store: sqlite: corrupt rollup (table %d, bucket %lld, series %u): %s\n",
				table, (long long)bucket, series, strerror(-err));
			err = err == -ENOMEM ? err : -EIO;
		}
	} else if (rc != SQLITE_DONE) {
		err = _sq_fail(st, rc, "rollup");
	}
	sqlite3_reset(s);
	if (err)
		return err;
	/* Twice: merged entries, then at most as many per-type totals. */
	if (2 * ((size_t)nold + nadd) > st->cap_merge) {
		size_t cap = 2 * ((size_t)nold + nadd);
		struct rollup_entry *m = realloc(st->merge, cap * sizeof(*m));

		if (!m)
			return -ENOMEM;
		st->merge = m;
		st->cap_merge = cap;
	}
	while (i < nold || j < nadd) {
		int c;

		if (i == nold)
			c = 1;
		else if (j == nadd)
			c = -1;
		else if (old[i].type != add[j].type)
			c = old[i].type < add[j].type ? -1 : 1;
		else
			c = (old[i].stack > add[j].stack) - (old[i].stack < add[j].stack);
		if (c < 0) {
			st->merge[n++] = old[i++];
		} else if (c > 0) {
			st->merge[n++] = add[j++];
		} else {
			st->merge[n] = old[i++];
			st->merge[n++].sum += add[j++].sum;
		}
	}
	s = st->st[table == RU_MIN ? ST_RU_PUT_M : ST_RU_PUT_H];
	sqlite3_bind_int64(s, 1, bucket);
	sqlite3_bind_int64(s, 2, series);
	/*
	 * Per-type totals in a column of their own: series queries over long
	 * windows need only them, not every stack of every minute.
	 */
	{
		/* The merge buffer has room for this after its n entries. */
		struct rollup_entry *totals = st->merge + n;
		uint32_t nt = 0;

		for (uint32_t k = 0; k < n; k++) {
			if (nt && totals[nt - 1].type == st->merge[k].type)
				totals[nt - 1].sum += st->merge[k].sum;
			else
				totals[nt++] = (struct rollup_entry){ 0, st->merge[k].type, st->merge[k].sum };
		}
		err = blockcodec__encode_rollup(st->codec, totals, nt, &enc, &len);
		if (err)
			return err;
		rc = sqlite3_bind_blob(s, 3, enc, (int)len, SQLITE_TRANSIENT);
	}
	err = blockcodec__encode_rollup(st->codec, st->merge, n, &enc, &len);
	if (err) {
		sqlite3_clear_bindings(s);
		return err;
	}
	if (rc == SQLITE_OK)
		rc = sqlite3_bind_blob(s, 4, enc, (int)len, SQLITE_STATIC);
	if (rc == SQLITE_OK)
		rc = sqlite3_step(s);
	sqlite3_reset(s);
	sqlite3_clear_bindings(s);
	if (rc != SQLITE_DONE)
		return _sq_fail(st, rc, "rollup");
	return 0;
}

/*
 * Sums the batch by (series, minute, type, stack), merges each minute into
 * rollup_1m, then re-buckets the sums by hour and merges them into rollup_1h.
 */
static int _write_rollups(struct sqlite_store *st, const struct wsample *ws, uint32_t n)
{
	struct rsample *rs = malloc((n ? n : 1) * sizeof(*rs));
	struct rollup_entry *e = malloc((n ? n : 1) * sizeof(*e));
	uint32_t m = n;
	int err = -ENOMEM;

	if (!rs || !e)
		goto out;
	for (uint32_t i = 0; i < n; i++)
		rs[i] = (struct rsample){ _floor_to(ws[i].ts, NS_MIN), ws[i].series, ws[i].type,
					  ws[i].stack, ws[i].value };
	for (int table = RU_MIN; table < RU_NTABLES; table++) {
		uint32_t k = 0;

		for (uint32_t i = 0; i < m; i++)
			rs[i].bucket = _floor_to(rs[i].bucket, _ru_unit[table]);
		qsort(rs, m, sizeof(*rs), _by_rollup);
		/* Reduce equal (series, bucket, type, stack) in place. */
		for (uint32_t i = 0; i < m; i++) {
			if (k && !_by_rollup(&rs[k - 1], &rs[i]))
				rs[k - 1].sum += rs[i].sum;
			else
				rs[k++] = rs[i];
		}
		m = k;
		for (uint32_t i = 0, j; i < m; i = j) {
			uint32_t ne = 0;

			for (j = i; j < m && rs[j].series == rs[i].series && rs[j].bucket == rs[i].bucket; j++)
				e[ne++] = (struct rollup_entry){ rs[j].stack, rs[j].type, rs[j].sum };
			err = _rollup_merge(st, table, rs[i].bucket, rs[i].series, e, ne);
			if (err)
				goto out;
		}
	}
	err = 0;
out:
	free(rs);
	free(e);
	return err;
}

static int _meta_add(struct sqlite_store *st, const char *key, int64_t v)
{
	sqlite3_stmt *s = st->st[ST_META_ADD];

	sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(s, 2, v);
	return _exec(st, ST_META_ADD);
}

static int _by_due(const void *pa, const void *pb)
{
	const struct due *a = pa, *b = pb;

	if (a->series != b->series)
		return a->series < b->series ? -1 : 1;
	if (a->type != b->type)
		return a->type < b->type ? -1 : 1;
	return (a->window > b->window) - (a->window < b->window);
}

static int _by_ts(const void *pa, const void *pb)
{
	const struct block_sample *a = pa, *b = pb;

	return (a->ts_ns > b->ts_ns) - (a->ts_ns < b->ts_ns);
}

/*
 * Merges the blocks of one (series, type, window) into one. A window whose
 * blocks would exceed MAX_BLOCK samples, or holds a corrupt block, is left
 * alone (and logged): compaction only saves space.
 */
static int _compact_window(struct sqlite_store *st, const struct due *d)
{
	sqlite3_stmt *s = st->st[ST_BLOCKS_WINDOW];
	struct block_sample *all = NULL;
	int64_t *ids = NULL;
	uint32_t nall = 0, cap = 0, nids = 0, capids = 0;
	int rc = SQLITE_DONE, err = 0;

	sqlite3_bind_int64(s, 1, d->series);
	sqlite3_bind_int64(s, 2, d->window);
	sqlite3_bind_int64(s, 3, d->window + SPAN);
	sqlite3_bind_int64(s, 4, d->type);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		const struct block_sample *bs;
		uint32_t n;

		if (nall + (uint64_t)sqlite3_column_int64(s, 1) > MAX_BLOCK) {
			err = 1;
			break;
		}
		err = blockcodec__decode(st->codec, sqlite3_column_blob(s, 2),
					 sqlite3_column_bytes(s, 2), &bs, &n);
		if (err) {
			pr_warn("store: sqlite: corrupt sample block %lld: not compacting its window\n",
				(long long)sqlite3_column_int64(s, 0));
			break;
		}
		if (nall + n > cap || nids == capids) {
			uint32_t ncap = (nall + n) * 2, ncapids = capids ? capids * 2 : 16;
			struct block_sample *a = realloc(all, ncap * sizeof(*a));
			int64_t *ni;

			if (!a) {
				err = -ENOMEM;
				break;
			}
			all = a;
			cap = ncap;
			ni = realloc(ids, ncapids * sizeof(*ni));
			if (!ni) {
				err = -ENOMEM;
				break;
			}
			ids = ni;
			capids = ncapids;
		}
		memcpy(all + nall, bs, n * sizeof(*bs));
		nall += n;
		ids[nids++] = sqlite3_column_int64(s, 0);
	}
	sqlite3_reset(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "compaction");
	if (err || nids < 2)
		goto out;
	qsort(all, nall, sizeof(*all), _by_ts);
	err = _insert_block(st, (uint32_t)d->series, d->type, all, nall);
	for (uint32_t i = 0; !err && i < nids; i++) {
		sqlite3_bind_int64(st->st[ST_BLOCK_DEL], 1, ids[i]);
		err = _exec(st, ST_BLOCK_DEL);
	}
out:
	free(all);
	free(ids);
	return err < 0 ? err : 0;
}

/* Compacts the due windows in a transaction of their own. */
static void _compact(struct sqlite_store *st, struct due *due, uint32_t n)
{
	int err;

	if (!n)
		return;
	qsort(due, n, sizeof(*due), _by_due);
	err = _exec(st, ST_BEGIN);
	for (uint32_t i = 0; !err && i < n; i++) {
		if (i && !_by_due(&due[i - 1], &due[i]))
			continue;
		err = _compact_window(st, &due[i]);
	}
	if (!err)
		err = _exec(st, ST_COMMIT);
	if (err) {
		_exec(st, ST_ROLLBACK);
		pr_warn("store: sqlite: compaction failed: %s\n", strerror(-err));
	}
}

/* Grows one translation array to n entries, the new ones untranslated. */
static int _dx_grow(struct sqlite_store *st, struct dxlate *d, int k, uint32_t n)
{
	uint32_t *ids, cap;

	if (n > d->cap[k]) {
		for (cap = d->cap[k] ? d->cap[k] : 64; cap < n; cap *= 2)
			;
		ids = realloc(d->ids[k], (size_t)cap * sizeof(*ids));
		if (!ids)
			return -ENOMEM;
		memset(ids + d->cap[k], 0, (size_t)(cap - d->cap[k]) * sizeof(*ids));
		st->dx_bytes += (uint64_t)(cap - d->cap[k]) * sizeof(*ids);
		d->ids[k] = ids;
		d->cap[k] = cap;
	}
	if (n > d->n[k])
		d->n[k] = n;
	return 0;
}

/*
 * The kept translation of dictionary dict_id written under node, grown to
 * the dictionary's current size, in x; or NULL for ENOMEM. Least recently
 * used ones go past DXLATE_MAX or DXLATE_BYTES: forgetting one costs its
 * session one content lookup per entry, as for a batch of its own.
 */
static struct dxlate *_dx_get(struct sqlite_store *st, uint64_t dict_id, const char *node,
			      struct xlate *x)
{
	const struct profile *p = x->d;
	uint32_t n[5] = { x->nstrings + 1, p->nmappings + 1, p->nframes + 1,
			  profile__nstacks(p) + 1, batch__nseries(x->b) + 1 };
	struct dxlate *d = NULL;

	for (uint32_t i = 0; i < st->ndx; i++) {
		if (st->dx[i]->dict_id == dict_id && st->dx[i]->period_ns == x->b->period_ns &&
		    !strcmp(st->dx[i]->node, node)) {
			d = st->dx[i];
			break;
		}
	}
	if (!d) {
		while (st->ndx && (st->ndx >= DXLATE_MAX || st->dx_bytes > DXLATE_BYTES)) {
			uint32_t old = 0;

			for (uint32_t i = 1; i < st->ndx; i++)
				if (st->dx[i]->used < st->dx[old]->used)
					old = i;
			_dx_remove(st, old);
		}
		if (!st->dx) {
			st->dx = calloc(DXLATE_MAX, sizeof(*st->dx));
			if (!st->dx)
				return NULL;
		}
		d = calloc(1, sizeof(*d));
		if (!d || !(d->node = strdup(node))) {
			free(d);
			return NULL;
		}
		d->dict_id = dict_id;
		d->period_ns = x->b->period_ns;
		st->dx[st->ndx++] = d;
		st->dx_bytes += sizeof(*d);
	}
	d->used = ++st->dx_clock;
	for (int k = 0; k < 5; k++)
		if (_dx_grow(st, d, k, n[k]))
			return NULL;
	x->strings = d->ids[0];
	x->mappings = d->ids[1];
	x->frames = d->ids[2];
	x->stacks = d->ids[3];
	x->series = d->ids[4];
	return d;
}
static int _civ_check(const char *node, const struct batch *b);
static int _civ_write(struct sqlite_store *st, struct xlate *x, const char *node,
		      const struct batch *b);

/* Inside the write's transaction; ids go through the same translation as samples'. */
static int _write_gpu_intervals(struct sqlite_store *st, struct xlate *x, const char *node,
				const struct batch *b)
{
	sqlite3_stmt *s = st->st[ST_GPU_INS];

	for (uint32_t i = 0; i < b->ngpu_intervals; i++) {
		const struct batch_gpu_interval *g = &b->gpu_intervals[i];
		int64_t series = _x_series(st, x, node, g->series);
		int64_t name = series < 0 ? series : _x_string(st, x, g->name);
		int64_t stack = g->stack == BATCH_NO_STACK || name < 0 ? name : _x_stack(st, x, g->stack);
		int rc;

		if (series < 0 || name < 0 || stack < 0)
			return (int)(series < 0 ? series : name < 0 ? name : stack);
		sqlite3_bind_int64(s, 1, g->start_ns);
		sqlite3_bind_int64(s, 2, g->end_ns);
		sqlite3_bind_int64(s, 3, series);
		sqlite3_bind_int64(s, 4, g->device);
		sqlite3_bind_int64(s, 5, g->stream);
		sqlite3_bind_int64(s, 6, g->kind);
		sqlite3_bind_int64(s, 7, name);
		if (g->stack == BATCH_NO_STACK)
			sqlite3_bind_null(s, 8);
		else
			sqlite3_bind_int64(s, 8, stack);
		sqlite3_bind_int64(s, 9, (int64_t)g->correlation);
		sqlite3_bind_int64(s, 10, (int64_t)g->bytes);
		sqlite3_bind_int64(s, 11, g->weight);
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE)
			return _sq_fail(st, rc, "gpu_intervals");
	}
	return 0;
}

static int _sqlite_write(void *impl, const char *node, const struct batch *b)
{
	struct sqlite_store *st = impl;
	const struct profile *d = b->dict;
	uint32_t nstacks = profile__nstacks(d), nseries = batch__nseries(b);
	struct xlate x = { .b = b, .d = d };
	struct dxlate *dx = NULL;
	struct wsample *ws = NULL;
	struct due *due = NULL;
	uint32_t ndue = 0, cap_due = 0;
	bool in_txn = false;
	int err = -EINVAL;

	/* Everything that can be checked without the database, first. */
	for (uint32_t i = 0; i < b->nsamples; i++) {
		const struct batch_sample *bs = &b->samples[i];

		if (bs->stack >= nstacks || bs->series >= nseries || bs->ts_ns < 0 ||
		    bs->ts_ns >= TS_LIMIT) {
			pr_warn("store: sqlite: batch from %s: sample %u has stack %u/%u, series %u/%u, ts %lld\n",
				node, i, bs->stack, nstacks, bs->series, nseries, (long long)bs->ts_ns);
			return -EINVAL;
		}
	}
	err = _civ_check(node, b);
	if (err)
		return err;
	for (uint32_t i = 0; i < b->ngpu_intervals; i++) {
		const struct batch_gpu_interval *g = &b->gpu_intervals[i];

		if ((g->stack != BATCH_NO_STACK && g->stack >= nstacks) || g->series >= nseries ||
		    g->name >= intern__count(d->strings) || g->start_ns < 0 ||
		    g->start_ns >= TS_LIMIT || g->end_ns < g->start_ns) {
			pr_warn("store: sqlite: batch from %s: GPU interval %u has stack %u/%u, "
				"series %u/%u, name %u, start %lld, end %lld\n", node, i, g->stack,
				nstacks, g->series, nseries, g->name, (long long)g->start_ns,
				(long long)g->end_ns);
			return -EINVAL;
		}
	}
	if (!b->nsamples && !b->ncpu_intervals && !b->ngpu_intervals)
		return 0;
	err = -ENOMEM;
	x.nstrings = intern__count(d->strings);
	if (b->dict_id) {
		dx = _dx_get(st, b->dict_id, node, &x);
		if (!dx)
			goto out;
	} else {
		x.strings = calloc(x.nstrings + 1, sizeof(uint32_t));
		x.mappings = calloc(d->nmappings + 1, sizeof(uint32_t));
		x.frames = calloc(d->nframes + 1, sizeof(uint32_t));
		x.stacks = calloc(nstacks + 1, sizeof(uint32_t));
		x.series = calloc(nseries + 1, sizeof(uint32_t));
	}
	ws = malloc((b->nsamples + 1) * sizeof(*ws));
	if (!x.strings || !x.mappings || !x.frames || !x.stacks || !x.series || !ws)
		goto out;

	err = _exec(st, ST_BEGIN);
	if (err)
		goto out;
	in_txn = true;
	for (uint32_t i = 0; i < b->nsamples; i++) {
		const struct batch_sample *bs = &b->samples[i];
		int64_t series = _x_series(st, &x, node, bs->series);
		int64_t stack = series < 0 ? series : _x_stack(st, &x, bs->stack);

		if (series < 0 || stack < 0) {
			err = (int)(series < 0 ? series : stack);
			goto out;
		}
		ws[i] = (struct wsample){
			.ts = bs->ts_ns, .value = bs->value, .series = (uint32_t)series,
			.type = bs->type, .stack = (uint32_t)stack, .tid = bs->tid, .cpu = bs->cpu,
		};
	}
	err = _civ_write(st, &x, node, b);
	if (!err)
		err = _write_blocks(st, ws, b->nsamples, &due, &ndue, &cap_due);
	if (!err)
		err = _write_rollups(st, ws, b->nsamples);
	if (!err)
		err = _write_gpu_intervals(st, &x, node, b);
	if (!err)
		err = _meta_add(st, "samples", b->nsamples);
	if (!err)
		err = _meta_add(st, "batches", 1);
	if (!err)
		err = _exec(st, ST_COMMIT);
	if (!err) {
		in_txn = false;
		_compact(st, due, ndue);
	}
out:
	if (err && in_txn) {
		_exec(st, ST_ROLLBACK);
		/*
		 * Rows the caches learned in this transaction are gone, and
		 * their ids may be handed out again. (The windows noted for
		 * compaction may stay: at worst they cost a check.)
		 */
		_drop_caches(st);
	}
	if (!dx) {
		free(x.strings);
		free(x.mappings);
		free(x.frames);
		free(x.stacks);
		free(x.series);
	}
	free(ws);
	free(due);
	return err;
}

/* ---- reading: series, selection, dictionaries ----------------------------- */

static const char *_info_get(void *ctx, const char *name)
{
	const struct series_info *si = ctx;

	for (uint32_t i = 0; i < si->nlabels; i++)
		if (!strcmp(si->names[i], name))
			return si->values[i];
	return NULL;
}

/* Borrowed series labels, loaded on first use. */
static int _series_info(struct sqlite_store *st, int64_t series, const struct series_info **out)
{
	sqlite3_stmt *s = st->st[ST_SERIES_LABELS];
	struct series_info *si = NULL;
	uint64_t *slot;
	size_t bytes = 0, nl = 0;
	bool added;
	char *p;
	int rc = SQLITE_DONE, err = 0;

	slot = _map_get(&st->series_info, (uint64_t)series);
	if (slot) {
		*out = st->infos[*slot];
		return 0;
	}
	/* Two passes over a handful of labels: sizes, then copies. */
	sqlite3_bind_int64(s, 1, series);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		bytes += sqlite3_column_bytes(s, 0) + sqlite3_column_bytes(s, 1) + 2;
		nl++;
	}
	sqlite3_reset(s);
	if (rc != SQLITE_DONE)
		return _sq_fail(st, rc, "series_labels");
	si = calloc(1, sizeof(*si) + 2 * nl * sizeof(char *) + bytes);
	if (!si)
		return -ENOMEM;
	si->names = (const char **)(si + 1);
	si->values = si->names + nl;
	p = (char *)(si->values + nl);
	si->comm = "";
	while ((rc = sqlite3_step(s)) == SQLITE_ROW && si->nlabels < nl) {
		for (int c = 0; c < 2; c++) {
			size_t len = sqlite3_column_bytes(s, c);
			const unsigned char *t = sqlite3_column_text(s, c);

			if (!t)
				t = (const unsigned char *)"";
			memcpy(p, t, len);
			p[len] = '\0';
			(c ? si->values : si->names)[si->nlabels] = p;
			p += len + 1;
		}
		if (!strcmp(si->names[si->nlabels], "comm"))
			si->comm = si->values[si->nlabels];
		else if (!strcmp(si->names[si->nlabels], "pid"))
			si->pid = (uint32_t)strtoul(si->values[si->nlabels], NULL, 10);
		si->nlabels++;
	}
	sqlite3_reset(s);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW) {
		err = _sq_fail(st, rc, "series_labels");
		goto err;
	}
	{
		int64_t period;

		sqlite3_bind_int64(st->st[ST_SERIES_PERIOD], 1, series);
		err = _exec_int(st, ST_SERIES_PERIOD, 0, &period);
		if (err)
			goto err;
		si->period_ns = period > 0 ? (uint64_t)period : 0;
	}
	if (st->ninfos == st->cap_infos) {
		uint32_t cap = st->cap_infos ? st->cap_infos * 2 : 256;
		struct series_info **a = realloc(st->infos, cap * sizeof(*a));

		if (!a) {
			err = -ENOMEM;
			goto err;
		}
		st->infos = a;
		st->cap_infos = cap;
	}
	slot = _map_upsert(&st->series_info, (uint64_t)series, &added);
	if (!slot) {
		err = -ENOMEM;
		goto err;
	}
	*slot = st->ninfos;
	st->infos[st->ninfos++] = si;
	*out = si;
	return 0;
err:
	free(si);
	return err;
}

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
	struct intern *ptags;		/* tag: struct ptag */
	uint64_t fallback_period;	/* for series of unknown period */
	/* series */
	int64_t from, step;
	struct intern *groups;
	const char *by;
};

static void _query_free(struct query *q)
{
	_map_free(&q->smap);
	_map_free(&q->agg);
	intern__free(q->ptags);
	free(q->qs);
	intern__free(q->groups);
}

/*
 * Returns the query's view of series (NULL when it does not match), or an
 * error through *err.
 */
static struct qseries *_qseries(struct query *q, int64_t series, int *err)
{
	bool added;
	uint64_t *slot = _map_upsert(&q->smap, (uint64_t)series, &added);
	struct qseries *qs;

	*err = 0;
	if (!slot) {
		*err = -ENOMEM;
		return NULL;
	}
	if (!added) {
		qs = &q->qs[*slot];
		return qs->match ? qs : NULL;
	}
	if (q->nqs == q->cap_qs) {
		uint32_t cap = q->cap_qs ? q->cap_qs * 2 : 64;
		struct qseries *a = realloc(q->qs, cap * sizeof(*a));

		if (!a) {
			*err = -ENOMEM;
			return NULL;
		}
		q->qs = a;
		q->cap_qs = cap;
	}
	qs = &q->qs[q->nqs];
	memset(qs, 0, sizeof(*qs));
	/* On error the query ends, so the half-made entry does not matter. */
	*err = _series_info(q->st, series, &qs->info);
	if (*err)
		return NULL;
	qs->match = !q->sel || selector__matches(q->sel, _info_get, (void *)qs->info);
	if (qs->match && q->tag) {
		*err = q->tag(q, qs);
		if (*err)
			return NULL;
	}
	*slot = q->nqs++;
	return qs->match ? qs : NULL;
}

/*
 * Copies store dictionary entries into an output profile, each once per
 * query.
 */
struct exporter {
	struct sqlite_store *st;
	struct profile *out;
	struct u64map strings, mappings, frames, stacks;
};

static void _exporter_free(struct exporter *ex)
{
	_map_free(&ex->strings);
	_map_free(&ex->mappings);
	_map_free(&ex->frames);
	_map_free(&ex->stacks);
}

/* Fetches the text of a store string into the output profile. */
static int64_t _ex_string(struct exporter *ex, int64_t id)
{
	sqlite3_stmt *s = ex->st->st[ST_STR_TEXT];
	uint64_t *slot = _map_get(&ex->strings, (uint64_t)id);
	int64_t out;
	int rc;

	if (slot)
		return (int64_t)*slot;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		const char *t = (const char *)sqlite3_column_text(s, 0);

		out = profile__intern_string(ex->out, t ? t : "");
	} else {
		out = rc == SQLITE_DONE ? -EIO : _sq_fail(ex->st, rc, "strings");
		if (rc == SQLITE_DONE)
			pr_warn("store: sqlite: string %lld is missing\n", (long long)id);
	}
	sqlite3_reset(s);
	if (out >= 0) {
		slot = _map_upsert(&ex->strings, (uint64_t)id, NULL);
		if (!slot)
			return -ENOMEM;
		*slot = (uint64_t)out;
	}
	return out;
}

static int64_t _ex_mapping(struct exporter *ex, int64_t id)
{
	sqlite3_stmt *s = ex->st->st[ST_MAP_ROW];
	uint64_t *slot;
	int64_t path, bid, out;
	int rc;

	if (!id)
		return PROFILE_NO_MAPPING;
	slot = _map_get(&ex->mappings, (uint64_t)id);
	if (slot)
		return (int64_t)*slot;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	path = sqlite3_column_int64(s, 0);
	bid = sqlite3_column_int64(s, 1);
	sqlite3_reset(s);
	if (rc != SQLITE_ROW) {
		pr_warn("store: sqlite: mapping %lld is missing\n", (long long)id);
		return rc == SQLITE_DONE ? -EIO : _sq_fail(ex->st, rc, "mappings");
	}
	if ((path = _ex_string(ex, path)) < 0)
		return path;
	if ((bid = _ex_string(ex, bid)) < 0)
		return bid;
	out = profile__intern_mapping(ex->out, profile__string(ex->out, (uint32_t)path),
				      profile__string(ex->out, (uint32_t)bid));
	if (out >= 0) {
		slot = _map_upsert(&ex->mappings, (uint64_t)id, NULL);
		if (!slot)
			return -ENOMEM;
		*slot = (uint64_t)out;
	}
	return out;
}

static int64_t _ex_frame(struct exporter *ex, int64_t id)
{
	sqlite3_stmt *s = ex->st->st[ST_FRAME_ROW];
	uint64_t *slot = _map_get(&ex->frames, (uint64_t)id);
	int64_t kind, mapping, addr, fn, file, line, out;
	int rc = SQLITE_DONE;

	if (slot)
		return (int64_t)*slot;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	kind = sqlite3_column_int64(s, 0);
	mapping = sqlite3_column_int64(s, 1);
	addr = sqlite3_column_int64(s, 2);
	fn = sqlite3_column_int64(s, 3);
	file = sqlite3_column_int64(s, 4);
	line = sqlite3_column_int64(s, 5);
	sqlite3_reset(s);
	if (rc != SQLITE_ROW) {
		pr_warn("store: sqlite: frame %lld is missing\n", (long long)id);
		return rc == SQLITE_DONE ? -EIO : _sq_fail(ex->st, rc, "frames");
	}
	if ((mapping = _ex_mapping(ex, mapping)) < 0)
		return mapping;
	if ((fn = _ex_string(ex, fn)) < 0)
		return fn;
	if ((file = _ex_string(ex, file)) < 0)
		return file;
	out = profile__intern_named_frame(ex->out, (enum frame_kind)kind, (uint32_t)mapping,
					  (uint64_t)addr, profile__string(ex->out, (uint32_t)fn),
					  profile__string(ex->out, (uint32_t)file), (uint32_t)line);
	if (out < 0)
		return out;
	slot = _map_upsert(&ex->frames, (uint64_t)id, NULL);
	if (!slot)
		return -ENOMEM;
	*slot = (uint64_t)out;
	return out;
}

static int64_t _ex_stack(struct exporter *ex, uint32_t id)
{
	struct sqlite_store *st = ex->st;
	sqlite3_stmt *s = st->st[ST_STACK_ROW];
	uint64_t *slot = _map_get(&ex->stacks, id);
	int64_t n, out;
	int rc;

	if (slot)
		return (int64_t)*slot;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		size_t len = sqlite3_column_bytes(s, 0);

		n = _fbuf_reserve(st, len + 1);
		if (!n)
			n = _stack_decode(sqlite3_column_blob(s, 0), len, st->fbuf, len + 1);
	} else {
		n = rc == SQLITE_DONE ? -EIO : _sq_fail(st, rc, "stacks");
	}
	sqlite3_reset(s);
	if (n < 0) {
		pr_warn("store: sqlite: stack %u is missing or corrupt\n", id);
		return n;
	}
	/*
	 * _ex_frame() does not touch fbuf, so the frame ids can be rewritten
	 * in place into output ids.
	 */
	for (int64_t i = 0; i < n; i++) {
		int64_t f = _ex_frame(ex, st->fbuf[i]);

		if (f < 0)
			return f;
		st->fbuf[i] = (uint32_t)f;
	}
	out = profile__intern_stack(ex->out, st->fbuf, (uint32_t)n);
	if (out < 0)
		return out;
	slot = _map_upsert(&ex->stacks, id, NULL);
	if (!slot)
		return -ENOMEM;
	*slot = (uint64_t)out;
	return out;
}

/* ---- reading: the time plan ----------------------------------------------- */

/*
 * How [from, to), cut into buckets of step, is read: whole hours from
 * rollup_1h, whole minutes from rollup_1m, the rest from raw blocks. Each
 * range lies within one bucket, so a rollup row or a sample finds its
 * bucket from its own start time.
 */
struct plan {
	struct ranges hours, minutes, raw;
};

static void _plan_free(struct plan *p)
{
	free(p->hours.r);
	free(p->minutes.r);
	free(p->raw.r);
}

static int _plan_bucket(struct plan *p, int64_t a, int64_t b)
{
	int64_t m0 = _ceil_to(a, NS_MIN), m1 = _floor_to(b, NS_MIN);
	int64_t h0 = _ceil_to(a, NS_HOUR), h1 = _floor_to(b, NS_HOUR);
	int err;

	if (m0 >= m1)
		return _ranges_add(&p->raw, a, b);
	if (h0 >= h1)
		h0 = h1 = m1;
	err = _ranges_add(&p->raw, a, m0);
	err = err ?: _ranges_add(&p->minutes, m0, h0);
	err = err ?: _ranges_add(&p->hours, h0, h1);
	err = err ?: _ranges_add(&p->minutes, h1, m1);
	err = err ?: _ranges_add(&p->raw, m1, b);
	return err;
}

/* Called for every rollup entry and raw sample of the plan, matched series only. */
struct visitor {
	/* Gets per-type totals with stack 0 when totals is set, else every stack. */
	int (*rollup)(struct query *q, struct qseries *s, int64_t bucket,
		      const struct rollup_entry *e, uint32_t n);
	bool totals;
	int (*sample)(struct query *q, struct qseries *s, const struct block_sample *bs);
};

static int _scan_rollups(struct query *q, int table, const struct ranges *rs,
			 const struct visitor *v)
{
	struct sqlite_store *st = q->st;
	sqlite3_stmt *s = st->st[table == RU_MIN ? ST_RU_RANGE_M : ST_RU_RANGE_H];
	int col = v->totals ? 2 : 3;
	int rc = SQLITE_DONE, err = 0;

	for (uint32_t i = 0; !err && i < rs->n; i++) {
		sqlite3_bind_int64(s, 1, rs->r[i].a);
		sqlite3_bind_int64(s, 2, rs->r[i].b);
		while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
			int64_t bucket = sqlite3_column_int64(s, 0);
			int64_t series = sqlite3_column_int64(s, 1);
			struct qseries *qs = _qseries(q, series, &err);
			const struct rollup_entry *e;
			uint32_t n;

			if (!qs)
				continue;
			err = blockcodec__decode_rollup(st->codec, sqlite3_column_blob(s, col),
							sqlite3_column_bytes(s, col), &e, &n);
			if (err) {
				pr_warn("store: sqlite: corrupt %s row (bucket %lld, series %lld)\n",
					table == RU_MIN ? "rollup_1m" : "rollup_1h",
					(long long)bucket, (long long)series);
				err = err == -ENOMEM ? err : -EIO;
				break;
			}
			err = v->rollup(q, qs, bucket, e, n);
		}
		sqlite3_reset(s);
		if (!err && rc != SQLITE_DONE)
			err = _sq_fail(st, rc, "rollup");
	}
	return err;
}

static inline int64_t _sat_add(int64_t a, int64_t b)
{
	int64_t r;

	return __builtin_add_overflow(a, b, &r) ? INT64_MAX : r;
}

static int _decode_row(struct sqlite_store *st, sqlite3_stmt *s, int col, int64_t id,
		       const struct block_sample **bs, uint32_t *n)
{
	int err = blockcodec__decode(st->codec, sqlite3_column_blob(s, col),
				     sqlite3_column_bytes(s, col), bs, n);

	if (err) {
		pr_warn("store: sqlite: corrupt sample block %lld\n", (long long)id);
		return err == -ENOMEM ? err : -EIO;
	}
	return 0;
}

/* Every sample of type in [a, b) of matched series, block by block, unordered. */
static int _scan_raw(struct query *q, int64_t a, int64_t b, const struct visitor *v)
{
	struct sqlite_store *st = q->st;
	sqlite3_stmt *s = st->st[ST_BLOCKS_RANGE];
	int rc = SQLITE_DONE, err = 0;

	sqlite3_bind_int64(s, 1, a);
	sqlite3_bind_int64(s, 2, b);
	sqlite3_bind_int64(s, 3, _sat_add(b, SPAN));
	sqlite3_bind_int64(s, 4, q->type);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct qseries *qs = _qseries(q, sqlite3_column_int64(s, 1), &err);
		const struct block_sample *bs;
		uint32_t n;

		if (!qs)
			continue;
		err = _decode_row(st, s, 5, sqlite3_column_int64(s, 0), &bs, &n);
		for (uint32_t i = 0; !err && i < n; i++)
			if (bs[i].ts_ns >= a && bs[i].ts_ns < b && bs[i].type == q->type)
				err = v->sample(q, qs, &bs[i]);
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "sample_blocks");
	return err;
}

static int _scan_plan(struct query *q, const struct plan *p, const struct visitor *v)
{
	int err = _scan_rollups(q, RU_HOUR, &p->hours, v);

	err = err ?: _scan_rollups(q, RU_MIN, &p->minutes, v);
	for (uint32_t i = 0; !err && i < p->raw.n; i++)
		err = _scan_raw(q, p->raw.r[i].a, p->raw.r[i].b, v);
	return err;
}

static int _begin_read(struct sqlite_store *st)
{
	return _exec(st, ST_BEGIN_READ);
}

static int _end_read(struct sqlite_store *st, int err)
{
	int e = _exec(st, ST_COMMIT);

	if (e)
		_exec(st, ST_ROLLBACK);
	return err ?: e;
}

/* Clamps a window to the timestamps a store can hold; false when empty. */
static bool _clamp(int64_t *from, int64_t *to)
{
	if (*from < 0)
		*from = 0;
	if (*to > TS_LIMIT)
		*to = TS_LIMIT;
	return *from < *to;
}

static void _query_begin(struct sqlite_store *st)
{
	/* Bounded between queries, never during one: qseries borrow from it. */
	if (st->ninfos > SERIES_CACHE_MAX)
		_drop_series_info(st);
}

/* ---- store__profile -------------------------------------------------------- */

/* What a profile query sums by besides the stack: comm, and for CPU the period. */
struct ptag {
	uint32_t comm, pad;
	uint64_t period_ns;
};

static int _tag_comm(struct query *q, struct qseries *s)
{
	int64_t id = profile__intern_string(q->out, s->info->comm);
	struct ptag t = { 0 };

	if (id < 0)
		return (int)id;
	t.comm = (uint32_t)id;
	if (q->type == SAMPLE_CPU)
		t.period_ns = s->info->period_ns ? s->info->period_ns : q->fallback_period;
	if (!q->ptags && !(q->ptags = intern__new()))
		return -ENOMEM;
	id = intern__add(q->ptags, &t, sizeof(t), NULL);
	if (id < 0)
		return (int)id;
	s->tag = (uint32_t)id;
	return 0;
}

static const struct ptag *_ptag(const struct query *q, uint32_t tag)
{
	size_t len;

	return intern__key(q->ptags, tag, &len);
}

static int _agg_add(struct query *q, uint64_t key, int64_t v)
{
	uint64_t *slot = _map_upsert(&q->agg, key, NULL);

	if (!slot)
		return -ENOMEM;
	*slot += (uint64_t)v;
	return 0;
}

static int _profile_rollup(struct query *q, struct qseries *s, int64_t bucket,
			   const struct rollup_entry *e, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		int err;

		if (e[i].type != q->type)
			continue;
		err = _agg_add(q, (uint64_t)e[i].stack << 32 | s->tag, e[i].sum);
		if (err)
			return err;
	}
	return 0;
}

static int _profile_sample(struct query *q, struct qseries *s, const struct block_sample *bs)
{
	return _agg_add(q, (uint64_t)bs->stack << 32 | s->tag, bs->value);
}

static int _sqlite_profile(void *impl, int64_t from, int64_t to, const struct selector *sel,
			   uint32_t type, struct profile *out)
{
	static const struct visitor v = { .rollup = _profile_rollup, .sample = _profile_sample };
	struct sqlite_store *st = impl;
	struct query q = { .st = st, .sel = sel, .type = type, .tag = _tag_comm, .out = out,
			   .fallback_period = out->period_ns };
	struct exporter ex = { .st = st, .out = out };
	struct plan p = { 0 };
	uint64_t first_period = 0;
	bool any_period = false, mixed = false;
	int err;

	if (!_clamp(&from, &to))
		return 0;
	_query_begin(st);
	err = _plan_bucket(&p, from, to);
	if (err)
		goto out;
	err = _begin_read(st);
	if (err)
		goto out;
	err = _scan_plan(&q, &p, &v);
	/* The periods of what was found: one, or several (then nanoseconds). */
	for (uint32_t i = 0; !err && i < q.agg.cap; i++) {
		const struct u64slot *slot = &q.agg.slots[i];
		uint64_t period;

		if (!slot->used || !slot->val)
			continue;
		period = _ptag(&q, (uint32_t)slot->key)->period_ns;
		if (!any_period) {
			first_period = period;
			any_period = true;
		} else if (period != first_period) {
			mixed = true;
			break;
		}
	}
	for (uint32_t i = 0; !err && i < q.agg.cap; i++) {
		const struct u64slot *slot = &q.agg.slots[i];
		const struct ptag *t;
		uint64_t v;
		int64_t stack;

		if (!slot->used || !slot->val)
			continue;
		t = _ptag(&q, (uint32_t)slot->key);
		v = slot->val;
		if (mixed && __builtin_mul_overflow(v, t->period_ns, &v))
			v = UINT64_MAX;
		stack = _ex_stack(&ex, (uint32_t)(slot->key >> 32));
		if (stack < 0)
			err = (int)stack;
		else
			err = profile__add_sample(out, (uint32_t)stack, 0, 0, 0, t->comm, v);
	}
	if (!err && type == SAMPLE_CPU && any_period)
		out->period_ns = mixed ? 1 : first_period;
	err = _end_read(st, err);
out:
	_plan_free(&p);
	_query_free(&q);
	_exporter_free(&ex);
	return err;
}

/* ---- store__series --------------------------------------------------------- */

static int _tag_group(struct query *q, struct qseries *s)
{
	const char *v = q->by ? _info_get((void *)s->info, q->by) : NULL;
	int64_t id;

	if (!v)
		v = "";
	id = intern__add(q->groups, v, strlen(v) + 1, NULL);
	if (id < 0)
		return (int)id;
	s->tag = (uint32_t)id;
	return 0;
}

static inline uint64_t _bucket_of(const struct query *q, int64_t t)
{
	return (uint64_t)((t - q->from) / q->step);
}

static int _series_rollup(struct query *q, struct qseries *s, int64_t bucket,
			  const struct rollup_entry *e, uint32_t n)
{
	int64_t sum = 0;

	for (uint32_t i = 0; i < n; i++)
		if (e[i].type == q->type)
			sum += e[i].sum;
	if (!sum)
		return 0;
	return _agg_add(q, (uint64_t)s->tag << 32 | _bucket_of(q, bucket), sum);
}

static int _series_sample(struct query *q, struct qseries *s, const struct block_sample *bs)
{
	return _agg_add(q, (uint64_t)s->tag << 32 | _bucket_of(q, bs->ts_ns), bs->value);
}

struct series_out {
	const char *group;
	uint64_t bucket;
	int64_t sum;
};

static int _by_group_bucket(const void *pa, const void *pb)
{
	const struct series_out *a = pa, *b = pb;
	int c = strcmp(a->group, b->group);

	if (c)
		return c;
	return (a->bucket > b->bucket) - (a->bucket < b->bucket);
}

static int _sqlite_series(void *impl, int64_t from, int64_t to, int64_t step,
			  const struct selector *sel, uint32_t type, const char *by,
			  int (*cb)(void *ctx, const char *group, int64_t bucket_start, int64_t sum),
			  void *ctx)
{
	static const struct visitor v = { .rollup = _series_rollup, .totals = true,
					  .sample = _series_sample };
	struct sqlite_store *st = impl;
	struct query q = { .st = st, .sel = sel, .type = type, .tag = _tag_group,
			   .from = from, .step = step, .by = by };
	struct series_out *res = NULL;
	struct plan p = { 0 };
	int64_t cfrom = from, cto = to;
	uint32_t nres = 0;
	int err = -ENOMEM;

	if (!_clamp(&cfrom, &cto))
		return 0;
	_query_begin(st);
	q.groups = intern__new();
	if (!q.groups)
		goto out;
	/* Buckets keep their places relative to from; only their reading is clamped. */
	for (int64_t a = from; a < to; a = _sat_add(a, step)) {
		int64_t b = _sat_add(a, step) < to ? _sat_add(a, step) : to;

		if (b <= cfrom || a >= cto)
			continue;
		err = _plan_bucket(&p, a > cfrom ? a : cfrom, b < cto ? b : cto);
		if (err)
			goto out;
		if (b == INT64_MAX)
			break;
	}
	err = _begin_read(st);
	if (err)
		goto out;
	err = _scan_plan(&q, &p, &v);
	err = _end_read(st, err);
	if (err)
		goto out;
	res = malloc((q.agg.count + 1) * sizeof(*res));
	if (!res) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < q.agg.cap; i++) {
		const struct u64slot *slot = &q.agg.slots[i];

		if (!slot->used || !slot->val)
			continue;
		res[nres++] = (struct series_out){
			.group = intern__key(q.groups, (uint32_t)(slot->key >> 32), NULL),
			.bucket = (uint32_t)slot->key,
			.sum = (int64_t)slot->val,
		};
	}
	qsort(res, nres, sizeof(*res), _by_group_bucket);
	for (uint32_t i = 0; !err && i < nres; i++)
		err = cb(ctx, res[i].group, from + (int64_t)res[i].bucket * step, res[i].sum);
out:
	free(res);
	_plan_free(&p);
	_query_free(&q);
	return err;
}

/* ---- store__samples -------------------------------------------------------- */

struct srec {
	int64_t ts, value;
	uint32_t stack, tid, cpu;
	uint32_t qs;		/* index in query.qs */
	int64_t series;
};

static int _by_srec(const void *pa, const void *pb)
{
	const struct srec *a = pa, *b = pb;

	if (a->ts != b->ts)
		return a->ts < b->ts ? -1 : 1;
	if (a->series != b->series)
		return a->series < b->series ? -1 : 1;
	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	if (a->cpu != b->cpu)
		return a->cpu < b->cpu ? -1 : 1;
	if (a->stack != b->stack)
		return a->stack < b->stack ? -1 : 1;
	return (a->value > b->value) - (a->value < b->value);
}

/* Exact count of the matching samples in [from, to): decodes only edge blocks. */
static int _count_samples(struct query *q, int64_t from, int64_t to, uint64_t *count)
{
	struct sqlite_store *st = q->st;
	sqlite3_stmt *s = st->st[ST_BLOCKS_RANGE];
	int rc = SQLITE_DONE, err = 0;

	*count = 0;
	sqlite3_bind_int64(s, 1, from);
	sqlite3_bind_int64(s, 2, to);
	sqlite3_bind_int64(s, 3, _sat_add(to, SPAN));
	sqlite3_bind_int64(s, 4, q->type);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct qseries *qs = _qseries(q, sqlite3_column_int64(s, 1), &err);
		const struct block_sample *bs;
		uint32_t n;

		if (!qs)
			continue;
		if (sqlite3_column_int64(s, 2) >= from && sqlite3_column_int64(s, 3) < to) {
			*count += (uint64_t)sqlite3_column_int64(s, 4);
			continue;
		}
		err = _decode_row(st, s, 5, sqlite3_column_int64(s, 0), &bs, &n);
		for (uint32_t i = 0; !err && i < n; i++)
			*count += bs[i].ts_ns >= from && bs[i].ts_ns < to && bs[i].type == q->type;
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "sample_blocks");
	return err;
}

/* Appends the samples of one window's blocks that fall in [from, to). */
/* A run of records from one block, sorted. */
struct run {
	uint32_t pos, end;
};

struct runs {
	struct run *r;
	uint32_t n, cap;
	uint32_t live;		/* runs in the merge heap */
};

static int _collect_window(struct query *q, int64_t w, int64_t from, int64_t to,
			   struct srec **recs, uint32_t *n, uint32_t *cap, struct runs *runs)
{
	struct sqlite_store *st = q->st;
	sqlite3_stmt *s = st->st[ST_BLOCKS_RANGE];
	int rc = SQLITE_DONE, err = 0;

	/* Blocks of window w: t_max in [w, w + SPAN), and t_max >= from, t_min < to. */
	sqlite3_bind_int64(s, 1, w > from ? w : from);
	sqlite3_bind_int64(s, 2, to);
	sqlite3_bind_int64(s, 3, w + SPAN);
	sqlite3_bind_int64(s, 4, q->type);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t series = sqlite3_column_int64(s, 1);
		struct qseries *qs = _qseries(q, series, &err);
		const struct block_sample *bs;
		uint32_t nb;

		if (!qs)
			continue;
		err = _decode_row(st, s, 5, sqlite3_column_int64(s, 0), &bs, &nb);
		if (!err && *n + (uint64_t)nb > *cap) {
			uint64_t ncap = (*n + (uint64_t)nb) * 2;
			struct srec *r;

			if (ncap > UINT32_MAX) {
				err = -E2BIG;
				break;
			}
			r = realloc(*recs, ncap * sizeof(*r));
			if (!r) {
				err = -ENOMEM;
				break;
			}
			*recs = r;
			*cap = (uint32_t)ncap;
		}
		if (!err && runs->n == runs->cap) {
			uint32_t ncap = runs->cap ? runs->cap * 2 : 256;
			struct run *r = realloc(runs->r, ncap * sizeof(*r));

			if (!r) {
				err = -ENOMEM;
				break;
			}
			runs->r = r;
			runs->cap = ncap;
		}
		if (err)
			break;
		runs->r[runs->n].pos = *n;
		for (uint32_t i = 0; i < nb; i++) {
			if (bs[i].ts_ns < from || bs[i].ts_ns >= to || bs[i].type != q->type)
				continue;
			(*recs)[(*n)++] = (struct srec){
				.ts = bs[i].ts_ns, .value = bs[i].value, .stack = bs[i].stack,
				.tid = bs[i].tid, .cpu = bs[i].cpu, .qs = (uint32_t)(qs - q->qs),
				.series = series,
			};
		}
		runs->r[runs->n].end = *n;
		if (runs->r[runs->n].end > runs->r[runs->n].pos)
			runs->n++;
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "sample_blocks");
	return err;
}

static inline bool _srec_less(const struct srec *a, const struct srec *b)
{
	if (a->ts != b->ts)
		return a->ts < b->ts;
	return _by_srec(a, b) < 0;
}

/* Heap entries carry their run's head timestamp: most comparisons stop there. */
struct head {
	int64_t ts;
	uint32_t run;
};

static inline bool _head_less(const struct srec *recs, const struct runs *runs,
			      const struct head *a, const struct head *b)
{
	if (a->ts != b->ts)
		return a->ts < b->ts;
	return _by_srec(&recs[runs->r[a->run].pos], &recs[runs->r[b->run].pos]) < 0;
}

static void _sift_down(const struct srec *recs, const struct runs *runs, struct head *heap,
		       uint32_t i)
{
	struct head h = heap[i];

	for (;;) {
		uint32_t l = 2 * i + 1, m;

		if (l >= runs->live)
			break;
		m = l + 1 < runs->live && _head_less(recs, runs, &heap[l + 1], &heap[l]) ? l + 1 : l;
		if (!_head_less(recs, runs, &heap[m], &h))
			break;
		heap[i] = heap[m];
		i = m;
	}
	heap[i] = h;
}

/*
 * Blocks come sorted by time (writes and compactions sort them), so a
 * window is a k-way merge of its blocks rather than a sort of everything:
 * several times faster for a whole fleet. Runs out of order are sorted
 * first, so the result never depends on that.
 */
static int _merge_runs(struct srec *recs, struct runs *runs, struct head **heap, uint32_t *cap)
{
	if (runs->n > *cap) {
		struct head *h = realloc(*heap, runs->n * sizeof(*h));

		if (!h)
			return -ENOMEM;
		*heap = h;
		*cap = runs->n;
	}
	for (uint32_t i = 0; i < runs->n; i++) {
		struct run *r = &runs->r[i];

		for (uint32_t j = r->pos + 1; j < r->end; j++) {
			if (_srec_less(&recs[j], &recs[j - 1])) {
				qsort(recs + r->pos, r->end - r->pos, sizeof(*recs), _by_srec);
				break;
			}
		}
		(*heap)[i] = (struct head){ recs[r->pos].ts, i };
	}
	runs->live = runs->n;
	for (uint32_t i = runs->n / 2; i-- > 0;)
		_sift_down(recs, runs, *heap, i);
	return 0;
}

/* Advances the run at the top of the heap; a run that ends leaves the heap. */
static void _merge_next(const struct srec *recs, struct runs *runs, struct head *heap)
{
	struct run *top = &runs->r[heap[0].run];

	if (++top->pos == top->end)
		heap[0] = heap[--runs->live];
	else
		heap[0].ts = recs[top->pos].ts;
	if (runs->live)
		_sift_down(recs, runs, heap, 0);
}

static int _sqlite_samples(void *impl, int64_t from, int64_t to, const struct selector *sel,
			   uint32_t type, uint32_t max_samples, struct profile *dict,
			   int (*cb)(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
				     int64_t value, const char *comm, uint32_t pid),
			   void *ctx, uint32_t *stride)
{
	struct sqlite_store *st = impl;
	struct query q = { .st = st, .sel = sel, .type = type };
	struct exporter ex = { .st = st, .out = dict };
	struct srec *recs = NULL;
	struct runs runs = { 0 };
	struct head *heap = NULL;
	uint32_t cap = 0, cap_heap = 0;
	uint64_t count, k = 1, idx = 0;
	int64_t w;
	int err;

	if (!_clamp(&from, &to))
		return 0;
	_query_begin(st);
	err = _begin_read(st);
	if (err)
		return err;
	err = _count_samples(&q, from, to, &count);
	if (err)
		goto out;
	if (max_samples && count > max_samples)
		k = (count + max_samples - 1) / max_samples;
	if (k > UINT32_MAX)
		k = UINT32_MAX;
	*stride = (uint32_t)k;
	/*
	 * Blocks never cross a window, so window by window the samples can
	 * be sorted and passed on in order, holding one window at a time.
	 * Empty windows are skipped through the t_max index.
	 */
	for (w = _floor_to(from, SPAN); !err && w < to; w += SPAN) {
		sqlite3_stmt *s = st->st[ST_NEXT_T_MAX];
		int64_t next;
		uint32_t n = 0;

		sqlite3_bind_int64(s, 1, w);
		err = _exec_int(st, ST_NEXT_T_MAX, -1, &next);
		if (err || next < 0 || _floor_to(next, SPAN) >= to)
			break;
		w = _floor_to(next, SPAN);
		runs.n = 0;
		err = _collect_window(&q, w, from, to, &recs, &n, &cap, &runs);
		if (err)
			break;
		err = _merge_runs(recs, &runs, &heap, &cap_heap);
		while (!err && runs.live) {
			const struct srec *r = &recs[runs.r[heap[0].run].pos];
			const struct series_info *si;
			int64_t stack;

			if (!(idx++ % k)) {
				stack = _ex_stack(&ex, r->stack);
				if (stack < 0) {
					err = (int)stack;
					break;
				}
				si = q.qs[r->qs].info;
				err = cb(ctx, r->ts, (uint32_t)stack, r->tid, r->cpu, r->value,
					 si->comm, si->pid);
			}
			_merge_next(recs, &runs, heap);
		}
	}
out:
	err = _end_read(st, err);
	free(recs);
	free(runs.r);
	free(heap);
	_query_free(&q);
	_exporter_free(&ex);
	return err;
}

/* ---- labels ---------------------------------------------------------------- */

/* The series with at least one sample (any type) in [from, to), into active. */
static int _active_series(struct sqlite_store *st, int64_t from, int64_t to, struct u64map *active)
{
	sqlite3_stmt *s = st->st[ST_BLOCKS_RANGE];
	int rc = SQLITE_DONE, err = 0;

	sqlite3_bind_int64(s, 1, from);
	sqlite3_bind_int64(s, 2, to);
	sqlite3_bind_int64(s, 3, _sat_add(to, SPAN));
	sqlite3_bind_int64(s, 4, -1);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		uint64_t series = (uint64_t)sqlite3_column_int64(s, 1);
		const struct block_sample *bs;
		bool inside = false;
		uint32_t n;

		if (_map_get(active, series))
			continue;
		if (sqlite3_column_int64(s, 2) >= from && sqlite3_column_int64(s, 3) < to) {
			inside = true;
		} else {
			err = _decode_row(st, s, 5, sqlite3_column_int64(s, 0), &bs, &n);
			for (uint32_t i = 0; !err && i < n && !inside; i++)
				inside = bs[i].ts_ns >= from && bs[i].ts_ns < to;
		}
		if (inside && !_map_upsert(active, series, NULL))
			err = -ENOMEM;
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "sample_blocks");
	return err;
}

static int _by_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Label names (name == NULL) or the values of label name over active series. */
static int _labels(struct sqlite_store *st, const char *name, int64_t from, int64_t to,
		   int (*cb)(void *ctx, const char *s), void *ctx)
{
	struct u64map active = { 0 };
	struct intern *set = intern__new();
	const char **sorted = NULL;
	uint32_t n;
	int err;

	if (!set)
		return -ENOMEM;
	if (!_clamp(&from, &to)) {
		intern__free(set);
		return 0;
	}
	_query_begin(st);
	err = _begin_read(st);
	if (err)
		goto out;
	err = _active_series(st, from, to, &active);
	for (uint32_t i = 0; !err && i < active.cap; i++) {
		const struct series_info *si;

		if (!active.slots[i].used)
			continue;
		err = _series_info(st, (int64_t)active.slots[i].key, &si);
		for (uint32_t j = 0; !err && j < si->nlabels; j++) {
			const char *t = name ? (strcmp(si->names[j], name) ? NULL : si->values[j])
					     : si->names[j];

			if (t && intern__add(set, t, strlen(t) + 1, NULL) < 0)
				err = -ENOMEM;
		}
	}
	err = _end_read(st, err);
	if (err)
		goto out;
	n = intern__count(set);
	sorted = malloc((n + 1) * sizeof(*sorted));
	if (!sorted) {
		err = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++)
		sorted[i] = intern__key(set, i, NULL);
	qsort(sorted, n, sizeof(*sorted), _by_str);
	for (uint32_t i = 0; !err && i < n; i++)
		err = cb(ctx, sorted[i]);
out:
	free(sorted);
	intern__free(set);
	_map_free(&active);
	return err;
}

static int _sqlite_label_names(void *impl, int64_t from, int64_t to,
			       int (*cb)(void *ctx, const char *name), void *ctx)
{
	return _labels(impl, NULL, from, to, cb, ctx);
}

static int _sqlite_label_values(void *impl, const char *name, int64_t from, int64_t to,
				int (*cb)(void *ctx, const char *value), void *ctx)
{
	return _labels(impl, name, from, to, cb, ctx);
}

/* ---- retention and stats --------------------------------------------------- */

/*
 * Windows a restart or a quiet series left with several blocks: merged here,
 * from where the last sweep stopped to the window before the newest data.
 */
static int _sweep(struct sqlite_store *st)
{
	sqlite3_stmt *s = st->st[ST_BLOCKS_SWEEP];
	struct due *due = NULL;
	uint32_t n = 0, cap = 0;
	int64_t newest, limit;
	int rc = SQLITE_DONE, err;

	err = _exec_int(st, ST_MAX_T_MAX, -1, &newest);
	if (err || newest < 0)
		return err;
	limit = _floor_to(newest, SPAN);
	if (limit <= st->sweep_from)
		return 0;
	sqlite3_bind_int64(s, 1, st->sweep_from);
	sqlite3_bind_int64(s, 2, limit);
	sqlite3_bind_int64(s, 3, SPAN);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW)
		err = _due_add(&due, &n, &cap, sqlite3_column_int64(s, 0),
			       (uint32_t)sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2));
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "sweep");
	if (!err) {
		_compact(st, due, n);
		st->sweep_from = limit;
	}
	free(due);
	return err;
}

/*
 * The hour bucket that straddles the cutoff still sums samples that are now
 * gone: rebuilt from the minute rollups that remain, so that rollups and raw
 * data keep agreeing exactly.
 */
static int _rebuild_hour(struct sqlite_store *st, int64_t cutoff)
{
	int64_t hour = _floor_to(cutoff, NS_HOUR);
	sqlite3_stmt *s = st->st[ST_RU_RANGE_M];
	struct rsample *rs = NULL;
	struct rollup_entry *e = NULL;
	uint32_t n = 0, cap = 0, k = 0;
	int rc = SQLITE_DONE, err = 0;

	if (hour == cutoff)
		return 0;
	sqlite3_bind_int64(s, 1, cutoff);
	sqlite3_bind_int64(s, 2, hour + NS_HOUR);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		const struct rollup_entry *re;
		uint32_t nre;

		err = blockcodec__decode_rollup(st->codec, sqlite3_column_blob(s, 3),
						sqlite3_column_bytes(s, 3), &re, &nre);
		if (err) {
			pr_warn("store: sqlite: corrupt rollup_1m row (bucket %lld, series %lld)\n",
				(long long)sqlite3_column_int64(s, 0), (long long)sqlite3_column_int64(s, 1));
			err = err == -ENOMEM ? err : -EIO;
			break;
		}
		if (n + nre > cap) {
			uint32_t ncap = (n + nre) * 2;
			struct rsample *a = realloc(rs, ncap * sizeof(*a));

			if (!a) {
				err = -ENOMEM;
				break;
			}
			rs = a;
			cap = ncap;
		}
		for (uint32_t i = 0; i < nre; i++)
			rs[n++] = (struct rsample){ hour, (uint32_t)sqlite3_column_int64(s, 1),
						    re[i].type, re[i].stack, re[i].sum };
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "rollup_1m");
	if (!err) {
		sqlite3_bind_int64(st->st[ST_RU_DEL_H], 1, hour);
		err = _exec(st, ST_RU_DEL_H);
	}
	if (err)
		goto out;
	if (n > 1)
		qsort(rs, n, sizeof(*rs), _by_rollup);
	for (uint32_t i = 0; i < n; i++) {
		if (k && !_by_rollup(&rs[k - 1], &rs[i]))
			rs[k - 1].sum += rs[i].sum;
		else
			rs[k++] = rs[i];
	}
	e = malloc((k + 1) * sizeof(*e));
	if (!e) {
		err = -ENOMEM;
		goto out;
	}
	/* The bucket's rows are gone, so merging into it writes them afresh. */
	for (uint32_t i = 0, j; !err && i < k; i = j) {
		uint32_t ne = 0;

		for (j = i; j < k && rs[j].series == rs[i].series; j++)
			e[ne++] = (struct rollup_entry){ rs[j].stack, rs[j].type, rs[j].sum };
		err = _rollup_merge(st, RU_HOUR, hour, rs[i].series, e, ne);
	}
out:
	free(rs);
	free(e);
	return err;
}

static int _sqlite_retain(void *impl, int64_t cutoff)
{
	struct sqlite_store *st = impl;
	int err;

	/*
	 * Blocks are the unit of deletion: rounding the cutoff down to their
	 * span makes "older than the cutoff" exact for blocks and rollups
	 * alike.
	 */
	if (cutoff > TS_LIMIT)
		cutoff = TS_LIMIT;
	cutoff = _floor_to(cutoff, SPAN);
	if (cutoff <= 0)
		return 0;
	err = _exec(st, ST_BEGIN);
	if (err)
		return err;
	sqlite3_bind_int64(st->st[ST_RETAIN_BLOCKS], 1, cutoff);
	sqlite3_bind_int64(st->st[ST_RETAIN_M], 1, cutoff);
	sqlite3_bind_int64(st->st[ST_RETAIN_H], 1, cutoff - NS_HOUR);
	err = _exec(st, ST_RETAIN_BLOCKS);
	err = err ?: _exec(st, ST_RETAIN_M);
	err = err ?: _exec(st, ST_RETAIN_H);
	sqlite3_bind_int64(st->st[ST_GPU_RETAIN], 1, cutoff);
	err = err ?: _exec(st, ST_GPU_RETAIN);
	err = err ?: _rebuild_hour(st, cutoff);
	if (!err) {
		char *msg = NULL;
		char sql[96];

		snprintf(sql, sizeof(sql), "DELETE FROM cpu_intervals WHERE start < %lld",
			 (long long)cutoff);
		if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK)
			err = _sq_fail(st, sqlite3_errcode(st->db), "cpu_intervals retention");
		sqlite3_free(msg);
	}
	err = err ?: _exec(st, ST_COMMIT);
	if (err) {
		_exec(st, ST_ROLLBACK);
		return err;
	}
	return _sweep(st);
}

static uint64_t _file_size(const char *path)
{
	struct stat sb;

	return stat(path, &sb) ? 0 : (uint64_t)sb.st_size;
}

static int _sqlite_stats(void *impl, struct store_stats *out)
{
	struct sqlite_store *st = impl;
	int64_t v;
	int err;

	err = _begin_read(st);
	if (err)
		return err;
	sqlite3_bind_text(st->st[ST_META_GET], 1, "samples", -1, SQLITE_STATIC);
	err = _exec_int(st, ST_META_GET, 0, &v);
	out->samples_written = (uint64_t)v;
	sqlite3_bind_text(st->st[ST_META_GET], 1, "batches", -1, SQLITE_STATIC);
	err = err ?: _exec_int(st, ST_META_GET, 0, &v);
	out->batches_written = (uint64_t)v;
	err = err ?: _exec_int(st, ST_MAX_SERIES, 0, &v);
	out->series = (uint64_t)v;
	err = err ?: _exec_int(st, ST_MAX_STACK, 0, &v);
	out->stacks = (uint64_t)v;
	err = err ?: _exec_int(st, ST_MAX_FRAME, 0, &v);
	out->frames = (uint64_t)v;
	err = _end_read(st, err);
	out->bytes_on_disk = _file_size(st->db_path) + _file_size(st->wal_path);
	return err;
}

/* ---- GPU intervals --------------------------------------------------------- */

static int _sqlite_gpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
				 struct profile *dict, uint32_t limit,
				 int (*cb)(void *ctx, const struct store_gpu_interval *iv),
				 void *ctx)
{
	struct sqlite_store *st = impl;
	struct query q = { .st = st, .sel = sel, .type = -1 };
	struct exporter ex = { .st = st, .out = dict };
	sqlite3_stmt *s = st->st[ST_GPU_RANGE];
	uint32_t n = 0;
	int err, rc;

	_query_begin(st);
	err = _begin_read(st);
	if (err)
		return err;
	sqlite3_bind_int64(s, 1, from);
	sqlite3_bind_int64(s, 2, to);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_gpu_interval iv;
		struct qseries *qs = _qseries(&q, sqlite3_column_int64(s, 2), &err);
		int64_t stack;

		if (!qs)
			continue;
		if (limit && n++ >= limit) {
			err = -E2BIG;
			break;
		}
		iv = (struct store_gpu_interval){
			.start_ns = sqlite3_column_int64(s, 0),
			.end_ns = sqlite3_column_int64(s, 1),
			.device = (uint32_t)sqlite3_column_int64(s, 3),
			.stream = (uint32_t)sqlite3_column_int64(s, 4),
			.kind = (uint32_t)sqlite3_column_int64(s, 5),
			.name = (const char *)sqlite3_column_text(s, 6),
			.stack = STORE_NO_STACK,
			.correlation = (uint64_t)sqlite3_column_int64(s, 8),
			.bytes = (uint64_t)sqlite3_column_int64(s, 9),
			.weight = (uint32_t)sqlite3_column_int64(s, 10),
			.pid = qs->info->pid,
			.comm = qs->info->comm,
		};
		if (!iv.name)
			iv.name = "";
		if (dict && sqlite3_column_type(s, 7) != SQLITE_NULL) {
			stack = _ex_stack(&ex, (uint32_t)sqlite3_column_int64(s, 7));
			if (stack < 0) {
				err = (int)stack;
				break;
			}
			iv.stack = (uint32_t)stack;
		}
		err = cb(ctx, &iv);
	}
	if (!err && rc != SQLITE_ROW && rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "gpu_intervals");
	sqlite3_reset(s);
	err = _end_read(st, err);
	_query_free(&q);
	_exporter_free(&ex);
	return err;
}

/* ---- metric points (struct batch_metric) ----------------------------------- */

/*
 * One row per point in metric_points, keyed by (series, name, ts) so that
 * a batch written twice (an agent resending after a lost acknowledgement)
 * stores each point once; metric_latest holds each (series, name)'s newest
 * point for /metrics. Series are the same rows as for samples (the node
 * label added); names are string ids. A point is about 40 bytes: at one
 * second and ~20 metrics per GPU that is ~70 MB per GPU per day of
 * retention, small next to samples.
 */
static const char MX_SCHEMA[] =
	"CREATE TABLE IF NOT EXISTS metric_points(series INTEGER NOT NULL, name INTEGER NOT NULL,"
	" ts INTEGER NOT NULL, value REAL NOT NULL, PRIMARY KEY(series, name, ts)) WITHOUT ROWID;"
	"CREATE INDEX IF NOT EXISTS metric_points_ts ON metric_points(ts);"
	"CREATE TABLE IF NOT EXISTS metric_latest(series INTEGER NOT NULL, name INTEGER NOT NULL,"
	" ts INTEGER NOT NULL, value REAL NOT NULL, PRIMARY KEY(series, name)) WITHOUT ROWID;";

enum { MX_INS, MX_LATEST_PUT, MX_RANGE, MX_LATEST, MX_RETAIN, MX_RETAIN_LATEST, MX_COUNT };

static const char *const _mx_sql[MX_COUNT] = {
	[MX_INS] = "INSERT OR REPLACE INTO metric_points(series, name, ts, value) VALUES(?1, ?2, ?3, ?4)",
	[MX_LATEST_PUT] = "INSERT INTO metric_latest(series, name, ts, value) VALUES(?1, ?2, ?3, ?4)"
			  " ON CONFLICT(series, name) DO UPDATE SET ts = excluded.ts,"
			  " value = excluded.value WHERE excluded.ts >= metric_latest.ts",
	[MX_RANGE] = "SELECT p.series, s.text, p.ts, p.value FROM metric_points p"
		     " JOIN strings s ON s.id = p.name WHERE p.ts >= ?1 AND p.ts < ?2"
		     " ORDER BY p.series, s.text, p.ts",
	[MX_LATEST] = "SELECT l.series, s.text, l.ts, l.value FROM metric_latest l"
		      " JOIN strings s ON s.id = l.name WHERE l.ts >= ?1 ORDER BY s.text, l.series",
	[MX_RETAIN] = "DELETE FROM metric_points WHERE ts < ?1",
	[MX_RETAIN_LATEST] = "DELETE FROM metric_latest WHERE ts < ?1",
};

_Static_assert(MX_COUNT <= sizeof(((struct sqlite_store *)0)->mx) /
	       sizeof(((struct sqlite_store *)0)->mx[0]), "mx statements");

static int _mx_prepare(struct sqlite_store *st)
{
	int rc;

	if (st->mx[0])
		return 0;
	rc = sqlite3_exec(st->db, MX_SCHEMA, NULL, NULL, NULL);
	if (rc != SQLITE_OK)
		return _sq_fail(st, rc, "metric tables");
	for (int i = 0; i < MX_COUNT; i++) {
		rc = sqlite3_prepare_v3(st->db, _mx_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					&st->mx[i], NULL);
		if (rc != SQLITE_OK) {
			int err = _sq_fail(st, rc, _mx_sql[i]);

			for (int j = 0; j <= i; j++) {
				sqlite3_finalize(st->mx[j]);
				st->mx[j] = NULL;
			}
			return err;
		}
	}
	return 0;
}

static int _mx_step(struct sqlite_store *st, int id)
{
	int rc = sqlite3_step(st->mx[id]);

	sqlite3_reset(st->mx[id]);
	return rc == SQLITE_DONE ? 0 : _sq_fail(st, rc, _mx_sql[id]);
}

static int _sqlite_write_metrics(void *impl, const char *node, const struct batch *b)
{
	struct sqlite_store *st = impl;
	const struct profile *d = b->dict;
	uint32_t nseries = batch__nseries(b), nstrings = intern__count(d->strings);
	struct xlate x = { .b = b, .d = d, .nstrings = nstrings };
	bool in_txn = false;
	int err;

	for (uint32_t i = 0; i < b->nmetrics; i++) {
		const struct batch_metric *m = &b->metrics[i];

		if (m->series >= nseries || m->name >= nstrings || m->ts_ns < 0 ||
		    m->ts_ns >= TS_LIMIT || m->value != m->value ||
		    !profile__string(d, m->name)[0]) {
			pr_warn("store: sqlite: batch from %s: metric point %u has series %u/%u, "
				"name %u/%u, ts %lld\n", node, i, m->series, nseries, m->name,
				nstrings, (long long)m->ts_ns);
			return -EINVAL;
		}
	}
	if (!b->nmetrics)
		return 0;
	err = _mx_prepare(st);
	if (err)
		return err;
	err = -ENOMEM;
	x.strings = calloc(nstrings + 1, sizeof(uint32_t));
	x.series = calloc(nseries + 1, sizeof(uint32_t));
	if (!x.strings || !x.series)
		goto out;
	err = _exec(st, ST_BEGIN);
	if (err)
		goto out;
	in_txn = true;
	for (uint32_t i = 0; i < b->nmetrics && !err; i++) {
		const struct batch_metric *m = &b->metrics[i];
		int64_t series = _x_series(st, &x, node, m->series);
		int64_t name = series < 0 ? series : _x_string(st, &x, m->name);

		if (series < 0 || name < 0) {
			err = (int)(series < 0 ? series : name);
			break;
		}
		for (int k = MX_INS; k <= MX_LATEST_PUT && !err; k++) {
			sqlite3_bind_int64(st->mx[k], 1, series);
			sqlite3_bind_int64(st->mx[k], 2, name);
			sqlite3_bind_int64(st->mx[k], 3, m->ts_ns);
			sqlite3_bind_double(st->mx[k], 4, m->value);
			err = _mx_step(st, k);
		}
	}
	if (!err)
		err = _exec(st, ST_COMMIT);
	if (!err)
		in_txn = false;
out:
	if (err && in_txn) {
		_exec(st, ST_ROLLBACK);
		_drop_caches(st);
	}
	free(x.strings);
	free(x.series);
	return err;
}

/* Label lookup for the selector: the series' labels plus __name__. */
struct mx_get {
	const struct series_info *si;
	const char *name;
};

static const char *_mx_get(void *ctx, const char *label)
{
	const struct mx_get *g = ctx;

	if (!strcmp(label, "__name__"))
		return g->name;
	return _info_get((void *)g->si, label);
}

static int _sqlite_metrics(void *impl, int64_t from, int64_t to, int64_t step,
			   const struct selector *sel, const struct store_metric_visitor *v)
{
	struct sqlite_store *st = impl;
	sqlite3_stmt *s;
	char *cur_name = NULL;
	int64_t cur_series = -1;
	struct store_metric_fold fold = { .v = v, .from = from, .step = step };
	bool match = false;
	int rc = SQLITE_DONE, err;

	err = _mx_prepare(st);
	if (err)
		return err;
	err = _begin_read(st);
	if (err)
		return err;
	s = st->mx[MX_RANGE];
	sqlite3_bind_int64(s, 1, from);
	sqlite3_bind_int64(s, 2, to);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t series = sqlite3_column_int64(s, 0), ts = sqlite3_column_int64(s, 2);
		const char *name = (const char *)sqlite3_column_text(s, 1);
		double val = sqlite3_column_double(s, 3);

		if (!name)
			name = "";
		if (series != cur_series || !cur_name || strcmp(name, cur_name)) {
			const struct series_info *si;

			err = store_metric_fold__flush(&fold);
			if (err)
				break;
			free(cur_name);
			cur_name = strdup(name);
			if (!cur_name) {
				err = -ENOMEM;
				break;
			}
			cur_series = series;
			err = _series_info(st, series, &si);
			if (err)
				break;
			{
				struct mx_get g = { si, name };

				match = !sel || selector__matches(sel, _mx_get, &g);
			}
			if (match)
				err = v->series(v->ctx, name, si->names, si->values, si->nlabels);
			if (err)
				break;
		}
		if (!match)
			continue;
		err = store_metric_fold__add(&fold, ts, val);
	}
	if (!err)
		err = store_metric_fold__flush(&fold);
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = _sq_fail(st, rc, "metric_points");
	free(cur_name);
	return _end_read(st, err);
}

static int _sqlite_metrics_latest(void *impl, int64_t since,
				  int (*cb)(void *ctx, const char *name, const char *const *lnames,
					    const char *const *lvalues, size_t n, int64_t ts,
					    double value),
				  void *ctx)
{
	struct sqlite_store *st = impl;
	sqlite3_stmt *s;
	int rc = SQLITE_DONE, err;

	err = _mx_prepare(st);
	if (err)
		return err;
	err = _begin_read(st);
	if (err)
		return err;
	s = st->mx[MX_LATEST];
	sqlite3_bind_int64(s, 1, since);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		const struct series_info *si;
		const char *name = (const char *)sqlite3_column_text(s, 1);

		err = _series_info(st, sqlite3_column_int64(s, 0), &si);
		if (!err)
			err = cb(ctx, name ? name : "", si->names, si->values, si->nlabels,
				 sqlite3_column_int64(s, 2), sqlite3_column_double(s, 3));
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = _sq_fail(st, rc, "metric_latest");
	return _end_read(st, err);
}

static int _sqlite_retain_metrics(void *impl, int64_t cutoff)
{
	struct sqlite_store *st = impl;
	int err = _mx_prepare(st);

	if (err)
		return err;
	err = _exec(st, ST_BEGIN);
	if (err)
		return err;
	sqlite3_bind_int64(st->mx[MX_RETAIN], 1, cutoff);
	sqlite3_bind_int64(st->mx[MX_RETAIN_LATEST], 1, cutoff);
	err = _mx_step(st, MX_RETAIN);
	err = err ?: _mx_step(st, MX_RETAIN_LATEST);
	err = err ?: _exec(st, ST_COMMIT);
	if (err)
		_exec(st, ST_ROLLBACK);
	return err;
}

/* ---- CPU busy intervals ----------------------------------------------------- */

enum { CIV_INS, CIV_RANGE, CIV_TEXT };

static const char *const _civ_sql[] = {
	[CIV_INS] = "INSERT OR REPLACE INTO cpu_intervals(start, node, cpu, dur, series, tid, comm)"
		    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	/* ?1 = from - chunk: no piece starting earlier reaches the window. */
	[CIV_RANGE] = "SELECT start, dur, node, cpu, series, tid, comm FROM cpu_intervals"
		      " WHERE start >= ?1 AND start < ?2 AND start + dur > ?3"
		      " AND (?4 < 0 OR cpu = ?4) ORDER BY node, cpu, start",
	[CIV_TEXT] = "SELECT text FROM strings WHERE id = ?1",
};

static int _civ_stmt(struct sqlite_store *st, int i, sqlite3_stmt **out)
{
	int rc;

	if (!st->civ_st[i]) {
		rc = sqlite3_prepare_v3(st->db, _civ_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					&st->civ_st[i], NULL);
		if (rc != SQLITE_OK)
			return _sq_fail(st, rc, _civ_sql[i]);
	}
	*out = st->civ_st[i];
	return 0;
}

/* What can be checked without the database. */
static int _civ_check(const char *node, const struct batch *b)
{
	uint32_t nseries = batch__nseries(b), nstrings = intern__count(b->dict->strings);

	for (uint32_t i = 0; i < b->ncpu_intervals; i++) {
		const struct batch_cpu_interval *iv = &b->cpu_intervals[i];

		if (iv->series >= nseries || iv->comm >= nstrings || iv->start_ns < 0 ||
		    iv->end_ns < iv->start_ns || iv->end_ns >= TS_LIMIT) {
			pr_warn("store: sqlite: batch from %s: CPU interval %u has series %u/%u, "
				"comm %u/%u, [%lld, %lld)\n", node, i, iv->series, nseries,
				iv->comm, nstrings, (long long)iv->start_ns, (long long)iv->end_ns);
			return -EINVAL;
		}
	}
	return 0;
}

/* Inside the caller's transaction. */
static int _civ_write(struct sqlite_store *st, struct xlate *x, const char *node,
		      const struct batch *b)
{
	sqlite3_stmt *s;
	int64_t node_id;
	uint64_t rows = 0;
	int err, rc;

	if (!b->ncpu_intervals)
		return 0;
	err = _civ_stmt(st, CIV_INS, &s);
	if (err)
		return err;
	node_id = _store_string(st, node);
	if (node_id < 0)
		return (int)node_id;
	for (uint32_t i = 0; i < b->ncpu_intervals; i++) {
		const struct batch_cpu_interval *iv = &b->cpu_intervals[i];
		int64_t series = _x_series(st, x, node, iv->series);
		int64_t comm = series < 0 ? series : _x_string(st, x, iv->comm);

		if (comm < 0)
			return (int)comm;
		for (int64_t a = iv->start_ns; a < iv->end_ns; a += STORE_CPU_INTERVAL_CHUNK_NS) {
			int64_t d = iv->end_ns - a;

			if (d > STORE_CPU_INTERVAL_CHUNK_NS)
				d = STORE_CPU_INTERVAL_CHUNK_NS;
			sqlite3_bind_int64(s, 1, a);
			sqlite3_bind_int64(s, 2, node_id);
			sqlite3_bind_int64(s, 3, iv->cpu);
			sqlite3_bind_int64(s, 4, d);
			sqlite3_bind_int64(s, 5, series);
			sqlite3_bind_int64(s, 6, iv->tid);
			sqlite3_bind_int64(s, 7, comm);
			rc = sqlite3_step(s);
			sqlite3_reset(s);
			if (rc != SQLITE_DONE)
				return _sq_fail(st, rc, "cpu_intervals");
			rows++;
		}
	}
	return _meta_add(st, "cpu_intervals", (int64_t)rows);
}

static int _sqlite_write_cpu_intervals(void *impl, const char *node, const struct batch *b)
{
	struct sqlite_store *st = impl;
	struct xlate x = { .b = b, .d = b->dict };
	int err = _civ_check(node, b);

	if (err || !b->ncpu_intervals)
		return err;
	x.nstrings = intern__count(b->dict->strings);
	x.strings = calloc(x.nstrings + 1, sizeof(uint32_t));
	x.series = calloc(batch__nseries(b) + 1, sizeof(uint32_t));
	err = -ENOMEM;
	if (!x.strings || !x.series)
		goto out;
	err = _exec(st, ST_BEGIN);
	if (err)
		goto out;
	err = _civ_write(st, &x, node, b);
	if (!err)
		err = _exec(st, ST_COMMIT);
	if (err) {
		_exec(st, ST_ROLLBACK);
		_drop_caches(st);
	}
out:
	free(x.strings);
	free(x.series);
	return err;
}

/* String ids to text for one query: each looked up once. */
struct civ_texts {
	struct u64map ix;	/* string id -> index in text */
	char **text;
	uint32_t n, cap;
};

static void _civ_texts_free(struct civ_texts *t)
{
	for (uint32_t i = 0; i < t->n; i++)
		free(t->text[i]);
	free(t->text);
	_map_free(&t->ix);
}

static int _civ_text(struct sqlite_store *st, struct civ_texts *t, int64_t id, const char **out)
{
	sqlite3_stmt *s;
	uint64_t *slot;
	bool added;
	char *text;
	int rc, err;

	slot = _map_upsert(&t->ix, (uint64_t)id, &added);
	if (!slot)
		return -ENOMEM;
	if (!added) {
		*out = t->text[*slot];
		return 0;
	}
	err = _civ_stmt(st, CIV_TEXT, &s);
	if (err)
		return err;
	sqlite3_bind_int64(s, 1, id);
	rc = sqlite3_step(s);
	text = strdup(rc == SQLITE_ROW && sqlite3_column_text(s, 0) ?
		      (const char *)sqlite3_column_text(s, 0) : "");
	sqlite3_reset(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		free(text);
		return _sq_fail(st, rc, "strings");
	}
	if (!text)
		return -ENOMEM;
	if (t->n == t->cap) {
		uint32_t cap = t->cap ? t->cap * 2 : 64;
		char **a = realloc(t->text, cap * sizeof(*a));

		if (!a) {
			free(text);
			return -ENOMEM;
		}
		t->text = a;
		t->cap = cap;
	}
	*slot = t->n;
	t->text[t->n++] = text;
	*out = text;
	return 0;
}

struct civ_row {
	int64_t start, end, node, series, comm;
	uint32_t cpu, tid, pid;
};

static int _civ_emit(struct sqlite_store *st, struct civ_texts *t, const struct civ_row *r,
		     int64_t from, int64_t to,
		     int (*cb)(void *ctx, const struct store_cpu_interval *iv), void *ctx)
{
	struct store_cpu_interval iv = {
		.start_ns = r->start < from ? from : r->start,
		.end_ns = r->end > to ? to : r->end,
		.cpu = r->cpu, .pid = r->pid, .tid = r->tid,
	};
	int err = _civ_text(st, t, r->node, &iv.node);

	err = err ?: _civ_text(st, t, r->comm, &iv.comm);
	if (err)
		return err;
	return cb(ctx, &iv);
}

static int _sqlite_cpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
				 int64_t cpu,
				 int (*cb)(void *ctx, const struct store_cpu_interval *iv), void *ctx)
{
	struct sqlite_store *st = impl;
	struct query q = { .st = st, .sel = sel };
	struct civ_texts texts = { 0 };
	struct civ_row pend = { 0 };
	bool have = false;
	sqlite3_stmt *s;
	int err, rc;

	if (!_clamp(&from, &to))
		return 0;
	_query_begin(st);
	err = _civ_stmt(st, CIV_RANGE, &s);
	if (err)
		return err;
	err = _begin_read(st);
	if (err)
		return err;
	sqlite3_bind_int64(s, 1, from > STORE_CPU_INTERVAL_CHUNK_NS ?
			   from - STORE_CPU_INTERVAL_CHUNK_NS : 0);
	sqlite3_bind_int64(s, 2, to);
	sqlite3_bind_int64(s, 3, from);
	sqlite3_bind_int64(s, 4, cpu);
	while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct civ_row r = {
			.start = sqlite3_column_int64(s, 0),
			.node = sqlite3_column_int64(s, 2),
			.cpu = (uint32_t)sqlite3_column_int64(s, 3),
			.series = sqlite3_column_int64(s, 4),
			.tid = (uint32_t)sqlite3_column_int64(s, 5),
			.comm = sqlite3_column_int64(s, 6),
		};
		struct qseries *qs;

		r.end = r.start + sqlite3_column_int64(s, 1);
		qs = _qseries(&q, r.series, &err);
		if (err)
			break;
		if (!qs)
			continue;
		r.pid = qs->info->pid;
		/* The pieces of one interval, written together, join up again. */
		if (have && pend.end == r.start && pend.node == r.node && pend.cpu == r.cpu &&
		    pend.series == r.series && pend.tid == r.tid && pend.comm == r.comm) {
			pend.end = r.end;
			continue;
		}
		if (have) {
			err = _civ_emit(st, &texts, &pend, from, to, cb, ctx);
			if (err)
				break;
		}
		pend = r;
		have = true;
	}
	if (!err && rc != SQLITE_ROW && rc != SQLITE_DONE)
		err = _sq_fail(st, rc, "cpu_intervals");
	sqlite3_reset(s);
	if (!err && have)
		err = _civ_emit(st, &texts, &pend, from, to, cb, ctx);
	err = _end_read(st, err);
	_civ_texts_free(&texts);
	_query_free(&q);
	return err;
}

const struct store_backend store_sqlite_backend = {
	.name = "sqlite",
	.open = _sqlite_open,
	.close = _sqlite_close,
	.write = _sqlite_write,
	.profile = _sqlite_profile,
	.samples = _sqlite_samples,
	.series = _sqlite_series,
	.label_names = _sqlite_label_names,
	.label_values = _sqlite_label_values,
	.retain = _sqlite_retain,
	.stats = _sqlite_stats,
	.gpu_intervals = _sqlite_gpu_intervals,
	.write_metrics = _sqlite_write_metrics,
	.metrics = _sqlite_metrics,
	.metrics_latest = _sqlite_metrics_latest,
	.retain_metrics = _sqlite_retain_metrics,
	.write_cpu_intervals = _sqlite_write_cpu_intervals,
	.cpu_intervals = _sqlite_cpu_intervals,
};
