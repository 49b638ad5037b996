/*
 * cpu_split: burns CPU for argv[1] seconds (default 3) with a known split:
 * 70 % of the time in hot_70() and 30 % in cold_30(), both called from
 *
 *     main -> run -> work_loop -> hot_70 | cold_30
 *
 * The split comes from call counts, not from timing: both leaves run the
 * same spin loop for the same number of iterations, and work_loop calls
 * hot_70 seven times for every three calls of cold_30. Both leaves are
 * aligned identically so their loops cost the same on any microarchitecture.
 * The clock is read only once per round of ten calls so that work_loop's own
 * share (and the vDSO's) stays far below the tests' tolerance.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))
#define LEAF __attribute__((noinline, aligned(64)))

/* Iterations per call: roughly 50-100 us on current x86, so a round of ten
 * calls is well under a millisecond and the duration is honoured closely. */
#define SPIN_ITERS 100000

static volatile unsigned long sink;

LEAF void hot_70(void)
{
	volatile unsigned long acc = 0;
	for (unsigned long i = 0; i < SPIN_ITERS; i++)
		acc += i ^ (acc >> 3);
	sink += acc;
}

LEAF void cold_30(void)
{
	volatile unsigned long acc = 0;
	for (unsigned long i = 0; i < SPIN_ITERS; i++)
		acc += i ^ (acc >> 3);
	sink += acc;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * Each round calls the leaves in a new random order (still seven hot, three
 * cold): in a fixed order a sampling period close to a multiple of the
 * round's length saw the same place in every round, and a test's share
 * came out far from 70 %.
 */
NOINLINE unsigned long work_loop(double seconds)
{
	static const unsigned char pattern[10] = { 1, 0, 1, 1, 0, 1, 1, 0, 1, 1 };
	unsigned char order[10];
	unsigned long rounds = 0, rng = 0x9e3779b97f4a7c15UL;
	double end = now_s() + seconds;

	for (int i = 0; i < 10; i++)
		order[i] = pattern[i];
	do {
		for (int i = 9; i > 0; i--) {
			int j;
			unsigned char t;

			rng ^= rng << 13;
			rng ^= rng >> 7;
			rng ^= rng << 17;
			j = (int)(rng % (unsigned long)(i + 1));
			t = order[i];
			order[i] = order[j];
			order[j] = t;
		}
		for (int i = 0; i < 10; i++) {
			if (order[i])
				hot_70();
			else
				cold_30();
		}
		rounds++;
	} while (now_s() < end);
	return rounds;
}

NOINLINE int run(double seconds)
{
	unsigned long rounds = work_loop(seconds);
	return rounds > 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3.0;
	if (seconds <= 0)
		seconds = 3.0;
	return run(seconds);
}
