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

#endif
