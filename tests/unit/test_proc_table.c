// SPDX-License-Identifier: Apache-2.0
/*
 * proc_table__sweep() against a fixture procfs: a process looked up after
 * its exit (a late CPU strip, a sample from its exit path) is forgotten
 * once its directory is gone at two sweeps in a row, and only then.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/proc_table.h"

struct gone {
	pid_t pids[8];
	int n;
};

static void _gone(void *ctx, pid_t pid)
{
	struct gone *g = ctx;

	assert_true(g->n < 8);
	g->pids[g->n++] = pid;
}

static void _mkproc(const char *root, pid_t pid, const char *comm)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d", root, pid);
	assert_int_equal(mkdir(path, 0755), 0);
	snprintf(path, sizeof(path), "%s/%d/comm", root, pid);
	f = fopen(path, "w");
	assert_non_null(f);
	fprintf(f, "%s\n", comm);
	fclose(f);
}

static void _rmproc(const char *root, pid_t pid)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%d/comm", root, pid);
	assert_int_equal(unlink(path), 0);
	snprintf(path, sizeof(path), "%s/%d", root, pid);
	assert_int_equal(rmdir(path), 0);
}

static void test_sweep(void **state)
{
	char root[] = "/tmp/fw_proc_XXXXXX";
	struct gone g = { 0 };
	struct proc_table *t;

	(void)state;
	assert_non_null(mkdtemp(root));
	_mkproc(root, 100, "alive");
	_mkproc(root, 200, "exits");
	t = proc_table__new(root);
	assert_non_null(t);

	assert_string_equal(proc_table__info(t, 100)->comm, "alive");
	assert_string_equal(proc_table__info(t, 200)->comm, "exits");
	/* Already gone when first looked up: labelled "", but still an entry. */
	assert_string_equal(proc_table__info(t, 300)->comm, "");
	assert_int_equal(proc_table__nprocs(t), 3);

	/*
	 * Gone at the first sweep that looks: kept until the next one, its
	 * exit event and last records may still be in the ring buffer.
	 */
	assert_int_equal(proc_table__sweep(t, _gone, &g), 0);
	assert_int_equal(g.n, 0);
	assert_int_equal(proc_table__nprocs(t), 3);
	assert_int_equal(proc_table__sweep(t, _gone, &g), 1);
	assert_int_equal(g.n, 1);
	assert_int_equal(g.pids[0], 300);
	assert_int_equal(proc_table__nprocs(t), 2);

	/* Nothing changed: nothing forgotten. */
	assert_int_equal(proc_table__sweep(t, _gone, &g), 0);
	assert_int_equal(g.n, 1);

	/* 200 exits; its exit event was handled, then a late lookup brought it back. */
	proc_table__exit(t, 200);
	assert_int_equal(proc_table__nprocs(t), 1);
	_rmproc(root, 200);
	assert_string_equal(proc_table__info(t, 200)->comm, "");
	assert_int_equal(proc_table__nprocs(t), 2);
	assert_int_equal(proc_table__sweep(t, NULL, NULL), 0);
	/* A pid whose directory is back (reused) between two sweeps stays. */
	_mkproc(root, 200, "reused");
	assert_int_equal(proc_table__sweep(t, NULL, NULL), 0);
	_rmproc(root, 200);
	assert_int_equal(proc_table__sweep(t, NULL, NULL), 0);
	assert_int_equal(proc_table__sweep(t, NULL, NULL), 1);
	assert_int_equal(proc_table__nprocs(t), 1);
	assert_string_equal(proc_table__info(t, 100)->comm, "alive");

	proc_table__free(t);
	_rmproc(root, 100);
	assert_int_equal(rmdir(root), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sweep),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
