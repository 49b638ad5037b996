/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_PROFILE_H
#define FW_COMMON_PROFILE_H

#include <stdint.h>

/*
 * A profile: the deduplicated strings, mappings, frames and stacks of a set
 * of samples, and the samples themselves aggregated by (stack, pid, tid, cpu,
 * comm). Collectors build it through the profile__intern_*() and
 * profile__add_sample() calls; output formats read the public arrays
 * directly and never modify them.
 *
 * All ids are dense indexes into the arrays below. String id 0 is "".
 * Stacks are stored root first, leaf last.
 */

enum frame_kind {
	FRAME_NATIVE = 0,	/* user-space machine code in a file mapping */
	FRAME_KERNEL = 1,	/* kernel text or a module */
	FRAME_JIT = 2,		/* anonymous executable memory (perf map names) */
	FRAME_PYTHON = 3,
	FRAME_CUDA_KERNEL = 4,
	FRAME_RUBY = 5,
	FRAME_KIND_MAX,
};

#define PROFILE_NO_MAPPING UINT32_MAX

struct profile_mapping {
	uint32_t path;		/* string id: the binary's path as the process sees it */
	uint32_t build_id;	/* string id: lower-case hex, or "" */
};

struct profile_frame {
	uint32_t kind;		/* enum frame_kind */
	uint32_t mapping;	/* index in mappings, or PROFILE_NO_MAPPING */
	uint64_t addr;		/* native: ELF virtual address in the binary; kernel: address */
	uint32_t function;	/* string id of the (demangled) name; set by symbolization */
	uint32_t file;		/* string id of the source file, or 0 */
	uint32_t line;		/* source line, or 0 */
};

struct profile_sample {
	uint32_t stack;
	uint32_t pid, tid, cpu;
	uint32_t comm;		/* string id */
	uint64_t count;
};

struct intern;

struct profile {
	uint64_t period_ns;	/* nanoseconds of CPU time one sample stands for */
	uint64_t start_ns;	/* wall clock, Unix ns */
	uint64_t duration_ns;

	struct intern *strings;
	struct intern *mapping_keys;
	struct intern *frame_keys;
	struct intern *stacks;		/* keys are uint32_t frame id arrays */
	struct intern *sample_keys;

	struct profile_mapping *mappings;
	struct profile_frame *frames;
	struct profile_sample *samples;
	uint32_t nmappings, nframes, nsamples;
	uint32_t cap_mappings, cap_frames, cap_samples;
};

/* Returns a new empty profile, or NULL with errno set. */
struct profile *profile__new(uint64_t period_ns, uint64_t start_ns);
/* Accepts NULL. */
void profile__free(struct profile *p);

/* Returns the id of a copy of s, or -ENOMEM. */
int64_t profile__intern_string(struct profile *p, const char *s);
/* Borrows the string with this id. */
const char *profile__string(const struct profile *p, uint32_t id);

/* Returns the id of the mapping (path, build_id), or -ENOMEM. build_id may be NULL. */
int64_t profile__intern_mapping(struct profile *p, const char *path, const char *build_id);

/*
 * Returns the id of the frame (kind, mapping, addr), or -ENOMEM. A new frame
 * has function 0 until profile__set_frame_name() names it.
 */
int64_t profile__intern_frame(struct profile *p, enum frame_kind kind,
			      uint32_t mapping, uint64_t addr);
/*
 * Returns the id of the frame (kind, mapping, addr) with this name, file and
 * line, or -ENOMEM. For frames that arrive already named (from a store, an
 * agent, another tool): the name is part of the identity, because the same
 * address can hold different functions on different hosts (kernel text under
 * KASLR, JIT code) or at different times.
 */
int64_t profile__intern_named_frame(struct profile *p, enum frame_kind kind, uint32_t mapping,
				    uint64_t addr, const char *function, const char *file,
				    uint32_t line);
/* The same, with function and file already string ids of p (< nstrings). */
int64_t profile__intern_frame_ids(struct profile *p, enum frame_kind kind, uint32_t mapping,
				  uint64_t addr, uint32_t function, uint32_t file, uint32_t line);
/* Names a frame; file may be NULL. Returns 0 or -ENOMEM. */
int profile__set_frame_name(struct profile *p, uint32_t frame, const char *function,
			    const char *file, uint32_t line);

/* Returns the id of the stack of n frame ids (root first), or -ENOMEM. */
int64_t profile__intern_stack(struct profile *p, const uint32_t *frames, uint32_t n);
/* Borrows the frame ids of a stack, root first; *n receives their number. */
const uint32_t *profile__stack(const struct profile *p, uint32_t stack, uint32_t *n);
struct strbuf;
/* Appends "stacks":[[frame ids, root first], ...] for the first nstacks stacks. */
void profile__write_stacks_json(const struct profile *p, uint32_t nstacks, struct strbuf *sb);
uint32_t profile__nstacks(const struct profile *p);

/* Adds count to the sample (stack, pid, tid, cpu, comm). Returns 0 or -ENOMEM. */
int profile__add_sample(struct profile *p, uint32_t stack, uint32_t pid, uint32_t tid,
			uint32_t cpu, uint32_t comm, uint64_t count);

/* Sum of all sample counts. */
uint64_t profile__total(const struct profile *p);

const char *frame_kind__name(enum frame_kind kind);

#endif
