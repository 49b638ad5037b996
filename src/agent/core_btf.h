/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_CORE_BTF_H
#define FW_AGENT_CORE_BTF_H

#include <stddef.h>
#include <stdint.h>

/*
 * The running kernel's BTF cut down to the types one BPF object uses, for
 * libbpf's CO-RE relocations (bpf_object_open_opts.btf_custom_path).
 *
 * Why: libbpf 1.1 reads the whole /sys/kernel/btf/vmlinux (megabytes)
 * into a buffer, copies it into another and indexes it, once per BPF object
 * it loads: for a moment more heap than the agent's whole memory budget. Here the kernel's BTF is mmap'ed (MAP_PRIVATE, read-only: a
 * mapping of kernel pages that costs no RSS, Linux 6.16+; older kernels
 * get one read() into a buffer instead), and only the types the object's
 * own BTF names are copied out: every named struct, union, enum and
 * typedef of the object found in the kernel by name, with the types its
 * members embed (arrays, nested structs, integers, enums) and every pointer
 * turned into a pointer to void. Field offsets, sizes, bitfields and enum
 * values stay the kernel's, so libbpf relocates exactly as against the
 * full BTF (test_core_btf compares the two loads), while the cut is tens
 * of KiB.
 *
 * A relocation never follows a pointer (BPF_CORE_READ(a, b, c) relocates
 * each hop against its own root type), and libbpf deems two pointer
 * members compatible whatever they point to, so void targets are enough.
 *
 * The cut lives in a memfd; path is "/proc/self/fd/N". The BPF object must
 * not need vmlinux BTF for anything else (tp_btf/fentry attach ids, typed
 * ksyms), or libbpf loads the full BTF anyway: our programs use raw_tp.
 */
struct core_btf {
	int fd;			/* -1 when there is no cut */
	char path[32];		/* "" when there is no cut */
	uint32_t types;		/* types in the cut */
	uint32_t bytes;		/* its size */
};

/*
 * Cuts the kernel's BTF for the BPF object in elf (the skeleton's bytes).
 * On failure cb->path is "" (one debug line says why) and libbpf falls
 * back to reading the kernel's BTF itself; returns 0 or -errno.
 */
int core_btf__open(struct core_btf *cb, const void *elf, size_t size);
/* The same from a given kernel BTF file (tests). */
int core_btf__open_from(struct core_btf *cb, const char *kernel_btf, const void *elf, size_t size);
/* Once the object is loaded. */
void core_btf__close(struct core_btf *cb);

/*
 * Whether the kernel's BTF has a type of that kind and name: 1, 0 or
 * -errno. One pass over the mapped BTF, nothing kept.
 */
int core_btf__kernel_has(const char *name, int kind);
/* Whether the kernel's struct type has a member of that name: 1, 0 or -errno. */
int core_btf__kernel_has_member(const char *type, const char *member);

#endif
