// SPDX-License-Identifier: Apache-2.0
/*
 * HotSpot's compressed streams, hand-assembled per their writers
 * (CompressedWriteStream::write_int, CompressedLineNumberWriteStream).
 * The real JVM's tables are read end to end in test_java.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "agent/interp/hotspot.h"

static void test_read_int(void **state)
{
	/* 7; 200 = 200 + 0 << 6; 1000 = 232 + 12 << 6; a number cut after its first byte. */
	const uint8_t b[] = { 7, 200, 0, 232, 12, 250 };
	size_t pos = 0;

	(void)state;
	assert_int_equal(hotspot__read_int(b, sizeof(b), &pos), 7);
	assert_int_equal(pos, 1);
	assert_int_equal(hotspot__read_int(b, sizeof(b), &pos), 200);
	assert_int_equal(pos, 3);
	assert_int_equal(hotspot__read_int(b, sizeof(b), &pos), 1000);
	assert_int_equal(pos, 5);
	assert_int_equal(hotspot__read_int(b, sizeof(b), &pos), -1);
	assert_int_equal(pos, 5);	/* a torn number does not move the stream */
	assert_int_equal(hotspot__read_int(b, sizeof(b), &(size_t){ 6 }), -1);
}

static void test_line(void **state)
{
	const uint8_t t[] = {
		0xff, 0, 20,		/* bci 0: line 10 (signed: 10 -> 20) */
		5 << 3 | 1,		/* bci 5: line 11 */
		3 << 3 | 2,		/* bci 8: line 13 */
		0xff, 40, 7,		/* bci 28: line 9 (+20, -4 -> 40, 7) */
		0,			/* the end */
		1 << 3 | 1,		/* past the end: never read */
	};

	(void)state;
	assert_int_equal(hotspot__line(t, sizeof(t), 0), 10);
	assert_int_equal(hotspot__line(t, sizeof(t), 4), 10);
	assert_int_equal(hotspot__line(t, sizeof(t), 5), 11);
	assert_int_equal(hotspot__line(t, sizeof(t), 7), 11);
	assert_int_equal(hotspot__line(t, sizeof(t), 8), 13);
	assert_int_equal(hotspot__line(t, sizeof(t), 27), 13);
	assert_int_equal(hotspot__line(t, sizeof(t), 28), 9);
	assert_int_equal(hotspot__line(t, sizeof(t), 60000), 9);
	assert_int_equal(hotspot__line(t, 0, 3), 0);		/* no table */
	assert_int_equal(hotspot__line(t, 2, 3), 0);		/* a torn escape */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_read_int),
		cmocka_unit_test(test_line),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
