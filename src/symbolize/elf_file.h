/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SYMBOLIZE_ELF_FILE_H
#define FW_SYMBOLIZE_ELF_FILE_H

#include <stddef.h>
#include <stdint.h>

/*
 * Symbolization is batched so that no symbol table stays in memory: callers
 * collect the addresses they need, and one resolve call loads what it needs,
 * answers through a symbol_cb and frees everything before it returns. That is
 * what keeps a host-wide profiler within a few MB of RSS.
 *
 * A symbol_cb is called exactly once for every index 0..n-1 of a batch, in
 * no particular order, also when the resolve call returns an error. name is
 * borrowed and valid only during the call (copy it to keep it); it is NULL
 * when the address could not be resolved, and then offset_in_symbol is 0.
 * The same typedef serves kallsyms__resolve() and perfmap__resolve().
 */
typedef void (*symbol_cb)(void *ctx, size_t index, const char *name,
			  uint64_t offset_in_symbol);

/*
 * One opened ELF binary (executable or shared object). It keeps a duplicate
 * of the file descriptor and a few small facts read at open time (build id,
 * PT_LOAD segments, ELF type, .gnu_debuglink name); no ELF handle and no
 * symbols stay open between calls.
 */
struct elf_file;

/*
 * Binaries and debug files are opened with at most this size (see
 * common/safe_open.h): everything read from one, symbol tables and unwind
 * information, is bounded by its size, and the largest ELF files shipped
 * (GPU libraries with their device code, debug files of browsers) are a
 * few GB. A larger file is a sparse one made to keep the agent reading.
 */
#define ELF_FILE_MAX_BYTES (16ull << 30)

/*
 * Opens the ELF file behind fd. Borrows fd: it is dup()ed, and the caller
 * keeps (and closes) its own. debug_root (borrowed, copied; NULL means "")
 * is the root directory below which separate debug files are looked for:
 * "" for the host, "/proc/PID/root" for a process in another mount
 * namespace. Below it, no symbolic link is followed (safe_open.h).
 * Returns an owned elf_file, or NULL with errno set: EBADF for a bad fd,
 * ENOEXEC when the file is not ELF, ENOMEM.
 */
struct elf_file *elf_file__open(int fd, const char *debug_root);

/* Closes f and frees everything it owns. Accepts NULL. */
void elf_file__close(struct elf_file *f);

/*
 * Tells f where the binary lives inside debug_root (e.g. "/usr/bin/foo"),
 * which the .gnu_debuglink search needs: it looks next to the binary, in its
 * .debug/ subdirectory and under <debug_root>/usr/lib/debug/<dir>/. Without a
 * path only the build-id lookup is tried. Borrows path (copied).
 * Returns 0, -EINVAL or -ENOMEM.
 */
int elf_file__set_path(struct elf_file *f, const char *path_in_root);

/*
 * The GNU build id as lowercase hex, or "" when the file has none.
 * Borrowed; valid until elf_file__close().
 */
const char *elf_file__build_id(const struct elf_file *f);

/* The ELF type: ET_EXEC, ET_DYN (PIE executables too), ... */
int elf_file__type(const struct elf_file *f);

/* The .gnu_debuglink file name, or NULL. Borrowed, like the build id. */
const char *elf_file__debuglink(const struct elf_file *f);

/*
 * The sizes of .eh_frame and .debug_frame together, from the section
 * headers (nothing read): what building an unwind table would parse.
 */
uint64_t elf_file__cfi_bytes(const struct elf_file *f);

/*
 * Converts a file offset (as /proc/PID/maps gives it: address - mapping start
 * + mapping offset) to the link-time virtual address that symbol tables use,
 * through the PT_LOAD segment holding that offset. Returns 0, or -ENOENT when
 * no segment maps the offset.
 */
int elf_file__offset_to_vaddr(const struct elf_file *f, uint64_t file_offset,
			      uint64_t *vaddr);

/*
 * The load bias of a mapping of this file ([map_start, map_end) at
 * map_offset): ELF virtual address = address - bias, for every address in
 * the segment the mapping holds. Returns 0, or -ENOENT.
 */
int elf_file__load_bias(const struct elf_file *f, uint64_t map_start, uint64_t map_end,
			uint64_t map_offset, uint64_t *bias);

/*
 * Resolves n link-time virtual addresses to function names, calling cb once
 * for each index (see symbol_cb). Borrows vaddrs.
 *
 * Symbols come from the first source that exists, in this order: the debug
 * file <debug_root>/usr/lib/debug/.build-id/xx/yyyy.debug; the debug file
 * named by .gnu_debuglink (needs elf_file__set_path()); the file's own
 * .symtab; its .dynsym. A debug file whose build id differs from the
 * binary's is skipped (its CRC is not checked: that would read the whole
 * file). Addresses the chosen source leaves unresolved are looked up again in
 * the binary's .dynsym.
 *
 * Functions (STT_FUNC, STT_GNU_IFUNC) count, and untyped symbols in
 * executable sections, which hand-written assembly often leaves. An address
 * resolves to the sized symbol containing it; failing that, to the nearest
 * symbol below it if that one has size 0, no other symbol starts in between
 * and its section reaches the address. Among aliases the name with the
 * fewest leading underscores wins ("malloc", not "__libc_malloc"; glibc's
 * "__GI_" aliases never), then global over weak over local binding. Names
 * are demangled.
 *
 * Memory is proportional to n, not to the symbol tables: the requested
 * addresses are sorted, each table is streamed once with pread() in small
 * chunks, and only the names of hits and of tied aliases are read. Returns 0 (also when addresses stay
 * unresolved), -EINVAL, -ENOMEM, or the -errno of reading the binary.
 */
int elf_file__resolve(struct elf_file *f, const uint64_t *vaddrs, size_t n,
		      symbol_cb cb, void *ctx);

/*
 * As elf_file__resolve(), saying what the symbol covers instead of the
 * offset: [start, end) in the file's virtual addresses, for a cache to
 * name later addresses of the same function without reading the tables
 * again. end == start where only the address itself is known to be named
 * so (a symbol without a size, a Go function, no name at all).
 */
typedef void (*symbol_range_cb)(void *ctx, size_t index, const char *name,
				uint64_t start, uint64_t end);
int elf_file__resolve_ranges(struct elf_file *f, const uint64_t *vaddrs, size_t n,
			     symbol_range_cb cb, void *ctx);

#endif
