/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_INTERP_HOTSPOT_H
#define FW_AGENT_INTERP_HOTSPOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * HotSpot (OpenJDK) support with no JVM flags: finds libjvm.so among a
 * process's mappings, reads the vmStructs tables it exports (field offsets,
 * type sizes, the code cache's heaps, the interpreter's code) from the
 * process, and describes the JVM to BPF in the hs_procs map so that the
 * stack walk can unwind compiled frames by their frame size and name
 * interpreted ones by their Method*. User space then names the frames:
 * Method* -> Class.method (File.java:line), and a compiled pc -> its
 * nmethod -> the chain of (inlined) methods recorded for that pc.
 */
struct hotspot;
struct proc_table;
struct hotspot_proc;

struct hotspot_stats {
	uint64_t procs;			/* JVMs described to BPF now */
	uint64_t method_reads;		/* Method* read from processes */
	uint64_t method_read_errors;	/* Method* that could not be read */
	uint64_t nmethod_reads;		/* compiled pcs resolved through their nmethod */
	uint64_t nmethod_read_errors;
	/* The BPF walk's counters (enum fw_hs_stat), summed over CPUs. */
	uint64_t interp_frames, compiled_frames, stub_frames, no_blob, faults;
};

/* One named Java frame. Strings are borrowed until the next hotspot__frames(). */
struct hotspot_frame {
	const char *function;	/* "pkg.Class.method" or "[jvm ...]" */
	const char *file;	/* "Class.java", or NULL */
	uint32_t line;		/* 0: unknown */
};

/* Java frames one stack word may stand for: the compiled frame and its inlined callees. */
#define HOTSPOT_MAX_INLINE 16

/* map_fd and stats_fd: the sampler's hs_procs and hs_stats maps; procs: the process table (all borrowed). */
struct hotspot *hotspot__new(int map_fd, int stats_fd, struct proc_table *procs);
/* Accepts NULL. */
void hotspot__free(struct hotspot *hs);

/*
 * Looks at pid: the first time (and a few times more while it is not a
 * JVM yet, or its code cache is not set up yet) and, for a JVM, describes
 * it to BPF. Cheap once decided.
 */
void hotspot__note_pid(struct hotspot *hs, pid_t pid);
/* The process exec'd or exited: forget it. */
void hotspot__forget(struct hotspot *hs, pid_t pid);

/* NULL unless pid is a JVM described to BPF. */
const struct hotspot_proc *hotspot__proc(struct hotspot *hs, pid_t pid);

/*
 * The Java frames of one user stack word (is_return: it is a return
 * address), leaf first, into out (HOTSPOT_MAX_INLINE entries). Returns
 * their number, or 0 when the word is not JVM code (a native frame).
 * Frames that cannot be read get a placeholder name, never an error.
 */
int hotspot__frames(struct hotspot *hs, const struct hotspot_proc *hp, uint64_t word,
		    bool is_return, struct hotspot_frame *out);

void hotspot__stats(const struct hotspot *hs, struct hotspot_stats *out);

/* The collector's calls (agent/interp/interp.h), on a struct hotspot. */
struct interp_ops;
extern const struct interp_ops hotspot_interp_ops;

/*
 * Pure decoders, exposed for unit tests. hotspot__read_int: one int of
 * HotSpot's CompressedReadStream (UNSIGNED5) at *pos, advancing it,
 * as the unsigned 32-bit value it codes; -1 when the stream ends first. hotspot__line: the line of bytecode index bci
 * in a compressed line number table (0 when none).
 */
int64_t hotspot__read_int(const uint8_t *buf, size_t len, size_t *pos);
uint32_t hotspot__line(const uint8_t *table, size_t len, uint32_t bci);

#endif
