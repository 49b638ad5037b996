// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "safe_open.h"

/* Older headers may lack openat2(); its number and ABI are the same on every architecture. */
#ifndef SYS_openat2
#define SYS_openat2 437
#endif

struct _open_how {
	uint64_t flags;
	uint64_t mode;
	uint64_t resolve;
};

#define _RESOLVE_NO_MAGICLINKS	0x02
#define _RESOLVE_NO_SYMLINKS	0x04
#define _RESOLVE_BENEATH	0x08

static bool _no_openat2;	/* the kernel or a seccomp filter refused it */

void safe_open__force_walk(bool on)
{
	_no_openat2 = on;
}

/* Refuses ".." (which could climb out of dirfd) and paths too long to copy. */
static int _check_path(const char *path)
{
	size_t len = strlen(path);

	if (len >= PATH_MAX)
		return -ENAMETOOLONG;
	for (const char *p = path; (p = strstr(p, "..")); p += 2)
		if ((p == path || p[-1] == '/') && (p[2] == '/' || p[2] == '\0'))
			return -EXDEV;
	while (*path == '/')
		path++;
	return *path ? 0 : -ENOENT;
}

/* On ENOTDIR, tells a symbolic link in the middle of the path apart: -ELOOP. */
static int _walk_error(int dirfd, const char *comp, int err)
{
	struct stat st;

	if (err == -ENOTDIR && !fstatat(dirfd, comp, &st, AT_SYMLINK_NOFOLLOW) &&
	    S_ISLNK(st.st_mode))
		return -ELOOP;
	return err;
}

/* The fallback: one openat() per component, none of them followed if a link. */
static int _walk(int dirfd, const char *path)
{
	char copy[PATH_MAX], *comp, *next, *save = NULL;
	int cur = dirfd, fd;

	snprintf(copy, sizeof(copy), "%s", path);
	for (comp = strtok_r(copy, "/", &save); comp; comp = next) {
		next = strtok_r(NULL, "/", &save);
		if (!strcmp(comp, "."))
			continue;
		fd = openat(cur, comp, O_PATH | O_NOFOLLOW | O_CLOEXEC | (next ? O_DIRECTORY : 0));
		if (fd < 0)
			fd = _walk_error(cur, comp, -errno);
		if (cur != dirfd)
			close(cur);
		if (fd < 0)
			return fd;
		cur = fd;
	}
	return cur == dirfd ? -ENOENT : cur;
}

static int _resolve(int dirfd, const char *path)
{
	struct _open_how how = {
		.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
		.resolve = _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS,
	};
	int fd;

	while (*path == '/')
		path++;
	if (!_no_openat2) {
		fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
		if (fd >= 0)
			return fd;
		/* ENOSYS: before Linux 5.6; EPERM: a seccomp filter (older Docker profiles). */
		if (errno != ENOSYS && errno != EPERM)
			return -errno;
		_no_openat2 = true;
	}
	return _walk(dirfd, path);
}

/*
 * The checks on an O_PATH descriptor, then the open for reading: through
 * /proc/self/fd, which reopens that very inode, whatever its path is now.
 */
static int _reopen(int pathfd, const struct safe_open_opts *o, struct stat *out)
{
	char self[64];
	struct stat st;
	int fd;

	if (fstat(pathfd, &st))
		return -errno;
	if (S_ISLNK(st.st_mode))
		return -ELOOP;
	if (S_ISDIR(st.st_mode))
		return -EISDIR;
	if (!S_ISREG(st.st_mode))
		return -EINVAL;
	if (o && o->n_uids) {
		size_t i = 0;

		while (i < o->n_uids && o->uids[i] != st.st_uid)
			i++;
		if (i == o->n_uids)
			return -EPERM;
	}
	if (o && o->max_size && (uint64_t)st.st_size > o->max_size)
		return -EFBIG;
	snprintf(self, sizeof(self), "/proc/self/fd/%d", pathfd);
	fd = open(self, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (out)
		*out = st;
	return fd;
}

int safe_open__at(int dirfd, const char *path, const struct safe_open_opts *o, struct stat *st)
{
	int pathfd, fd, err;

	if (!path)
		return -EINVAL;
	err = _check_path(path);
	if (err)
		return err;
	pathfd = _resolve(dirfd, path);
	if (pathfd < 0)
		return pathfd;
	fd = _reopen(pathfd, o, st);
	close(pathfd);
	return fd;
}

int safe_open__in_root(const char *root, const char *path, const struct safe_open_opts *o,
		       struct stat *st)
{
	int dirfd, fd;

	dirfd = open(root && root[0] ? root : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	fd = safe_open__at(dirfd, path, o, st);
	close(dirfd);
	return fd;
}

int safe_open__link(const char *path, const struct safe_open_opts *o, struct stat *st)
{
	int pathfd, fd;

	pathfd = open(path, O_PATH | O_CLOEXEC);
	if (pathfd < 0)
		return -errno;
	fd = _reopen(pathfd, o, st);
	close(pathfd);
	return fd;
}

int safe_open__proc(int dirfd, const char *path)
{
	int fd = openat(dirfd, path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

ssize_t safe_open__read_proc(int dirfd, const char *path, char *buf, size_t len)
{
	ssize_t n;
	int fd;

	if (!len)
		return -EINVAL;
	fd = safe_open__proc(dirfd, path);
	if (fd < 0)
		return fd;
	do
		n = read(fd, buf, len - 1);
	while (n < 0 && errno == EINTR);
	n = n < 0 ? -errno : n;
	close(fd);
	if (n < 0)
		return n;
	buf[n] = '\0';
	if (n && buf[n - 1] == '\n')
		buf[--n] = '\0';
	return n;
}

int safe_lines__init(struct safe_lines *r, int fd, uint64_t start, size_t line_max,
		     uint64_t max_bytes)
{
	memset(r, 0, sizeof(*r));
	if (!line_max)
		return -EINVAL;
	r->buf = malloc(line_max + 1);
	if (!r->buf)
		return -ENOMEM;
	r->fd = fd;
	r->cap = line_max + 1;
	r->off = start;
	r->left = max_bytes;
	return 0;
}

void safe_lines__release(struct safe_lines *r)
{
	free(r->buf);
	r->buf = NULL;
}

/* Hands out buf[start, start + len) as a line and consumes it and its newline. */
static char *_take(struct safe_lines *r, size_t len, size_t consumed, size_t *lenp,
		   uint64_t *offp)
{
	char *line = r->buf + r->start;

	line[len] = '\0';
	*lenp = len;
	if (offp)
		*offp = r->off;
	r->start += consumed;
	r->off += consumed;
	return line;
}

char *safe_lines__next(struct safe_lines *r, size_t *len, uint64_t *off)
{
	for (;;) {
		char *nl = r->end > r->start ? memchr(r->buf + r->start, '\n', r->end - r->start) :
					       NULL;
		size_t want;
		ssize_t n;

		if (nl) {
			size_t l = nl - (r->buf + r->start);

			if (r->skipping) {
				r->skipping = false;
				r->skipped++;
				r->start += l + 1;
				r->off += l + 1;
				continue;
			}
			return _take(r, l, l + 1, len, off);
		}
		/* No newline in what is buffered: make room, or give up on the line. */
		if (r->skipping) {
			r->off += r->end - r->start;
			r->start = r->end = 0;
		} else if (r->start) {
			memmove(r->buf, r->buf + r->start, r->end - r->start);
			r->end -= r->start;
			r->start = 0;
		}
		if (r->end == r->cap - 1) {
			r->skipping = true;
			r->off += r->end;
			r->start = r->end = 0;
		}
		if (r->eof || r->err || !r->left) {
			if (!r->left && !r->eof)
				r->capped = true;
			if (r->eof && r->end > r->start && !r->skipping)
				return _take(r, r->end - r->start, r->end - r->start, len, off);
			if (r->eof && r->skipping) {
				r->skipping = false;
				r->skipped++;
			}
			return NULL;
		}
		want = r->cap - 1 - r->end;
		if (want > r->left)
			want = r->left;
		n = pread(r->fd, r->buf + r->end, want, (off_t)(r->off + (r->end - r->start)));
		if (n < 0) {
			if (errno == EINTR)
				continue;
			r->err = -errno;
			continue;
		}
		if (n == 0)
			r->eof = true;
		r->end += n;
		r->left -= n;
	}
}
