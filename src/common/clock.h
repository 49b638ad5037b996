/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_CLOCK_H
#define FW_COMMON_CLOCK_H

#include <stdint.h>
#include <time.h>

/* CLOCK_MONOTONIC in nanoseconds: for intervals and deadlines, never for timestamps. */
static inline uint64_t clock__mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static inline int64_t clock__unix_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/*
 * The offset to add to another clock's reading (CUPTI's) to get
 * CLOCK_REALTIME: the midpoint of the tightest of a few bracketed reads,
 * since a preemption inside one bracket makes its midpoint off by up to
 * half of it. A previous offset (have_old) that still lies inside the new
 * bracket is kept, so times mapped before and after join exactly, while a
 * stepped or slewed CLOCK_REALTIME moves it outside and is followed.
 * read returns 0 and a nonzero time on success.
 */
#define CLOCK_OFFSET_READS 5

static inline int clock__offset_ns(int (*read)(uint64_t *t), int64_t *offset, int have_old)
{
	uint64_t a, b, t, width = UINT64_MAX;
	int64_t best = 0, half = 0;
	struct timespec ts;
	int i;

	for (i = 0; i < CLOCK_OFFSET_READS; i++) {
		t = 0;
		clock_gettime(CLOCK_REALTIME, &ts);
		a = (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
		if (read(&t) || !t)
			return -1;
		clock_gettime(CLOCK_REALTIME, &ts);
		b = (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
		if (b < a || b - a >= width)
			continue;
		width = b - a;
		best = (int64_t)(a + width / 2) - (int64_t)t;
		half = (int64_t)(width / 2) + 1;
	}
	if (width == UINT64_MAX)
		return -1; /* CLOCK_REALTIME went back inside every bracket */
	if (have_old && *offset >= best - half && *offset <= best + half)
		return 0;
	*offset = best;
	return 0;
}

#endif
