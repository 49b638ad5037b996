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
 * A large file, or one whose table would not fit beside the others, gets
 * its rows a 64-KiB chunk of code at a time instead, built when a sample
 * first lands there (see fw_mapping). Tables no process maps any more, and
 * chunks, are kept until their space is needed, so a command run again and
 * again is not re-parsed each time; the sum of all stays under a byte cap.
 */
struct unwinder;
struct proc_table;

struct unwinder_stats {
	uint64_t files;			/* whole tables loaded now */
	uint64_t files_chunked;		/* files whose rows come a chunk at a time */
	uint64_t files_chunk_used;	/* ... of which a sample has needed a chunk */
	uint64_t files_without_cfi;	/* files with no usable unwind information */
	uint64_t chunks_no_room;	/* chunk builds put off: the round's chunks filled the cap */
	uint64_t chunks;		/* chunks loaded now */
	uint64_t rules;			/* distinct rules chunk rows index (unwind_rules) */
	uint64_t rules_full;		/* chunk rows walked by frame pointers: unwind_rules was full */
	uint64_t chunk_builds;
	uint64_t chunk_evictions;
	uint64_t rows;			/* rows loaded now, in whole tables and chunks */
	uint64_t table_bytes;		/* BPF map memory of the tables (rows * 8 + a page, in whole pages) */
	uint64_t cap_bytes;
	uint64_t pids;			/* processes described to BPF */
	uint64_t evictions;
	uint64_t build_ns;		/* time spent building tables */
};

/* The sampler's maps the unwinder fills; borrowed fds. */
struct unwinder_maps {
	int files_fd;		/* unwind_files */
	int chunks_fd;		/* unwind_chunks */
	int rules_fd;		/* unwind_rules */
	int procs_fd;		/* proc_mappings */
	int wanted_fd;		/* wanted_chunks */
};

/*
 * maps (copied) are the sampler's; procs is borrowed. Returns NULL with
 * errno set.
 */
struct unwinder *unwinder__new(const struct unwinder_maps *maps, struct proc_table *procs,
			       uint64_t cap_bytes);
/*
 * Files with at least cfi_bytes of .eh_frame and .debug_frame (0: none,
 * the default) get their rows a chunk at a time: the first sample with a
 * frame in a chunk not built yet (FW_SAMPLE_WANTS_TABLE) has it built,
 * and that frame is walked by frame pointers. A process that maps many
 * large libraries and runs a small part of them (PyTorch: 8 million rows'
 * worth) then holds rows for that part only. Files over the share of the
 * cap left for whole tables are chunked whatever cfi_bytes says.
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
 * 100 ms to 5 s, so code BPF cannot place costs next to nothing. A sample
 * that wants a chunk has unwinder__add_pending() build the chunks asked for.
 */
void unwinder__note_sample(struct unwinder *u, pid_t pid, uint32_t flags);
/* Queues pid for unwinder__add_pending() now (it has just exec'd). */
void unwinder__queue(struct unwinder *u, pid_t pid);
/*
 * Builds the chunks samples asked for and describes the queued processes;
 * call after each ring-buffer drain.
 * described(ctx, pid), if not NULL, follows each description: pid's maps
 * were read anew.
 */
void unwinder__add_pending(struct unwinder *u, void (*described)(void *ctx, pid_t pid), void *ctx);

void unwinder__stats(const struct unwinder *u, struct unwinder_stats *out);

#endif
