// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "common/hex.h"
#include "common/log.h"
#include "common/lower_bound.h"
#include "common/safe_open.h"
#include "demangle.h"
#include "perfmap.h"

struct preq {
	uint64_t addr;
	size_t index;
	off_t line;		/* offset of the covering line, -1 if none */
	bool done;		/* cb called */
};

/*
 * Parses "START SIZE NAME\n" in place (the line ending is cut off). Returns
 * false for anything else, and for empty entries, which cover no address.
 */
static bool _parse_line(char *line, uint64_t *start, uint64_t *end, char **name)
{
	const char *p;
	uint64_t size;
	size_t len;

	p = hex__parse_u64(line, start);
	if (!p || (*p != ' ' && *p != '\t'))
		return false;
	p += strspn(p, " \t");
	p = hex__parse_u64(p, &size);
	if (!p || (*p != ' ' && *p != '\t') || size == 0)
		return false;
	p += strspn(p, " \t");
	len = strlen(p);
	while (len && (p[len - 1] == '\n' || p[len - 1] == '\r'))
		len--;
	if (!len)
		return false;
	*name = line + (p - line);
	(*name)[len] = '\0';
	*end = *start + size < *start ? UINT64_MAX : *start + size;
	return true;
}

static int _by_addr(const void *a, const void *b)
{
	const struct preq *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int _by_line(const void *a, const void *b)
{
	const struct preq *x = a, *y = b;

	return x->line < y->line ? -1 : x->line > y->line;
}

/*
 * Pass 1: every entry claims the requests inside it, overwriting what earlier
 * lines claimed; that is the "last one wins" rule, and it needs no more than
 * one offset per request.
 */
static int _pass1(struct safe_lines *lr, struct preq *reqs, size_t n)
{
	uint64_t here;
	size_t len;
	char *line, *name;

	while ((line = safe_lines__next(lr, &len, &here))) {
		uint64_t start, end;

		if (!_parse_line(line, &start, &end, &name))
			continue;
		for (size_t j = lower_bound__u64(reqs, n, sizeof(*reqs), offsetof(struct preq, addr),
						 start);
		     j < n && reqs[j].addr < end; j++)
			reqs[j].line = (off_t)here;
	}
	return lr->err;
}

/* Reads the line at offset at into buf (PERFMAP_LINE_MAX + 1 bytes); false if it is gone. */
static bool _read_line_at(int fd, off_t at, char *buf, int *err)
{
	ssize_t got = pread(fd, buf, PERFMAP_LINE_MAX, at);
	char *nl;

	if (got < 0) {
		*err = -errno;
		return false;
	}
	buf[got] = '\0';
	nl = memchr(buf, '\n', got);
	if (nl)
		*nl = '\0';
	return got > 0 && (nl || got < PERFMAP_LINE_MAX);
}

/* Pass 2: reads each chosen line once and answers the requests it covers. */
static int _pass2(int fd, char *line, struct preq *reqs, size_t n, symbol_cb cb, void *ctx)
{
	size_t j = 0;
	int err = 0;

	qsort(reqs, n, sizeof(*reqs), _by_line);
	while (j < n && reqs[j].line < 0)
		j++;
	while (j < n) {
		off_t at = reqs[j].line;
		uint64_t start = 0, end = 0;
		char *name = NULL, *dem = NULL;
		bool ok;

		ok = _read_line_at(fd, at, line, &err) && _parse_line(line, &start, &end, &name);
		if (ok)
			dem = demangle(name);
		for (; j < n && reqs[j].line == at; j++) {
			struct preq *r = &reqs[j];

			/* The file can have been rewritten since pass 1. */
			if (!ok || r->addr < start || r->addr >= end)
				continue;
			cb(ctx, r->index, dem ? dem : name, r->addr - start);
			r->done = true;
		}
		free(dem);
	}
	return err;
}

int perfmap__resolve_fd(int fd, const uint64_t *addrs, size_t n, symbol_cb cb, void *ctx)
{
	struct safe_lines lr = { 0 };
	struct preq *reqs = NULL;
	uint64_t from = 0;
	struct stat st;
	int err = 0;

	if (fd < 0 || !cb || (n && !addrs))
		return -EINVAL;
	if (!n)
		return 0;

	reqs = malloc(n * sizeof(*reqs));
	if (!reqs) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		reqs[i] = (struct preq){ .addr = addrs[i], .index = i, .line = -1 };
	qsort(reqs, n, sizeof(*reqs), _by_addr);

	/*
	 * A map larger than the cap is read from its last PERFMAP_MAX_BYTES:
	 * later lines win, so the tail is what names the code running now.
	 * The line the tail starts in is skipped up to its newline, which
	 * reading from the byte before finds even when the tail starts a line.
	 */
	if (fstat(fd, &st)) {
		err = -errno;
		goto out;
	}
	if ((uint64_t)st.st_size > PERFMAP_MAX_BYTES)
		from = (uint64_t)st.st_size - PERFMAP_MAX_BYTES - 1;
	err = safe_lines__init(&lr, fd, from, PERFMAP_LINE_MAX, PERFMAP_MAX_BYTES + (from > 0));
	if (err)
		goto out;
	lr.skipping = from > 0;
	err = _pass1(&lr, reqs, n);
	if (err)
		goto out;
	if (lr.skipped > (from > 0))
		pr_debug("perfmap: %" PRIu64 " lines longer than %d bytes skipped\n",
			 lr.skipped - (from > 0), PERFMAP_LINE_MAX);
	err = _pass2(fd, lr.buf, reqs, n, cb, ctx);
out:
	if (reqs) {
		for (size_t j = 0; j < n; j++) {
			if (!reqs[j].done)
				cb(ctx, reqs[j].index, NULL, 0);
		}
	} else {
		for (size_t i = 0; i < n; i++)
			cb(ctx, i, NULL, 0);
	}
	safe_lines__release(&lr);
	free(reqs);
	return err;
}

int perfmap__resolve(const char *path, const uint64_t *addrs, size_t n, symbol_cb cb, void *ctx)
{
	int fd, err;

	if (!path || !cb || (n && !addrs))
		return -EINVAL;
	if (!n)
		return 0;
	fd = path[0] == '/' ? safe_open__in_root("", path, NULL, NULL) :
			      safe_open__at(AT_FDCWD, path, NULL, NULL);
	if (fd < 0) {
		pr_debug("perfmap: cannot open %s: %s\n", path, strerror(-fd));
		for (size_t i = 0; i < n; i++)
			cb(ctx, i, NULL, 0);
		return fd;
	}
	err = perfmap__resolve_fd(fd, addrs, n, cb, ctx);
	close(fd);
	return err;
}
