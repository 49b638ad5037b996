/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_INTERP_INTERP_PROCS_H
#define FW_AGENT_INTERP_INTERP_PROCS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * What the interpreter unwinders (python.c, ruby.c) share: a per-pid record
 * of whether a process runs the interpreter, decided by a describe callback
 * that is tried again a few times, 100 ms to 3.2 s apart, while the answer
 * is no (the interpreter's library is mapped after exec), and reading a
 * process's memory.
 */
struct interp_procs;

/*
 * Decides whether pid runs the interpreter: 0 with *proc set (a malloc'ed
 * description the table then owns), or -errno.
 */
typedef int (*interp_describe_fn)(void *ctx, pid_t pid, void **proc);

struct interp_procs *interp_procs__new(void);
/* Frees the table and every description in it (with free()). Accepts NULL. */
void interp_procs__free(struct interp_procs *t);
/* Describes pid unless that is decided or not due yet. Returns 1 when it was described now. */
int interp_procs__note(struct interp_procs *t, pid_t pid, interp_describe_fn fn, void *ctx);
/*
 * pid mapped new files: a process not found to run an interpreter is
 * looked at again now, whatever its backoff (it may have just mapped
 * libpython), then as for interp_procs__note. Returns as it does.
 */
int interp_procs__maps_changed(struct interp_procs *t, pid_t pid, interp_describe_fn fn, void *ctx);
/* Forgets pid: returns its description (the caller's to undo and free), or NULL. */
void *interp_procs__forget(struct interp_procs *t, pid_t pid);
/* pid's description, or NULL. */
void *interp_procs__get(struct interp_procs *t, pid_t pid);

/* Reads len bytes at addr in pid. Returns 0, or -errno (-EFAULT for a short read). */
int interp__read_mem(pid_t pid, uint64_t addr, void *buf, size_t len);

#endif
