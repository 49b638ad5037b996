/*
 * forker: forks two children that each burn CPU in child_work() for argv[1]
 * seconds (default 3); the parent only waits. Used to check that
 * `flamewatch record -- CMD` follows the command's children:
 *
 *     main -> spawn -> child_work        (in each child)
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static volatile unsigned long sink;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE void child_work(double seconds)
{
	double end = now_s() + seconds;
	volatile unsigned long acc = 0;

	do {
		for (unsigned long i = 0; i < 1000000; i++)
			acc += i ^ (acc >> 3);
	} while (now_s() < end);
	sink = acc;
}

NOINLINE pid_t spawn(double seconds)
{
	pid_t pid = fork();
	if (pid == 0) {
		child_work(seconds);
		_exit(0);
	}
	return pid;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3.0;
	int status, rc = 0;

	if (seconds <= 0)
		seconds = 3.0;
	for (int i = 0; i < 2; i++) {
		if (spawn(seconds) < 0) {
			perror("fork");
			return 1;
		}
	}
	while (wait(&status) > 0)
		if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
			rc = 1;
	return rc;
}
