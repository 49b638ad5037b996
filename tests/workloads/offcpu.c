// SPDX-License-Identifier: Apache-2.0
/*
 * offcpu MODE SECONDS [SPIN_MS BLOCK_MS [SHORT_PER_LONG [SHORT_FIRST_S]]]:
 * blocks over and over in one noinline function per MODE for SECONDS,
 * spinning SPIN_MS on the CPU (spin_on_cpu) between blocks of about
 * BLOCK_MS (default 0 and 10):
 *
 *   sleep  block_in_sleep: nanosleep()
 *   pipe   block_in_pipe_read: read() from a pipe a child process writes
 *          a byte to every BLOCK_MS
 *   futex  block_in_futex: FUTEX_WAIT on a word nobody wakes, timing out
 *   disk   block_in_disk_read: pread() with O_DIRECT of a file it wrote in
 *          the current directory
 *
 * Short blocks, for the off-CPU profiler's prediction of long ones:
 * SHORT_PER_LONG nanosleep()s of 200 us (block_short, under the 1 ms
 * minimum) before each block of MODE, and SHORT_FIRST_S seconds of them
 * alone before the first (both default 0), from the same call site as
 * block_in_sleep's.
 *
 * Prints its pid, the wall time spent inside MODE's blocking calls (the
 * truth an off-CPU profile is checked against), the number of calls and
 * its run time: "pid N", "blocked_ns N", "blocks N", "total_ns N"; then
 * the short blocks, "short_blocks N", and the time of every block, short
 * or not, that took at least 1 ms: "over_min_ns N".
 *
 * With OFFCPU_SPANS=FILE it also writes each blocking call of MODE's start
 * and end (Unix ns, CLOCK_REALTIME as the agent's timestamps) to FILE, a
 * line each: the truth a flame chart's blocked spans are checked against.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t _now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static uint64_t _unix_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static volatile uint64_t sink;

__attribute__((noinline)) void spin_on_cpu(uint64_t ns)
{
	uint64_t end = _now() + ns;

	while (_now() < end)
		sink++;
}

__attribute__((noinline)) void block_in_sleep(uint64_t ns)
{
	struct timespec ts = { ns / 1000000000ULL, ns % 1000000000ULL };

	nanosleep(&ts, NULL);
}

#define SHORT_NS 200000ULL
#define MIN_NS 1000000ULL

static uint64_t over_min;

__attribute__((noinline)) void block_short(void)
{
	uint64_t t = _now();

	block_in_sleep(SHORT_NS);
	t = _now() - t;
	if (t >= MIN_NS)
		over_min += t;
}

__attribute__((noinline)) void block_in_pipe_read(int fd)
{
	char c;

	if (read(fd, &c, 1) != 1)
		exit(1);
}

static uint32_t futex_word;

__attribute__((noinline)) void block_in_futex(uint64_t ns)
{
	struct timespec ts = { ns / 1000000000ULL, ns % 1000000000ULL };

	syscall(SYS_futex, &futex_word, FUTEX_WAIT_PRIVATE, 0, &ts, NULL, 0);
}

__attribute__((noinline)) void block_in_disk_read(int fd, void *buf, size_t len, off_t off)
{
	if (pread(fd, buf, len, off) != (ssize_t)len)
		exit(1);
}

#define DISK_CHUNK (8 << 20)
#define DISK_FILE_CHUNKS 8

static int _disk_file(void **buf)
{
	char path[] = "offcpu-disk.XXXXXX";
	int fd = mkstemp(path);

	if (fd < 0 || posix_memalign(buf, 4096, DISK_CHUNK))
		return -1;
	memset(*buf, 0x5a, DISK_CHUNK);
	for (int i = 0; i < DISK_FILE_CHUNKS; i++)
		if (write(fd, *buf, DISK_CHUNK) != DISK_CHUNK)
			return -1;
	fsync(fd);
	close(fd);
	fd = open(path, O_RDONLY | O_DIRECT);
	unlink(path);
	return fd;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "sleep";
	double secs = argc > 2 ? atof(argv[2]) : 5;
	uint64_t spin = (argc > 3 ? atof(argv[3]) : 0) * 1e6;
	uint64_t block = (argc > 4 ? atof(argv[4]) : 10) * 1e6;
	long short_per_long = argc > 5 ? atol(argv[5]) : 0;
	uint64_t short_first = (argc > 6 ? atof(argv[6]) : 0) * 1e9;
	uint64_t t0 = _now(), end = t0 + secs * 1e9, blocked = 0, blocks = 0, shorts = 0, t, u = 0;
	const char *spans_path = getenv("OFFCPU_SPANS");
	FILE *spans = spans_path ? fopen(spans_path, "w") : NULL;
	int fds[2] = { -1, -1 }, disk = -1, i = 0;
	pid_t child = 0;
	void *buf = NULL;

	if (!strcmp(mode, "pipe")) {
		if (pipe(fds))
			return 1;
		child = fork();
		if (child == 0) {
			for (;;) {
				block_in_sleep(block);
				if (write(fds[1], "x", 1) != 1)
					_exit(0);
			}
		}
	} else if (!strcmp(mode, "disk")) {
		disk = _disk_file(&buf);
		if (disk < 0) {
			perror("disk file");
			return 1;
		}
	} else if (strcmp(mode, "sleep") && strcmp(mode, "futex")) {
		fprintf(stderr, "unknown mode %s\n", mode);
		return 2;
	}
	if (spans_path && !spans) {
		perror(spans_path);
		return 1;
	}

	while (_now() < t0 + short_first) {
		block_short();
		shorts++;
	}
	while (_now() < end) {
		for (long k = 0; k < short_per_long; k++, shorts++)
			block_short();
		if (spin)
			spin_on_cpu(spin);
		if (spans)
			u = _unix_now();
		t = _now();
		if (!strcmp(mode, "sleep"))
			block_in_sleep(block);
		else if (!strcmp(mode, "pipe"))
			block_in_pipe_read(fds[0]);
		else if (!strcmp(mode, "futex"))
			block_in_futex(block);
		else
			block_in_disk_read(disk, buf, DISK_CHUNK,
					   (off_t)(i++ % DISK_FILE_CHUNKS) * DISK_CHUNK);
		t = _now() - t;
		blocked += t;
		if (t >= MIN_NS)
			over_min += t;
		blocks++;
		if (spans)
			fprintf(spans, "%llu %llu\n", (unsigned long long)u,
				(unsigned long long)_unix_now());
	}
	if (spans)
		fclose(spans);
	if (child > 0) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
	}
	printf("pid %d\nblocked_ns %llu\nblocks %llu\ntotal_ns %llu\nshort_blocks %llu\n"
	       "over_min_ns %llu\n", (int)getpid(), (unsigned long long)blocked,
	       (unsigned long long)blocks, (unsigned long long)(_now() - t0),
	       (unsigned long long)shorts, (unsigned long long)over_min);
	return 0;
}
