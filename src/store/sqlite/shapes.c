// SPDX-License-Identifier: Apache-2.0
/*
 * SQLite backend: the shapes of stored stacks, kept in memory across
 * queries for flame graphs. A flame graph merges frames by (function,
 * binary, kind); knowing that for every frame of every stack a window
 * holds is what lets it cut the tree before naming any frame. Stacks and
 * frames never change once written (store__retain() keeps them), so what
 * was read once stays right; only a rolled-back write could reuse an id,
 * and every path that rolls back drops this cache too (sqlite__drop_caches).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "common/log.h"
#include "sqlite_int.h"

/*
 * The cache grows with the fleet's distinct stacks, not with time; past
 * this it is dropped whole before a query, so that a store of pathological
 * dictionaries costs lookups again rather than the server's memory.
 */
#define SHAPES_MAX_BYTES (256u << 20)

/* Stack slots pack the arena offset and the frame count. */
#define SHAPE_N_BITS 24
#define SHAPE_N_MAX ((1u << SHAPE_N_BITS) - 1)

/* In fkey or stack while a query decides how to load it: wanted, not yet known. */
#define KEY_WANTED UINT32_MAX
#define STACK_WANTED UINT64_MAX

/*
 * A scan reads a row for a fraction of what a lookup by id costs
 * (bench/README.md, issue 28): when the stacks or frames a query needs
 * and the cache lacks are more than this share of their table, it reads
 * the table whole.
 */
#define SCAN_SHARE_DIV 8

void sqlite__shapes_free(struct shapes *sh)
{
	free(sh->stack);
	free(sh->frames);
	free(sh->fkey);
	intern__free(sh->keys);
	u64map__free(&sh->mpath);
	memset(sh, 0, sizeof(*sh));
}

static size_t _bytes(const struct shapes *sh)
{
	return (size_t)sh->nstack * sizeof(*sh->stack) + sh->cap_frames * sizeof(*sh->frames) +
	       (size_t)sh->nfkey * sizeof(*sh->fkey) +
	       (sh->keys ? intern__memory(sh->keys) : 0) +
	       (size_t)sh->mpath.cap * sizeof(*sh->mpath.slots);
}

void sqlite__shapes_trim(struct sqlite_store *st)
{
	if (_bytes(&st->shapes) > SHAPES_MAX_BYTES)
		sqlite__shapes_free(&st->shapes);
}

/* The largest id of a table; -EIO when ids here could not hold it. */
static int _table_max(struct sqlite_store *st, enum stmt_id max_stmt, uint32_t *max)
{
	int64_t m = 0;
	int err = sqlite__exec_int(st, max_stmt, 0, &m);

	if (err)
		return err;
	if (m < 0 || m >= UINT32_MAX) {
		pr_warn("store: sqlite: largest id %lld is out of range\n", (long long)m);
		return -EIO;
	}
	*max = (uint32_t)m;
	return 0;
}

/* Grows a per-id array to want slots, the new ones zeroed. */
static int _resize(void **arr, uint32_t *n, size_t elem, uint32_t want)
{
	void *a;

	if (want <= *n)
		return 0;
	a = realloc(*arr, (size_t)want * elem);
	if (!a)
		return -ENOMEM;
	memset((char *)a + (size_t)*n * elem, 0, (size_t)(want - *n) * elem);
	*arr = a;
	*n = want;
	return 0;
}

/*
 * Grows a per-id array to hold id: at least doubling, but never past the
 * largest id the table holds, so that an id read from a corrupt row
 * cannot make it allocate gigabytes. -EIO for an id the table cannot have.
 */
static int _grow(struct sqlite_store *st, void **arr, uint32_t *n, size_t elem, uint32_t id,
		 enum stmt_id max_stmt)
{
	uint64_t want;
	uint32_t max;
	int err;

	if (id < *n)
		return 0;
	err = _table_max(st, max_stmt, &max);
	if (err)
		return err;
	if (id > max) {
		pr_warn("store: sqlite: id %u is beyond the table's largest, %u\n", id, max);
		return -EIO;
	}
	want = (uint64_t)*n * 2 > (uint64_t)id + 1 ? (uint64_t)*n * 2 : (uint64_t)id + 1;
	if (want < 1024)
		want = 1024;
	if (want > (uint64_t)max + 1)
		want = (uint64_t)max + 1;
	return _resize(arr, n, elem, (uint32_t)want);
}

/* The path string id of a mapping (0 for none), which frames merge by. */
static int64_t _mapping_path(struct sqlite_store *st, int64_t mapping)
{
	sqlite3_stmt *s = st->st[ST_MAP_ROW];
	uint64_t *slot;
	int64_t path;
	int rc;

	if (!mapping)
		return 0;
	slot = u64map__get(&st->shapes.mpath, (uint64_t)mapping);
	if (slot)
		return (int64_t)*slot;
	sqlite3_bind_int64(s, 1, mapping);
	rc = sqlite3_step(s);
	path = sqlite3_column_int64(s, 0);
	sqlite3_reset(s);
	if (rc != SQLITE_ROW) {
		pr_warn("store: sqlite: mapping %lld is missing\n", (long long)mapping);
		return rc == SQLITE_DONE ? -EIO : sqlite__fail(st, rc, "mappings");
	}
	slot = u64map__upsert(&st->shapes.mpath, (uint64_t)mapping, NULL);
	if (!slot)
		return -ENOMEM;
	*slot = (uint64_t)path;
	return path;
}

/* Sets frame's merge key in fkey (as key + 1: 0 means not loaded). */
static int _set_key(struct sqlite_store *st, uint32_t frame, int64_t kind, int64_t mapping,
		    int64_t function)
{
	struct shapes *sh = &st->shapes;
	struct { int64_t function, path, kind; } key;
	int64_t id;

	memset(&key, 0, sizeof(key));
	key.function = function;
	key.kind = kind;
	key.path = _mapping_path(st, mapping);
	if (key.path < 0)
		return (int)key.path;
	if (!sh->keys && !(sh->keys = intern__new()))
		return -ENOMEM;
	id = intern__add(sh->keys, &key, sizeof(key), NULL);
	if (id < 0)
		return (int)id;
	if (id >= (int64_t)KEY_WANTED - 1)
		return -E2BIG;
	sh->fkey[frame] = (uint32_t)id + 1;
	return 0;
}

static int _load_frame(struct sqlite_store *st, uint32_t frame)
{
	sqlite3_stmt *s = st->st[ST_FRAME_ROW];
	int64_t kind, mapping, function;
	int rc;

	sqlite3_bind_int64(s, 1, frame);
	rc = sqlite3_step(s);
	kind = sqlite3_column_int64(s, 0);
	mapping = sqlite3_column_int64(s, 1);
	function = sqlite3_column_int64(s, 3);
	sqlite3_reset(s);
	if (rc != SQLITE_ROW) {
		pr_warn("store: sqlite: frame %u is missing\n", frame);
		return rc == SQLITE_DONE ? -EIO : sqlite__fail(st, rc, "frames");
	}
	return _set_key(st, frame, kind, mapping, function);
}

/* Every frame of the table, in one pass. */
static int _scan_frames(struct sqlite_store *st)
{
	struct shapes *sh = &st->shapes;
	sqlite3_stmt *s = st->st[ST_FRAME_SCAN];
	int rc, err = 0;

	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(s, 0);

		/* A read transaction: no row can be newer than the largest id. */
		if (id < 0 || id >= sh->nfkey || (sh->fkey[id] && sh->fkey[id] != KEY_WANTED))
			continue;
		err = _set_key(st, (uint32_t)id, sqlite3_column_int64(s, 1),
			       sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 3));
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "frames");
	return err;
}

int sqlite__shape_keys(struct sqlite_store *st, const uint64_t *at, uint32_t n)
{
	struct shapes *sh = &st->shapes;
	uint64_t wanted = 0;
	uint32_t max_id = 0, max;
	int err;

	for (uint32_t i = 0; i < n; i++) {
		uint32_t nf;
		const uint32_t *f = sqlite__shape_frames(sh, at[i], &nf);

		for (uint32_t j = 0; j < nf; j++)
			if (f[j] > max_id)
				max_id = f[j];
	}
	err = _grow(st, (void **)&sh->fkey, &sh->nfkey, sizeof(*sh->fkey), max_id, ST_MAX_FRAME);
	if (err)
		return err;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t nf;
		const uint32_t *f = sqlite__shape_frames(sh, at[i], &nf);

		for (uint32_t j = 0; j < nf; j++) {
			if (!sh->fkey[f[j]]) {
				sh->fkey[f[j]] = KEY_WANTED;
				wanted++;
			}
		}
	}
	if (!wanted)
		return 0;
	err = _table_max(st, ST_MAX_FRAME, &max);
	if (!err && wanted > ((uint64_t)max + 1) / SCAN_SHARE_DIV) {
		/* The whole table: fkey sized to its largest id, not this query's. */
		err = _resize((void **)&sh->fkey, &sh->nfkey, sizeof(*sh->fkey), max + 1);
		if (!err)
			err = _scan_frames(st);
	}
	for (uint32_t i = 0; !err && i < n; i++) {
		uint32_t nf;
		const uint32_t *f = sqlite__shape_frames(sh, at[i], &nf);

		for (uint32_t j = 0; !err && j < nf; j++)
			if (sh->fkey[f[j]] == KEY_WANTED)
				err = _load_frame(st, f[j]);
	}
	/* Marks left behind would read as keys: drop the lot. */
	if (err)
		sqlite__shapes_free(sh);
	return err;
}

/* Decodes a stack row's blob into the arena: stack's slot says where. */
static int _put_stack(struct shapes *sh, uint32_t stack, const void *blob, size_t len)
{
	int64_t n;

	/* A blob holds at least a byte per frame: len + 1 is room enough. */
	if (sh->nframes + len + 1 > sh->cap_frames) {
		size_t cap = sh->cap_frames ? sh->cap_frames * 2 : 65536;
		uint32_t *f;

		while (cap < sh->nframes + len + 1)
			cap *= 2;
		f = realloc(sh->frames, cap * sizeof(*f));
		if (!f)
			return -ENOMEM;
		sh->frames = f;
		sh->cap_frames = cap;
	}
	n = sqlite__stack_decode(blob, len, sh->frames + sh->nframes, len + 1);
	if (n < 0 || n > SHAPE_N_MAX) {
		pr_warn("store: sqlite: stack %u is corrupt\n", stack);
		return -EIO;
	}
	/* Offset + 1, so that an empty stack at offset 0 still reads as loaded. */
	sh->stack[stack] = (uint64_t)(sh->nframes + 1) << SHAPE_N_BITS | (uint64_t)n;
	sh->nframes += (size_t)n;
	return 0;
}

static int _load_stack(struct sqlite_store *st, uint32_t stack)
{
	sqlite3_stmt *s = st->st[ST_STACK_ROW];
	int rc, err;

	sqlite3_bind_int64(s, 1, stack);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW)
		err = _put_stack(&st->shapes, stack, sqlite3_column_blob(s, 0),
				 (size_t)sqlite3_column_bytes(s, 0));
	else
		err = rc == SQLITE_DONE ? -EIO : sqlite__fail(st, rc, "stacks");
	sqlite3_reset(s);
	if (rc == SQLITE_DONE)
		pr_warn("store: sqlite: stack %u is missing\n", stack);
	return err;
}

/* The wanted stacks of the table, in one pass. */
static int _scan_stacks(struct sqlite_store *st)
{
	struct shapes *sh = &st->shapes;
	sqlite3_stmt *s = st->st[ST_STACK_SCAN];
	int rc, err = 0;

	while (!err && (rc = sqlite3_step(s)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(s, 0);

		if (id < 0 || id >= sh->nstack || sh->stack[id] != STACK_WANTED)
			continue;
		err = _put_stack(sh, (uint32_t)id, sqlite3_column_blob(s, 1),
				 (size_t)sqlite3_column_bytes(s, 1));
	}
	sqlite3_reset(s);
	if (!err && rc != SQLITE_DONE)
		err = sqlite__fail(st, rc, "stacks");
	return err;
}

int sqlite__shape_stacks(struct sqlite_store *st, const uint32_t *ids, uint32_t n, uint64_t *at)
{
	struct shapes *sh = &st->shapes;
	uint32_t max_id = 0, max;
	uint64_t wanted = 0;
	int err;

	for (uint32_t i = 0; i < n; i++)
		if (ids[i] > max_id)
			max_id = ids[i];
	err = _grow(st, (void **)&sh->stack, &sh->nstack, sizeof(*sh->stack), max_id, ST_MAX_STACK);
	if (err)
		return err;
	for (uint32_t i = 0; i < n; i++) {
		if (!sh->stack[ids[i]]) {
			sh->stack[ids[i]] = STACK_WANTED;
			wanted++;
		}
	}
	err = wanted ? _table_max(st, ST_MAX_STACK, &max) : 0;
	if (!err && wanted > ((uint64_t)max + 1) / SCAN_SHARE_DIV)
		err = _scan_stacks(st);
	for (uint32_t i = 0; !err && i < n; i++) {
		if (sh->stack[ids[i]] == STACK_WANTED)
			err = _load_stack(st, ids[i]);
		at[i] = sh->stack[ids[i]];
	}
	/* Marks left behind would read as stacks: drop the lot. */
	if (err)
		sqlite__shapes_free(sh);
	return err;
}

const uint32_t *sqlite__shape_frames(const struct shapes *sh, uint64_t at, uint32_t *n)
{
	*n = (uint32_t)(at & SHAPE_N_MAX);
	return sh->frames + ((at >> SHAPE_N_BITS) - 1);
}
