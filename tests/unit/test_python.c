// SPDX-License-Identifier: Apache-2.0
/*
 * CPython line tables, hand-assembled per the formats' definitions: the
 * 3.10 line table (PEP 626) and the 3.11+ location table. The real
 * interpreters' tables are checked end to end in test_python.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/interp/python.h"

static void test_line_310(void **state)
{
	/* bytes 0-5: +1; 6-9: no line; 10-17: +2 (from the last line); 18-19: -1 */
	const uint8_t t[] = { 6, 1, 4, (uint8_t)-128, 8, 2, 2, (uint8_t)-1 };

	(void)state;
	assert_int_equal(python__line_310(t, sizeof(t), 10, 0), 11);
	assert_int_equal(python__line_310(t, sizeof(t), 10, 5), 11);
	assert_int_equal(python__line_310(t, sizeof(t), 10, 6), 0);
	assert_int_equal(python__line_310(t, sizeof(t), 10, 9), 0);
	assert_int_equal(python__line_310(t, sizeof(t), 10, 10), 13);
	assert_int_equal(python__line_310(t, sizeof(t), 10, 17), 13);
	assert_int_equal(python__line_310(t, sizeof(t), 10, 18), 12);
	assert_int_equal(python__line_310(t, sizeof(t), 10, 20), 0);	/* past the end */
	assert_int_equal(python__line_310(t, 1, 10, 0), 0);		/* a torn pair */
}

static void test_line_311(void **state)
{
	const uint8_t t[] = {
		0x80 | 13 << 3 | 1, 0x02,		/* units 0-1: no columns, line +1 */
		0x80 | 0 << 3 | 2, 0x05,		/* units 2-4: short form, same line */
		0x80 | 11 << 3 | 0, 0x01, 0x02,		/* unit 5: one-line form, line +1 */
		0x80 | 15 << 3 | 0,			/* unit 6: no location */
		0x80 | 14 << 3 | 0, 0x07, 0, 0, 0,	/* unit 7: long form, line -3 */
		0x80 | 14 << 3 | 0, 0x40 | 0x00, 0x01, 0, 0, 0,	/* unit 8: +32, two-byte varint */
	};

	(void)state;
	assert_int_equal(python__line_311(t, sizeof(t), 20, 0), 21);
	assert_int_equal(python__line_311(t, sizeof(t), 20, 1), 21);
	assert_int_equal(python__line_311(t, sizeof(t), 20, 4), 21);
	assert_int_equal(python__line_311(t, sizeof(t), 20, 5), 22);
	assert_int_equal(python__line_311(t, sizeof(t), 20, 6), 0);
	assert_int_equal(python__line_311(t, sizeof(t), 20, 7), 19);
	assert_int_equal(python__line_311(t, sizeof(t), 20, 8), 51);
	assert_int_equal(python__line_311(t, sizeof(t), 20, 9), 0);
	/* A table that loses step (a data byte where a header belongs) gives no line. */
	assert_int_equal(python__line_311((const uint8_t[]){ 0x05 }, 1, 20, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_line_310),
		cmocka_unit_test(test_line_311),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
