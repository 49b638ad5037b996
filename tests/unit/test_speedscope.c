// SPDX-License-Identifier: Apache-2.0
/* speedscope export: one sampled profile per process, shared frames. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/profile.h"
#include "format/speedscope.h"
#include "golden.h"

static void test_two_processes(void **state)
{
	struct profile *p = profile__new(1000000, 0);
	int64_t bin = profile__intern_mapping(p, "/usr/bin/app", NULL);
	uint32_t f_main = profile__intern_frame(p, FRAME_NATIVE, bin, 0x10);
	uint32_t f_work = profile__intern_frame(p, FRAME_NATIVE, bin, 0x20);
	uint32_t s1[] = { f_main, f_work }, s2[] = { f_main };
	uint32_t app = profile__intern_string(p, "app"), db = profile__intern_string(p, "db");
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	profile__set_frame_name(p, f_main, "main", "main.c", 3);
	profile__set_frame_name(p, f_work, "work \"quoted\"", NULL, 0);
	profile__add_sample(p, profile__intern_stack(p, s1, 2), 1, 1, 0, app, 5);
	profile__add_sample(p, profile__intern_stack(p, s2, 1), 2, 2, 0, db, 2);
	profile__add_sample(p, profile__intern_stack(p, s2, 1), 1, 3, 1, app, 1);
	assert_int_equal(speedscope__write(p, "none", f), 0);
	fclose(f);
	golden__check(FW_TEST_DATA "/golden/speedscope_basic.json", buf, len);
	free(buf);
	profile__free(p);
}

static void test_write_error(void **state)
{
	struct profile *p = profile__new(1, 0);
	FILE *f = fopen("/dev/full", "w");

	assert_non_null(f);
	setvbuf(f, NULL, _IONBF, 0);
	assert_int_equal(speedscope__write(p, "none", f), -EIO);
	fclose(f);
	profile__free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_two_processes),
		cmocka_unit_test(test_write_error),
	};

	return cmocka_run_group_tests_name("speedscope", tests, NULL, NULL);
}
