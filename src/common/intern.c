// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "intern.h"

/*
 * Keys live in large arena chunks, each prefixed by its length, so a table of
 * a hundred thousand short keys costs a few allocations rather than one each.
 * The index is open addressing with linear probing over (hash, id) pairs; the
 * hash is kept so that growing never has to touch the keys.
 */
#define ARENA_CHUNK (64 * 1024)

struct slot {
	uint64_t hash;
	uint32_t id_plus_one;	/* 0 marks an empty slot */
};

struct entry {
	const uint8_t *key;
	uint32_t len;
};

struct arena_chunk {
	struct arena_chunk *next;
	size_t used, size;
	uint8_t data[];
};

struct intern {
	struct slot *slots;
	uint32_t nslots;	/* power of two */
	struct entry *entries;
	uint32_t count, capacity;
	struct arena_chunk *chunks;
	size_t arena_bytes;
};

uint64_t hash__bytes(const void *data, size_t len)
{
	const uint8_t *p = data;
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < len; i++) {
		h ^= p[i];
		h *= 0x100000001b3ULL;
	}
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return h;
}

struct intern *intern__new(void)
{
	struct intern *t = calloc(1, sizeof(*t));

	if (!t)
		return NULL;
	t->nslots = 64;
	t->slots = calloc(t->nslots, sizeof(*t->slots));
	if (!t->slots) {
		free(t);
		errno = ENOMEM;
		return NULL;
	}
	return t;
}

void intern__free(struct intern *t)
{
	struct arena_chunk *c, *next;

	if (!t)
		return;
	for (c = t->chunks; c; c = next) {
		next = c->next;
		free(c);
	}
	free(t->entries);
	free(t->slots);
	free(t);
}

static uint8_t *_arena_alloc(struct intern *t, size_t len)
{
	struct arena_chunk *c = t->chunks;
	uint8_t *p;

	if (!c || c->size - c->used < len) {
		size_t size = len > ARENA_CHUNK ? len : ARENA_CHUNK;

		c = aligned_alloc(8, (sizeof(*c) + size + 7) & ~(size_t)7);
		if (!c)
			return NULL;
		c->size = size;
		c->used = 0;
		c->next = t->chunks;
		t->chunks = c;
		t->arena_bytes += sizeof(*c) + size;
	}
	p = c->data + c->used;
	c->used += len;
	return p;
}

/* Moves the index to nslots slots (a power of two above twice the count). */
static int _rehash(struct intern *t, uint32_t nslots)
{
	uint32_t mask = nslots - 1;
	struct slot *slots = calloc(nslots, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (uint32_t i = 0; i < t->nslots; i++) {
		struct slot s = t->slots[i];
		uint32_t j;

		if (!s.id_plus_one)
			continue;
		for (j = s.hash & mask; slots[j].id_plus_one; j = (j + 1) & mask)
			;
		slots[j] = s;
	}
	free(t->slots);
	t->slots = slots;
	t->nslots = nslots;
	return 0;
}

static struct slot *_lookup(const struct intern *t, uint64_t hash,
			    const void *key, size_t len)
{
	uint32_t mask = t->nslots - 1;

	for (uint32_t i = hash & mask;; i = (i + 1) & mask) {
		struct slot *s = &t->slots[i];
		const struct entry *e;

		if (!s->id_plus_one)
			return s;
		if (s->hash != hash)
			continue;
		e = &t->entries[s->id_plus_one - 1];
		if (e->len == len && memcmp(e->key, key, len) == 0)
			return s;
	}
}

int64_t intern__find(const struct intern *t, const void *key, size_t len)
{
	struct slot *s = _lookup(t, hash__bytes(key, len), key, len);

	return s->id_plus_one ? (int64_t)s->id_plus_one - 1 : -ENOENT;
}

int64_t intern__add(struct intern *t, const void *key, size_t len, bool *added)
{
	uint64_t hash = hash__bytes(key, len);
	struct slot *s;
	uint8_t *copy;

	if (added)
		*added = false;
	if (len > UINT32_MAX)
		return -EINVAL;
	s = _lookup(t, hash, key, len);
	if (s->id_plus_one)
		return s->id_plus_one - 1;

	/* Keep the load factor under 1/2 so probes stay short. */
	if ((uint64_t)(t->count + 1) * 2 > t->nslots) {
		if (_rehash(t, t->nslots * 2))
			return -ENOMEM;
		s = _lookup(t, hash, key, len);
	}
	if (t->count == t->capacity) {
		uint32_t cap = t->capacity ? t->capacity * 2 : 64;
		struct entry *e = realloc(t->entries, cap * sizeof(*e));

		if (!e)
			return -ENOMEM;
		t->entries = e;
		t->capacity = cap;
	}
	/*
	 * Keys are handed back as typed arrays (uint32_t stacks, label
	 * pairs): keep every key 8-byte aligned, even after an odd-sized one.
	 */
	copy = _arena_alloc(t, len ? (len + 7) & ~(size_t)7 : 8);
	if (!copy)
		return -ENOMEM;
	memcpy(copy, key, len);
	t->entries[t->count] = (struct entry){ .key = copy, .len = (uint32_t)len };
	s->hash = hash;
	s->id_plus_one = ++t->count;
	if (added)
		*added = true;
	return t->count - 1;
}

const void *intern__key(const struct intern *t, uint32_t id, size_t *len)
{
	if (len)
		*len = t->entries[id].len;
	return t->entries[id].key;
}

uint32_t intern__count(const struct intern *t)
{
	return t->count;
}

int intern__compact(struct intern *t)
{
	struct arena_chunk *c, *next;
	uint32_t nslots = 8;
	size_t used = 0;
	uint8_t *p;

	while (nslots < (uint64_t)t->count * 2)
		nslots *= 2;
	if (nslots < t->nslots && _rehash(t, nslots))
		return -ENOMEM;
	if (t->count < t->capacity) {
		struct entry *e = realloc(t->entries, (t->count ? t->count : 1) * sizeof(*e));

		if (!e)
			return -ENOMEM;
		t->entries = e;
		t->capacity = t->count;
	}
	for (c = t->chunks; c; c = c->next)
		used += c->used;
	if (!t->chunks || (!t->chunks->next && t->chunks->used == t->chunks->size))
		return 0;
	c = aligned_alloc(8, (sizeof(*c) + used + 7) & ~(size_t)7);
	if (!c)
		return -ENOMEM;
	c->next = NULL;
	c->size = c->used = used;
	/* The same padded sizes as intern__add(): every key stays 8-byte aligned. */
	p = c->data;
	for (uint32_t i = 0; i < t->count; i++) {
		struct entry *e = &t->entries[i];

		memcpy(p, e->key, e->len);
		e->key = p;
		p += e->len ? (e->len + 7) & ~(size_t)7 : 8;
	}
	for (struct arena_chunk *old = t->chunks; old; old = next) {
		next = old->next;
		free(old);
	}
	t->chunks = c;
	t->arena_bytes = sizeof(*c) + used;
	return 0;
}

size_t intern__memory(const struct intern *t)
{
	return sizeof(*t) + (size_t)t->nslots * sizeof(struct slot) +
	       (size_t)t->capacity * sizeof(struct entry) + t->arena_bytes;
}
