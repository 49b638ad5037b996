/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SYMBOLIZE_PERFMAP_H
#define FW_SYMBOLIZE_PERFMAP_H

#include <stddef.h>
#include <stdint.h>

#include "symbolize/elf_file.h"	/* symbol_cb */

/*
 * Resolves n addresses through a JIT perf map (/tmp/perf-PID.map, or
 * /proc/PID/root/tmp/perf-PID.map for a process in a container), calling cb
 * once for every index (see symbol_cb), also when an error is returned.
 * Borrows path and addrs.
 *
 * Lines are "START SIZE NAME": START and SIZE in hex, with or without "0x";
 * NAME is the rest of the line and may contain spaces. An entry covers
 * [START, START+SIZE); entries of size 0 and malformed lines are skipped.
 * JITs reuse freed code memory and append a new line, so for an address
 * covered by several entries the last one in the file wins. Names that are
 * C++ or Rust manglings are demangled.
 *
 * Perf maps only grow, to many MB for long-running JITs, so the file is not
 * loaded: pass 1 remembers, per requested address, the file offset of the
 * covering line; pass 2 seeks to just those lines. Memory is proportional
 * to n, plus one line.
 *
 * The file is written by the process being profiled, so it is read with
 * caps: only its last PERFMAP_MAX_BYTES (the latest entries, which win),
 * and lines longer than PERFMAP_LINE_MAX are skipped.
 *
 * Reads through fd (borrowed; its position does not matter), which the
 * caller opened with the checks a file of another process needs (see
 * common/safe_open.h and proc_table__open_perfmap()).
 *
 * Returns 0 (also when addresses stay unresolved), -EINVAL, -ENOMEM, or the
 * -errno of reading.
 */
int perfmap__resolve_fd(int fd, const uint64_t *addrs, size_t n, symbol_cb cb, void *ctx);

/*
 * A read costs up to this many bytes: each second the agent re-reads the
 * map of a JIT whose frames are still unnamed, and 64 MiB is about a
 * million entries, more than the code a JIT keeps alive.
 */
#define PERFMAP_MAX_BYTES (64ull << 20)
/* Longer lines are skipped: names of a few KB (C++ templates) still fit. */
#define PERFMAP_LINE_MAX (64 << 10)

/*
 * perfmap__resolve_fd() on the file at path, opened with safe_open (no
 * symbolic link, a regular file) but no owner check: for tools and tests.
 * Returns -ENOENT when the file is missing, and the errors above.
 */
int perfmap__resolve(const char *path, const uint64_t *addrs, size_t n,
		     symbol_cb cb, void *ctx);

#endif
