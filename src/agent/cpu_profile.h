/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_CPU_PROFILE_H
#define FW_AGENT_CPU_PROFILE_H

#include <stdbool.h>
#include <stdint.h>

#include "agent/bpf/sample.h"

/*
 * Turns raw BPF samples into a struct profile: every address is placed in
 * its binary (as an ELF virtual address) while the process is alive, and
 * the distinct frames are named in one batch per binary at the end, so no
 * symbol table stays in memory between batches.
 */
struct cpu_profile;
struct proc_table;
struct profile;

/*
 * Borrows procs. Aggregated (timed false) for `record`: samples are counted
 * per stack, pid, tid, cpu and comm. Timed for agents: every sample is kept
 * in a batch with its timestamp and its process's labels (pid, comm, exe,
 * container, pod). Returns NULL with errno set.
 */
struct cpu_profile *cpu_profile__new(struct proc_table *procs, uint64_t period_ns,
				     uint64_t start_ns, bool timed);
/* Timed mode: the batch being filled (its dict is the profile). Borrowed. */
struct batch *cpu_profile__batch(struct cpu_profile *cp);
/*
 * Starts over with an empty dictionary (and batch) once the previous one has
 * been handed on. Returns 0 or -ENOMEM.
 */
int cpu_profile__reset(struct cpu_profile *cp, uint64_t start_ns);
/*
 * Timed mode: hands over the batch filled so far (the caller frees it; its
 * frames are named only if cpu_profile__symbolize() ran first) and starts a
 * new one. NULL with errno set when out of memory: the old batch goes on.
 */
struct batch *cpu_profile__take_batch(struct cpu_profile *cp, uint64_t start_ns);
/* Accepts NULL. Frees the profile too unless it was taken. */
void cpu_profile__free(struct cpu_profile *cp);

struct hotspot;
struct python;
struct ruby;

/*
 * The interpreters that name the samples' language frames, all borrowed; a
 * NULL one turns its language off. Typed, not interp_ops (interp/interp.h):
 * each language puts its frames into the native stack its own way, and
 * only Python's go into CUDA launch stacks (cpu_profile__place()).
 */
struct cpu_profile_interps {
	/* Python frames in place of the interpreter's own frames */
	struct python *py;
	/* Ruby frames in place of the VM's */
	struct ruby *rb;
	/* JVM frames as Java methods; without it they stay anonymous JIT code */
	struct hotspot *hs;
};
void cpu_profile__set_interps(struct cpu_profile *cp, const struct cpu_profile_interps *in);

/* Adds one sample. Returns 0 or -ENOMEM. */
int cpu_profile__add(struct cpu_profile *cp, const struct fw_sample *s, uint64_t unix_ns);
/*
 * Adds one block of off-CPU time: o->blocked_ns under o's stack, at unix_ns
 * (when it began); a block whose stack BPF did not take
 * (FW_SAMPLE_OFFCPU_NO_STACK) under the one frame
 * CPU_PROFILE_OFFCPU_NO_STACK. Returns 0, -EINVAL or -ENOMEM.
 */
#define CPU_PROFILE_OFFCPU_NO_STACK "[off-CPU: stack not taken]"
int cpu_profile__add_offcpu(struct cpu_profile *cp, const struct fw_offcpu *o, uint64_t unix_ns);
/*
 * Aggregated mode: which samples the profile counts, SAMPLE_CPU (the
 * default; count: samples of the period) or SAMPLE_OFFCPU (count:
 * nanoseconds blocked); the others are dropped. Returns 0 or -EINVAL.
 */
int cpu_profile__set_aggregate(struct cpu_profile *cp, uint32_t type);
/* Names every frame that has no name yet. Returns 0 or -ENOMEM. */
int cpu_profile__symbolize(struct cpu_profile *cp);

/*
 * Names the JIT frames added since the last call from their processes'
 * perf maps. JITs rewrite and delete those files while they run, so this
 * is done on every drain, while the code is still there. Returns 0 or -ENOMEM.
 */
int cpu_profile__symbolize_jit(struct cpu_profile *cp);

/*
 * Timed mode: the id in the batch being filled of process pid's series, the
 * same one its CPU samples get (comm names it when the process is gone).
 * Returns the id, -EINVAL in aggregated mode, or -ENOMEM.
 */
int64_t cpu_profile__series(struct cpu_profile *cp, uint32_t pid, const char *comm);

/* Borrows the profile. */
struct profile *cpu_profile__profile(struct cpu_profile *cp);

struct cpu_profile_counts {
	uint64_t samples;
	uint64_t frames_unresolved;
	uint64_t pids;
	uint64_t frames_named_cached;	/* named from earlier batches' names */
	uint64_t symbol_reads;		/* a binary's symbol tables read for a batch's new frames */
};
void cpu_profile__counts(const struct cpu_profile *cp, struct cpu_profile_counts *out);

/* ---- GPU time: CUDA activity under the CPU stack that launched it ---- */

struct binary;

/*
 * A user stack placed in its binaries while the process is alive, root
 * first, independent of any dictionary: a launch's stack waits for its
 * kernel's record across batches, and the process may be gone by then.
 */
/* cpu_placed_frame.kind of a Python frame, past every enum addr_kind. */
#define CPU_PLACED_PYTHON 0x100
/* ... and of a marker frame (a name only: "[from thread pt_autograd_0]"). */
#define CPU_PLACED_MARKER 0x101

struct cpu_placed_frame {
	struct binary *bin;	/* ADDR_FILE: borrowed from the proc table */
	uint64_t addr;		/* ELF vaddr for files, the line of Python frames, else the address */
	uint32_t kind;		/* enum addr_kind, or CPU_PLACED_PYTHON */
	char special[12];	/* ADDR_SPECIAL: the mapping's name, cut to fit */
	const char *py;		/* CPU_PLACED_PYTHON: "function\0file\0" in the stack's allocation;
				 * CPU_PLACED_MARKER: its name, there too */
};

struct cpu_placed_stack {
	uint32_t n;
	uint32_t flags;		/* FW_SAMPLE_* of the walk */
	struct cpu_placed_frame f[];
};

/*
 * Places the user addresses of s (leaf first, as BPF writes them; the
 * first is exact, the others return addresses). Returns an owned stack
 * (free()), or NULL without memory.
 */
struct cpu_placed_stack *cpu_profile__place(struct cpu_profile *cp, const struct fw_sample *s);

/* One completed GPU activity, joined (or not) with its launch. */
struct cpu_gpu_activity {
	uint32_t pid, tid, cpu;
	const char *comm;			/* the launching thread's, or NULL */
	const struct cpu_placed_stack *stack;	/* NULL: no launch stack at all */
	/* A frame between stack and leaf saying whose stack it is; NULL: its own launch's. */
	const char *marker;
	const char *name;			/* leaf frame: kernel name, "[memcpy HtoD]", ... */
	uint32_t kind;				/* enum gpu_activity_kind */
	uint32_t device, stream, weight;
	uint32_t graph;				/* CUDA graph id (a "graph" label); 0: none */
	uint64_t correlation, bytes;
	int64_t start_ns, end_ns;		/* Unix ns */
};

/*
 * Timed mode: adds a gpu_time sample (value: GPU ns x weight, at start_ns)
 * whose stack is the launching stack with a FRAME_CUDA_KERNEL leaf named
 * a->name (the leaf alone when there is no launch), a->marker between the
 * two when set, labelled with the process's labels plus device, stream
 * and graph; and the matching GPU interval.
 * Returns 0, -EINVAL (not timed) or -ENOMEM.
 */
int cpu_profile__add_gpu(struct cpu_profile *cp, const struct cpu_gpu_activity *a);

/*
 * Timed mode: a span of a process's busy timeline (a->kind GPU_BUSY or
 * GPU_COVERAGE; cuda/probes.h): only the GPU interval, with no stack and no
 * sample, since it is no GPU time of its own. a->bytes carries the merge
 * gap of a busy span, a->correlation the idle ns inside it; a->name, when set, names the interval (the source:
 * GPU_BUSY_NAME_MONITORS, ...). Returns 0, -EINVAL or -ENOMEM.
 */
int cpu_profile__add_gpu_span(struct cpu_profile *cp, const struct cpu_gpu_activity *a);

#endif
