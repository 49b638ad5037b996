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
 *     samples small.
 *   - rollup_1m, rollup_1h: per (bucket, series) the (stack, type, sum)
 *     triples of the bucket and, apart, its per-type totals. Minute rows are
 *     merged into (read, add, write back) in the same transaction as the
 *     samples, so they always agree with the raw data, also after a crash.
 *     Hour rows are built once, from the minute rows, after the hour has
 *     closed (meta 'hours_through': every hour before it is in rollup_1h):
 *     merging every batch into a row that grows all hour long rewrote most
 *     of what a batch wrote. A late sample, older than hours_through, is
 *     merged into its hour row as well. Retention rebuilds the hour it cuts
 *     through from the minutes that remain.
 *
 * A profile over [from, to) reads whole hours before hours_through from
 * rollup_1h, whole minutes from rollup_1m and decodes blocks only for the
 * partial minutes at both ends.
 *
 * Timestamps must lie in [0, STORE_TS_LIMIT): Unix nanoseconds, with room for
 * bucket arithmetic never to overflow. Samples' are rounded to the nearest
 * microsecond (store__sample_ts()) before anything is derived from them.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/log.h"
#include "sqlite_int.h"

/*
 * 1: the first; rollup tables gained their totals column without a version
 * change (such files are upgraded too). 2: series.period_ns. 3: hour rows
 * are built after their hour (meta 'hours_through'); older programs, which
 * would read the missing ones as empty, refuse the file.
 */
#define SCHEMA_VERSION	3
_Static_assert(STORE_NS_HOUR == 3600000000000LL, "the hour in _sqlite_open()'s SQL");
#define ZSTD_LEVEL	1

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
	/*
	 * One index, in time order, for time ranges and for a window's blocks
	 * of one series (compaction): new entries land at its end. An index
	 * by series first, as before version 3, put each batch's entries on a
	 * page per series, and those pages were most of what a batch wrote.
	 */
	"CREATE INDEX IF NOT EXISTS sample_blocks_t_max_series ON sample_blocks(t_max, series);"
	"DROP INDEX IF EXISTS sample_blocks_t_max;"
	"DROP INDEX IF EXISTS sample_blocks_series;"
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

const char *const sqlite__sql[ST_COUNT] = {
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
	/* Blocks never cross a window: t_max in [?2, ?3) finds those of window ?2. */
	[ST_BLOCKS_WINDOW] = "SELECT id, n, data FROM sample_blocks"
			     " WHERE t_max >= ?2 AND t_max < ?3 AND series = ?1 AND type = ?4",
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
	[ST_FRAME_SCAN] = "SELECT id, kind, mapping, function FROM frames",
	[ST_STACK_SCAN] = "SELECT id, frames FROM stacks",
	[ST_SERIES_PERIOD] = "SELECT period_ns FROM series WHERE id = ?1",
	[ST_GPU_INS] = "INSERT INTO gpu_intervals(start, end, series, device, stream, kind, name,"
		       " stack, correlation, bytes, weight)"
		       " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
	[ST_GPU_RANGE] = "SELECT g.start, g.end, g.series, g.device, g.stream, g.kind, s.text,"
			 " g.stack, g.correlation, g.bytes, g.weight FROM gpu_intervals g"
			 " JOIN strings s ON s.id = g.name"
			 " WHERE g.start >= ?1 AND g.start < ?2 ORDER BY g.start, g.rowid",
	[ST_GPU_RETAIN] = "DELETE FROM gpu_intervals WHERE start < ?1",
	[ST_RU_ROLL_M] = "SELECT bucket, series, data FROM rollup_1m"
			 " WHERE bucket >= ?1 AND bucket < ?2 ORDER BY bucket",
	[ST_META_SET] = "INSERT INTO meta(key, value) VALUES(?1, ?2)"
			" ON CONFLICT(key) DO UPDATE SET value = excluded.value",
};

/* ---- the store ------------------------------------------------------------ */

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

int sqlite__fail(struct sqlite_store *st, int rc, const char *what)
{
	pr_warn("store: sqlite: %s: %s (%d)\n", what, sqlite3_errmsg(st->db), rc);
	return _sq_errno(rc);
}

/* Runs a statement that returns no rows. */
int sqlite__exec(struct sqlite_store *st, enum stmt_id id)
{
	int rc = sqlite3_step(st->st[id]);

	sqlite3_reset(st->st[id]);
	if (rc != SQLITE_DONE)
		return sqlite__fail(st, rc, sqlite__sql[id]);
	return 0;
}

/* Runs a statement returning one integer (NULL or no row: dflt). */
int sqlite__exec_int(struct sqlite_store *st, enum stmt_id id, int64_t dflt, int64_t *out)
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
		return sqlite__fail(st, rc, sqlite__sql[id]);
	return 0;
}

static void _dx_free(struct dxlate *d)
{
	if (!d)
		return;
	for (int k = 0; k < DICT_NKINDS; k++)
		dict_ids__release(&d->ids[k]);
	free(d->node);
	free(d);
}

static uint64_t _dx_bytes(const struct dxlate *d)
{
	uint64_t n = sizeof(*d);

	for (int k = 0; k < DICT_NKINDS; k++)
		n += (uint64_t)d->ids[k].cap * sizeof(uint32_t);
	return n;
}

void sqlite__dx_remove(struct sqlite_store *st, uint32_t i)
{
	st->dx_bytes -= _dx_bytes(st->dx[i]);
	_dx_free(st->dx[i]);
	st->dx[i] = st->dx[--st->ndx];
}

void sqlite__drop_caches(struct sqlite_store *st)
{
	while (st->ndx)
		sqlite__dx_remove(st, st->ndx - 1);

	sqlite__cache_free(&st->strings);
	sqlite__cache_free(&st->mappings);
	sqlite__cache_free(&st->frames);
	sqlite__cache_free(&st->stacks);
	sqlite__cache_free(&st->series);
	sqlite__shapes_free(&st->shapes);
}

void sqlite__drop_series_info(struct sqlite_store *st)
{
	for (uint32_t i = 0; i < st->ninfos; i++)
		free(st->infos[i]);
	st->ninfos = 0;
	u64map__free(&st->series_info);
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
	sqlite__drop_caches(st);
	free(st->dx);
	sqlite__drop_series_info(st);
	free(st->infos);
	u64map__free(&st->open_window);
	free(st->fbuf);
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

	return rc == SQLITE_OK ? 0 : sqlite__fail(st, rc, sql);
}

/* 1 when table has the column, 0 when not, or -errno. */
static int _has_column(struct sqlite_store *st, const char *table, const char *column)
{
	sqlite3_stmt *s;
	int rc = sqlite3_prepare_v2(st->db, "SELECT 1 FROM pragma_table_info(?1) WHERE name = ?2",
				    -1, &s, NULL);

	if (rc != SQLITE_OK)
		return sqlite__fail(st, rc, "pragma_table_info");
	sqlite3_bind_text(s, 1, table, -1, SQLITE_STATIC);
	sqlite3_bind_text(s, 2, column, -1, SQLITE_STATIC);
	rc = sqlite3_step(s);
	sqlite3_finalize(s);
	if (rc == SQLITE_ROW)
		return 1;
	return rc == SQLITE_DONE ? 0 : sqlite__fail(st, rc, "pragma_table_info");
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
		err = sqlite__fail(st, rc, "migrating rollups");
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
			err = sqlite__fail(st, rc, "migrating rollups");
			goto out;
		}
	}
	if (rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "migrating rollups");
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
	/*
	 * Files written before hours_through existed kept every hour row up
	 * to date, the newest too: their hours are through after the last
	 * hour row. A new file has none.
	 */
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(st->db, "INSERT OR IGNORE INTO meta SELECT 'hours_through',"
				  " coalesce(max(bucket) + 3600000000000, 0) FROM rollup_1h",
				  NULL, NULL, NULL);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(st->db, "PRAGMA user_version=" FW_STR(SCHEMA_VERSION) "; COMMIT",
				  NULL, NULL, NULL);
	if (rc != SQLITE_OK) {
		sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
		goto sqlerr;
	}
	for (int i = 0; i < ST_COUNT; i++) {
		rc = sqlite3_prepare_v3(st->db, sqlite__sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->st[i], NULL);
		if (rc != SQLITE_OK)
			goto sqlerr;
	}
	rc = sqlite__meta_get(st, "hours_through", 0, &st->hours_through);
	if (rc) {
		e = -rc;
		snprintf(err, err_len, "%s: cannot read hours_through: %s", st->db_path, strerror(e));
		goto err;
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

const struct store_backend store_sqlite_backend = {
	.name = "sqlite",
	.open = _sqlite_open,
	.close = _sqlite_close,
	.write = sqlite__write,
	.profile = sqlite__profile,
	.flamegraph = sqlite__flamegraph,
	.samples = sqlite__samples,
	.series = sqlite__series,
	.label_names = sqlite__label_names,
	.label_values = sqlite__label_values,
	.retain = sqlite__retain,
	.stats = sqlite__stats,
	.gpu_intervals = sqlite__gpu_intervals,
	.write_metrics = sqlite__write_metrics,
	.metrics = sqlite__metrics,
	.metrics_latest = sqlite__metrics_latest,
	.retain_metrics = sqlite__retain_metrics,
	.write_cpu_intervals = sqlite__write_cpu_intervals,
	.cpu_intervals = sqlite__cpu_intervals,
};
