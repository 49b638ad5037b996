// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend: a batch's dictionary (strings, mappings, frames, stacks,
 * series) translated into store ids, inserting what the store lacks.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/dict_xlate.h"
#include "common/intern.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "sqlite_int.h"

/* ---- writing: dictionaries ------------------------------------------------ */

static int _id32(int64_t id)
{
	return id > 0 && id <= UINT32_MAX ? 0 : -EOVERFLOW;
}

int64_t sqlite__store_string(struct sqlite_store *st, const char *text)
{
	size_t len = strlen(text);
	sqlite3_stmt *s;
	int64_t id = sqlite__cache_find(&st->strings, text, len);
	int rc;

	if (id >= 0)
		return id;
	s = st->st[ST_STR_GET];
	sqlite3_bind_text(s, 1, text, (int)len, SQLITE_STATIC);
	rc = sqlite3_step(s);
	id = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
	sqlite3_reset(s);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return sqlite__fail(st, rc, "strings");
	if (!id) {
		s = st->st[ST_STR_INS];
		sqlite3_bind_text(s, 1, text, (int)len, SQLITE_STATIC);
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE)
			return sqlite__fail(st, rc, "strings");
		id = sqlite3_last_insert_rowid(st->db);
	}
	if (_id32(id))
		return -EOVERFLOW;
	sqlite__cache_put(&st->strings, text, len, (uint32_t)id);
	return id;
}

static int64_t _x_string(struct dict_xlate *dx, uint32_t local)
{
	struct xlate *x = dx->ctx;

	return sqlite__store_string(x->st, profile__string(x->d, local));
}

/* Looks up or inserts a dictionary row keyed by n integer columns. */
static int64_t _store_row(struct sqlite_store *st, struct cache *c, enum stmt_id get,
			  enum stmt_id ins, const int64_t *cols, int n)
{
	int64_t id = c ? sqlite__cache_find(c, cols, n * sizeof(*cols)) : -ENOENT;
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
		return sqlite__fail(st, rc, sqlite__sql[get]);
	if (!id) {
		s = st->st[ins];
		for (int i = 0; i < n; i++)
			sqlite3_bind_int64(s, i + 1, cols[i]);
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE)
			return sqlite__fail(st, rc, sqlite__sql[ins]);
		id = sqlite3_last_insert_rowid(st->db);
	}
	if (_id32(id))
		return -EOVERFLOW;
	if (c)
		sqlite__cache_put(c, cols, n * sizeof(*cols), (uint32_t)id);
	return id;
}

static int64_t _x_mapping(struct dict_xlate *dx, uint32_t local)
{
	struct xlate *x = dx->ctx;
	const struct profile_mapping *m = &x->d->mappings[local];
	int64_t cols[2];

	if ((cols[0] = dict_xlate__id(dx, DICT_STRING, m->path)) < 0)
		return cols[0];
	if ((cols[1] = dict_xlate__id(dx, DICT_STRING, m->build_id)) < 0)
		return cols[1];
	return _store_row(x->st, &x->st->mappings, ST_MAP_GET, ST_MAP_INS, cols, 2);
}

/*
 * Frames are cached by their content with names as store string ids: a
 * session's strings are translated once per session (the dictionary's id
 * arrays), and a key of fixed size hashes and compares in a few words,
 * where one with the names' text hashed and compared them on every frame
 * (the names are most of a frame's bytes).
 */
struct frame_key {
	uint64_t addr;
	uint32_t kind, line, mapping, function, file, pad;
};

static int64_t _x_frame(struct dict_xlate *dx, uint32_t local)
{
	struct xlate *x = dx->ctx;
	struct sqlite_store *st = x->st;
	const struct profile_frame *f = &x->d->frames[local];
	struct frame_key k;
	int64_t cols[6], id, mapping = 0, fn, file;

	if (f->function >= dx->n[DICT_STRING] || f->file >= dx->n[DICT_STRING])
		return -EINVAL;
	if (f->mapping != PROFILE_NO_MAPPING &&
	    (mapping = dict_xlate__id(dx, DICT_MAPPING, f->mapping)) < 0)
		return mapping;
	if ((fn = dict_xlate__id(dx, DICT_STRING, f->function)) < 0)
		return fn;
	if ((file = dict_xlate__id(dx, DICT_STRING, f->file)) < 0)
		return file;
	memset(&k, 0, sizeof(k));
	k.addr = f->addr;
	k.kind = f->kind;
	k.line = f->line;
	k.mapping = (uint32_t)mapping;
	k.function = (uint32_t)fn;
	k.file = (uint32_t)file;
	id = sqlite__cache_find(&st->frames, &k, sizeof(k));
	if (id < 0) {
		cols[0] = f->kind;
		cols[1] = mapping;
		cols[2] = (int64_t)f->addr;
		cols[3] = fn;
		cols[4] = file;
		cols[5] = f->line;
		id = _store_row(st, NULL, ST_FRAME_GET, ST_FRAME_INS, cols, 6);
		if (id < 0)
			return id;
		sqlite__cache_put(&st->frames, &k, sizeof(k), (uint32_t)id);
	}
	return id;
}

int sqlite__fbuf_reserve(struct sqlite_store *st, size_t n)
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
static int64_t _x_stack(struct dict_xlate *dx, uint32_t local)
{
	struct xlate *x = dx->ctx;
	struct sqlite_store *st = x->st;
	const uint32_t *lf;
	uint32_t n, *frames;
	uint8_t *blob = NULL;
	size_t blen = 0;
	int64_t id = 0;
	uint64_t hash;
	int rc;

	lf = profile__stack(x->d, local, &n);
	if (sqlite__fbuf_reserve(st, n + 1))
		return -ENOMEM;
	frames = st->fbuf;
	/* Translating a frame does not touch fbuf. */
	rc = dict_xlate__ids(dx, DICT_FRAME, lf, n, frames);
	if (rc)
		return rc;
	id = sqlite__cache_find(&st->stacks, frames, n * sizeof(*frames));
	if (id >= 0)
		goto out;
	blob = malloc((size_t)n * 5 + 1);
	if (!blob)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		sqlite__put_varint(blob, &blen, frames[i]);
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
			id = sqlite__fail(st, rc, "stacks");
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
			id = sqlite__fail(st, rc, "stacks");
			goto out;
		}
		id = sqlite3_last_insert_rowid(st->db);
	}
cache:
	if (_id32(id)) {
		id = -EOVERFLOW;
		goto out;
	}
	sqlite__cache_put(&st->stacks, frames, n * sizeof(*frames), (uint32_t)id);
out:
	free(blob);
	return id;
}

/* Appends s quoted like a Prometheus label value. */
static void _sb_quoted(struct strbuf *b, const char *s)
{
	strbuf__putc(b, '"');
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			strbuf__putc(b, '\\');
		if (*s == '\n')
			strbuf__append(b, "\\n", 2);
		else
			strbuf__putc(b, *s);
	}
	strbuf__putc(b, '"');
}

/*
 * A series' identity (store__series_labels()) as text: {a="x",b="y"} and,
 * for a batch that has one, @period.
 */
static int64_t _x_series(struct dict_xlate *dx, uint32_t local)
{
	struct xlate *x = dx->ctx;
	struct sqlite_store *st = x->st;
	struct store_label *labels;
	struct strbuf key = STRBUF_INIT;
	size_t nl, len;
	int64_t id;
	int rc;

	rc = store__series_labels(x->b, local, x->node, &labels, &nl);
	if (rc)
		return rc;
	strbuf__putc(&key, '{');
	for (size_t i = 0; i < nl; i++) {
		if (i)
			strbuf__putc(&key, ',');
		strbuf__puts(&key, labels[i].name);
		strbuf__putc(&key, '=');
		_sb_quoted(&key, labels[i].value);
	}
	strbuf__putc(&key, '}');
	if (x->b->period_ns)
		strbuf__printf(&key, "@%llu", (unsigned long long)x->b->period_ns);
	id = -ENOMEM;
	if (key.oom)
		goto out;
	len = key.len;
	id = sqlite__cache_find(&st->series, key.buf, len);
	if (id >= 0)
		goto out;
	{
		sqlite3_stmt *s = st->st[ST_SERIES_GET];

		sqlite3_bind_text(s, 1, key.buf, (int)len, SQLITE_STATIC);
		rc = sqlite3_step(s);
		id = rc == SQLITE_ROW ? sqlite3_column_int64(s, 0) : 0;
		sqlite3_reset(s);
		if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
			id = sqlite__fail(st, rc, "series");
			goto out;
		}
	}
	if (!id) {
		sqlite3_stmt *s = st->st[ST_SERIES_INS];

		sqlite3_bind_text(s, 1, key.buf, (int)len, SQLITE_STATIC);
		sqlite3_bind_int64(s, 2, x->b->period_ns > INT64_MAX ? 0 : (int64_t)x->b->period_ns);
		rc = sqlite3_step(s);
		sqlite3_reset(s);
		if (rc != SQLITE_DONE) {
			id = sqlite__fail(st, rc, "series");
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
				id = sqlite__fail(st, rc, "series_labels");
				goto out;
			}
		}
	}
	if (_id32(id)) {
		id = -EOVERFLOW;
		goto out;
	}
	sqlite__cache_put(&st->series, key.buf, len, (uint32_t)id);
out:
	free(labels);
	strbuf__release(&key);
	return id;
}

static const dict_xlate_fn _x_fns[DICT_NKINDS] = {
	[DICT_STRING] = _x_string, [DICT_MAPPING] = _x_mapping, [DICT_FRAME] = _x_frame,
	[DICT_STACK] = _x_stack, [DICT_SERIES] = _x_series,
};

void sqlite__x_init(struct sqlite_store *st, struct xlate *x, const struct batch *b,
		    const char *node)
{
	*x = (struct xlate){ .st = st, .b = b, .d = b->dict, .node = node };
	x->dx = (struct dict_xlate){ .ids = x->own, .fn = _x_fns, .ctx = x };
	dict_xlate__batch_counts(&x->dx, b);
}

int sqlite__x_own(struct xlate *x, unsigned kinds)
{
	for (int k = 0; k < DICT_NKINDS; k++) {
		if (!(kinds & 1u << k))
			x->dx.n[k] = 0;
		else if (dict_ids__alloc(&x->own[k], x->dx.n[k]))
			return -ENOMEM;
	}
	return 0;
}

void sqlite__x_release(struct xlate *x)
{
	for (int k = 0; k < DICT_NKINDS; k++)
		dict_ids__release(&x->own[k]);
}
