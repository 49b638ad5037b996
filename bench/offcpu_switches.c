// SPDX-License-Identifier: Apache-2.0
/*
 * A steady rate of blocking context switches for bench/offcpu_cost.py
 * (issue 30): THREADS threads each sleep PERIOD in a loop, so that the
 * whole process blocks RATE times a second, each block about PERIOD long
 * (PERIOD = THREADS / RATE: at 100k/s and 50 threads, 500 us, under
 * --off-cpu-min's 1 ms default, as most of a busy server's blocks are;
 * offcpu_cost.py picks THREADS for the block length it wants). Prints the
 * blocks it made and the CPU time it used.
 *
 *   gcc -O2 -pthread bench/offcpu_switches.c -o build/offcpu_switches
 *   build/offcpu_switches RATE SECONDS [THREADS]
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

static _Atomic unsigned long blocks;
static long period_ns;
static struct timespec end;

static int _before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

static void *_sleeper(void *arg)
{
	struct timespec next, now;
	unsigned long n = 0;

	(void)arg;
	clock_gettime(CLOCK_MONOTONIC, &next);
	for (;;) {
		next.tv_nsec += period_ns;
		while (next.tv_nsec >= 1000000000L) {
			next.tv_sec++;
			next.tv_nsec -= 1000000000L;
		}
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
		n++;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (!_before(&now, &end))
			break;
		/* Behind by a period or more: start counting from now. */
		if (_before(&next, &now) && (now.tv_sec - next.tv_sec) * 1000000000L +
		    now.tv_nsec - next.tv_nsec > period_ns)
			next = now;
	}
	atomic_fetch_add(&blocks, n);
	return NULL;
}

int main(int argc, char **argv)
{
	long rate = argc > 1 ? atol(argv[1]) : 0;
	double seconds = argc > 2 ? atof(argv[2]) : 0;
	int threads = argc > 3 ? atoi(argv[3]) : 50;
	pthread_t t[1024];
	struct rusage ru;

	if (rate < 1 || seconds <= 0 || threads < 1 || threads > 1024) {
		fprintf(stderr, "usage: offcpu_switches RATE SECONDS [THREADS]\n");
		return 2;
	}
	period_ns = (long)(1e9 * threads / (double)rate);
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)seconds;
	end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, _sleeper, NULL))
			return 1;
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	getrusage(RUSAGE_SELF, &ru);
	printf("blocks %lu rate %.0f cpu_s %.3f\n", (unsigned long)blocks, (double)blocks / seconds,
	       (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + (double)ru.ru_stime.tv_sec +
	       ru.ru_stime.tv_usec / 1e6);
	return 0;
}
