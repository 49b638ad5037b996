// SPDX-License-Identifier: Apache-2.0
/*
 * What building one file's unwind table costs: for each file given, the
 * rows, the CPU time of unwind_table__build() and a hash of the rows (equal
 * hashes: identical tables, for comparing two builds of the builder); then
 * the process's peak RSS. Build against a libflamewatch.a and run by hand:
 *
 *   gcc -O2 -Isrc bench/unwind_build.c build/libflamewatch.a \
 *       -Wl,-Bstatic -ldw -lelf -lzstd -llzma -lbz2 -lz -Wl,-Bdynamic -o build/unwind_build
 *   build/unwind_build /lib/x86_64-linux-gnu/libc.so.6 /usr/bin/node
 *
 * Run one file per process to see each file's own peak. With --stream
 * first, the table is built as the agent builds it, through
 * unwind_table__stream() (hashed as it goes, never held whole): same hash,
 * smaller peak. bench/README.md has the numbers.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "unwind/unwind_table.h"

static double _cpu_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int _hash_rows(void *ctx, const struct unwind_row *rows, size_t n)
{
	uint64_t *h = ctx;

	for (size_t j = 0; j < n; j++) {
		uint64_t v;

		memcpy(&v, &rows[j], sizeof(v));
		*h = (*h ^ v) * 1099511628211ULL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	char line[256];
	int stream = argc > 1 && !strcmp(argv[1], "--stream");
	FILE *f;

	for (int i = 1 + stream; i < argc; i++) {
		struct unwind_table_stats st;
		struct unwind_row *rows;
		uint64_t h = 1469598103934665603ULL;
		size_t n;
		double t0;
		int fd = open(argv[i], O_RDONLY | O_CLOEXEC), err;

		t0 = _cpu_ms();
		rows = NULL;
		if (stream)
			err = unwind_table__stream(fd, -1, _hash_rows, &h, &n, &st);
		else
			err = unwind_table__build(fd, -1, &rows, &n, &st);
		t0 = _cpu_ms() - t0;
		if (fd >= 0)
			close(fd);
		if (err) {
			printf("%s: error %d\n", argv[i], err);
			continue;
		}
		if (rows)
			_hash_rows(&h, rows, n);
		printf("%s: %zu FDEs, %zu rows, %zu unsupported, %.1f ms CPU, rows hash %016llx\n",
		       argv[i], st.fdes, n, st.unsupported_rows, t0, (unsigned long long)h);
		free(rows);
	}
	f = fopen("/proc/self/status", "re");
	while (f && fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "VmHWM:", 6))
			fputs(line, stdout);
	}
	if (f)
		fclose(f);
	return 0;
}
