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

void sqlite__shapes_free(struct shapes *sh)
{
	free(sh->stack);
	free(sh->frames);
	free(sh->fkey);
	intern__free(sh->keys);
	sqlite__map_free(&sh->mpath);
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

/*
 * Grows a per-id array to hold id: at least doubling, but never past the
 * largest id the table holds, so that an id read from a corrupt row
 * cannot make it allocate gigabytes. -EIO for an id the table cannot have.
 */
static int _grow(struct sqlite_store *st, void **arr, uint32_t *n, size_t elem, uint32_t id,
		 enum stmt_id max_stmt)
{
	int64_t max = 0;
	uint64_t want;
	void *a;
	int err;

	if (id < *n)
		return 0;
	err = sqlite__exec_int(st, max_stmt, 0, &max);
	if (err)
		return err;
	if ((int64_t)id > max || max >= UINT32_MAX) {
		pr_warn("store: sqlite: id %u is beyond the table's largest, %lld\n", id,
			(long long)max);
		return -EIO;
	}
	want = (uint64_t)*n * 2 > (uint64_t)id + 1 ? (uint64_t)*n * 2 : (uint64_t)id + 1;
	if (want < 1024)
		want = 1024;
	if (want > (uint64_t)max + 1)
		want = (uint64_t)max + 1;
	a = realloc(*arr, want * elem);
	if (!a)
		return -ENOMEM;
	memset((char *)a + (size_t)*n * elem, 0, (want - *n) * elem);
	*arr = a;
	*n = (uint32_t)want;
	return 0;
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
	slot = sqlite__map_get(&st->shapes.mpath, (uint64_t)mapping);
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
	slot = sqlite__map_upsert(&st->shapes.mpath, (uint64_t)mapping, NULL);
	if (!slot)
		return -ENOMEM;
	*slot = (uint64_t)path;
	return path;
}

/* Loads frame's merge key into fkey (as key + 1: 0 means not loaded). */
static int _load_frame(struct sqlite_store *st, uint32_t frame)
{
	struct shapes *sh = &st->shapes;
	sqlite3_stmt *s = st->st[ST_FRAME_ROW];
	struct { int64_t function, path, kind; } key;
	int64_t mapping, id;
	int rc, err;

	err = _grow(st, (void **)&sh->fkey, &sh->nfkey, sizeof(*sh->fkey), frame, ST_MAX_FRAME);
	if (err)
		return err;
	if (sh->fkey[frame])
		return 0;
	sqlite3_bind_int64(s, 1, frame);
	rc = sqlite3_step(s);
	memset(&key, 0, sizeof(key));
	key.kind = sqlite3_column_int64(s, 0);
	mapping = sqlite3_column_int64(s, 1);
	key.function = sqlite3_column_int64(s, 3);
	sqlite3_reset(s);
	if (rc != SQLITE_ROW) {
		pr_warn("store: sqlite: frame %u is missing\n", frame);
		return rc == SQLITE_DONE ? -EIO : sqlite__fail(st, rc, "frames");
	}
	key.path = _mapping_path(st, mapping);
	if (key.path < 0)
		return (int)key.path;
	if (!sh->keys && !(sh->keys = intern__new()))
		return -ENOMEM;
	id = intern__add(sh->keys, &key, sizeof(key), NULL);
	if (id < 0)
		return (int)id;
	sh->fkey[frame] = (uint32_t)id + 1;
	return 0;
}

int sqlite__shape_stack(struct sqlite_store *st, uint32_t stack, uint64_t *at)
{
	struct shapes *sh = &st->shapes;
	sqlite3_stmt *s = st->st[ST_STACK_ROW];
	int64_t n;
	int rc, err;

	err = _grow(st, (void **)&sh->stack, &sh->nstack, sizeof(*sh->stack), stack, ST_MAX_STACK);
	if (err)
		return err;
	if (sh->stack[stack]) {
		*at = sh->stack[stack];
		return 0;
	}
	sqlite3_bind_int64(s, 1, stack);
	rc = sqlite3_step(s);
	if (rc == SQLITE_ROW) {
		size_t len = sqlite3_column_bytes(s, 0);

		n = -ENOMEM;
		if (sh->nframes + len + 1 > sh->cap_frames) {
			size_t cap = sh->cap_frames ? sh->cap_frames * 2 : 65536;
			uint32_t *f;

			while (cap < sh->nframes + len + 1)
				cap *= 2;
			f = realloc(sh->frames, cap * sizeof(*f));
			if (f) {
				sh->frames = f;
				sh->cap_frames = cap;
			}
		}
		/* A blob holds at least a byte per frame: len + 1 is room enough. */
		if (sh->nframes + len + 1 <= sh->cap_frames)
			n = sqlite__stack_decode(sqlite3_column_blob(s, 0), len,
						 sh->frames + sh->nframes, len + 1);
	} else {
		n = rc == SQLITE_DONE ? -EIO : sqlite__fail(st, rc, "stacks");
	}
	sqlite3_reset(s);
	if (n < 0 || n > SHAPE_N_MAX) {
		pr_warn("store: sqlite: stack %u is missing or corrupt\n", stack);
		return n < 0 ? (int)n : -EIO;
	}
	for (int64_t i = 0; i < n; i++) {
		err = _load_frame(st, sh->frames[sh->nframes + i]);
		if (err)
			return err;
	}
	/* Offset + 1, so that an empty stack at offset 0 still reads as loaded. */
	sh->stack[stack] = (uint64_t)(sh->nframes + 1) << SHAPE_N_BITS | (uint64_t)n;
	sh->nframes += (size_t)n;
	*at = sh->stack[stack];
	return 0;
}

const uint32_t *sqlite__shape_frames(const struct shapes *sh, uint64_t at, uint32_t *n)
{
	*n = (uint32_t)(at & SHAPE_N_MAX);
	return sh->frames + ((at >> SHAPE_N_BITS) - 1);
}
