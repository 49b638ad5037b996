// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend: retention (with the compaction sweep that follows it) and
 * the store's statistics.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "common/log.h"
#include "sqlite_int.h"

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

	err = sqlite__exec_int(st, ST_MAX_T_MAX, -1, &newest);
	if (err || newest < 0)
		return err;
	limit = sqlite__floor_to(newest, SPAN);
	if (limit <= st->sweep_from)
		return 0;
	sqlite3_bind_int64(s, 1, st->sweep_from);
	sqlite3_bind_int64(s, 2, limit);
	sqlite3_bind_int64(s, 3, SPAN);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW)
		err = sqlite__due_add(&due, &n, &cap, sqlite3_column_int64(s, 0),
				      (uint32_t)sqlite3_column_int64(s, 1), sqlite3_column_int64(s, 2));
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "sweep");
	if (!err) {
		sqlite__compact(st, due, n);
		st->sweep_from = limit;
	}
	free(due);
	return err;
}

/*
 * The hour bucket that straddles the cutoff still sums samples that are now
 * gone: rebuilt from the minute rollups that remain, so that rollups and raw
 * data keep agreeing exactly. An hour not built yet (hours_through) has no
 * row to rebuild.
 */
static int _rebuild_hour(struct sqlite_store *st, int64_t cutoff)
{
	int64_t hour = sqlite__floor_to(cutoff, STORE_NS_HOUR);
	sqlite3_stmt *s = st->st[ST_RU_RANGE_M];
	struct rsample *rs = NULL;
	struct rollup_entry *e = NULL;
	uint32_t n = 0, cap = 0, k = 0;
	int rc = SQLITE_DONE, err = 0;

	if (hour == cutoff || hour >= st->hours_through)
		return 0;
	sqlite3_bind_int64(s, 1, cutoff);
	sqlite3_bind_int64(s, 2, hour + STORE_NS_HOUR);
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
		err = sqlite__fail(st, rc, "rollup_1m");
	if (!err) {
		sqlite3_bind_int64(st->st[ST_RU_DEL_H], 1, hour);
		err = sqlite__exec(st, ST_RU_DEL_H);
	}
	if (err)
		goto out;
	if (n > 1)
		qsort(rs, n, sizeof(*rs), sqlite__by_rollup);
	for (uint32_t i = 0; i < n; i++) {
		if (k && !sqlite__by_rollup(&rs[k - 1], &rs[i]))
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
		err = sqlite__rollup_merge(st, RU_HOUR, hour, rs[i].series, e, ne);
	}
out:
	free(rs);
	free(e);
	return err;
}

int sqlite__retain(void *impl, int64_t cutoff)
{
	struct sqlite_store *st = impl;
	int err;

	/*
	 * Blocks are the unit of deletion: rounding the cutoff down to their
	 * span makes "older than the cutoff" exact for blocks and rollups
	 * alike.
	 */
	if (cutoff > STORE_TS_LIMIT)
		cutoff = STORE_TS_LIMIT;
	cutoff = sqlite__floor_to(cutoff, SPAN);
	if (cutoff <= 0)
		return 0;
	err = sqlite__exec(st, ST_BEGIN);
	if (err)
		return err;
	sqlite3_bind_int64(st->st[ST_RETAIN_BLOCKS], 1, cutoff);
	sqlite3_bind_int64(st->st[ST_RETAIN_M], 1, cutoff);
	sqlite3_bind_int64(st->st[ST_RETAIN_H], 1, cutoff - STORE_NS_HOUR);
	err = sqlite__exec(st, ST_RETAIN_BLOCKS);
	err = err ?: sqlite__exec(st, ST_RETAIN_M);
	err = err ?: sqlite__exec(st, ST_RETAIN_H);
	sqlite3_bind_int64(st->st[ST_GPU_RETAIN], 1, cutoff);
	err = err ?: sqlite__exec(st, ST_GPU_RETAIN);
	err = err ?: _rebuild_hour(st, cutoff);
	if (!err) {
		char *msg = NULL;
		char sql[96];

		snprintf(sql, sizeof(sql), "DELETE FROM cpu_intervals WHERE start < %lld",
			 (long long)cutoff);
		if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK)
			err = sqlite__fail(st, sqlite3_errcode(st->db), "cpu_intervals retention");
		sqlite3_free(msg);
	}
	err = err ?: sqlite__exec(st, ST_COMMIT);
	if (err) {
		sqlite__exec(st, ST_ROLLBACK);
		return err;
	}
	return _sweep(st);
}

static uint64_t _file_size(const char *path)
{
	struct stat sb;

	return stat(path, &sb) ? 0 : (uint64_t)sb.st_size;
}

int sqlite__stats(void *impl, struct store_stats *out)
{
	struct sqlite_store *st = impl;
	int64_t v;
	int err;

	err = sqlite__begin_read(st);
	if (err)
		return err;
	sqlite3_bind_text(st->st[ST_META_GET], 1, "samples", -1, SQLITE_STATIC);
	err = sqlite__exec_int(st, ST_META_GET, 0, &v);
	out->samples_written = (uint64_t)v;
	sqlite3_bind_text(st->st[ST_META_GET], 1, "batches", -1, SQLITE_STATIC);
	err = err ?: sqlite__exec_int(st, ST_META_GET, 0, &v);
	out->batches_written = (uint64_t)v;
	err = err ?: sqlite__exec_int(st, ST_MAX_SERIES, 0, &v);
	out->series = (uint64_t)v;
	err = err ?: sqlite__exec_int(st, ST_MAX_STACK, 0, &v);
	out->stacks = (uint64_t)v;
	err = err ?: sqlite__exec_int(st, ST_MAX_FRAME, 0, &v);
	out->frames = (uint64_t)v;
	err = sqlite__end_read(st, err);
	out->bytes_on_disk = _file_size(st->db_path) + _file_size(st->wal_path);
	return err;
}
