/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_SKEL_BYTES_H
#define FW_AGENT_SKEL_BYTES_H

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/*
 * A BPF skeleton's ELF bytes (hundreds of KB for our objects) sit in the
 * executable's .rodata. libbpf parses them once, in bpf_object open, and
 * keeps what it needs on its heap; their pages then stayed resident for
 * the agent's whole life. Called with the skeleton's <name>__elf_bytes
 * once the object is open, this gives back the whole pages among them.
 * They are clean pages of a read-only file mapping: dropping them loses
 * nothing, and a later read would fault them in again from the file.
 */
static inline void skel_bytes__release(const void *(*elf_bytes)(size_t *size))
{
	size_t size;
	const void *elf = elf_bytes(&size);
	uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
	uintptr_t lo = ((uintptr_t)elf + page - 1) & ~(page - 1);
	uintptr_t hi = ((uintptr_t)elf + size) & ~(page - 1);

	if (hi > lo)
		madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

#endif
