// SPDX-License-Identifier: Apache-2.0
/*
 * common/safe_open: what a file put in the agent's way by another process
 * can do. Every case runs twice, with openat2() and with the walk one
 * component at a time that kernels without it (or seccomp filters that
 * refuse it) get. An alarm turns an open that blocks into a failure.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/safe_open.h"
#include "symbolize/perfmap.h"

#define SECRET "7f0000001000 100 secret_root_only_name\n"

struct dir {
	char path[64];
	int fd;
};

static void _write(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static void _at(struct dir *d, const char *name, char *out, size_t len)
{
	snprintf(out, len, "%s/%s", d->path, name);
}

/*
 * A directory like a process's root: a regular map, a FIFO, a link to a
 * file, a link to a directory, a directory.
 */
static int setup(void **state)
{
	struct dir *d = calloc(1, sizeof(*d));
	char p[128], q[128];

	assert_non_null(d);
	snprintf(d->path, sizeof(d->path), "/tmp/fw-safe-open-XXXXXX");
	assert_non_null(mkdtemp(d->path));
	_at(d, "tmp", p, sizeof(p));
	assert_int_equal(mkdir(p, 0755), 0);
	_at(d, "tmp/perf-1.map", p, sizeof(p));
	_write(p, "7f0000001000 100 jit_fn\n");
	_at(d, "secret", p, sizeof(p));
	_write(p, SECRET);
	assert_int_equal(chmod(p, 0600), 0);
	_at(d, "tmp/fifo.map", p, sizeof(p));
	assert_int_equal(mkfifo(p, 0644), 0);
	_at(d, "secret", q, sizeof(q));
	_at(d, "tmp/link.map", p, sizeof(p));
	assert_int_equal(symlink(q, p), 0);
	_at(d, "tmp/rel.map", p, sizeof(p));
	assert_int_equal(symlink("../secret", p), 0);
	_at(d, "tmp", q, sizeof(q));
	_at(d, "linkdir", p, sizeof(p));
	assert_int_equal(symlink(q, p), 0);
	_at(d, "tmp/dir.map", p, sizeof(p));
	assert_int_equal(mkdir(p, 0755), 0);
	d->fd = open(d->path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(d->fd >= 0);
	*state = d;
	return 0;
}

static int teardown(void **state)
{
	struct dir *d = *state;
	char cmd[128];

	close(d->fd);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d->path);
	assert_int_equal(system(cmd), 0);
	free(d);
	safe_open__force_walk(false);
	return 0;
}

/* Runs fn with openat2() and then with the walk. */
static void _both(void (*fn)(struct dir *d), void **state)
{
	alarm(10);
	safe_open__force_walk(false);
	fn(*state);
	safe_open__force_walk(true);
	fn(*state);
	safe_open__force_walk(false);
	alarm(0);
}

static void _regular(struct dir *d)
{
	struct stat st;
	char buf[64];
	int fd = safe_open__at(d->fd, "/tmp/perf-1.map", NULL, &st);

	assert_true(fd >= 0);
	assert_true(S_ISREG(st.st_mode));
	assert_true(fcntl(fd, F_GETFL) & O_NONBLOCK);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal((fcntl(fd, F_GETFL) & O_ACCMODE), O_RDONLY);
	assert_int_equal(read(fd, buf, 6), 6);
	assert_memory_equal(buf, "7f0000", 6);
	close(fd);
	fd = safe_open__at(d->fd, "tmp/./perf-1.map", NULL, NULL);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(safe_open__at(d->fd, "tmp/none.map", NULL, NULL), -ENOENT);
}

static void test_regular_file(void **state)
{
	_both(_regular, state);
}

/* Opening a FIFO for reading blocks until a writer comes: it must not be opened at all. */
static void _fifo(struct dir *d)
{
	assert_int_equal(safe_open__at(d->fd, "tmp/fifo.map", NULL, NULL), -EINVAL);
}

static void test_fifo(void **state)
{
	_both(_fifo, state);
}

static void _symlink(struct dir *d)
{
	assert_int_equal(safe_open__at(d->fd, "tmp/link.map", NULL, NULL), -ELOOP);
	assert_int_equal(safe_open__at(d->fd, "tmp/rel.map", NULL, NULL), -ELOOP);
	/* A linked directory in the middle of the path is no better. */
	assert_int_equal(safe_open__at(d->fd, "linkdir/perf-1.map", NULL, NULL), -ELOOP);
}

static void test_symlink(void **state)
{
	_both(_symlink, state);
}

static void _dotdot(struct dir *d)
{
	assert_int_equal(safe_open__at(d->fd, "tmp/../secret", NULL, NULL), -EXDEV);
	assert_int_equal(safe_open__at(d->fd, "../x", NULL, NULL), -EXDEV);
	assert_int_equal(safe_open__at(d->fd, "tmp/..", NULL, NULL), -EXDEV);
	/* Dots inside a name are a name. */
	assert_int_equal(safe_open__at(d->fd, "tmp/..perf", NULL, NULL), -ENOENT);
}

static void test_dotdot(void **state)
{
	_both(_dotdot, state);
}

static void _directory(struct dir *d)
{
	assert_int_equal(safe_open__at(d->fd, "tmp/dir.map", NULL, NULL), -EISDIR);
	assert_int_equal(safe_open__at(d->fd, "tmp", NULL, NULL), -EISDIR);
	assert_int_equal(safe_open__at(d->fd, "/", NULL, NULL), -ENOENT);
	assert_int_equal(safe_open__at(d->fd, "", NULL, NULL), -ENOENT);
}

static void test_directory(void **state)
{
	_both(_directory, state);
}

/* A device is never opened: opening one can act (a watchdog starts counting). */
static void _device(struct dir *d)
{
	(void)d;
	assert_int_equal(safe_open__in_root("", "/dev/null", NULL, NULL), -EINVAL);
}

static void test_device(void **state)
{
	_both(_device, state);
}

static void _owner(struct dir *d)
{
	uid_t other[2] = { getuid() + 1, getuid() + 2 }, mine[2] = { getuid() + 1, getuid() };
	struct safe_open_opts o = { .uids = other, .n_uids = 2 };
	int fd;

	assert_int_equal(safe_open__at(d->fd, "tmp/perf-1.map", &o, NULL), -EPERM);
	o.uids = mine;
	fd = safe_open__at(d->fd, "tmp/perf-1.map", &o, NULL);
	assert_true(fd >= 0);
	close(fd);
}

static void test_other_owner(void **state)
{
	_both(_owner, state);
}

static void _size(struct dir *d)
{
	struct safe_open_opts o = { .max_size = 23 };
	int fd;

	assert_int_equal(safe_open__at(d->fd, "tmp/perf-1.map", &o, NULL), -EFBIG);
	o.max_size = 24;	/* the file's size */
	fd = safe_open__at(d->fd, "tmp/perf-1.map", &o, NULL);
	assert_true(fd >= 0);
	close(fd);
}

static void test_oversized(void **state)
{
	_both(_size, state);
}

/* A procfs magic link is followed, to a regular file only. */
static void test_magic_link(void **state)
{
	char path[64];
	int mfd = memfd_create("fw-test", MFD_CLOEXEC), pfd[2], fd;
	struct stat a, b;

	(void)state;
	assert_true(mfd >= 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", mfd);
	fd = safe_open__link(path, NULL, &a);
	assert_true(fd >= 0);
	assert_int_equal(fstat(mfd, &b), 0);
	assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
	close(fd);
	close(mfd);

	alarm(10);
	assert_int_equal(pipe2(pfd, O_CLOEXEC), 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", pfd[0]);
	assert_int_equal(safe_open__link(path, NULL, NULL), -EINVAL);
	close(pfd[0]);
	close(pfd[1]);
	alarm(0);
}

static int _memfd(const void *data, size_t len)
{
	int fd = memfd_create("fw-lines", MFD_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	return fd;
}

/* Lines longer than the cap are skipped whole; the ones after still come, at their offsets. */
static void test_lines_long(void **state)
{
	char text[200];
	struct safe_lines r;
	uint64_t off;
	size_t len;
	char *line;
	int fd;

	(void)state;
	memset(text, 'x', sizeof(text));
	memcpy(text, "short\n", 6);
	text[100] = '\n';			/* line 2: 94 bytes, over the cap of 16 */
	memcpy(text + 101, "ok\n", 3);
	memcpy(text + 104, "tail", 4);		/* no newline at the end */
	fd = _memfd(text, 108);
	assert_int_equal(safe_lines__init(&r, fd, 0, 16, 1 << 20), 0);
	line = safe_lines__next(&r, &len, &off);
	assert_string_equal(line, "short");
	assert_int_equal(off, 0);
	line = safe_lines__next(&r, &len, &off);
	assert_string_equal(line, "ok");
	assert_int_equal(off, 101);
	line = safe_lines__next(&r, &len, &off);
	assert_string_equal(line, "tail");
	assert_int_equal(off, 104);
	assert_null(safe_lines__next(&r, &len, &off));
	assert_int_equal(r.skipped, 1);
	assert_false(r.capped);
	safe_lines__release(&r);
	close(fd);
}

/* Reading stops at max_bytes; a line the cap cuts is dropped, not returned cut. */
static void test_lines_cap(void **state)
{
	static const char text[] = "one\ntwo\nthree\nfour\n";
	struct safe_lines r;
	size_t len;
	int fd = _memfd(text, sizeof(text) - 1);

	(void)state;
	assert_int_equal(safe_lines__init(&r, fd, 4, 64, 7), 0);	/* "two\nthr" */
	assert_string_equal(safe_lines__next(&r, &len, NULL), "two");
	assert_null(safe_lines__next(&r, &len, NULL));
	assert_true(r.capped);
	safe_lines__release(&r);

	/* NUL bytes stay inside a line, which comes with its length. */
	close(fd);
	fd = _memfd("a\0b\nc\n", 6);
	assert_int_equal(safe_lines__init(&r, fd, 0, 64, 1 << 20), 0);
	assert_non_null(safe_lines__next(&r, &len, NULL));
	assert_int_equal(len, 3);
	assert_string_equal(safe_lines__next(&r, &len, NULL), "c");
	safe_lines__release(&r);
	close(fd);
}

struct names {
	char *name[2];
};

static void _keep(void *ctx, size_t i, const char *name, uint64_t off)
{
	struct names *n = ctx;

	(void)off;
	if (i < 2 && name)
		n->name[i] = strdup(name);
}

/*
 * The perf map reader's caps: a map larger than PERFMAP_MAX_BYTES is read
 * from its tail (later lines win), a line longer than PERFMAP_LINE_MAX is
 * skipped, and a FIFO at the path is refused instead of blocking.
 */
static void test_perfmap_caps(void **state)
{
	uint64_t addrs[2] = { 0x7f0000001010, 0x7f0000002010 };
	struct dir *d = *state;
	struct names n = { 0 };
	char path[128], *line;
	FILE *f;
	int fd;

	_at(d, "big.map", path, sizeof(path));
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("7f0000001000 100 head_entry\n", f);
	line = malloc(PERFMAP_LINE_MAX + 2);
	assert_non_null(line);
	memset(line, 'n', PERFMAP_LINE_MAX + 1);
	line[PERFMAP_LINE_MAX + 1] = '\0';
	/* Past the cap from the end: only the tail is read. */
	assert_int_equal(fseeko(f, (off_t)PERFMAP_MAX_BYTES, SEEK_SET), 0);
	fputs("\n7f0000002000 ", f);
	fputs(line, f);			/* an entry with a name too long: skipped */
	fputs("\n7f0000002000 100 tail_entry\n", f);
	assert_int_equal(fclose(f), 0);
	free(line);

	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(perfmap__resolve_fd(fd, addrs, 2, _keep, &n), 0);
	close(fd);
	assert_null(n.name[0]);
	assert_non_null(n.name[1]);
	assert_string_equal(n.name[1], "tail_entry");
	free(n.name[1]);
	n.name[1] = NULL;

	alarm(10);
	_at(d, "tmp/fifo.map", path, sizeof(path));
	assert_int_equal(perfmap__resolve(path, addrs, 2, _keep, &n), -EINVAL);
	_at(d, "tmp/link.map", path, sizeof(path));
	assert_int_equal(perfmap__resolve(path, addrs, 2, _keep, &n), -ELOOP);
	alarm(0);
	assert_null(n.name[0]);
	assert_null(n.name[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_regular_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fifo, setup, teardown),
		cmocka_unit_test_setup_teardown(test_symlink, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dotdot, setup, teardown),
		cmocka_unit_test_setup_teardown(test_directory, setup, teardown),
		cmocka_unit_test_setup_teardown(test_device, setup, teardown),
		cmocka_unit_test_setup_teardown(test_other_owner, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversized, setup, teardown),
		cmocka_unit_test(test_magic_link),
		cmocka_unit_test(test_lines_long),
		cmocka_unit_test(test_lines_cap),
		cmocka_unit_test_setup_teardown(test_perfmap_caps, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
