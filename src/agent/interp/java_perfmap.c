// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "agent/interp/interp.h"
#include "agent/interp/java_perfmap.h"
#include "agent/proc_table.h"
#include "common/clock.h"
#include "common/log.h"

#define MAX_JVMS 256

extern char **environ;

struct jvm {
	pid_t pid;
	pid_t jcmd;		/* running jcmd, or 0 */
	uint64_t next_ns;	/* 0: run at the next tick */
};

struct java_perfmap {
	uint64_t interval_ns;
	struct proc_table *procs;	/* borrowed */
	struct jvm jvms[MAX_JVMS];
	uint32_t n;
	uint64_t runs;
	bool no_jcmd;		/* jcmd is not installed: stop trying */
};

struct java_perfmap *java_perfmap__new(uint64_t interval_ns, struct proc_table *procs)
{
	struct java_perfmap *j;

	if (!interval_ns) {
		errno = EINVAL;
		return NULL;
	}
	j = calloc(1, sizeof(*j));
	if (j) {
		j->interval_ns = interval_ns;
		j->procs = procs;
	}
	return j;
}

void java_perfmap__free(struct java_perfmap *j)
{
	free(j);
}

static struct jvm *_find(struct java_perfmap *j, pid_t pid)
{
	for (uint32_t i = 0; i < j->n; i++)
		if (j->jvms[i].pid == pid)
			return &j->jvms[i];
	return NULL;
}

void java_perfmap__note(struct java_perfmap *j, pid_t pid, const char *exe)
{
	const char *base;

	if (!j || !exe || _find(j, pid) || j->n >= MAX_JVMS)
		return;
	base = strrchr(exe, '/');
	base = base ? base + 1 : exe;
	if (strcmp(base, "java"))
		return;
	j->jvms[j->n++] = (struct jvm){ .pid = pid };
}

void java_perfmap__forget(struct java_perfmap *j, pid_t pid)
{
	struct jvm *v = j ? _find(j, pid) : NULL;

	if (!v)
		return;
	if (v->jcmd)
		waitpid(v->jcmd, NULL, WNOHANG);
	*v = j->jvms[--j->n];
}

static pid_t _spawn_jcmd(pid_t pid)
{
	posix_spawn_file_actions_t fa;
	char spid[16];
	char *argv[] = { "jcmd", spid, "Compiler.perfmap", NULL };
	pid_t child = 0;
	int err;

	snprintf(spid, sizeof(spid), "%d", pid);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	err = posix_spawnp(&child, "jcmd", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (err) {
		errno = err;
		return -1;
	}
	return child;
}

void java_perfmap__tick(struct java_perfmap *j, uint64_t now_ns)
{
	if (!j)
		return;
	for (uint32_t i = 0; i < j->n; i++) {
		struct jvm *v = &j->jvms[i];
		int status;

		if (v->jcmd) {
			if (waitpid(v->jcmd, &status, WNOHANG) == 0)
				continue;	/* still running */
			if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
				j->no_jcmd = true;
			v->jcmd = 0;
		}
		if (j->no_jcmd || now_ns < v->next_ns)
			continue;
		v->jcmd = _spawn_jcmd(v->pid);
		if (v->jcmd < 0) {
			pr_warn("cannot run jcmd for the perf map of JVM %d: %s\n", v->pid,
				strerror(errno));
			if (errno == ENOENT)
				j->no_jcmd = true;
			v->jcmd = 0;
		} else {
			j->runs++;
			pr_debug("jcmd %d Compiler.perfmap started\n", v->pid);
		}
		v->next_ns = now_ns + j->interval_ns;
	}
}

uint64_t java_perfmap__runs(const struct java_perfmap *j)
{
	return j ? j->runs : 0;
}

static void _ops_note_pid(void *obj, pid_t pid)
{
	struct java_perfmap *j = obj;
	const struct proc_info *info = proc_table__info(j->procs, pid);

	java_perfmap__note(j, pid, info ? info->exe : NULL);
}

static void _ops_forget(void *j, pid_t pid)
{
	java_perfmap__forget(j, pid);
}

static void _ops_tick(void *j)
{
	java_perfmap__tick(j, clock__mono_ns());
}

static void _ops_free(void *j)
{
	java_perfmap__free(j);
}

/*
 * JVMs are remembered from their samples alone (a followed process is not
 * noted ahead of them), and forgotten at exit, not at exec: an entry is
 * only a pid and its jcmd schedule.
 */
const struct interp_ops java_perfmap_interp_ops = {
	.name = "java_perfmap",
	.note_pid = _ops_note_pid,
	.forget = _ops_forget,
	.tick = _ops_tick,
	.free = _ops_free,
};
