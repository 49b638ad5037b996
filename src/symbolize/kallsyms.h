/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SYMBOLIZE_KALLSYMS_H
#define FW_SYMBOLIZE_KALLSYMS_H

#include <stddef.h>
#include <stdint.h>

#include "symbolize/elf_file.h"	/* symbol_cb */

/*
 * Resolves n kernel addresses through a kallsyms file (normally
 * "/proc/kallsyms"; borrowed, like addrs), calling cb once for every index
 * (see symbol_cb), also when an error is returned.
 *
 * Nothing of the ~120k-line table is kept: pass 1 reads addresses only and
 * finds, for every requested address, the nearest text symbol (types t, T, w,
 * W) at or below it; pass 2 reads the file again and copies just the names of
 * those symbols. Memory is proportional to n.
 *
 * Module symbols ("ffffffffc0a01000 t foo\t[mod]") are named "foo [mod]", and
 * so are the kernel's own pseudo-modules ("bpf_prog_..._name [bpf]",
 * "ftrace_trampoline [__builtin__ftrace]"), since the module is the only
 * binary a kernel frame can show. Names are demangled (Rust in the kernel).
 * Among aliases the name with the fewest leading underscores wins, then a
 * global one.
 *
 * kallsyms gives no sizes, so where a function ends is a best effort: an
 * address is left unresolved when the nearest symbol below it is _etext or
 * _einittext or a data symbol (types b/d/r/g/s/v, either case: the end of a
 * text region), or lies more than KALLSYMS_MAX_OFFSET below it (the last
 * symbol of a module or of the whole table has nothing after it).
 *
 * Returns 0 (also when addresses stay unresolved); -EPERM, with one warning
 * per process, when every text address reads as zero (kernel.kptr_restrict,
 * or no CAP_SYSLOG); -ENOENT when the file is missing; -EINVAL; -ENOMEM; or
 * the -errno of reading.
 */
#define KALLSYMS_MAX_OFFSET (128u * 1024)

int kallsyms__resolve(const char *path, const uint64_t *addrs, size_t n,
		      symbol_cb cb, void *ctx);

/*
 * The kernel's text symbols held in memory, for a long-running agent that
 * names kernel frames every batch (reading /proc/kallsyms each time, the
 * kernel formatting all ~120k lines, cost far more CPU than the rest).
 *
 * Compact, because it lives as long as the agent. Both halves come in
 * blocks of KALLSYMS_BLOCK_NAMES symbols in address order:
 *  - the addresses: each block's first as a 32-bit offset from the lowest
 *    (all of x86-64's kernel text, modules and BPF programs lie in its top
 *    2 GiB), the others as LEB128 deltas from the one before (~2 bytes a
 *    symbol, not 4: a lookup decodes up to one block of them);
 *  - the names, zstd-compressed; a lookup decompresses one block (a few
 *    KiB) and keeps the name it wanted, so only names of frames actually
 *    seen stay expanded.
 * A small fraction of what the table takes uncompressed.
 *
 * Among aliases at one address the name with the fewest leading
 * underscores wins, then a global one, as in kallsyms__resolve().
 */
#define KALLSYMS_BLOCK_NAMES 128

struct kallsyms_cached;
struct kallsyms_table {
	uint64_t base;		/* lowest address */
	size_t n;
	uint32_t *boff;		/* nblocks: each block's first offset from base */
	uint32_t *dpos;		/* nblocks + 1: where each block's deltas start in d */
	uint8_t *d;		/* the other offsets, LEB128 deltas from the one before */
	uint32_t *zoff;		/* nblocks + 1 offsets of the compressed blocks in z */
	uint8_t *z;
	size_t nblocks;
	uint32_t *ends;		/* sorted offsets of _etext/_einittext: nothing resolves there */
	size_t nends;
	struct kallsyms_cached *cache;	/* entry index + 1 -> expanded name; open addressing */
	size_t cache_cap, cache_n;
};

/* Loads the table. Returns 0, -EPERM when the addresses are hidden, or -errno. */
int kallsyms__load(const char *path, struct kallsyms_table *t);
/*
 * The name of the function holding addr (borrowed until the table is
 * freed), or NULL; *offset from its start. Not const: names are expanded
 * and cached on first use.
 */
const char *kallsyms__lookup(struct kallsyms_table *t, uint64_t addr, uint64_t *offset);
/* Bytes the table holds, expanded names included. */
size_t kallsyms__memory(const struct kallsyms_table *t);
void kallsyms__table_free(struct kallsyms_table *t);

#endif
