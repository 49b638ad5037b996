// SPDX-License-Identifier: Apache-2.0
/*
 * late_dlopen LIB CHILDREN MS DIR: CHILDREN children, one after the other,
 * each copying LIB to a file of its own in DIR, dlopen()ing the copy and
 * spinning MS ms in it through main;run_child;late_outer;late_inner.
 *
 * Each copy is a file the profiler has never seen, mapped after its
 * process started: its samples walk fully only once the profiler has read
 * the new mapping and loaded its unwind table. How soon that happens is
 * what the test measures.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static int _copy(const char *from, const char *to)
{
	struct stat st;
	int in = open(from, O_RDONLY), out = -1, ok = 0;

	if (in >= 0 && fstat(in, &st) == 0)
		out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	if (out >= 0)
		ok = sendfile(out, in, NULL, st.st_size) == st.st_size;
	if (in >= 0)
		close(in);
	if (out >= 0)
		close(out);
	return ok ? 0 : -1;
}

__attribute__((noinline)) static int run_child(const char *lib, int ms, const char *dir)
{
	char path[4096];
	unsigned long (*outer)(double);
	void *h;

	snprintf(path, sizeof(path), "%s/late_lib.%d.so", dir, (int)getpid());
	if (_copy(lib, path)) {
		perror(path);
		return 1;
	}
	h = dlopen(path, RTLD_NOW);
	unlink(path);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 1;
	}
	*(void **)&outer = dlsym(h, "late_outer");
	if (!outer)
		return 1;
	return outer(ms / 1000.0) == 0;	/* never 0: keeps the call */
}

int main(int argc, char **argv)
{
	int children, ms, st, failed = 0;

	if (argc != 5) {
		fprintf(stderr, "usage: late_dlopen LIB CHILDREN MS DIR\n");
		return 2;
	}
	children = atoi(argv[2]);
	ms = atoi(argv[3]);
	for (int i = 0; i < children; i++) {
		pid_t pid = fork();

		if (pid == 0)
			_exit(run_child(argv[1], ms, argv[4]));
		if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st))
			failed++;
	}
	return failed ? 1 : 0;
}
