/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_ELF_SECTIONS_H
#define FW_COMMON_ELF_SECTIONS_H

#include <gelf.h>
#include <libelf.h>

/*
 * The first section of e called name, its header copied to *sh (borrowed);
 * NULL when there is none or the section names cannot be read. A section
 * whose header or name cannot be read is skipped.
 */
Elf_Scn *elf_sections__find(Elf *e, const char *name, GElf_Shdr *sh);

#endif
