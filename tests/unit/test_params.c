// SPDX-License-Identifier: Apache-2.0
/*
 * The query parameter parsers every route uses (src/server/params.c): each
 * takes exactly its form, refuses blanks, signs, junk, overflow and values
 * outside the route's range, and leaves the output alone when it refuses.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "server/request.h"

#define N(a) (sizeof(a) / sizeof((a)[0]))
#define MS 1000000LL
#define S 1000000000LL

static void test_uint(void **state)
{
	static const struct {
		const char *in;
		uint64_t min, max;
		int rc;
		uint64_t want;
	} cases[] = {
		{ "1", 1, 10, 0, 1 },
		{ "10", 1, 10, 0, 10 },
		{ "007", 1, 10, 0, 7 },
		{ "0", 0, 10, 0, 0 },
		{ "18446744073709551615", 0, UINT64_MAX, 0, UINT64_MAX },
		{ "0", 1, 10, -ERANGE, 0 },
		{ "11", 1, 10, -ERANGE, 0 },
		{ "18446744073709551616", 0, UINT64_MAX, -ERANGE, 0 },
		{ "99999999999999999999999", 1, 10, -ERANGE, 0 },
		{ "", 0, 10, -EINVAL, 0 },
		{ "-1", 0, 10, -EINVAL, 0 },
		{ "+1", 0, 10, -EINVAL, 0 },
		{ " 1", 0, 10, -EINVAL, 0 },
		{ "1 ", 0, 10, -EINVAL, 0 },
		{ "1x", 0, 10, -EINVAL, 0 },
		{ "0x1", 0, 10, -EINVAL, 0 },
		{ "1e3", 0, 10000, -EINVAL, 0 },
		{ "1.0", 0, 10, -EINVAL, 0 },
	};

	(void)state;
	for (size_t i = 0; i < N(cases); i++) {
		uint64_t got = 4242;
		int rc = param__parse_uint(cases[i].in, cases[i].min, cases[i].max, &got);

		if (rc != cases[i].rc)
			fail_msg("uint '%s' [%llu, %llu]: rc %d, want %d", cases[i].in,
				 (unsigned long long)cases[i].min, (unsigned long long)cases[i].max,
				 rc, cases[i].rc);
		assert_true(got == (rc ? 4242 : cases[i].want));
	}
	assert_int_equal(param__parse_uint(NULL, 0, 1, NULL), -EINVAL);
}

static void test_duration(void **state)
{
	static const struct {
		const char *in;
		unsigned int flags;
		int64_t min, max;
		int rc;
		int64_t want;
	} cases[] = {
		{ "1s", 0, MS, PARAM_MAX_DURATION_NS, 0, S },
		{ "1m30s", 0, MS, PARAM_MAX_DURATION_NS, 0, 90 * S },
		{ "500ms", 0, MS, PARAM_MAX_DURATION_NS, 0, 500 * MS },
		{ "3650d", 0, MS, PARAM_MAX_DURATION_NS, 0, PARAM_MAX_DURATION_NS },
		{ "0s", 0, 0, PARAM_MAX_DURATION_NS, 0, 0 },
		/* The crashers: zero is no step. */
		{ "0s", 0, MS, PARAM_MAX_DURATION_NS, -ERANGE, 0 },
		{ "0ms", 0, MS, PARAM_MAX_DURATION_NS, -ERANGE, 0 },
		{ "0m", 0, MS, PARAM_MAX_DURATION_NS, -ERANGE, 0 },
		{ "0h00m", 0, MS, PARAM_MAX_DURATION_NS, -ERANGE, 0 },
		/* Fits int64, but later arithmetic would not. */
		{ "9223372036s", 0, MS, PARAM_MAX_DURATION_NS, -ERANGE, 0 },
		{ "3651d", 0, MS, PARAM_MAX_DURATION_NS, -ERANGE, 0 },
		{ "9223372037s", 0, MS, PARAM_MAX_DURATION_NS, -EINVAL, 0 },	/* int64 overflow */
		{ "", 0, 0, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
		{ "-1s", 0, 0, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
		{ "1.5s", 0, 0, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
		{ "1s ", 0, 0, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
		{ " 1s", 0, 0, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
		{ "1sx", 0, 0, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
		{ "5", 0, 0, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
		/* Plain nanoseconds only when asked for. */
		{ "5", PARAM_BARE_NS, 1, PARAM_MAX_DURATION_NS, 0, 5 },
		{ "10ms", PARAM_BARE_NS, 1, PARAM_MAX_DURATION_NS, 0, 10 * MS },
		{ "0", PARAM_BARE_NS, 1, PARAM_MAX_DURATION_NS, -ERANGE, 0 },
		{ "9223372036854775807", PARAM_BARE_NS, 1, PARAM_MAX_DURATION_NS, -ERANGE, 0 },
		{ "9223372036854775808", PARAM_BARE_NS, 1, INT64_MAX, -ERANGE, 0 },
		{ "-5", PARAM_BARE_NS, 1, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
		{ "5 ", PARAM_BARE_NS, 1, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
		{ "", PARAM_BARE_NS, 1, PARAM_MAX_DURATION_NS, -EINVAL, 0 },
	};

	(void)state;
	for (size_t i = 0; i < N(cases); i++) {
		int64_t got = -42;
		int rc = param__parse_duration(cases[i].in, cases[i].flags, cases[i].min,
					       cases[i].max, &got);

		if (rc != cases[i].rc)
			fail_msg("duration '%s' (flags %u): rc %d, want %d", cases[i].in,
				 cases[i].flags, rc, cases[i].rc);
		assert_true(got == (rc ? -42 : cases[i].want));
	}
}

static void test_double(void **state)
{
	static const struct {
		const char *in;
		int rc;
		double want;
	} cases[] = {
		{ "0", 0, 0 }, { "100", 0, 100 }, { "5.5", 0, 5.5 }, { ".5", 0, 0.5 },
		{ "5.", 0, 5 }, { "1e1", 0, 10 }, { "1e-400", 0, 0 }, { "2.5E-1", 0, 0.25 }, { "-0", 0, 0 },
		{ "100.5", -ERANGE, 0 }, { "-1", -ERANGE, 0 }, { "1e999", -ERANGE, 0 },
		{ "nan", -EINVAL, 0 }, { "NaN", -EINVAL, 0 }, { "inf", -EINVAL, 0 },
		{ "-inf", -EINVAL, 0 }, { "infinity", -EINVAL, 0 }, { "0x10", -EINVAL, 0 },
		{ "", -EINVAL, 0 }, { ".", -EINVAL, 0 }, { "-", -EINVAL, 0 }, { " 5", -EINVAL, 0 },
		{ "5 ", -EINVAL, 0 }, { "5%", -EINVAL, 0 }, { "+5", -EINVAL, 0 }, { "1e", -EINVAL, 0 },
		{ "1e+", -EINVAL, 0 }, { "1..2", -EINVAL, 0 },
	};

	(void)state;
	for (size_t i = 0; i < N(cases); i++) {
		double got = -42;
		int rc = param__parse_double(cases[i].in, 0, 100, &got);

		if (rc != cases[i].rc)
			fail_msg("double '%s': rc %d, want %d", cases[i].in, rc, cases[i].rc);
		assert_true(got == (rc ? -42 : cases[i].want));
	}
}

static void test_time(void **state)
{
	int64_t got = -42;

	(void)state;
	assert_int_equal(param__parse_time("1700000000.5", &got), 0);
	assert_true(got == 1700000000 * S + S / 2);
	assert_int_equal(param__parse_time("2199-12-31T23:59:59Z", &got), 0);
	assert_int_equal(param__parse_time("7258118400", &got), 0);
	assert_true(got == PARAM_MAX_TIME_NS);
	assert_int_equal(param__parse_time("now", &got), 0);
	got = -42;
	/* Valid times, but past what a window plus a step can reach safely. */
	assert_int_equal(param__parse_time("7258118400.000000001", &got), -ERANGE);
	assert_int_equal(param__parse_time("9223372036", &got), -ERANGE);
	assert_int_equal(param__parse_time("2262-04-11T23:47:16Z", &got), -ERANGE);
	assert_int_equal(param__parse_time("", &got), -EINVAL);
	assert_int_equal(param__parse_time("1700000000x", &got), -EINVAL);
	assert_int_equal(param__parse_time(NULL, &got), -EINVAL);
	assert_true(got == -42);
	/* A time plus the longest duration stays inside int64, with room. */
	assert_true(PARAM_MAX_TIME_NS < INT64_MAX - 4 * PARAM_MAX_DURATION_NS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_uint),
		cmocka_unit_test(test_duration),
		cmocka_unit_test(test_double),
		cmocka_unit_test(test_time),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
