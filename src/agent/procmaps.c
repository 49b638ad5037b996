// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "agent/procmaps.h"

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
	size_t n = 0, cap = 0, path_bytes = 0, line_cap = 0;
	struct proc_maps *maps = NULL;
	char *line = NULL, *names = NULL, *strings;
	int err = 0;
	FILE *f;

	f = fopen(path, "re");
	if (!f)
		return NULL;
	/*
	 * Keep the paths in a temporary buffer first; the final block holds
	 * the array followed by the strings, and path pointers are fixed up.
	 */
	while (getline(&line, &line_cap, f) > 0) {
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
	if (ferror(f)) {
		err = errno ? errno : EIO;
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
	fclose(f);
	free(line);
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
