// SPDX-License-Identifier: Apache-2.0
/*
 * libFuzzer target for what the agent reads from binaries on the host: the
 * ELF reader (build id, segments, symbol lookup, also with the extents and
 * gaps of elf_file__resolve_ranges()) and the unwind table builder
 * (.eh_frame/.debug_frame through libdw). A hostile binary must give an
 * error, never a crash, a table that is sorted and extents that hold their
 * addresses.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "symbolize/elf_file.h"
#include "unwind/unwind_table.h"

static void _count(void *ctx, size_t index, const char *name, uint64_t off)
{
	(*(size_t *)ctx)++;
	if (name && !name[0] && off)
		abort();
}

/* An extent or gap must hold its address; a point is start == end. */
struct ranged {
	const uint64_t *addrs;
	size_t called;
};

static void _range(void *ctx, size_t index, const char *name, uint64_t start, uint64_t end)
{
	struct ranged *r = ctx;
	uint64_t a = r->addrs[index];

	(void)name;
	r->called++;
	if (start > a || (end != start && a >= end))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint64_t addrs[] = { 0, 0x400000, 0x401000, 0x1000, 0xffffffffffffffffull };
	struct unwind_row *rows = NULL;
	struct elf_file *f;
	size_t nrows = 0, called = 0;
	int fd = memfd_create("elf", 0);

	if (fd < 0 || write(fd, data, size) != (ssize_t)size)
		abort();
	f = elf_file__open(fd, "/nonexistent-debug-root");
	if (f) {
		uint64_t bias;

		elf_file__build_id(f);
		elf_file__load_bias(f, 0x555555554000ull, 0x555555600000ull, 0, &bias);
		/* The callback runs once per address, errors included. */
		elf_file__resolve(f, addrs, sizeof(addrs) / sizeof(addrs[0]), _count, &called);
		if (called != sizeof(addrs) / sizeof(addrs[0]))
			abort();
		{
			struct ranged r = { addrs, 0 };

			elf_file__cfi_bytes(f);
			elf_file__resolve_ranges(f, addrs, sizeof(addrs) / sizeof(addrs[0]), _range,
						 &r);
			if (r.called != sizeof(addrs) / sizeof(addrs[0]))
				abort();
		}
		elf_file__close(f);
	}
	if (unwind_table__build(fd, -1, &rows, &nrows, NULL) == 0) {
		for (size_t i = 1; i < nrows; i++)
			if (rows[i - 1].pc >= rows[i].pc)
				abort();
		if (nrows)
			unwind_table__find(rows, nrows, rows[nrows / 2].pc);
	} else if (rows || nrows) {
		abort();
	}
	/* The agent's chunk of a large file: one 64-KiB range, around the middle row. */
	{
		uint64_t lo = nrows ? (rows[nrows / 2].pc & ~(uint64_t)0xffff) : 0;
		struct unwind_row *part = NULL;
		size_t np = 0;

		if (unwind_table__build_range(fd, -1, lo, lo + 0x10000, &part, &np, NULL) == 0) {
			if (!np || part[0].pc != lo)
				abort();
			for (size_t i = 1; i < np; i++)
				if (part[i - 1].pc >= part[i].pc || part[i].pc >= lo + 0x10000)
					abort();
		} else if (part || np) {
			abort();
		}
		free(part);
	}
	free(rows);
	close(fd);
	return 0;
}
