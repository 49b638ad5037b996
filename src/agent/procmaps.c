// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "agent/procmaps.h"
#include "common/safe_open.h"
#include "symbolize/elf_file.h"

int procmaps__parse_line(char *line, struct proc_mapping *m)
{
	char perms[5];
	int path_at = -1;
	size_t len;

	/* 7f00-7f10 r-xp 00001000 08:01 1234     /usr/lib/libc.so.6 */
	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n",
		   &m->start, &m->end, perms, &m->offset, &m->dev_major, &m->dev_minor,
		   &m->inode, &path_at) < 7 || path_at < 0)
		return -EINVAL;
	if (m->end <= m->start || strlen(perms) != 4)
		return -EINVAL;
	m->prot = (perms[0] == 'r' ? PROT_READ : 0) |
		  (perms[1] == 'w' ? PROT_WRITE : 0) |
		  (perms[2] == 'x' ? PROT_EXEC : 0);
	m->path = line + path_at;
	len = strlen(m->path);
	while (len && (m->path[len - 1] == '\n' || m->path[len - 1] == ' '))
		line[path_at + --len] = '\0';
	return 0;
}

static int _by_start(const void *a, const void *b)
{
	const struct proc_mapping *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

struct proc_maps *procmaps__read(const char *path)
{
	struct proc_mapping *tmp = NULL, m;
	size_t n = 0, cap = 0, path_bytes = 0, len;
	struct proc_maps *maps = NULL;
	struct safe_lines lr = { 0 };
	char *line, *names = NULL, *strings;
	int err = 0, fd;

	fd = safe_open__proc(AT_FDCWD, path);
	if (fd < 0) {
		errno = -fd;
		return NULL;
	}
	if (safe_lines__init(&lr, fd, 0, PROCMAPS_LINE_MAX, PROCMAPS_MAX_BYTES)) {
		err = ENOMEM;
		goto out;
	}
	/*
	 * Keep the paths in a temporary buffer first; the final block holds
	 * the array followed by the strings, and path pointers are fixed up.
	 */
	while ((line = safe_lines__next(&lr, &len, NULL))) {
		size_t plen;
		char *nn;

		if (procmaps__parse_line(line, &m)) {
			err = EINVAL;
			goto out;
		}
		if (!(m.prot & PROT_EXEC))
			continue;
		if (n == cap) {
			struct proc_mapping *t;

			cap = cap ? cap * 2 : 32;
			t = realloc(tmp, cap * sizeof(*tmp));
			if (!t) {
				err = ENOMEM;
				goto out;
			}
			tmp = t;
		}
		plen = strlen(m.path) + 1;
		nn = realloc(names, path_bytes + plen);
		if (!nn) {
			err = ENOMEM;
			goto out;
		}
		names = nn;
		memcpy(names + path_bytes, m.path, plen);
		m.path = (const char *)(uintptr_t)path_bytes;	/* offset until fixed up */
		path_bytes += plen;
		tmp[n++] = m;
	}
	if (lr.err) {
		err = -lr.err;
		goto out;
	}

	maps = malloc(sizeof(*maps) + n * sizeof(maps->m[0]) + path_bytes);
	if (!maps) {
		err = ENOMEM;
		goto out;
	}
	maps->n = n;
	strings = (char *)&maps->m[n];
	if (path_bytes)
		memcpy(strings, names, path_bytes);
	for (size_t i = 0; i < n; i++) {
		maps->m[i] = tmp[i];
		maps->m[i].path = strings + (uintptr_t)tmp[i].path;
	}
	qsort(maps->m, n, sizeof(maps->m[0]), _by_start);
out:
	safe_lines__release(&lr);
	close(fd);
	free(names);
	free(tmp);
	if (err) {
		free(maps);
		errno = err;
		return NULL;
	}
	return maps;
}

const struct proc_mapping *procmaps__find(const struct proc_maps *maps, uint64_t addr)
{
	size_t lo = 0, hi = maps->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		const struct proc_mapping *m = &maps->m[mid];

		if (addr < m->start)
			hi = mid;
		else if (addr >= m->end)
			lo = mid + 1;
		else
			return m;
	}
	return NULL;
}

/*
 * Opens the file a mapping maps. map_files is that very file, wherever its
 * path leads now (deleted, replaced, or in a mount namespace whose paths
 * we cannot follow); it needs CAP_CHECKPOINT_RESTORE. Its inode must be
 * the one maps names, its device need not: on btrfs maps names the file
 * system's device and fstat() the subvolume's.
 *
 * Otherwise the path is opened below the process's root with no link
 * followed, and must lead to the device and inode maps names: anything
 * else may be another file. On btrfs, whose inode numbers repeat across
 * subvolumes, and on overlayfs before Linux 6.8, where maps names the
 * layer's file and the path leads to the overlay's, that never holds.
 */
int procmaps__open_file(const char *proc_root, pid_t pid, const struct proc_mapping *m)
{
	const struct safe_open_opts caps = { .max_size = ELF_FILE_MAX_BYTES };
	char path[PATH_MAX];
	struct stat st;
	int fd, rootfd;

	snprintf(path, sizeof(path), "%s/%d/map_files/%" PRIx64 "-%" PRIx64,
		 proc_root, pid, m->start, m->end);
	fd = safe_open__link(path, &caps, &st);
	if (fd >= 0 && st.st_ino == m->inode)
		return fd;
	if (fd >= 0)
		close(fd);	/* remapped since maps was read */
	else if (fd == -EINVAL || fd == -EFBIG)
		return fd;

	snprintf(path, sizeof(path), "%s/%d/root", proc_root, pid);
	rootfd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		return -errno;
	fd = safe_open__at(rootfd, m->path, &caps, &st);
	close(rootfd);
	if (fd < 0)
		return fd;
	if (major(st.st_dev) != m->dev_major || minor(st.st_dev) != m->dev_minor ||
	    st.st_ino != m->inode) {
		close(fd);
		return -ESTALE;
	}
	return fd;
}
