/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_HEAPSORT_H
#define FW_COMMON_HEAPSORT_H

#include <stddef.h>

/*
 * DEFINE_HEAPSORT(fn, type, less) defines static void fn(type *a, size_t n),
 * an in-place heapsort by less(const type *, const type *). Where glibc's
 * qsort() sorts a large array it first allocates a copy of it (merge sort),
 * which doubles the memory of the agent's largest transient arrays; this
 * takes none. Not stable: less must be a total order where ties matter.
 */
#define DEFINE_HEAPSORT(fn, type, less)						\
static void fn##_sift(type *a, size_t i, size_t n)				\
{										\
	for (size_t c; (c = 2 * i + 1) < n; i = c) {				\
		type tmp;							\
										\
		if (c + 1 < n && less(&a[c], &a[c + 1]))			\
			c++;							\
		if (!less(&a[i], &a[c]))					\
			return;							\
		tmp = a[i], a[i] = a[c], a[c] = tmp;				\
	}									\
}										\
										\
static void fn(type *a, size_t n)						\
{										\
	for (size_t k = n / 2; k-- > 0;)					\
		fn##_sift(a, k, n);						\
	for (size_t end = n; end-- > 1;) {					\
		type tmp = a[0];						\
										\
		a[0] = a[end], a[end] = tmp;					\
		fn##_sift(a, 0, end);						\
	}									\
}

#endif
