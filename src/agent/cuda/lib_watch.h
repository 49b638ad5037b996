/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_CUDA_LIB_WATCH_H
#define FW_AGENT_CUDA_LIB_WATCH_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Which processes load a library, as events: a uprobe on each dynamic
 * loader's _dl_debug_state() compares the names of newly loaded objects
 * with the watched one (bpf/libwatch.bpf.c says how and why there) and
 * reports matches into a small ring buffer whose descriptor polls readable
 * at each (lib_watch__fd()); lib_watch__drain() runs then, and on the
 * agent's tick. Loaders are attached one
 * file at a time, as the caller finds them in processes' maps.
 */
struct lib_watch;

struct lib_watch_stats {
	uint64_t calls;		/* loader notifications */
	uint64_t walks;		/* ... with a complete list, walked */
	uint64_t names;		/* object names compared */
	uint64_t events;	/* loads of the library reported */
	uint64_t lost;		/* loads not reported: the ring buffer was full */
	uint64_t faults;	/* walks stopped by unreadable loader memory */
	uint64_t truncated;	/* walks cut at FW_LIBWATCH_MAX_OBJECTS objects */
	uint32_t loaders;	/* loader files hooked */
};

/*
 * Loads the program for libraries named name, or name.N... (libfoo.so.1),
 * shorter than FW_LIBWATCH_NAME_LEN. Needs CAP_BPF and CAP_PERFMON.
 * Returns NULL with errno set.
 */
struct lib_watch *lib_watch__open(const char *name);
/* Detaches and frees. Accepts NULL. */
void lib_watch__close(struct lib_watch *w);

/* Whether path (a maps path: "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2") names a loader. */
bool lib_watch__is_loader(const char *path);
struct proc_mapping;

/*
 * Hooks the loader file that mapping m (borrowed) of process pid maps,
 * opened with procmaps__open_file() through proc_root. Each file (device
 * and inode, as maps names them) is tried once. Returns 1 when newly
 * hooked, 0 when tried before, or -errno: -ENOENT when the file lacks
 * _dl_debug_state or _r_debug (musl), -EACCES or -EPERM without the
 * capability that creating uprobes needs.
 */
int lib_watch__add_loader(struct lib_watch *w, const char *proc_root, pid_t pid,
			  const struct proc_mapping *m);

/*
 * Calls fn with the pid of each load reported since the last call, in
 * order; a pid may come more than once. Returns the number of events or
 * -errno.
 */
int lib_watch__drain(struct lib_watch *w, void (*fn)(void *ctx, pid_t pid), void *ctx);
/* Reads the counters, summed over CPUs. Returns 0 or -errno. */
int lib_watch__stats(struct lib_watch *w, struct lib_watch_stats *out);
/* Readable when loads were reported (epoll); borrowed. */
int lib_watch__fd(const struct lib_watch *w);

#endif
