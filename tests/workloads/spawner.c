/*
 * spawner: starts short-lived processes at a steady rate for a while, to
 * check that the agent keeps up with process churn and that its memory
 * stays flat. Each child execs this same binary with "child", which spins
 * for ~1 ms in child_spin() (so samples land in it now and then) and
 * exits.
 *
 *     spawner RATE SECONDS     prints "spawned N in S s" at the end
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

NOINLINE static void child_spin(void)
{
	double end = now_s() + 0.001;

	while (now_s() < end)
		sink++;
}

static void reap(int *running)
{
	while (*running > 0 && waitpid(-1, NULL, WNOHANG) > 0)
		(*running)--;
}

int main(int argc, char **argv)
{
	double rate, seconds, start, next;
	char self[4096];
	long spawned = 0;
	int running = 0;
	ssize_t n;

	if (argc > 1 && !strcmp(argv[1], "child")) {
		child_spin();
		return 0;
	}
	/* exec by the real path: through /proc/self/exe the children's comm would be "exe". */
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = '\0';
	rate = argc > 1 ? atof(argv[1]) : 1000;
	seconds = argc > 2 ? atof(argv[2]) : 10;
	start = next = now_s();
	while (now_s() - start < seconds) {
		pid_t pid;

		while (now_s() < next)
			usleep(100);
		next += 1.0 / rate;
		pid = fork();
		if (pid == 0) {
			execl(self, argv[0], "child", (char *)NULL);
			_exit(127);
		}
		if (pid > 0) {
			spawned++;
			running++;
		}
		reap(&running);
	}
	while (running > 0 && wait(NULL) > 0)
		running--;
	printf("spawned %ld in %.1f s\n", spawned, now_s() - start);
	return 0;
}
