/*
 * threads: burns CPU for argv[1] seconds (default 3) on three threads of one
 * process, so `flamewatch record -p PID` can be checked to follow threads:
 *
 *     main -> main_spin                               (main thread)
 *     start_thread -> thread_entry -> thread_spin     (two more threads)
 *
 * Threads keep the process's comm (no pthread_setname_np).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;
static double seconds = 3.0;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE void thread_spin(double end)
{
	volatile unsigned long acc = 0;
	do {
		for (unsigned long i = 0; i < 1000000; i++)
			acc += i ^ (acc >> 3);
	} while (now_s() < end);
	sink = acc;
}

NOINLINE void main_spin(double end)
{
	volatile unsigned long acc = 0;
	do {
		for (unsigned long i = 0; i < 1000000; i++)
			acc += i ^ (acc >> 3);
	} while (now_s() < end);
	sink = acc;
}

NOINLINE void *thread_entry(void *arg)
{
	thread_spin(*(double *)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[2];
	double end;

	if (argc > 1 && atof(argv[1]) > 0)
		seconds = atof(argv[1]);
	end = now_s() + seconds;
	for (int i = 0; i < 2; i++) {
		if (pthread_create(&t[i], NULL, thread_entry, &end) != 0) {
			fprintf(stderr, "threads: pthread_create failed\n");
			return 1;
		}
	}
	main_spin(end);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	return 0;
}
