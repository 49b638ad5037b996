/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_INTERP_JAVA_PERFMAP_H
#define FW_AGENT_INTERP_JAVA_PERFMAP_H

#include <stdint.h>
#include <sys/types.h>

/*
 * Asks running JVMs to write their perf map (/tmp/perf-PID.map) with
 * `jcmd PID Compiler.perfmap`, every interval, so JIT-compiled Java frames
 * get names without restarting the JVM with -XX:+DumpPerfMapAtExit or an
 * agent. jcmd is itself a JVM (costly to start), so this is off
 * unless asked for, and one jcmd per JVM runs at a time.
 */
struct java_perfmap;
struct proc_table;

/*
 * interval_ns > 0; procs (borrowed) tells a sampled process's executable.
 * Returns NULL with errno set.
 */
struct java_perfmap *java_perfmap__new(uint64_t interval_ns, struct proc_table *procs);
/* Waits for nothing: running jcmds are left to finish. Accepts NULL. */
void java_perfmap__free(struct java_perfmap *j);
/* A sample of pid, whose executable is exe (borrowed): JVMs are remembered. */
void java_perfmap__note(struct java_perfmap *j, pid_t pid, const char *exe);
/* The process is gone. */
void java_perfmap__forget(struct java_perfmap *j, pid_t pid);
/* Reaps finished jcmds and starts new ones for JVMs whose interval passed. */
void java_perfmap__tick(struct java_perfmap *j, uint64_t now_ns);
/* jcmd runs started so far (for tests and logs). */
uint64_t java_perfmap__runs(const struct java_perfmap *j);

/* The collector's calls (agent/interp/interp.h), on a struct java_perfmap. */
struct interp_ops;
extern const struct interp_ops java_perfmap_interp_ops;

#endif
