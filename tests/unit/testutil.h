/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Helpers that several unit tests had each copied: scratch directories
 * under /tmp, shell commands that build fixtures, a wall clock, a
 * deterministic random sequence and a store opened for a test. Include
 * after <cmocka.h>.
 */
#ifndef FW_TESTS_TESTUTIL_H
#define FW_TESTS_TESTUTIL_H

#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "store/store.h"

/*
 * Makes a fresh directory /tmp/fw-NAME-XXXXXX in dir (size bytes) and
 * returns dir, or NULL with errno set.
 */
static inline char *tmpdir_make(char *dir, size_t size, const char *name)
{
	snprintf(dir, size, "/tmp/fw-%s-XXXXXX", name);
	return mkdtemp(dir);
}

static inline int _tmpdir_remove_one(const char *path, const struct stat *sb, int flag,
				     struct FTW *ftw)
{
	return remove(path);
}

/* Removes dir and everything under it, symlinks not followed; "" is nothing. */
static inline void tmpdir_remove(const char *dir)
{
	if (dir[0])
		nftw(dir, _tmpdir_remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * The scratch directory of a test program whose group setup builds
 * fixtures into it (tmpdir_make(tmpdir, sizeof(tmpdir), ...)), and the path
 * of a file there, in one of eight static buffers so that a call can take
 * a few paths at once.
 */
static char tmpdir[64] __attribute__((unused));

static inline const char *tmp_path(const char *name)
{
	static char bufs[8][256];
	static unsigned int next;
	char *p = bufs[next++ % 8];

	snprintf(p, sizeof(bufs[0]), "%s/%s", tmpdir, name);
	return p;
}

/* Runs a printf-formatted shell command; returns what system() does. */
static inline int __attribute__((format(printf, 1, 2))) run(const char *fmt, ...)
{
	char *cmd;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vasprintf(&cmd, fmt, ap);
	va_end(ap);
	assert_true(rc >= 0);
	rc = system(cmd);
	free(cmd);
	return rc;
}

/* CLOCK_REALTIME in nanoseconds. */
static inline int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* xorshift64: the same sequence on every run from the same nonzero *state. */
static inline uint64_t xorshift(uint64_t *state)
{
	*state ^= *state << 13;
	*state ^= *state >> 7;
	*state ^= *state << 17;
	return *state;
}

/* store__open(uri), failing the test with the store's message if it cannot. */
static inline struct store *store_open_or_fail(const char *uri)
{
	char err[256];
	struct store *s = store__open(uri, err, sizeof(err));

	if (!s)
		fail_msg("store__open(%s): %s", uri, err);
	return s;
}

#endif
