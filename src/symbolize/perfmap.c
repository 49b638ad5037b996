// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/hex.h"
#include "common/log.h"
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

static size_t _lower_bound(const struct preq *r, size_t n, uint64_t addr)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (r[mid].addr < addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/*
 * Pass 1: every entry claims the requests inside it, overwriting what earlier
 * lines claimed; that is the "last one wins" rule, and it needs no more than
 * one offset per request.
 */
static void _pass1(FILE *fp, struct preq *reqs, size_t n)
{
	size_t cap = 0;
	char *line = NULL, *name;
	off_t off = 0;
	ssize_t len;

	while ((len = getline(&line, &cap, fp)) > 0) {
		uint64_t start, end;
		off_t here = off;

		off += len;
		if (!_parse_line(line, &start, &end, &name))
			continue;
		for (size_t j = _lower_bound(reqs, n, start); j < n && reqs[j].addr < end; j++)
			reqs[j].line = here;
	}
	free(line);
}

/* Pass 2: reads each chosen line once and answers the requests it covers. */
static int _pass2(FILE *fp, struct preq *reqs, size_t n, symbol_cb cb, void *ctx)
{
	size_t cap = 0, j = 0;
	char *line = NULL;
	int err = 0;

	qsort(reqs, n, sizeof(*reqs), _by_line);
	while (j < n && reqs[j].line < 0)
		j++;
	while (j < n) {
		off_t at = reqs[j].line;
		uint64_t start = 0, end = 0;
		char *name = NULL, *dem = NULL;
		bool ok;

		ok = fseeko(fp, at, SEEK_SET) == 0 && getline(&line, &cap, fp) > 0 &&
		     _parse_line(line, &start, &end, &name);
		if (!ok)
			err = ferror(fp) ? -EIO : err;
		else
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
	free(line);
	return err;
}

int perfmap__resolve(const char *path, const uint64_t *addrs, size_t n,
		     symbol_cb cb, void *ctx)
{
	struct preq *reqs = NULL;
	FILE *fp = NULL;
	int err = 0;

	if (!path || !cb || (n && !addrs))
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

	fp = fopen(path, "re");
	if (!fp) {
		err = -errno;
		pr_debug("perfmap: cannot open %s: %s\n", path, strerror(-err));
		goto out;
	}
	_pass1(fp, reqs, n);
	if (ferror(fp)) {
		err = -EIO;
		goto out;
	}
	clearerr(fp);
	err = _pass2(fp, reqs, n, cb, ctx);
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
	if (fp)
		fclose(fp);
	free(reqs);
	return err;
}
