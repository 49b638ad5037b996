// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/procmaps.h"

static void test_parse_file_mapping(void **state)
{
	char line[] = "7f3a1c228000-7f3a1c3bd000 r-xp 00028000 fe:01 1835142"
		      "                    /usr/lib/x86_64-linux-gnu/libc.so.6\n";
	struct proc_mapping m;

	assert_int_equal(procmaps__parse_line(line, &m), 0);
	assert_int_equal(m.start, 0x7f3a1c228000ULL);
	assert_int_equal(m.end, 0x7f3a1c3bd000ULL);
	assert_int_equal(m.offset, 0x28000);
	assert_int_equal(m.dev_major, 0xfe);
	assert_int_equal(m.dev_minor, 0x01);
	assert_int_equal(m.inode, 1835142);
	assert_int_equal(m.prot, PROT_READ | PROT_EXEC);
	assert_string_equal(m.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
}

static void test_parse_anonymous_and_special(void **state)
{
	char anon[] = "7ffd4a5e1000-7ffd4a5e3000 rw-p 00000000 00:00 0 \n";
	char vdso[] = "7ffd4a5fc000-7ffd4a5fe000 r-xp 00000000 00:00 0                          [vdso]\n";
	char spaces[] = "55d0c0a00000-55d0c0a01000 r-xp 00001000 08:01 42 /opt/my app/bin (deleted)\n";
	struct proc_mapping m;

	assert_int_equal(procmaps__parse_line(anon, &m), 0);
	assert_string_equal(m.path, "");
	assert_int_equal(m.prot, PROT_READ | PROT_WRITE);
	assert_int_equal(procmaps__parse_line(vdso, &m), 0);
	assert_string_equal(m.path, "[vdso]");
	assert_int_equal(procmaps__parse_line(spaces, &m), 0);
	assert_string_equal(m.path, "/opt/my app/bin (deleted)");
}

static void test_parse_rejects_garbage(void **state)
{
	char empty[] = "";
	char junk[] = "hello world\n";
	char reversed[] = "2000-1000 r-xp 00000000 00:00 0 /x\n";
	char short_perms[] = "1000-2000 rx 00000000 00:00 0 /x\n";
	struct proc_mapping m;

	assert_int_equal(procmaps__parse_line(empty, &m), -EINVAL);
	assert_int_equal(procmaps__parse_line(junk, &m), -EINVAL);
	assert_int_equal(procmaps__parse_line(reversed, &m), -EINVAL);
	assert_int_equal(procmaps__parse_line(short_perms, &m), -EINVAL);
}

static void test_read_keeps_executable_sorted(void **state)
{
	struct proc_maps *maps = procmaps__read(FW_TEST_DATA "/fixtures/maps.txt");
	const struct proc_mapping *m;

	assert_non_null(maps);
	assert_int_equal(maps->n, 4);
	for (size_t i = 1; i < maps->n; i++)
		assert_true(maps->m[i - 1].start < maps->m[i].start);
	m = procmaps__find(maps, 0x55d0c0a01234);
	assert_non_null(m);
	assert_string_equal(m->path, "/usr/bin/workload");
	m = procmaps__find(maps, 0x7f3a1c228000);
	assert_non_null(m);
	assert_string_equal(m->path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
	/* The end is exclusive; writable data is not kept. */
	assert_null(procmaps__find(maps, 0x7f3a1c3bd000));
	assert_null(procmaps__find(maps, 0x55d0c0c00100));
	assert_null(procmaps__find(maps, 0x1000));
	free(maps);
}

static void test_read_self(void **state)
{
	struct proc_maps *maps = procmaps__read("/proc/self/maps");
	const struct proc_mapping *m;

	assert_non_null(maps);
	m = procmaps__find(maps, (uint64_t)(uintptr_t)&test_read_self);
	assert_non_null(m);
	assert_true(m->prot & PROT_EXEC);
	assert_non_null(strstr(m->path, "test_procmaps"));
	free(maps);
}

static void test_read_errors(void **state)
{
	assert_null(procmaps__read("/proc/999999999/maps"));
	assert_int_equal(errno, ENOENT);
	assert_null(procmaps__read(FW_TEST_DATA "/fixtures/maps_bad.txt"));
	assert_int_equal(errno, EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_file_mapping),
		cmocka_unit_test(test_parse_anonymous_and_special),
		cmocka_unit_test(test_parse_rejects_garbage),
		cmocka_unit_test(test_read_keeps_executable_sorted),
		cmocka_unit_test(test_read_self),
		cmocka_unit_test(test_read_errors),
	};

	return cmocka_run_group_tests_name("procmaps", tests, NULL, NULL);
}
