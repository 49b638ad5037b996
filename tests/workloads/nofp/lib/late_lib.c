// SPDX-License-Identifier: Apache-2.0
/*
 * The library late_dlopen maps mid-run: two frames without frame pointers,
 * so only its unwind table walks from late_inner back to the program.
 */
#include <time.h>

static double _now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) unsigned long late_inner(double until)
{
	volatile unsigned long x = 0;

	while (_now() < until)
		for (int i = 0; i < 20000; i++)
			x += (unsigned long)i * i;
	return x;
}

__attribute__((noinline)) unsigned long late_outer(double seconds)
{
	/* Work after the call keeps this frame (no tail call). */
	return late_inner(_now() + seconds) + 1;
}
