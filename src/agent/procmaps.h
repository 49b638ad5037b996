/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_PROCMAPS_H
#define FW_AGENT_PROCMAPS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* One line of /proc/PID/maps. */
struct proc_mapping {
	uint64_t start, end;	/* [start, end) in the process */
	uint64_t offset;	/* file offset of start */
	uint64_t inode;
	uint32_t dev_major, dev_minor;
	uint32_t prot;		/* PROT_READ | PROT_WRITE | PROT_EXEC */
	const char *path;	/* "" for anonymous memory; "[vdso]", "[stack]", ... */
};

/*
 * Parses one line of /proc/PID/maps in place: the trailing newline is cut
 * and m->path borrows from line. Returns 0, or -EINVAL for a malformed line.
 */
int procmaps__parse_line(char *line, struct proc_mapping *m);

/*
 * The executable mappings of one process, sorted by start address. Paths
 * live in the same allocation as the array, so one free releases all.
 */
struct proc_maps {
	size_t n;
	struct proc_mapping m[];
};

/*
 * Caps on reading a maps file, whose length the process decides (up to
 * vm.max_map_count lines, each with a path of up to PATH_MAX): a line
 * holds a path of PATH_MAX and more; 64 MiB is several times the maps of
 * a process at the default limit of 65530 mappings with usual paths,
 * and bounds what one read costs the agent. Mappings past the cap are
 * not seen.
 */
#define PROCMAPS_LINE_MAX (8 << 10)
#define PROCMAPS_MAX_BYTES (64ull << 20)

/*
 * Reads the executable mappings from a maps file (normally
 * "/proc/PID/maps"), with the caps above. Returns an owned struct the caller free()s, or NULL
 * with errno set (ENOENT: the process is gone; EINVAL: a malformed line).
 */
struct proc_maps *procmaps__read(const char *path);

/* Borrows the mapping holding addr, or returns NULL. */
const struct proc_mapping *procmaps__find(const struct proc_maps *maps, uint64_t addr);

/*
 * Opens the file that mapping m of process pid maps, for reading (see
 * common/safe_open.h), through proc_root ("/proc"): the file maps names by
 * device and inode, or none. At most ELF_FILE_MAX_BYTES. Returns the
 * descriptor (owned) or -errno: -ESTALE when the path now leads to
 * another file.
 */
int procmaps__open_file(const char *proc_root, pid_t pid, const struct proc_mapping *m);

#endif
