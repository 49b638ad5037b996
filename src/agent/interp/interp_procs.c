// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <time.h>

#include "agent/interp/interp_procs.h"
#include "common/clock.h"

struct pid_entry {
	pid_t pid;
	uint8_t checks;		/* times looked at while not the interpreter */
	uint64_t next_check_ns;
	void *proc;		/* NULL: not the interpreter (yet) */
	struct pid_entry *next;
};

#define PID_BUCKETS 1024
#define MAX_CHECKS 6		/* 100 ms .. 3.2 s after the first look */

struct interp_procs {
	struct pid_entry *pids[PID_BUCKETS];
};

struct interp_procs *interp_procs__new(void)
{
	return calloc(1, sizeof(struct interp_procs));
}

void interp_procs__free(struct interp_procs *t)
{
	if (!t)
		return;
	for (int i = 0; i < PID_BUCKETS; i++) {
		struct pid_entry *e = t->pids[i], *next;

		for (; e; e = next) {
			next = e->next;
			free(e->proc);
			free(e);
		}
	}
	free(t);
}

static struct pid_entry **_slot(struct interp_procs *t, pid_t pid)
{
	struct pid_entry **pe = &t->pids[(uint32_t)pid % PID_BUCKETS];

	while (*pe && (*pe)->pid != pid)
		pe = &(*pe)->next;
	return pe;
}

int interp_procs__note(struct interp_procs *t, pid_t pid, interp_describe_fn fn, void *ctx)
{
	struct pid_entry **pe = _slot(t, pid), *e = *pe;
	uint64_t now;

	if (e && (e->proc || e->checks >= MAX_CHECKS))
		return 0;
	now = clock__mono_ns();
	if (e && now < e->next_check_ns)
		return 0;
	if (!e) {
		e = calloc(1, sizeof(*e));
		if (!e)
			return 0;
		e->pid = pid;
		*pe = e;
	}
	e->checks++;
	e->next_check_ns = now + (50000000ULL << e->checks);
	return fn(ctx, pid, &e->proc) == 0 && e->proc;
}

int interp_procs__maps_changed(struct interp_procs *t, pid_t pid, interp_describe_fn fn, void *ctx)
{
	struct pid_entry *e = *_slot(t, pid);

	if (e && !e->proc) {
		e->next_check_ns = 0;
		if (e->checks >= MAX_CHECKS)
			e->checks = MAX_CHECKS - 1;	/* one more look per change */
	}
	return interp_procs__note(t, pid, fn, ctx);
}

void *interp_procs__forget(struct interp_procs *t, pid_t pid)
{
	struct pid_entry **pe = _slot(t, pid), *e = *pe;
	void *proc;

	if (!e)
		return NULL;
	proc = e->proc;
	*pe = e->next;
	free(e);
	return proc;
}

void *interp_procs__get(struct interp_procs *t, pid_t pid)
{
	struct pid_entry *e = *_slot(t, pid);

	return e ? e->proc : NULL;
}

int interp__read_mem(pid_t pid, uint64_t addr, void *buf, size_t len)
{
	struct iovec local = { buf, len }, remote = { (void *)addr, len };
	ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}
