/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_SAFE_OPEN_H
#define FW_COMMON_SAFE_OPEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

/*
 * Opening files that another process chose: its perf map, the binaries it
 * maps, their debug files. That process may be hostile, and the agent runs
 * as root on one event loop, so such a file is opened
 *
 *   - without following a symbolic link anywhere in the path, and without
 *     ".." (a path from /proc/PID/maps never needs either);
 *   - first as O_PATH, which reads nothing and cannot block: only once
 *     fstat() shows a regular file that passes the owner and size checks is
 *     it opened for reading, through /proc/self/fd, so that a FIFO, a
 *     socket or a device is never opened at all (a FIFO's open blocks until
 *     a writer comes; a device's open can act);
 *   - O_NONBLOCK | O_CLOEXEC, for reading only.
 *
 * A path relative to a directory descriptor is resolved with openat2()
 * (RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS), or, where the kernel or a
 * seccomp filter refuses openat2(), one component at a time with O_NOFOLLOW.
 */

/* The checks a file must pass besides being a regular file. */
struct safe_open_opts {
	const uid_t *uids;	/* allowed owners (st_uid), n_uids of them */
	size_t n_uids;		/* 0: any owner */
	uint64_t max_size;	/* 0: any size; else larger files are -EFBIG */
};

/*
 * Opens path below dirfd for reading, as described above; a leading '/'
 * is taken relative to dirfd too. o may be NULL (no owner or size check).
 * Fills *st (may be NULL) with the file's status. Returns the descriptor,
 * or -ELOOP (a symbolic link), -EXDEV (".." in path), -EISDIR, -EINVAL
 * (not a regular file), -EPERM (another owner), -EFBIG (too large), or the
 * -errno of the lookup.
 */
int safe_open__at(int dirfd, const char *path, const struct safe_open_opts *o,
		  struct stat *st);

/*
 * Like safe_open__at() below root, a directory that is trusted as given
 * (followed): "" is "/", "/proc/PID/root" the view of process PID.
 */
int safe_open__in_root(const char *root, const char *path, const struct safe_open_opts *o,
		       struct stat *st);

/*
 * Opens what a procfs magic link points at (/proc/PID/map_files/A-B: the
 * very file a process maps), with the same checks as safe_open__at(). The
 * link itself is followed; nothing else in path may be a link.
 */
int safe_open__link(const char *path, const struct safe_open_opts *o, struct stat *st);

/*
 * Opens a procfs file (path, or path below dirfd when dirfd is not
 * AT_FDCWD) O_RDONLY | O_NONBLOCK | O_CLOEXEC. Returns the descriptor or
 * -errno.
 */
int safe_open__proc(int dirfd, const char *path);

/*
 * Reads at most len - 1 bytes of a procfs file into buf, NUL-terminated,
 * one trailing newline cut. Returns the length or -errno.
 */
ssize_t safe_open__read_proc(int dirfd, const char *path, char *buf, size_t len);

/*
 * Reads the lines of a file with a bound on both the memory and the bytes
 * read: a line longer than line_max is skipped whole (counted in skipped),
 * and reading stops after max_bytes (capped is then set; a line cut by the
 * cap is dropped). A last line without a newline is returned at the end of
 * the file. NUL bytes are kept: lines are returned with their length.
 * Reads with pread() from offset start, so the descriptor's position does
 * not matter and procfs files read sequentially as usual.
 */
struct safe_lines {
	int fd;			/* borrowed */
	char *buf;
	size_t cap;		/* line_max + 1 */
	size_t start, end;	/* unread bytes: buf[start, end) */
	uint64_t off;		/* file offset of buf[start] */
	uint64_t left;		/* bytes max_bytes still allows */
	bool eof, skipping;
	bool capped;		/* stopped at max_bytes */
	uint64_t skipped;	/* lines longer than line_max */
	int err;		/* -errno of a failed read, else 0 */
};

/* Returns 0 or -ENOMEM. line_max > 0. */
int safe_lines__init(struct safe_lines *r, int fd, uint64_t start, size_t line_max,
		     uint64_t max_bytes);
/* Frees the buffer; the descriptor stays open. Accepts a zeroed struct. */
void safe_lines__release(struct safe_lines *r);
/*
 * The next line, newline cut, NUL-terminated, in r's buffer until the next
 * call; *len its length and *off (may be NULL) its offset in the file.
 * NULL at the end, at the cap, or on a read error (r->err).
 */
char *safe_lines__next(struct safe_lines *r, size_t *len, uint64_t *off);

/*
 * Tests only: resolve paths one component at a time, as on kernels
 * without openat2(), even where it is available.
 */
void safe_open__force_walk(bool on);

#endif
