// SPDX-License-Identifier: Apache-2.0
/*
 * The encoder's session tables (struct wire_keys): each entry is known by
 * a 128-bit keyed hash of its key, and its key bytes are held only until
 * the server acknowledges a batch that carried it.
 *
 * Why: an acknowledged entry is never sent again in its session; the
 * encoder needs it only to find its id when a later batch refers to it
 * again. Holding every key for that (long demangled names, stacks of
 * dozens of frame ids, a general-purpose index over them) cost several
 * times what a hash and an index slot cost, whatever the key; where nodes
 * run many distinct stacks, a node's working set did not fit the agent's
 * cap and every batch started a session anew, carrying its whole
 * dictionary (bench/README.md, issue 28, has the figures).
 *
 * Two different keys of one session with the same 128-bit hash would share
 * an id (the second would be sent as the first). With n entries the chance
 * is about n^2 / 2^129, negligible for any table memory can hold. The hash
 * is SipHash-2-4 with a random key per session, so names chosen by a
 * profiled program cannot be made to collide either.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/random.h>

#include "format/wire/wire_int.h"

static inline uint64_t _rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

#define SIPROUND(v0, v1, v2, v3)					\
	do {								\
		v0 += v1; v1 = _rotl(v1, 13); v1 ^= v0; v0 = _rotl(v0, 32); \
		v2 += v3; v3 = _rotl(v3, 16); v3 ^= v2;			\
		v0 += v3; v3 = _rotl(v3, 21); v3 ^= v0;			\
		v2 += v1; v1 = _rotl(v1, 17); v1 ^= v2; v2 = _rotl(v2, 32); \
	} while (0)

static inline uint64_t _le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

void wire__siphash128(const uint64_t key[2], const void *data, size_t len, uint64_t out[2])
{
	const uint8_t *p = data, *end = p + (len & ~(size_t)7);
	uint64_t v0 = key[0] ^ 0x736f6d6570736575ULL, v1 = key[1] ^ 0x646f72616e646f6dULL;
	uint64_t v2 = key[0] ^ 0x6c7967656e657261ULL, v3 = key[1] ^ 0x7465646279746573ULL;
	uint64_t b = (uint64_t)len << 56;

	v1 ^= 0xee;
	for (; p != end; p += 8) {
		uint64_t m = _le64(p);

		v3 ^= m;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= m;
	}
	for (size_t i = 0; i < (len & 7); i++)
		b |= (uint64_t)p[i] << (8 * i);
	v3 ^= b;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= b;
	v2 ^= 0xee;
	for (int i = 0; i < 4; i++)
		SIPROUND(v0, v1, v2, v3);
	out[0] = v0 ^ v1 ^ v2 ^ v3;
	v1 ^= 0xdd;
	for (int i = 0; i < 4; i++)
		SIPROUND(v0, v1, v2, v3);
	out[1] = v0 ^ v1 ^ v2 ^ v3;
}

int wire_keys__init(struct wire_keys *t, const uint64_t *sip_key)
{
	memset(t, 0, sizeof(*t));
	if (sip_key) {
		memcpy(t->sip, sip_key, sizeof(t->sip));
	} else if (getrandom(t->sip, sizeof(t->sip), GRND_NONBLOCK) != sizeof(t->sip)) {
		struct timespec ts;

		/*
		 * No entropy yet (early boot): any key keeps accidental
		 * collisions as unlikely; only crafted ones become conceivable.
		 */
		clock_gettime(CLOCK_MONOTONIC, &ts);
		t->sip[0] = (uint64_t)(uintptr_t)t ^ 0x9e3779b97f4a7c15ULL;
		t->sip[1] = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	}
	t->nslots = 64;
	t->slots = calloc(t->nslots, sizeof(*t->slots));
	return t->slots ? 0 : -ENOMEM;
}

void wire_keys__release(struct wire_keys *t)
{
	free(t->h);
	free(t->slots);
	free(t->bytes);
	free(t->end);
	memset(t, 0, sizeof(*t));
}

size_t wire_keys__memory(const struct wire_keys *t)
{
	return (size_t)t->cap * sizeof(*t->h) + (size_t)t->nslots * sizeof(*t->slots) +
	       t->cap_bytes + t->cap_end * sizeof(*t->end);
}

static int _rehash(struct wire_keys *t, uint32_t nslots)
{
	uint32_t *slots = calloc(nslots, sizeof(*slots)), mask = nslots - 1;

	if (!slots)
		return -ENOMEM;
	for (uint32_t id = 0; id < t->n; id++) {
		uint32_t i = (uint32_t)t->h[id].lo & mask;

		while (slots[i])
			i = (i + 1) & mask;
		slots[i] = id + 1;
	}
	free(t->slots);
	t->slots = slots;
	t->nslots = nslots;
	return 0;
}

/* Makes room for one more entry and len more key bytes. */
static int _reserve(struct wire_keys *t, size_t len)
{
	if (t->n == t->cap) {
		/* By half, not double: the array is most of the table. */
		uint32_t cap = t->cap < 1024 ? 1024 : t->cap + t->cap / 2;
		struct wire_hash *h;

		if (t->cap >= UINT32_MAX / 3 * 2)
			return -E2BIG;
		h = realloc(t->h, (size_t)cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		t->h = h;
		t->cap = cap;
	}
	if (t->n - t->first == t->cap_end) {
		size_t cap = t->cap_end ? t->cap_end * 2 : 256;
		size_t *end = realloc(t->end, cap * sizeof(*end));

		if (!end)
			return -ENOMEM;
		t->end = end;
		t->cap_end = cap;
	}
	/* Allocated even for empty keys, so that a key is never NULL. */
	if (t->len + len > t->cap_bytes || !t->bytes) {
		size_t cap = t->cap_bytes ? t->cap_bytes : 4096;
		uint8_t *b;

		while (cap < t->len + len)
			cap *= 2;
		b = realloc(t->bytes, cap);
		if (!b)
			return -ENOMEM;
		t->bytes = b;
		t->cap_bytes = cap;
	}
	/* Load at most one half: probes stay short. */
	if ((uint64_t)(t->n + 1) * 2 > t->nslots)
		return _rehash(t, t->nslots * 2);
	return 0;
}

int64_t wire_keys__add(struct wire_keys *t, const void *key, size_t len)
{
	uint64_t h[2];
	uint32_t i, id;
	int err;

	wire__siphash128(t->sip, key, len, h);
	for (i = (uint32_t)h[0] & (t->nslots - 1); t->slots[i]; i = (i + 1) & (t->nslots - 1)) {
		id = t->slots[i] - 1;
		if (t->h[id].lo == h[0] && t->h[id].hi == h[1])
			return id;
	}
	if (t->n == UINT32_MAX - 1)
		return -E2BIG;
	err = _reserve(t, len);
	if (err)
		return err;
	/* _reserve() may have rehashed: probe again for the free slot. */
	for (i = (uint32_t)h[0] & (t->nslots - 1); t->slots[i]; i = (i + 1) & (t->nslots - 1))
		;
	id = t->n++;
	t->h[id] = (struct wire_hash){ h[0], h[1] };
	t->slots[i] = id + 1;
	memcpy(t->bytes + t->len, key, len);
	t->len += len;
	t->end[id - t->first] = t->len;
	return id;
}

const void *wire_keys__key(const struct wire_keys *t, uint32_t id, size_t *len)
{
	size_t start = id > t->first ? t->end[id - t->first - 1] : 0;

	*len = t->end[id - t->first] - start;
	return t->bytes + start;
}

void wire_keys__forget(struct wire_keys *t, uint32_t upto)
{
	size_t cut;
	uint32_t drop;

	if (upto > t->n)
		upto = t->n;
	if (upto <= t->first)
		return;
	drop = upto - t->first;
	cut = t->end[drop - 1];
	memmove(t->bytes, t->bytes + cut, t->len - cut);
	t->len -= cut;
	for (uint32_t i = drop; i < t->n - t->first; i++)
		t->end[i - drop] = t->end[i] - cut;
	t->first = upto;
	/* A big batch's keys need not stay allocated for the small ones after it. */
	if (t->cap_bytes > 65536 && t->len < t->cap_bytes / 4) {
		size_t cap = t->len > 4096 ? t->len * 2 : 4096;
		uint8_t *b = realloc(t->bytes, cap);

		if (b) {
			t->bytes = b;
			t->cap_bytes = cap;
		}
	}
}
