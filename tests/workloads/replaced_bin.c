// SPDX-License-Identifier: Apache-2.0
/*
 * replaced_bin: prints "ready", waits for a line on stdin, then spins for
 * argv[1] seconds (default 3) in SPIN(). workloads.mk builds it twice: as
 * replaced_bin with SPIN spin_original, and as replaced_bin_imposter with
 * SPIN spin_imposter, a name of the same length, so that both files lay
 * out their code alike and the symbols of one name the addresses of the
 * other. test_hostile_files.py runs one and puts the other at its path
 * while it waits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#ifndef SPIN
#define SPIN spin_original
#endif

static volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) void SPIN(double end)
{
	while (now() < end)
		for (int i = 0; i < 100000; i++)
			sink += i;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	char line[16];

	puts("ready");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	SPIN(now() + seconds);
	return 0;
}
