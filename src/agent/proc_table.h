/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_PROC_TABLE_H
#define FW_AGENT_PROC_TABLE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Process tracking: each process's executable mappings, read from
 * /proc/PID/maps when the process is first seen, re-read on a lookup miss
 * and dropped on exec and exit; and the binaries those mappings point at,
 * opened once through /proc/PID/root (so containers work) and shared by all
 * processes that map the same (device, inode).
 */
struct elf_file;

struct binary {
	uint64_t dev, inode;
	char *path;		/* as the process sees it */
	char *root;		/* debug-file root: "" for the host's, else /proc/PID/root */
	int fd;			/* -1 if the file could not be opened */
	struct elf_file *elf;	/* NULL if not a readable ELF file */
	int64_t user_id;	/* free for the caller; -1 until set */
	struct binary *next;
};

enum addr_kind {
	ADDR_UNKNOWN = 0,	/* not in any executable mapping we know */
	ADDR_FILE,		/* in a file-backed mapping: bin and vaddr are set */
	ADDR_ANON,		/* anonymous executable memory: JIT code */
	ADDR_SPECIAL,		/* [vdso], [vsyscall], ...: name is set */
};

struct addr_info {
	enum addr_kind kind;
	struct binary *bin;	/* borrowed; valid until proc_table__free() */
	uint64_t vaddr;		/* ELF virtual address in bin */
	const char *name;	/* ADDR_SPECIAL: the mapping's name (borrowed, short-lived) */
};

struct proc_table;

/*
 * proc_root is the procfs mount to read ("/proc", or a fixture directory
 * for tests). Returns NULL with errno set.
 */
struct proc_table *proc_table__new(const char *proc_root);
/* Closes every binary. Accepts NULL. */
void proc_table__free(struct proc_table *t);

/* Describes addr in process pid. Never fails: unknown addresses are ADDR_UNKNOWN. */
void proc_table__lookup(struct proc_table *t, pid_t pid, uint64_t addr, struct addr_info *out);
/* The process replaced its image: forget its mappings. */
void proc_table__exec(struct proc_table *t, pid_t pid);
/* The process exited: forget it. */
void proc_table__exit(struct proc_table *t, pid_t pid);
/*
 * Starts a new lookup round (one ring-buffer drain): a process's maps are
 * re-read on a miss at most once per round, so a stream of unknown
 * addresses costs one read per drain, not one per sample.
 */
void proc_table__next_round(struct proc_table *t);

/*
 * Forgets every process whose procfs directory was gone at this sweep and
 * the one before, calling gone(ctx, pid) first for each (may be NULL; it
 * must not call back into the table), and returns how many it forgot.
 * Zombies still have theirs. Not at the first sweep that finds it gone:
 * the process may have exited just now, its exit event and its last
 * records (a CUDA process's exit flush) still in the ring buffer, to be
 * read at the next drain with its names and mappings.
 *
 * Exit events alone do not keep the table bounded: a process's CPU strips
 * and its last samples (taken in the kernel's exit path, after the exit
 * tracepoint) are handled after its exit event and look it up again, and
 * an exit event lost to a full ring buffer never comes. Each of those
 * would leave an entry behind for good: under churn, hundreds of bytes per
 * process. One stat() per known process; call it every few seconds.
 */
unsigned int proc_table__sweep(struct proc_table *t, void (*gone)(void *ctx, pid_t pid),
			       void *ctx);

struct cgroup_k8s;

/* What labels a process's samples: read once per process image from /proc. */
struct proc_info {
	char comm[17];		/* the process's (main thread's) name */
	char exe[256];		/* path of its executable, as the process sees it */
	char container[65];	/* container id, or "" */
	char pod[37];		/* Kubernetes pod uid, or "" */
	struct cgroup_k8s *k8s;	/* Kubernetes names, or NULL (owned; most processes have none) */
};

/*
 * Borrows pid's labels, reading them on first use and again after exec.
 * Fields are "" when unknown (the process is gone). NULL only without memory.
 */
const struct proc_info *proc_table__info(struct proc_table *t, pid_t pid);

struct proc_mapping;

/*
 * Calls fn for every executable mapping of pid, reading its maps if they
 * are not cached; b is NULL for anonymous and special mappings. Stops at
 * the first non-zero return of fn and returns it. Returns -ESRCH when the
 * maps cannot be read (the process is gone).
 */
int proc_table__for_each_mapping(struct proc_table *t, pid_t pid,
				 int (*fn)(void *ctx, const struct proc_mapping *m,
					   struct binary *b),
				 void *ctx);

/*
 * Opens the perf map of a process for reading: /tmp/perf-N.map below its
 * root, N its pid in its own pid namespace, with the checks of
 * common/safe_open.h (no link, a regular file, opened without blocking),
 * owned by one of the process's uids. Returns the descriptor (owned), or
 * -ENOENT (no map, or the process is gone), or another -errno for a file
 * that is there but refused (logged at debug level).
 */
int proc_table__open_perfmap(struct proc_table *t, pid_t pid);

/* Calls fn for every binary. */
void proc_table__for_each_binary(struct proc_table *t, void (*fn)(void *ctx, struct binary *b),
				 void *ctx);

uint32_t proc_table__nprocs(const struct proc_table *t);

#endif
