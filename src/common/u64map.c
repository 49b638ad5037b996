// SPDX-License-Identifier: Apache-2.0
/* u64 keys to u64 values (u64map.h). */
#include <stdlib.h>
#include <string.h>

#include "u64map.h"

static inline uint32_t _u64hash(uint64_t k)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (uint32_t)k;
}

void u64map__free(struct u64map *m)
{
	free(m->slots);
	memset(m, 0, sizeof(*m));
}

uint64_t *u64map__get(const struct u64map *m, uint64_t key)
{
	if (!m->cap)
		return NULL;
	for (uint32_t i = _u64hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
		if (!m->slots[i].used)
			return NULL;
		if (m->slots[i].key == key)
			return &m->slots[i].val;
	}
}

uint64_t *u64map__upsert(struct u64map *m, uint64_t key, bool *added)
{
	uint32_t i;

	if ((m->count + 1) * 2 > m->cap) {
		uint32_t cap = m->cap ? m->cap * 2 : 64;
		struct u64slot *slots = calloc(cap, sizeof(*slots));

		if (!slots)
			return NULL;
		for (uint32_t j = 0; j < m->cap; j++) {
			if (!m->slots[j].used)
				continue;
			for (i = _u64hash(m->slots[j].key) & (cap - 1); slots[i].used; i = (i + 1) & (cap - 1))
				;
			slots[i] = m->slots[j];
		}
		free(m->slots);
		m->slots = slots;
		m->cap = cap;
	}
	for (i = _u64hash(key) & (m->cap - 1); m->slots[i].used; i = (i + 1) & (m->cap - 1)) {
		if (m->slots[i].key == key) {
			if (added)
				*added = false;
			return &m->slots[i].val;
		}
	}
	m->slots[i] = (struct u64slot){ .key = key, .used = true };
	m->count++;
	if (added)
		*added = true;
	return &m->slots[i].val;
}
