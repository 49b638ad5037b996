/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_INTERP_PYTHON_H
#define FW_AGENT_INTERP_PYTHON_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * CPython support: finds the interpreter in a process (a python3.x
 * executable or libpython3.x.so among its mappings), works out the layout
 * of its thread states and frames for its version (3.10-3.12 from tables
 * of CPython's header facts, 3.13+ from the _Py_DebugOffsets table at the
 * start of _PyRuntime, read from the process), and describes it to BPF in
 * the py_procs map. User space then names the (code object, instruction)
 * pairs BPF reports by reading the code objects from the process.
 */
struct python;
struct proc_table;

struct python_stats {
	uint64_t procs;			/* CPython processes described to BPF now */
	uint64_t code_reads;		/* code objects read from processes */
	uint64_t code_read_errors;	/* code objects that could not be read, of which: */
	uint64_t code_read_gone;	/*  the process had exited (ESRCH) */
	uint64_t code_read_fault;	/*  the memory was not mapped */
	uint64_t code_read_bad;		/*  not a code object (freed, reused) or no name */
	uint64_t code_rereads;		/* failed reads tried again */
	uint64_t code_replaced;		/* read again: another code object at the address */
	uint64_t code_cache_clears;	/* the cache of names and line tables started afresh */
};

/*
 * map_fd is the sampler's py_procs map, known_fd its py_known map (-1: none)
 * and procs the process table (all borrowed).
 */
struct python *python__new(int map_fd, int known_fd, struct proc_table *procs);
/* Accepts NULL. */
void python__free(struct python *py);

/*
 * Looks at pid: the first time (and a few times more while it is not
 * CPython yet, since libpython is mapped after exec) reads its mappings and,
 * for CPython, describes it to BPF. Cheap once decided.
 */
void python__note_pid(struct python *py, pid_t pid);
/* pid mapped new files (the unwinder re-read its maps): looks again now. */
void python__maps_changed(struct python *py, pid_t pid);
/* The process exec'd or exited: forget it and its code objects. */
void python__forget(struct python *py, pid_t pid);

/* What one process's interpreter looks like; borrowed, valid until python__forget(). */
struct python_proc;
/* NULL unless pid is a CPython process described to BPF. */
const struct python_proc *python__proc(struct python *py, pid_t pid);
/* addr is in _PyEval_EvalFrameDefault: a native frame that Python frames replace. */
bool python__is_eval(const struct python_proc *pp, uint64_t addr);
/* addr is in the interpreter's own code (python3.x or libpython3.x.so). */
bool python__in_interp(const struct python_proc *pp, uint64_t addr);

/*
 * Names one Python frame from BPF (code object address, instruction word
 * without flags): *function and *file are borrowed until the next call that
 * may read code objects; *line is 0 when unknown. word1 is the frame's
 * second word as BPF wrote it (instruction, FW_PY_ENTRY, co_firstlineno byte). Returns 0, or -errno when
 * the code object cannot be read (then the caller shows a placeholder).
 */
int python__frame(struct python *py, const struct python_proc *pp, uint64_t code,
		  uint64_t word1, const char **function, const char **file, uint32_t *line);

void python__stats(const struct python *py, struct python_stats *out);

/* The collector's calls (agent/interp/interp.h), on a struct python. */
struct interp_ops;
extern const struct interp_ops python_interp_ops;

/*
 * Pure helpers, exposed for unit tests: the source line of code unit index
 * `unit` (3.11+ location table) or of byte offset `offset` (3.10 line table).
 * Return 0 when the table has no line there.
 */
uint32_t python__line_311(const uint8_t *table, size_t len, uint32_t firstlineno, uint64_t unit);
uint32_t python__line_310(const uint8_t *table, size_t len, uint32_t firstlineno, uint64_t offset);

#endif
