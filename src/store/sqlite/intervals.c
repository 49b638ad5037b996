// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend: GPU activity intervals as queries read them (they are
 * written with the samples, write.c), and CPU busy intervals.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "sqlite_int.h"

/* ---- GPU intervals --------------------------------------------------------- */

int sqlite__gpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
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

	sqlite__query_begin(st);
	err = sqlite__begin_read(st);
	if (err)
		return err;
	sqlite3_bind_int64(s, 1, from);
	sqlite3_bind_int64(s, 2, to);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		struct store_gpu_interval iv;
		struct qseries *qs = sqlite__qseries(&q, sqlite3_column_int64(s, 2), &err);
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
			stack = sqlite__ex_stack(&ex, (uint32_t)sqlite3_column_int64(s, 7));
			if (stack < 0) {
				err = (int)stack;
				break;
			}
			iv.stack = (uint32_t)stack;
		}
		err = cb(ctx, &iv);
	}
	if (!err && rc != SQLITE_ROW && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "gpu_intervals");
	sqlite3_reset(s);
	err = sqlite__end_read(st, err);
	sqlite__query_free(&q);
	sqlite__exporter_free(&ex);
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
			return sqlite__fail(st, rc, _civ_sql[i]);
	}
	*out = st->civ_st[i];
	return 0;
}

/* What can be checked without the database. */
int sqlite__civ_check(const char *node, const struct batch *b)
{
	uint32_t nseries = batch__nseries(b), nstrings = intern__count(b->dict->strings);

	for (uint32_t i = 0; i < b->ncpu_intervals; i++) {
		const struct batch_cpu_interval *iv = &b->cpu_intervals[i];

		if (iv->series >= nseries || iv->comm >= nstrings || iv->start_ns < 0 ||
		    iv->end_ns < iv->start_ns || iv->end_ns >= STORE_TS_LIMIT) {
			pr_warn("store: sqlite: batch from %s: CPU interval %u has series %u/%u, "
				"comm %u/%u, [%lld, %lld)\n", node, i, iv->series, nseries,
				iv->comm, nstrings, (long long)iv->start_ns, (long long)iv->end_ns);
			return -EINVAL;
		}
	}
	return 0;
}

/* Inside the caller's transaction. */
int sqlite__civ_write(struct sqlite_store *st, struct xlate *x, const struct batch *b)
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
	node_id = sqlite__store_string(st, x->node);
	if (node_id < 0)
		return (int)node_id;
	for (uint32_t i = 0; i < b->ncpu_intervals; i++) {
		const struct batch_cpu_interval *iv = &b->cpu_intervals[i];
		int64_t series = dict_xlate__id(&x->dx, DICT_SERIES, iv->series);
		int64_t comm = series < 0 ? series : dict_xlate__id(&x->dx, DICT_STRING, iv->comm);

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
				return sqlite__fail(st, rc, "cpu_intervals");
			rows++;
		}
	}
	return sqlite__meta_add(st, "cpu_intervals", (int64_t)rows);
}

int sqlite__write_cpu_intervals(void *impl, const char *node, const struct batch *b)
{
	struct sqlite_store *st = impl;
	struct xlate x;
	int err = sqlite__civ_check(node, b);

	if (err || !b->ncpu_intervals)
		return err;
	sqlite__x_init(st, &x, b, node);
	err = sqlite__x_own(&x, 1u << DICT_STRING | 1u << DICT_SERIES);
	if (err)
		goto out;
	err = sqlite__exec(st, ST_BEGIN);
	if (err)
		goto out;
	err = sqlite__civ_write(st, &x, b);
	if (!err)
		err = sqlite__exec(st, ST_COMMIT);
	if (err) {
		sqlite__exec(st, ST_ROLLBACK);
		sqlite__drop_caches(st);
	}
out:
	sqlite__x_release(&x);
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
	u64map__free(&t->ix);
}

static int _civ_text(struct sqlite_store *st, struct civ_texts *t, int64_t id, const char **out)
{
	sqlite3_stmt *s;
	uint64_t *slot;
	bool added;
	char *text;
	int rc, err;

	slot = u64map__upsert(&t->ix, (uint64_t)id, &added);
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
		return sqlite__fail(st, rc, "strings");
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

int sqlite__cpu_intervals(void *impl, int64_t from, int64_t to, const struct selector *sel,
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

	if (!sqlite__clamp(&from, &to))
		return 0;
	sqlite__query_begin(st);
	err = _civ_stmt(st, CIV_RANGE, &s);
	if (err)
		return err;
	err = sqlite__begin_read(st);
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
		qs = sqlite__qseries(&q, r.series, &err);
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
		err = sqlite__fail(st, rc, "cpu_intervals");
	sqlite3_reset(s);
	if (!err && have)
		err = _civ_emit(st, &texts, &pend, from, to, cb, ctx);
	err = sqlite__end_read(st, err);
	_civ_texts_free(&texts);
	sqlite__query_free(&q);
	return err;
}
