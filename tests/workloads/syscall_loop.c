/*
 * syscall_loop: spends argv[1] seconds (default 3) mostly in the kernel,
 * reading /dev/zero and calling getppid in a loop, so that samples carry
 * kernel frames below the user frames:
 *
 *     main -> do_syscalls -> sys_read_zero | sys_getppid -> [kernel]
 *
 * On x86-64 the system calls are issued by inline `syscall` instructions in
 * our own noinline functions, so a frame-pointer unwinder reaches main without
 * depending on how libc was built. Each keeps its result in a volatile stack
 * slot: GCC 12 gives a leaf function that uses no stack no frame pointer,
 * even with -mno-omit-leaf-frame-pointer, and do_syscalls would be skipped.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define NOINLINE __attribute__((noinline))

static char buf[64 * 1024];

NOINLINE long sys_read_zero(int fd)
{
#if defined(__x86_64__)
	long r;
	volatile long ret;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "0"((long)SYS_read), "D"((long)fd), "S"(buf), "d"(sizeof(buf))
			 : "rcx", "r11", "memory");
	ret = r;
	return ret;
#else
	return syscall(SYS_read, fd, buf, sizeof(buf));
#endif
}

NOINLINE long sys_getppid(void)
{
#if defined(__x86_64__)
	long r;
	volatile long ret;
	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "0"((long)SYS_getppid)
			 : "rcx", "r11", "memory");
	ret = r;
	return ret;
#else
	return syscall(SYS_getppid);
#endif
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

NOINLINE int do_syscalls(double seconds)
{
	int fd = open("/dev/zero", O_RDONLY);
	double end = now_s() + seconds;

	if (fd < 0) {
		perror("open /dev/zero");
		return 1;
	}
	do {
		for (int i = 0; i < 64; i++) {
			if (sys_read_zero(fd) < 0)
				return 1;
			sys_getppid();
		}
	} while (now_s() < end);
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	double seconds = argc > 1 ? atof(argv[1]) : 3.0;
	if (seconds <= 0)
		seconds = 3.0;
	return do_syscalls(seconds);
}
