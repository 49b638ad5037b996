// SPDX-License-Identifier: Apache-2.0
#include <stdint.h>
#include <stdlib.h>

#include "format/pb_alloc.h"

#define ALLOC_HDR 16	/* keeps max_align_t alignment */

static void *_alloc(void *data, size_t size)
{
	struct pb_capped_alloc *a = data;
	size_t *p;

	if (size > a->max || size + ALLOC_HDR > a->max - a->used) {
		a->over = true;
		return NULL;
	}
	p = malloc(size + ALLOC_HDR);
	if (!p)
		return NULL;
	p[0] = size;
	a->used += size + ALLOC_HDR;
	return (uint8_t *)p + ALLOC_HDR;
}

static void _free(void *data, void *ptr)
{
	struct pb_capped_alloc *a = data;
	size_t *p;

	if (!ptr)
		return;
	p = (size_t *)((uint8_t *)ptr - ALLOC_HDR);
	a->used -= p[0] + ALLOC_HDR;
	free(p);
}

ProtobufCAllocator pb_capped_alloc__allocator(struct pb_capped_alloc *a)
{
	return (ProtobufCAllocator){ _alloc, _free, a };
}
