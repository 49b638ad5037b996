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
 * The kernel's text symbols held in memory (about 30 bytes a symbol): for a
 * long-running agent, which names kernel frames every few seconds, reading
 * /proc/kallsyms each time (the kernel formats every line) costs far more.
 */
struct ksym_entry;
struct kallsyms_table {
	struct ksym_entry *entries;
	size_t n;
	char *names;
};

/* Loads the table. Returns 0, -EPERM when the addresses are hidden, or -errno. */
int kallsyms__load(const char *path, struct kallsyms_table *t);
/* The name of the function holding addr (borrowed), or NULL; *offset from its start. */
const char *kallsyms__lookup(const struct kallsyms_table *t, uint64_t addr, uint64_t *offset);
void kallsyms__table_free(struct kallsyms_table *t);

#endif
