// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend: GPU and other metric points (struct batch_metric),
 * written, queried and retained apart from samples.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "store/selector.h"
#include "sqlite_int.h"

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
		return sqlite__fail(st, rc, "metric tables");
	for (int i = 0; i < MX_COUNT; i++) {
		rc = sqlite3_prepare_v3(st->db, _mx_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					&st->mx[i], NULL);
		if (rc != SQLITE_OK) {
			int err = sqlite__fail(st, rc, _mx_sql[i]);

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
	return rc == SQLITE_DONE ? 0 : sqlite__fail(st, rc, _mx_sql[id]);
}

int sqlite__write_metrics(void *impl, const char *node, const struct batch *b)
{
	struct sqlite_store *st = impl;
	const struct profile *d = b->dict;
	uint32_t nseries = batch__nseries(b), nstrings = intern__count(d->strings);
	struct xlate x;
	bool in_txn = false;
	int err;

	for (uint32_t i = 0; i < b->nmetrics; i++) {
		const struct batch_metric *m = &b->metrics[i];

		if (m->series >= nseries || m->name >= nstrings || m->ts_ns < 0 ||
		    m->ts_ns >= STORE_TS_LIMIT || m->value != m->value ||
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
	sqlite__x_init(st, &x, b, node);
	err = sqlite__x_own(&x, 1u << DICT_STRING | 1u << DICT_SERIES);
	if (err)
		goto out;
	err = sqlite__exec(st, ST_BEGIN);
	if (err)
		goto out;
	in_txn = true;
	for (uint32_t i = 0; i < b->nmetrics && !err; i++) {
		const struct batch_metric *m = &b->metrics[i];
		int64_t series = dict_xlate__id(&x.dx, DICT_SERIES, m->series);
		int64_t name = series < 0 ? series : dict_xlate__id(&x.dx, DICT_STRING, m->name);

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
		err = sqlite__exec(st, ST_COMMIT);
	if (!err)
		in_txn = false;
out:
	if (err && in_txn) {
		sqlite__exec(st, ST_ROLLBACK);
		sqlite__drop_caches(st);
	}
	sqlite__x_release(&x);
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
	return sqlite__info_get((void *)g->si, label);
}

int sqlite__metrics(void *impl, int64_t from, int64_t to, int64_t step,
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
	err = sqlite__begin_read(st);
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
			err = sqlite__series_info(st, series, &si);
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
		err = sqlite__fail(st, rc, "metric_points");
	free(cur_name);
	return sqlite__end_read(st, err);
}

int sqlite__metrics_latest(void *impl, int64_t since,
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
	err = sqlite__begin_read(st);
	if (err)
		return err;
	s = st->mx[MX_LATEST];
	sqlite3_bind_int64(s, 1, since);
	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		const struct series_info *si;
		const char *name = (const char *)sqlite3_column_text(s, 1);

		err = sqlite__series_info(st, sqlite3_column_int64(s, 0), &si);
		if (!err)
			err = cb(ctx, name ? name : "", si->names, si->values, si->nlabels,
				 sqlite3_column_int64(s, 2), sqlite3_column_double(s, 3));
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = sqlite__fail(st, rc, "metric_latest");
	return sqlite__end_read(st, err);
}

int sqlite__retain_metrics(void *impl, int64_t cutoff)
{
	struct sqlite_store *st = impl;
	int err = _mx_prepare(st);

	if (err)
		return err;
	err = sqlite__exec(st, ST_BEGIN);
	if (err)
		return err;
	sqlite3_bind_int64(st->mx[MX_RETAIN], 1, cutoff);
	sqlite3_bind_int64(st->mx[MX_RETAIN_LATEST], 1, cutoff);
	err = _mx_step(st, MX_RETAIN);
	err = err ?: _mx_step(st, MX_RETAIN_LATEST);
	err = err ?: sqlite__exec(st, ST_COMMIT);
	if (err)
		sqlite__exec(st, ST_ROLLBACK);
	return err;
}
