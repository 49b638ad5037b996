// SPDX-License-Identifier: Apache-2.0
/*
 * The ClickHouse backend: the store interface over ClickHouse's HTTP
 * interface, so that several stateless `flamewatch server` processes can
 * share one database (docs/clickhouse.md).
 *
 * Dictionary rows (frames, stacks, series) are keyed by 64-bit hashes of
 * their content computed here, so servers agree on ids without talking to
 * each other, and inserting a row twice is harmless: the tables are
 * ReplacingMergeTree and readers take any one copy. Samples refer to the
 * stack and series hashes. Every statement is one that ClickHouse 18.16
 * (Debian 12's) and current versions both accept.
 *
 * A batch is written as INSERTs in this order: dictionaries (only rows
 * this process has not inserted yet), CPU intervals, GPU intervals, samples
 * (one INSERT, which the materialized views also sum into samples_1m and
 * samples_1h and note in sample_spans). Samples come after everything
 * they refer to, so a reader never meets a sample whose stack is missing;
 * interval tables are ReplacingMergeTree keyed like the SQLite primary keys,
 * so a batch resent after a failure part way through stores them once.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/intern.h"
#include "common/log.h"
#include "store/clickhouse.h"
#include "clickhouse_impl.h"

/* ---- talking to ClickHouse --------------------------------------------------- */

static int _post(struct ch_store *st, const char *query, const char *extra, const void *body,
		 size_t len, struct strbuf *resp)
{
	int err = chhttp__post(st->http, query, extra, body, len, resp, st->err, sizeof(st->err));

	if (err)
		pr_warn("store: clickhouse: %s\n", st->err);
	return err;
}

int ch__exec(struct ch_store *st, const char *sql)
{
	return _post(st, NULL, NULL, sql, strlen(sql), NULL);
}

int ch__select(struct ch_store *st, const char *sql, struct strbuf *resp)
{
	/*
	 * wait_end_of_query: ClickHouse buffers the whole answer, so an error
	 * part way through is an HTTP error, not a truncated 200.
	 * max_query_size, max_ast_elements, max_expanded_ast_elements: IN
	 * lists of stack, frame and series ids can be long, longer than the
	 * defaults take ("AST is too big").
	 */
	int err = _post(st, NULL, "wait_end_of_query=1&max_query_size=268435456"
			"&max_ast_elements=100000000&max_expanded_ast_elements=100000000", sql,
			strlen(sql), resp);

	return !err && resp->oom ? -ENOMEM : err;
}

int ch__select_i64(struct ch_store *st, const char *sql, int64_t dflt, int64_t *out)
{
	struct strbuf resp = STRBUF_INIT;
	int err = ch__select(st, sql, &resp);

	*out = dflt;
	if (!err && resp.len >= 8)
		memcpy(out, resp.buf, 8);
	strbuf__release(&resp);
	return err;
}

int ch__insert(struct ch_store *st, const char *table, const struct strbuf *rows)
{
	char q[256];

	if (!rows->len)
		return 0;
	if (rows->oom)
		return -ENOMEM;
	snprintf(q, sizeof(q), "INSERT INTO %s.%s FORMAT RowBinary", st->db, table);
	return _post(st, q, NULL, rows->buf, rows->len, NULL);
}

int ch__watermark(struct ch_store *st, const char *what, int64_t *out)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT toInt64(max(cutoff)) FROM %s.retention WHERE what = '%s'"
		 " FORMAT RowBinary", st->db, what);
	return ch__select_i64(st, q, 0, out);
}

/* ---- the series cache ------------------------------------------------------- */

static int _series_add(struct ch_store *st, uint64_t id, uint64_t period, struct rbr *r)
{
	uint64_t n = rbr__varint(r);
	const char **names = NULL, **values = NULL;
	struct ch_series *s;
	size_t bytes = 0;
	char *p;
	bool added;
	int64_t idx;

	if (r->bad || n > 4096)
		return -EIO;
	/* The strings live in the response: copy them out in one block. */
	names = calloc(n + 1, sizeof(*names));
	values = calloc(n + 1, sizeof(*values));
	if (!names || !values)
		goto oom;
	for (uint64_t i = 0; i < n; i++) {
		names[i] = rbr__str(r);
		bytes += strlen(names[i]) + 1;
	}
	if (rbr__varint(r) != n) {
		free(names);
		free(values);
		return -EIO;
	}
	for (uint64_t i = 0; i < n; i++) {
		values[i] = rbr__str(r);
		bytes += strlen(values[i]) + 1;
	}
	if (r->bad) {
		free(names);
		free(values);
		return -EIO;
	}
	idx = intern__add(st->series_idx, &id, sizeof(id), &added);
	if (idx < 0)
		goto oom;
	if (!added) {
		free(names);
		free(values);
		return 0;
	}
	if (st->nseries == st->cap_series) {
		uint32_t cap = st->cap_series ? st->cap_series * 2 : 256;
		struct ch_series **a = realloc(st->series, cap * sizeof(*a));

		if (!a)
			goto oom_idx;
		st->series = a;
		st->cap_series = cap;
	}
	s = calloc(1, sizeof(*s) + 2 * (n + 1) * sizeof(char *) + bytes);
	if (!s)
		goto oom_idx;
	s->id = id;
	s->period_ns = period;
	s->nlabels = n;
	s->names = (const char **)(s + 1);
	s->values = s->names + n + 1;
	s->comm = "";
	p = (char *)(s->values + n + 1);
	for (uint64_t i = 0; i < n; i++) {
		size_t a = strlen(names[i]) + 1, b = strlen(values[i]) + 1;

		s->names[i] = memcpy(p, names[i], a);
		p += a;
		s->values[i] = memcpy(p, values[i], b);
		p += b;
		if (!strcmp(s->names[i], "comm"))
			s->comm = s->values[i];
		else if (!strcmp(s->names[i], "pid"))
			s->pid = (uint32_t)strtoul(s->values[i], NULL, 10);
	}
	st->series[st->nseries++] = s;
	free(names);
	free(values);
	return 0;
oom_idx:
	/*
	 * The id is interned without an entry: drop the whole cache, so that
	 * indexes and entries stay in step.
	 */
	for (uint32_t i = 0; i < st->nseries; i++)
		free(st->series[i]);
	st->nseries = 0;
	intern__free(st->series_idx);
	st->series_idx = intern__new();
oom:
	free(names);
	free(values);
	return -ENOMEM;
}

int ch__series_load(struct ch_store *st)
{
	struct strbuf resp = STRBUF_INIT;
	char q[256];
	struct rbr r;
	int err;

	if (!st->series_idx)
		return -ENOMEM;
	snprintf(q, sizeof(q), "SELECT id, period, names, vals FROM %s.series FORMAT RowBinary",
		 st->db);
	err = ch__select(st, q, &resp);
	r = (struct rbr){ (uint8_t *)resp.buf, (uint8_t *)resp.buf + resp.len, false };
	while (!err && rbr__more(&r)) {
		uint64_t id = rbr__u64(&r), period = rbr__u64(&r);

		err = _series_add(st, id, period, &r);
	}
	if (!err && r.bad)
		err = -EIO;
	strbuf__release(&resp);
	return err;
}

int ch__series(struct ch_store *st, uint64_t id, const struct ch_series **out)
{
	int64_t idx = st->series_idx ? intern__find(st->series_idx, &id, sizeof(id)) : -ENOENT;
	int err;

	if (idx < 0) {
		err = ch__series_load(st);
		if (err)
			return err;
		idx = intern__find(st->series_idx, &id, sizeof(id));
		if (idx < 0) {
			pr_warn("store: clickhouse: series %016llx is missing\n",
				(unsigned long long)id);
			return -EIO;
		}
	}
	*out = st->series[idx];
	return 0;
}

/* ---- opening -------------------------------------------------------------- */

/*
 * The tables. {D} stands for the database. Timestamps are Int64 Unix
 * nanoseconds (18.16 has no DateTime64); partitions are UTC days numbered
 * from the epoch, the unit that retention drops (18.16 has no TTL).
 */
static const char *const SCHEMA[] = {
	"CREATE DATABASE IF NOT EXISTS {D}",
	"CREATE TABLE IF NOT EXISTS {D}.frames (id UInt64, kind UInt8, has_mapping UInt8,"
	" path String, build_id String, addr UInt64, function String, file String, line UInt32)"
	" ENGINE = ReplacingMergeTree ORDER BY id",
	"CREATE TABLE IF NOT EXISTS {D}.stacks (id UInt64, frames Array(UInt64))"
	" ENGINE = ReplacingMergeTree ORDER BY id",
	"CREATE TABLE IF NOT EXISTS {D}.series (id UInt64, period UInt64, names Array(String),"
	" vals Array(String)) ENGINE = ReplacingMergeTree ORDER BY id",
	"CREATE TABLE IF NOT EXISTS {D}.samples (ts Int64, type UInt8, series UInt64, stack UInt64,"
	" tid UInt32, cpu UInt32, value Int64) ENGINE = MergeTree"
	" PARTITION BY intDiv(ts, 86400000000000)"
	" ORDER BY (type, intDiv(ts, 3600000000000), series, stack, ts)",
	"CREATE TABLE IF NOT EXISTS {D}.samples_1m (minute Int64, type UInt8, series UInt64,"
	" stack UInt64, value Int64) ENGINE = SummingMergeTree"
	" PARTITION BY intDiv(minute, 86400000000000) ORDER BY (type, minute, series, stack)",
	"CREATE MATERIALIZED VIEW IF NOT EXISTS {D}.samples_1m_mv TO {D}.samples_1m AS"
	" SELECT intDiv(ts, 60000000000) * 60000000000 AS minute, type, series, stack,"
	" sum(value) AS value FROM {D}.samples GROUP BY minute, type, series, stack",
	"CREATE TABLE IF NOT EXISTS {D}.samples_1h (hour Int64, type UInt8, series UInt64,"
	" stack UInt64, value Int64) ENGINE = SummingMergeTree"
	" PARTITION BY intDiv(hour, 86400000000000) ORDER BY (type, hour, series, stack)",
	"CREATE MATERIALIZED VIEW IF NOT EXISTS {D}.samples_1h_mv TO {D}.samples_1h AS"
	" SELECT intDiv(ts, 3600000000000) * 3600000000000 AS hour, type, series, stack,"
	" sum(value) AS value FROM {D}.samples GROUP BY hour, type, series, stack",
	/* Per inserted block, the times its samples span: where a window's edge has none. */
	"CREATE TABLE IF NOT EXISTS {D}.sample_spans (type UInt8, tmin Int64, tmax Int64)"
	" ENGINE = MergeTree PARTITION BY intDiv(tmax, 86400000000000) ORDER BY (type, tmax)",
	"CREATE MATERIALIZED VIEW IF NOT EXISTS {D}.sample_spans_mv TO {D}.sample_spans AS"
	" SELECT type, min(ts) AS tmin, max(ts) AS tmax FROM {D}.samples GROUP BY type",
	"CREATE TABLE IF NOT EXISTS {D}.cpu_intervals (start Int64, dur Int64, node String,"
	" cpu UInt32, series UInt64, tid UInt32, comm String) ENGINE = ReplacingMergeTree"
	" PARTITION BY intDiv(start, 86400000000000) ORDER BY (node, cpu, start)",
	"CREATE TABLE IF NOT EXISTS {D}.gpu_intervals (start Int64, end Int64, series UInt64,"
	" device UInt32, stream UInt32, kind UInt8, name String, has_stack UInt8, stack UInt64,"
	" correlation UInt64, bytes UInt64, weight UInt32) ENGINE = ReplacingMergeTree"
	" PARTITION BY intDiv(start, 86400000000000)"
	" ORDER BY (start, series, device, stream, correlation, kind)",
	"CREATE TABLE IF NOT EXISTS {D}.metric_points (series UInt64, name String, ts Int64,"
	" value Float64) ENGINE = ReplacingMergeTree PARTITION BY intDiv(ts, 86400000000000)"
	" ORDER BY (series, name, ts)",
	"CREATE TABLE IF NOT EXISTS {D}.retention (what String, cutoff Int64)"
	" ENGINE = ReplacingMergeTree(cutoff) ORDER BY what",
};

/*
 * samples_1h and sample_spans only know the samples inserted after their
 * views were made. The retention row "rollups_from" says from when they
 * are whole: 0 for a database that had no samples then, else an hour
 * past both the newest sample and now, so that no batch written before
 * the views can land behind it (a server of an older version still
 * writing then is the one way round that). Several servers upgrading at
 * once each insert one; readers take the largest, the safe one.
 */
static int _rollups_from(struct ch_store *st)
{
	struct strbuf rows = STRBUF_INIT;
	int64_t n = 0, newest = 0, b = 0;
	char q[256];
	int err;

	snprintf(q, sizeof(q), "SELECT toInt64(count()) FROM %s.retention WHERE"
		 " what = 'rollups_from' FORMAT RowBinary", st->db);
	err = ch__select_i64(st, q, 0, &n);
	if (err || n)
		return err;
	snprintf(q, sizeof(q), "SELECT toInt64(count()) FROM %s.samples FORMAT RowBinary", st->db);
	err = ch__select_i64(st, q, 0, &n);
	if (!err && n) {
		struct timespec ts;
		int64_t now;

		clock_gettime(CLOCK_REALTIME, &ts);
		now = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;

		snprintf(q, sizeof(q), "SELECT toInt64(max(ts)) FROM %s.samples FORMAT RowBinary",
			 st->db);
		err = ch__select_i64(st, q, 0, &newest);
		if (newest < now)
			newest = now;
		b = (newest / STORE_NS_HOUR + 2) * STORE_NS_HOUR;
	}
	if (err)
		return err;
	rb__str(&rows, "rollups_from");
	rb__i64(&rows, b);
	err = ch__insert(st, "retention", &rows);
	strbuf__release(&rows);
	return err;
}

int ch__rollups_from(struct ch_store *st, int64_t *out)
{
	char q[256];

	snprintf(q, sizeof(q), "SELECT toInt64(cutoff) FROM %s.retention WHERE"
		 " what = 'rollups_from' ORDER BY cutoff DESC LIMIT 1 FORMAT RowBinary", st->db);
	return ch__select_i64(st, q, INT64_MAX, out);
}

static int _schema(struct ch_store *st)
{
	for (size_t i = 0; i < sizeof(SCHEMA) / sizeof(SCHEMA[0]); i++) {
		struct strbuf sql = STRBUF_INIT;
		const char *s = SCHEMA[i], *d;
		int err;

		while ((d = strstr(s, "{D}"))) {
			strbuf__append(&sql, s, (size_t)(d - s));
			strbuf__puts(&sql, st->db);
			s = d + 3;
		}
		strbuf__puts(&sql, s);
		err = sql.oom ? -ENOMEM : ch__exec(st, sql.buf);
		strbuf__release(&sql);
		if (err)
			return err;
	}
	return 0;
}

/* Decodes %XX in place. */
static void _pct_decode(char *s)
{
	char *o = s;

	for (; *s; s++) {
		unsigned v;

		if (*s == '%' && s[1] && s[2] && sscanf(s + 1, "%2x", &v) == 1) {
			*o++ = (char)v;
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
}

static void _ch_close(void *impl)
{
	struct ch_store *st = impl;

	if (!st)
		return;
	chhttp__free(st->http);
	intern__free(st->seen_frames);
	intern__free(st->seen_stacks);
	intern__free(st->seen_series);
	ch__dhash_free_all(st);
	intern__free(st->series_idx);
	for (uint32_t i = 0; i < st->nseries; i++)
		free(st->series[i]);
	free(st->series);
	ch__shapes_free(&st->shapes);
	free(st);
}

/*
 * location: [USER[:PASSWORD]@]HOST[:PORT][/DB][?user=U&password=P&secure=0|1&ca=FILE]
 * (what follows "clickhouse://"). The password may also come from the
 * environment (FLAMEWATCH_CLICKHOUSE_PASSWORD), so that it stays out of
 * process listings. secure=1 is HTTPS (default port 8443, ClickHouse's
 * https_port) with the certificate checked against ca (default: the
 * system's trust store) and against HOST.
 */
static void *_ch_open(const char *location, char *err, size_t err_len)
{
	char *loc = strdup(location), *host, *at, *slash, *qm, *colon, *port = NULL, *ca = NULL;
	char *user = NULL, *password = getenv("FLAMEWATCH_CLICKHOUSE_PASSWORD");
	const char *db = "flamewatch";
	struct ch_store *st = calloc(1, sizeof(*st));
	struct chhttp_opts o = { 0 };
	bool secure = false;
	int e = EINVAL;

	if (!loc || !st) {
		e = ENOMEM;
		snprintf(err, err_len, "out of memory");
		goto fail;
	}
	host = loc;
	qm = strchr(loc, '?');
	if (qm) {
		*qm++ = '\0';
		for (char *kv = strtok(qm, "&"); kv; kv = strtok(NULL, "&")) {
			char *v = strchr(kv, '=');

			if (!v) {
				snprintf(err, err_len, "option \"%s\" needs a value", kv);
				goto fail;
			}
			*v++ = '\0';
			_pct_decode(v);
			if (!strcmp(kv, "user")) {
				user = v;
			} else if (!strcmp(kv, "password")) {
				password = v;
			} else if (!strcmp(kv, "secure")) {
				if (!strcmp(v, "1") || !strcmp(v, "true")) {
					secure = true;
				} else if (!strcmp(v, "0") || !strcmp(v, "false")) {
					secure = false;
				} else {
					snprintf(err, err_len, "secure=%s: expected 1 or 0", v);
					goto fail;
				}
			} else if (!strcmp(kv, "ca")) {
				ca = v;
			} else {
				snprintf(err, err_len, "unknown option \"%s\" (user, password, secure, "
					 "ca)", kv);
				goto fail;
			}
		}
	}
	slash = strchr(host, '/');
	if (slash) {
		*slash++ = '\0';
		if (*slash)
			db = slash;
	}
	at = strrchr(host, '@');
	if (at) {
		/* USER[:PASSWORD]@: ?user= and ?password= win over them. */
		char *ui_user = host, *ui_pass = NULL;

		*at = '\0';
		host = at + 1;
		colon = strchr(ui_user, ':');
		if (colon) {
			*colon = '\0';
			ui_pass = colon + 1;
			_pct_decode(ui_pass);
		}
		_pct_decode(ui_user);
		if (!user)
			user = ui_user;
		if (ui_pass && !(qm && strstr(location, "password=")))
			password = ui_pass;
	}
	colon = strrchr(host, ':');
	if (colon && !strchr(colon, ']')) {
		*colon = '\0';
		port = colon + 1;
	}
	if (!port)
		port = secure ? "8443" : "8123";
	if (ca && !secure) {
		snprintf(err, err_len, "ca=%s needs secure=1", ca);
		goto fail;
	}
	if (host[0] == '[') {
		size_t n = strlen(host);

		if (n < 2 || host[n - 1] != ']') {
			snprintf(err, err_len, "bad IPv6 address \"%s\"", host);
			goto fail;
		}
		host[n - 1] = '\0';
		host++;
	}
	if (!host[0] || !port[0] || strspn(port, "0123456789") != strlen(port)) {
		snprintf(err, err_len, "expected clickhouse://HOST[:PORT]/DB, got \"clickhouse://%s\"",
			 location);
		goto fail;
	}
	if (!db[0] || strlen(db) >= sizeof(st->db) ||
	    strspn(db, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") !=
		    strlen(db) || (db[0] >= '0' && db[0] <= '9')) {
		snprintf(err, err_len, "bad database name \"%s\" (letters, digits, _)", db);
		goto fail;
	}
	snprintf(st->db, sizeof(st->db), "%s", db);
	o = (struct chhttp_opts){ .host = host, .port = port, .user = user, .password = password,
				  .secure = secure, .ca_file = ca };
	st->http = chhttp__new(&o, err, err_len);
	if (!st->http) {
		e = errno;
		goto fail;
	}
	st->seen_frames = intern__new();
	st->seen_stacks = intern__new();
	st->seen_series = intern__new();
	st->series_idx = intern__new();
	if (!st->seen_frames || !st->seen_stacks || !st->seen_series ||
	    !st->series_idx) {
		e = ENOMEM;
		snprintf(err, err_len, "out of memory");
		goto fail;
	}
	e = -_schema(st);
	if (!e)
		e = -_rollups_from(st);
	if (e) {
		snprintf(err, err_len, "%s", st->err);
		goto fail;
	}
	free(loc);
	return st;
fail:
	free(loc);
	_ch_close(st);
	errno = e;
	return NULL;
}

/* ---- retention and stats --------------------------------------------------- */

/*
 * Retention raises a watermark that every query applies, so what queries
 * see is exact at once, on every server; whole days below it are dropped
 * (ALTER TABLE ... DROP PARTITION: 18.16 has no TTL; current versions
 * could use TTL instead, docs/clickhouse.md).
 */
static int _raise(struct ch_store *st, const char *what, int64_t cutoff,
		  const char *const *tables, size_t ntables)
{
	struct strbuf resp = STRBUF_INIT;
	struct strbuf rows = STRBUF_INIT;
	int64_t cur;
	char q[512];
	int err;

	err = ch__watermark(st, what, &cur);
	if (err || cutoff <= cur)
		return err;
	rb__str(&rows, what);
	rb__i64(&rows, cutoff);
	err = ch__insert(st, "retention", &rows);
	strbuf__release(&rows);
	for (size_t t = 0; !err && t < ntables; t++) {
		struct rbr r;

		snprintf(q, sizeof(q), "SELECT DISTINCT partition FROM system.parts WHERE"
			 " database = '%s' AND table = '%s' AND active FORMAT RowBinary",
			 st->db, tables[t]);
		resp.len = 0;
		err = ch__select(st, q, &resp);
		r = (struct rbr){ (uint8_t *)resp.buf, (uint8_t *)resp.buf + resp.len, false };
		while (!err && rbr__more(&r)) {
			const char *p = rbr__str(&r);
			char *end;
			long long day = strtoll(p, &end, 10);

			if (*end || end == p || (day + 1) * CH_NS_DAY > cutoff)
				continue;
			snprintf(q, sizeof(q), "ALTER TABLE %s.%s DROP PARTITION %lld", st->db,
				 tables[t], day);
			err = ch__exec(st, q);
		}
	}
	strbuf__release(&resp);
	return err;
}

static int _ch_retain(void *impl, int64_t cutoff)
{
	static const char *const tables[] = { "samples", "samples_1m", "samples_1h",
					      "sample_spans", "cpu_intervals", "gpu_intervals" };

	/* Minutes are the unit: rollups and raw samples are cut at the same place. */
	if (cutoff > STORE_TS_LIMIT)
		cutoff = STORE_TS_LIMIT;
	cutoff = cutoff / STORE_NS_MIN * STORE_NS_MIN;
	if (cutoff <= 0)
		return 0;
	return _raise(impl, "samples", cutoff, tables, sizeof(tables) / sizeof(tables[0]));
}

static int _ch_retain_metrics(void *impl, int64_t cutoff)
{
	static const char *const tables[] = { "metric_points" };

	if (cutoff > STORE_TS_LIMIT)
		cutoff = STORE_TS_LIMIT;
	if (cutoff <= 0)
		return 0;
	return _raise(impl, "metrics", cutoff, tables, 1);
}

static int _ch_stats(void *impl, struct store_stats *out)
{
	struct ch_store *st = impl;
	struct strbuf resp = STRBUF_INIT;
	char q[1024];
	int err;

	/*
	 * Samples: those stored now (retention counted off), from the parts'
	 * row counts. Batches: those this server wrote, the only count that
	 * costs no INSERT of its own per batch.
	 */
	snprintf(q, sizeof(q),
		 "SELECT toUInt64(sumIf(rows, table = 'samples')), toUInt64(sum(bytes_on_disk)),"
		 " (SELECT toUInt64(uniqExact(id)) FROM %s.series),"
		 " (SELECT toUInt64(uniqExact(id)) FROM %s.stacks),"
		 " (SELECT toUInt64(uniqExact(id)) FROM %s.frames)"
		 " FROM system.parts WHERE database = '%s' AND active"
		 " FORMAT RowBinary", st->db, st->db, st->db, st->db);
	err = ch__select(st, q, &resp);
	if (!err) {
		struct rbr r = { (uint8_t *)resp.buf, (uint8_t *)resp.buf + resp.len, false };

		out->samples_written = rbr__u64(&r);
		out->batches_written = st->batches_written;
		out->bytes_on_disk = rbr__u64(&r);
		out->series = rbr__u64(&r);
		out->stacks = rbr__u64(&r);
		out->frames = rbr__u64(&r);
		if (r.bad)
			err = -EIO;
	}
	strbuf__release(&resp);
	return err;
}

const struct store_backend store_clickhouse_backend = {
	.name = "clickhouse",
	.open = _ch_open,
	.close = _ch_close,
	.write = ch__write,
	.profile = ch__profile,
	.flamegraph = ch__flamegraph,
	.samples = ch__samples,
	.series = ch__query_series,
	.label_names = ch__label_names,
	.label_values = ch__label_values,
	.retain = _ch_retain,
	.stats = _ch_stats,
	.gpu_intervals = ch__gpu_intervals,
	.write_metrics = ch__write_metrics,
	.metrics = ch__metrics,
	.metrics_latest = ch__metrics_latest,
	.retain_metrics = _ch_retain_metrics,
	.write_cpu_intervals = ch__write_cpu_intervals,
	.cpu_intervals = ch__cpu_intervals,
};
