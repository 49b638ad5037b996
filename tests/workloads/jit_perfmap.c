// SPDX-License-Identifier: Apache-2.0
/*
 * A tiny "JIT": copies a counting loop into anonymous executable memory,
 * announces it in /tmp/perf-PID.map as jit_spin_loop, and calls it for the
 * given number of seconds. The JIT code has no frame pointer and no symbol
 * anywhere but in the perf map.
 *
 *   jit_perfmap SECONDS [wait]
 *
 * With "wait" it writes no perf map: it prints "PID ADDR SIZE" (hex
 * address and size of its code) and waits for a line on stdin before it
 * runs, so that a test can put whatever it likes at /tmp/perf-PID.map.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* mov rcx, 1000000; 1: dec rcx; jnz 1b; ret */
static const unsigned char loop_code[] = {
	0x48, 0xc7, 0xc1, 0x40, 0x42, 0x0f, 0x00,
	0x48, 0xff, 0xc9,
	0x75, 0xfb,
	0xc3,
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void run_jit(void (*fn)(void), double seconds)
{
	double end = now() + seconds;

	while (now() < end)
		fn();
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3;
	int wait = argc > 2 && !strcmp(argv[2], "wait");
	char path[64], line[16];
	void *mem;
	FILE *map;

	mem = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		perror("mmap");
		return 1;
	}
	memcpy(mem, loop_code, sizeof(loop_code));

	if (wait) {
		printf("%d %lx %zx\n", getpid(), (unsigned long)mem, sizeof(loop_code));
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			return 1;
		run_jit((void (*)(void))mem, seconds);
		return 0;
	}
	snprintf(path, sizeof(path), "/tmp/perf-%d.map", getpid());
	map = fopen(path, "w");
	if (!map) {
		perror(path);
		return 1;
	}
	fprintf(map, "%lx %zx jit_spin_loop\n", (unsigned long)mem, sizeof(loop_code));
	fclose(map);

	run_jit((void (*)(void))mem, seconds);
	unlink(path);
	return 0;
}
