// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "dict_xlate.h"
#include "intern.h"
#include "profile.h"

int dict_ids__grow(struct dict_ids *m, uint32_t n)
{
	if (n > m->cap) {
		uint32_t cap = m->cap ? m->cap : 64;
		uint32_t *ids;

		while (cap < n)
			cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
		ids = realloc(m->ids, (size_t)cap * sizeof(*ids));
		if (!ids)
			return -ENOMEM;
		m->ids = ids;
		m->cap = cap;
	}
	for (; m->n < n; m->n++)
		m->ids[m->n] = DICT_UNSET;
	return 0;
}

int dict_ids__alloc(struct dict_ids *m, uint32_t n)
{
	size_t cap = n ? n : 1;

	m->ids = malloc(cap * sizeof(*m->ids));
	if (!m->ids)
		return -ENOMEM;
	memset(m->ids, 0xff, cap * sizeof(*m->ids));
	m->n = n;
	m->cap = (uint32_t)cap;
	return 0;
}

void dict_ids__release(struct dict_ids *m)
{
	free(m->ids);
	*m = (struct dict_ids){ 0 };
}

int dict_xlate__ids(struct dict_xlate *x, enum dict_kind k, const void *src, size_t n,
		    uint32_t *out)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t id;
		int64_t t;

		memcpy(&id, (const uint8_t *)src + i * sizeof(id), sizeof(id));
		t = dict_xlate__id(x, k, id);
		if (t < 0)
			return (int)t;
		out[i] = (uint32_t)t;
	}
	return 0;
}

void dict_xlate__batch_counts(struct dict_xlate *x, const struct batch *b)
{
	x->n[DICT_STRING] = intern__count(b->dict->strings);
	x->n[DICT_MAPPING] = b->dict->nmappings;
	x->n[DICT_FRAME] = b->dict->nframes;
	x->n[DICT_STACK] = profile__nstacks(b->dict);
	x->n[DICT_SERIES] = batch__nseries(b);
}
