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
 * smaller peak. With --chunks first, each file's table is also built the
 * way the agent builds a large file's, one 64-KiB chunk of code at a time
 * (unwind_table__build_range()), for every chunk that has code: rows,
 * kernel bytes (a row array costs its rows in whole pages and a header
 * page) and CPU time, whole table against every chunk and against one
 * chunk. bench/README.md has the numbers.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "unwind/unwind_table.h"

#define CHUNK (64u << 10)	/* FW_CHUNK_BYTES */

static double _cpu_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

/*
 * KiB the kernel allocates for n rows: a whole table's mappable array
 * (its rows in whole pages and a header page), or a chunk's array of
 * 4-byte rows (one kmalloc() of header and rows, a power of two up to 32
 * KiB, pages beyond). As the agent's _table_bytes() and _chunk_bytes().
 */
static double _kib(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (page + (n * sizeof(struct unwind_row) + page - 1) / page * page) / 1024.0;
}

static double _chunk_kib(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), size = 320 + 8 * (1 + (n + 1) / 2), b = 8;

	if (size > 8 * page)
		return (size + page - 1) / page * page / 1024.0;
	while (b < size)
		b *= 2;
	return b / 1024.0;
}

/*
 * Builds every chunk of the file that its table has a rule other than
 * "no CFI" in, and prints their totals beside the whole table's.
 */
static void _chunks(const char *path, int fd, const struct unwind_row *rows, size_t n,
		    double whole_ms)
{
	size_t nchunks = 0, total = 0, most = 0;
	double kib = 0, ms = 0, worst = 0;

	for (size_t i = 0; i + 1 < n; i++) {
		uint64_t lo = rows[i].pc / CHUNK * (uint64_t)CHUNK;
		struct unwind_row *part;
		size_t np;
		double t0;

		if (rows[i].cfa_type == UNWIND_NO_CFI)
			continue;
		t0 = _cpu_ms();
		if (unwind_table__build_range(fd, -1, lo, lo + CHUNK, &part, &np, NULL)) {
			printf("%s: chunk %#llx: error\n", path, (unsigned long long)lo);
			return;
		}
		t0 = _cpu_ms() - t0;
		ms += t0;
		worst = t0 > worst ? t0 : worst;
		nchunks++;
		total += np;
		most = np > most ? np : most;
		kib += _chunk_kib(np);
		free(part);
		/* The next chunk with a row in it. */
		while (i + 1 < n && rows[i + 1].pc < lo + CHUNK)
			i++;
	}
	printf("%s: whole table %zu rows, %.0f KiB, %.1f ms CPU; %zu chunks with code: %zu rows, "
	       "%.0f KiB, %.1f ms CPU; a chunk: %.0f rows (at most %zu), %.1f KiB, %.2f ms CPU "
	       "(at most %.2f)\n",
	       path, n, _kib(n), whole_ms, nchunks, total, kib, ms,
	       nchunks ? (double)total / nchunks : 0.0, most, nchunks ? kib / nchunks : 0.0,
	       nchunks ? ms / nchunks : 0.0, worst);
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
	int chunks = argc > 1 && !strcmp(argv[1], "--chunks");
	FILE *f;

	for (int i = 1 + stream + chunks; i < argc; i++) {
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
		if (!err && chunks)
			_chunks(argv[i], fd, rows, n, t0);
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
