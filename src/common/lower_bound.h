/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_LOWER_BOUND_H
#define FW_COMMON_LOWER_BOUND_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * The first of n elements of size bytes at base, sorted by the uint64_t key
 * at offset within each (offsetof()), whose key is >= key; n when none is.
 * Inline: the symbolizers call it once per symbol of a table, and with size
 * and offset constants it compiles to a plain binary search.
 */
static inline size_t lower_bound__u64(const void *base, size_t n, size_t size, size_t offset,
				       uint64_t key)
{
	const uint8_t *p = base;
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		uint64_t k;

		memcpy(&k, p + mid * size + offset, sizeof(k));
		if (k < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

#endif
