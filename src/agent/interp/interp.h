/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_INTERP_INTERP_H
#define FW_AGENT_INTERP_INTERP_H

#include <sys/types.h>

/*
 * What the collector does alike with every interpreter module (python.c,
 * ruby.c, hotspot.c, java_perfmap.c): each exports one of these, and the
 * collector keeps (ops, object) pairs and calls each in turn as processes
 * are sampled, followed, remap, exec and exit, on its tick, in its report
 * and when it frees them. A NULL operation: the module has nothing to do
 * then. Constructors stay the modules' own, since each takes other BPF maps,
 * and so does naming frames (cpu_profile.c), which differs per language.
 */
struct interp_ops {
	const char *name;
	/* A sample of pid came in. */
	void (*note_pid)(void *obj, pid_t pid);
	/* pid is to be followed: describe it now, before its first samples. */
	void (*follow)(void *obj, pid_t pid);
	/* pid mapped new files (the unwinder read its maps anew). */
	void (*maps_changed)(void *obj, pid_t pid);
	/* pid exec'd: what was learnt of its old image is stale. */
	void (*exec)(void *obj, pid_t pid);
	/* pid exited, or the sweep found it gone. */
	void (*forget)(void *obj, pid_t pid);
	/* Every collector tick. */
	void (*tick)(void *obj);
	/* Logs the module's counters (collector__report()). */
	void (*report)(void *obj);
	/* Frees obj. Accepts NULL. */
	void (*free)(void *obj);
};

#endif
