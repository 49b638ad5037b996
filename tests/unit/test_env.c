// SPDX-License-Identifier: Apache-2.0
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/env.h"

#define NAME "FLAMEWATCH_TEST_KIB"
#define DFLT (3u << 20)

static uint64_t kib(const char *value, uint64_t min_kib)
{
	if (value)
		setenv(NAME, value, 1);
	else
		unsetenv(NAME);
	return env__kib(NAME, DFLT, min_kib);
}

static void test_numbers_are_taken(void **state)
{
	assert_int_equal(kib("1", 0), 1024);
	assert_int_equal(kib("2048", 1), 2048u << 10);
	assert_int_equal(kib("0", 0), 0);	/* where 0 is allowed, it means 0 */
}

static void test_unset_or_empty_is_the_default(void **state)
{
	assert_int_equal(kib(NULL, 0), DFLT);
	assert_int_equal(kib("", 0), DFLT);
}

static void test_bad_values_keep_the_default(void **state)
{
	/* Each of these once read as a number: strtoull() took what it could. */
	const char *bad[] = { "abc", "12k", "1 ", " 1", "-1", "+1", "0x10", "1.5",
			      "99999999999999999999", "17592186044417" /* 2^44 + 1 */ };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(kib(bad[i], 0), DFLT);
	assert_int_equal(kib("0", 1), DFLT);	/* below the minimum */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_numbers_are_taken),
		cmocka_unit_test(test_unset_or_empty_is_the_default),
		cmocka_unit_test(test_bad_values_keep_the_default),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
