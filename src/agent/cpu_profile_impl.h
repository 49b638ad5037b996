/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_CPU_PROFILE_IMPL_H
#define FW_AGENT_CPU_PROFILE_IMPL_H

/*
 * Private to cpu_profile.c (CPU samples, naming frames) and
 * cpu_profile_gpu.c (GPU activity under the CPU stack that launched it).
 */
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "symbolize/kallsyms.h"

struct batch;
struct binary;
struct hotspot;
struct intern;
struct mapping_source;
struct proc_table;
struct profile;
struct python;
struct ruby;
struct sym_range;

struct cpu_profile {
	struct proc_table *procs;
	struct profile *p;		/* the dictionary; batch->dict in timed mode */
	bool timed;
	uint64_t period_ns;
	uint32_t aggregate_type;	/* aggregated mode: the enum sample_type kept */
	struct batch *batch;		/* timed mode: every sample with its timestamp */
	struct intern *pids;		/* timed mode: pid -> index in pid_series */
	uint32_t *pid_series;
	uint32_t cap_pid_series;
	struct mapping_source *sources;
	uint32_t nsources;
	int64_t kernel_mapping;
	uint64_t samples;
	uint64_t unresolved;
	uint32_t *frames;	/* scratch for one stack */
	uint32_t jit_named_upto;	/* frames below this id had their JIT names looked up */
	uint64_t jit_retry_ns;	/* CLOCK_MONOTONIC of the last retry of every JIT frame */
	struct kallsyms_table ksyms;	/* kernel text symbols, loaded on first use */
	bool ksyms_tried;
	struct intern *sym_keys;	/* symbol cache: (owner, addr) -> index in sym_name_of */
	struct intern *sym_names;
	uint32_t *sym_name_of;
	uint32_t sym_cap;
	struct sym_range *ranges;	/* functions named so far, sorted up to nsorted */
	uint32_t nranges, nsorted, cap_ranges;
	uint64_t named_cached, symbol_reads;
	struct python *py;		/* borrowed; NULL: Python frames are ignored */
	struct ruby *rb;		/* borrowed; NULL: Ruby frames are ignored */
	struct hotspot *hs;		/* borrowed; NULL: JVM code is named as anonymous memory */
	uint32_t *leaf;			/* scratch: one user stack, leaf first */
};

/* The mapping id of a binary, or of process pid's JIT code, in cp's dictionary. */
int64_t cp__binary_mapping(struct cpu_profile *cp, struct binary *bin);
int64_t cp__jit_mapping(struct cpu_profile *cp, pid_t pid);

#endif
