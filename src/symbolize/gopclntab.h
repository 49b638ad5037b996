/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SYMBOLIZE_GOPCLNTAB_H
#define FW_SYMBOLIZE_GOPCLNTAB_H

/*
 * Function names of a Go binary from its .gopclntab, which the Go runtime
 * needs for its own tracebacks and which therefore survives `-ldflags=-s
 * -w` and strip(1): the only names a stripped Go binary has. Only Go 1.18
 * and later (pclntab magic 0xfffffff0 and 0xfffffff1) are read.
 *
 * Like the symbol tables in elf_file.c, the table is read with pread() as
 * needed, never mapped or copied: a large Go binary has tens of MB of it.
 */
#include <stddef.h>
#include <stdint.h>

#include <libelf.h>

struct gopclntab;

/*
 * Opens the .gopclntab of the ELF file e, read through fd (both borrowed;
 * they must outlive the result). Returns 0 and an owned table in *out, or
 * -ENOENT (no .gopclntab, or a layout this reader does not know), -EIO,
 * -ENOMEM.
 */
int gopclntab__open(int fd, Elf *e, struct gopclntab **out);

/*
 * The function holding the link-time virtual address vaddr: its name
 * (borrowed, valid until the next lookup or close) and vaddr's offset
 * from its entry. Returns 0, -ENOENT when no function holds vaddr, -EIO.
 */
int gopclntab__lookup(struct gopclntab *t, uint64_t vaddr, const char **name,
		      uint64_t *offset);

/* Frees t. Accepts NULL. */
void gopclntab__close(struct gopclntab *t);

#endif
