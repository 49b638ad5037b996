// SPDX-License-Identifier: Apache-2.0
/*
 * Spends its time in the vDSO: main -> poll_clock -> clock_gettime. The
 * vDSO has no frame pointers, so its caller is only found through the
 * vDSO's own .eh_frame.
 */
#include <stdlib.h>
#include <time.h>

static volatile long sink;

__attribute__((noinline)) static void poll_clock(double seconds)
{
	struct timespec start, now;

	clock_gettime(CLOCK_MONOTONIC, &start);
	do {
		clock_gettime(CLOCK_MONOTONIC, &now);
		sink += now.tv_nsec;
	} while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
}

int main(int argc, char **argv)
{
	poll_clock(argc > 1 ? atof(argv[1]) : 3);
	return 0;
}
