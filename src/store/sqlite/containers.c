// SPDX-License-Identifier: Apache-2.0
/*
 * The small containers of the SQLite backend: content caches, lists of
 * ranges, and the decoder of stack blobs.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "sqlite_int.h"

/* ---- small containers ----------------------------------------------------- */

/* Bytes a content cache may hold before it is dropped and refilled. */
#define CACHE_BYTES	(32u << 20)

void sqlite__cache_free(struct cache *c)
{
	intern__free(c->keys);
	free(c->ids);
	memset(c, 0, sizeof(*c));
}

int64_t sqlite__cache_find(const struct cache *c, const void *key, size_t len)
{
	int64_t i;

	if (!c->keys)
		return -ENOENT;
	i = intern__find(c->keys, key, len);
	return i < 0 ? i : c->ids[i];
}

void sqlite__cache_put(struct cache *c, const void *key, size_t len, uint32_t id)
{
	int64_t i;

	/* A cache is an optimization: failing to fill it is not an error. */
	if (c->keys && intern__memory(c->keys) > CACHE_BYTES)
		sqlite__cache_free(c);
	if (!c->keys && !(c->keys = intern__new()))
		return;
	i = intern__add(c->keys, key, len, NULL);
	if (i < 0)
		return;
	if ((uint32_t)i >= c->cap) {
		uint32_t cap = c->cap ? c->cap * 2 : 1024;
		uint32_t *ids = realloc(c->ids, cap * sizeof(*ids));

		if (!ids) {
			sqlite__cache_free(c);
			return;
		}
		c->ids = ids;
		c->cap = cap;
	}
	c->ids[i] = id;
}

int sqlite__ranges_add(struct ranges *rs, int64_t a, int64_t b)
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

/* Decodes a stack blob into frames (cap entries). Returns the count or -EIO. */
int64_t sqlite__stack_decode(const uint8_t *p, size_t len, uint32_t *frames, size_t cap)
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
