// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include <cmocka.h>

#include "common/timeparse.h"

#define S	1000000000LL
#define NOW	(1796210409LL * S + 123)	/* 2026-12-02T11:20:09.000000123Z */

struct tcase {
	const char *in;
	int64_t want;
};

static void check_times(const struct tcase *c, size_t n)
{
	int64_t got;

	for (size_t i = 0; i < n; i++) {
		got = -42;
		if (time__parse_at(c[i].in, NOW, &got))
			fail_msg("time \"%s\" rejected", c[i].in);
		if (got != c[i].want)
			fail_msg("time \"%s\": got %lld, want %lld", c[i].in,
				 (long long)got, (long long)c[i].want);
	}
}

static void check_bad_times(const char *const *in, size_t n)
{
	int64_t got;

	for (size_t i = 0; i < n; i++) {
		got = -42;
		if (time__parse_at(in[i], NOW, &got) != -EINVAL)
			fail_msg("time \"%s\" accepted as %lld", in[i], (long long)got);
		assert_int_equal(got, -42);	/* untouched */
	}
}

#define N(a) (sizeof(a) / sizeof((a)[0]))

static void test_unix_seconds(void **state)
{
	static const struct tcase ok[] = {
		{ "0", 0 },
		{ "1700000000", 1700000000LL * S },
		{ "1700000000.25", 1700000000LL * S + 250000000 },
		{ "1700000000.000000001", 1700000000LL * S + 1 },
		{ "1700000000.123456789", 1700000000LL * S + 123456789 },
		{ "0001700000000.5", 1700000000LL * S + 500000000 },
		{ "9223372036.854775807", INT64_MAX },
	};
	static const char *const bad[] = {
		"", "-1", "+1", "-0", ".5", "1700000000.", "1700000000.1234567890",
		"1.7e9", "1700000000s", " 1700000000", "1700000000 ", "0x10",
		"1700000000.25.5", "1,5",
		"9223372036.854775808",		/* one ns past int64 */
		"9223372037",
		"1700000000000",		/* milliseconds: year 55 857 */
		"99999999999999999999999999",	/* past int64 while reading */
	};

	check_times(ok, N(ok));
	check_bad_times(bad, N(bad));
}

static void test_rfc3339(void **state)
{
	static const struct tcase ok[] = {
		{ "1970-01-01T00:00:00Z", 0 },
		{ "2026-12-02T11:20:09Z", 1796210409LL * S },
		{ "2026-12-02t11:20:09z", 1796210409LL * S },
		{ "2026-12-02T11:20:09+00:00", 1796210409LL * S },
		{ "2026-12-02T11:20:09-00:00", 1796210409LL * S },
		{ "2026-12-02T12:20:09.123456789+01:00", 1796210409LL * S + 123456789 },
		{ "2026-12-02T05:50:09.5-05:30", 1796210409LL * S + 500000000 },
		{ "2026-12-02T11:20:09.1Z", 1796210409LL * S + 100000000 },
		/* leap days */
		{ "2024-02-29T00:00:00Z", 1709164800LL * S },
		{ "2000-02-29T23:59:59Z", 951868799LL * S },
		{ "2024-03-01T00:00:00Z", (1709164800LL + 86400) * S },
		{ "2023-12-31T23:59:59Z", 1704067199LL * S },
		/* offsets that cross a day, and the limits */
		{ "1970-01-01T00:00:00-00:01", 60 * S },
		{ "1970-01-01T01:00:00+01:00", 0 },
		{ "2262-04-11T23:47:16.854775807Z", INT64_MAX },
		{ "2262-04-12T00:47:16.854775807+01:00", INT64_MAX },
	};
	static const char *const bad[] = {
		"2023-02-29T00:00:00Z",		/* not a leap year */
		"2100-02-29T00:00:00Z",		/* neither, by the century rule */
		"2026-04-31T00:00:00Z",
		"2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z",
		"2026-12-00T00:00:00Z", "2026-12-32T00:00:00Z",
		"2026-12-02T24:00:00Z", "2026-12-02T11:60:00Z",
		"2026-12-02T11:20:60Z",		/* leap second */
		"2026-12-02T11:20:09+24:00", "2026-12-02T11:20:09+01:60",
		"2026-12-02T11:20:09",		/* no zone */
		"2026-12-02T11:20:09+0100", "2026-12-02T11:20:09+01",
		"2026-12-02 11:20:09Z", "2026-12-02", "2026-12-02T11:20Z",
		"2026-12-02T11:20:09Zjunk", "2026-12-02T11:20:09Z ",
		"2026-12-02T11:20:09.Z", "2026-12-02T11:20:09.1234567891Z",
		"2026-12-2T11:20:09Z", "2026-1-02T11:20:09Z", "20261-12-02T11:20:09Z",
		"1969-12-31T23:59:59Z", "1970-01-01T00:00:00+00:01",
		"2262-04-11T23:47:16.854775808Z", "2262-04-11T23:47:17Z",
		"2262-04-11T23:47:16.854775807-00:01", "2263-01-01T00:00:00Z",
		"9999-12-31T23:59:59Z",
	};

	check_times(ok, N(ok));
	check_bad_times(bad, N(bad));
}

static void test_relative(void **state)
{
	static const struct tcase ok[] = {
		{ "now", NOW },
		{ "now-15m", NOW - 900 * S },
		{ "now-1h30m", NOW - 5400 * S },
		{ "now-7d", NOW - 7 * 86400 * S },
		{ "now-2w", NOW - 14 * 86400 * S },
		{ "now-500ms", NOW - 500000000 },
		{ "now+1h", NOW + 3600 * S },
		{ "now-0s", NOW },
	};
	static const char *const bad[] = {
		"now-", "now+", "now15m", "now-15", "now - 15m", "now-15m ", "NOW",
		"now-1.5h", "now--1h", "now-15x", "nowhere", "now-100000w",
		"now+1000000w",
	};
	struct timespec ts;
	int64_t t, before, after;

	check_times(ok, N(ok));
	check_bad_times(bad, N(bad));

	/* A clock at 0 cannot go back. */
	assert_int_equal(time__parse_at("now-1s", 0, &t), -EINVAL);
	assert_int_equal(time__parse_at("now", -1, &t), -EINVAL);
	assert_int_equal(time__parse_at(NULL, NOW, &t), -EINVAL);
	assert_int_equal(time__parse_at("now", NOW, NULL), -EINVAL);

	/* time__parse() reads the real clock. */
	clock_gettime(CLOCK_REALTIME, &ts);
	before = ts.tv_sec * S + ts.tv_nsec;
	assert_int_equal(time__parse("now-1m", &t), 0);
	clock_gettime(CLOCK_REALTIME, &ts);
	after = ts.tv_sec * S + ts.tv_nsec;
	assert_true(t >= before - 60 * S && t <= after - 60 * S);
	assert_int_equal(time__parse("2026-12-02T11:20:09Z", &t), 0);
	assert_int_equal(t, 1796210409LL * S);
	assert_int_equal(time__parse("junk", &t), -EINVAL);
}

static void test_duration(void **state)
{
	static const struct tcase ok[] = {
		{ "7d", 7 * 86400 * S },
		{ "36h", 36 * 3600 * S },
		{ "90s", 90 * S },
		{ "1h30m", 5400 * S },
		{ "500ms", 500000000 },
		{ "1m1ms", 60 * S + 1000000 },
		{ "1w2d3h4m5s6ms", ((9 * 24 + 3) * 3600 + 4 * 60 + 5) * S + 6000000 },
		{ "0s", 0 },
		{ "007d", 7 * 86400 * S },
		{ "15250w", 15250LL * 7 * 86400 * S },
		{ "9223372036854ms", 9223372036854LL * 1000000 },
	};
	static const char *const bad[] = {
		"", "90", "h", "1.5h", "-1h", "+1h", "1x", "1H", "1us", "1ns",
		"30m1h",			/* units out of order */
		"1h1h", "1ms1ms", "1s1m", "1ms1s",
		"1h ", " 1h", "1h 30m", "1hm",
		"15251w",			/* past int64 */
		"15250w1000d",			/* the sum past int64 */
		"9223372036855ms",
		"99999999999999999999ms",	/* past int64 while reading */
	};
	int64_t got;

	for (size_t i = 0; i < N(ok); i++) {
		got = -42;
		if (duration__parse(ok[i].in, &got))
			fail_msg("duration \"%s\" rejected", ok[i].in);
		if (got != ok[i].want)
			fail_msg("duration \"%s\": got %lld, want %lld", ok[i].in,
				 (long long)got, (long long)ok[i].want);
	}
	for (size_t i = 0; i < N(bad); i++) {
		got = -42;
		if (duration__parse(bad[i], &got) != -EINVAL)
			fail_msg("duration \"%s\" accepted as %lld", bad[i],
				 (long long)got);
		assert_int_equal(got, -42);
	}
	assert_int_equal(duration__parse(NULL, &got), -EINVAL);
	assert_int_equal(duration__parse("1s", NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_unix_seconds),
		cmocka_unit_test(test_rfc3339),
		cmocka_unit_test(test_relative),
		cmocka_unit_test(test_duration),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
