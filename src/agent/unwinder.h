/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_UNWINDER_H
#define FW_AGENT_UNWINDER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * Feeds the BPF unwinder: builds each executable file's unwind table once
 * (keyed by build id, else by device and inode), loads it into an array map
 * of its own, and describes each process's executable mappings to BPF.
 * Tables no process maps any more are kept until their space is needed, so
 * a command run again and again is not re-parsed each time; the sum of all
 * tables stays under a byte cap.
 */
struct unwinder;
struct proc_table;

struct unwinder_stats {
	uint64_t files;			/* tables loaded now */
	uint64_t files_on_demand;	/* large files no sample has needed a table of yet */
	uint64_t files_wanted;		/* large files whose table a sample asked for */
	uint64_t files_without_cfi;	/* files with no usable unwind information */
	uint64_t files_over_cap;	/* tables not loaded for lack of room */
	uint64_t rows;			/* rows loaded now */
	uint64_t table_bytes;		/* BPF map memory of the tables (rows * 8, in whole pages) */
	uint64_t cap_bytes;
	uint64_t pids;			/* processes described to BPF */
	uint64_t evictions;
	uint64_t build_ns;		/* time spent building tables */
};

/*
 * files_fd, procs_fd and wanted_fd are the sampler's unwind_files,
 * proc_mappings and wanted_tables maps (borrowed); procs is borrowed.
 * Returns NULL with errno set.
 */
struct unwinder *unwinder__new(int files_fd, int procs_fd, int wanted_fd,
			       struct proc_table *procs, uint64_t cap_bytes);
/*
 * Files with at least cfi_bytes of .eh_frame and .debug_frame (0: none,
 * the default) are described to BPF without a table; the first sample
 * with a frame in one (FW_SAMPLE_WANTS_TABLE) has it built and its process
 * described again. A process that maps many large libraries and runs a few
 * (PyTorch: 8 million rows' worth, over the 64-MiB cap) then holds tables
 * for those few only, and the frames before the build are walked by frame
 * pointers.
 */
void unwinder__set_on_demand(struct unwinder *u, uint64_t cfi_bytes);
/* Accepts NULL. The maps keep their contents until the sampler closes. */
void unwinder__free(struct unwinder *u);

/*
 * Describes pid's executable mappings to BPF, loading the tables of files
 * seen for the first time. Re-describes a pid already known (its maps
 * changed). Returns 0, -ESRCH if the process is gone, or -errno.
 */
int unwinder__add_pid(struct unwinder *u, pid_t pid);
/* Forgets pid (exit or exec); its files' tables become evictable. */
void unwinder__remove_pid(struct unwinder *u, pid_t pid);

/*
 * Looks at one sample's flags (FW_SAMPLE_*): a process without tables, or
 * with a pc outside the mappings BPF knows (dlopen, a new JIT region), is
 * queued for unwinder__add_pending(). Re-reading a process backs off from
 * 100 ms to 5 s, so code BPF cannot place costs next to nothing. One that
 * wants a table built on demand is queued at most every 100 ms.
 */
void unwinder__note_sample(struct unwinder *u, pid_t pid, uint32_t flags);
/* Queues pid for unwinder__add_pending() now (it has just exec'd). */
void unwinder__queue(struct unwinder *u, pid_t pid);
/*
 * Describes the queued processes; call after each ring-buffer drain.
 * described(ctx, pid), if not NULL, follows each description: pid's maps
 * were read anew.
 */
void unwinder__add_pending(struct unwinder *u, void (*described)(void *ctx, pid_t pid), void *ctx);

void unwinder__stats(const struct unwinder *u, struct unwinder_stats *out);

#endif
