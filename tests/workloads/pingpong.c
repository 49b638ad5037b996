// SPDX-License-Identifier: Apache-2.0
/*
 * pingpong: two threads pass a byte back and forth over two pipes for
 * argv[1] seconds; every pass is a context switch. Pin it to one CPU
 * (taskset -c 1) so that the switches go thread to thread, not via idle.
 * Prints the round trips done.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ab[2], ba[2];
static volatile int stop;

static void *_echo(void *arg)
{
	char c;

	(void)arg;
	while (read(ab[0], &c, 1) == 1 && c)
		if (write(ba[1], &c, 1) != 1)
			break;
	return NULL;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 5;
	struct timespec t0, t;
	unsigned long trips = 0;
	pthread_t th;
	char c = 1;

	if (pipe(ab) || pipe(ba) || pthread_create(&th, NULL, _echo, NULL))
		return 1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		if (write(ab[1], &c, 1) != 1 || read(ba[0], &c, 1) != 1)
			return 1;
		if (++trips % 1024 == 0) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			if ((t.tv_sec - t0.tv_sec) + (t.tv_nsec - t0.tv_nsec) / 1e9 >= secs)
				break;
		}
	}
	c = 0;
	if (write(ab[1], &c, 1) != 1)
		return 1;
	pthread_join(th, NULL);
	printf("%lu\n", trips);
	return 0;
}
