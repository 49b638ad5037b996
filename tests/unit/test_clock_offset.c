// SPDX-License-Identifier: Apache-2.0
/* clock__offset_ns: the offset of another clock against CLOCK_REALTIME. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/clock.h"

/* The other clock: CLOCK_REALTIME minus SKEW, so the true offset is SKEW. */
#define SKEW 7000000000LL
#define STALL_NS 2000000L

static int calls, stall_until, fail;

static uint64_t _realtime(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

/* Reads late (as when preempted after the read) for its first stall_until calls. */
static int other_clock(uint64_t *t)
{
	if (fail)
		return -1;
	*t = _realtime() - SKEW;
	if (++calls <= stall_until)
		nanosleep(&(struct timespec){ .tv_nsec = STALL_NS }, NULL);
	return 0;
}

static int setup(void **state)
{
	calls = 0;
	stall_until = 0;
	fail = 0;
	return 0;
}

static void test_the_tightest_read_wins(void **state)
{
	int64_t off = 0;

	/* Only the last of the reads is not late: a late one alone would be off by about STALL_NS / 2. */
	stall_until = CLOCK_OFFSET_READS - 1;
	assert_int_equal(clock__offset_ns(other_clock, &off, 0), 0);
	assert_int_equal(calls, CLOCK_OFFSET_READS);
	assert_true(llabs(off - SKEW) < STALL_NS / 4);
}

static void test_a_consistent_offset_is_kept(void **state)
{
	/* The true offset lies inside every bracket: it is never replaced, even by late reads. */
	int64_t off = SKEW;

	for (int i = 0; i < 20; i++) {
		calls = 0;
		stall_until = i % 3;
		assert_int_equal(clock__offset_ns(other_clock, &off, 1), 0);
		assert_int_equal(off, SKEW);
	}
}

static void test_a_step_is_followed(void **state)
{
	int64_t off = SKEW + 5000000; /* CLOCK_REALTIME was stepped by 5 ms since */

	assert_int_equal(clock__offset_ns(other_clock, &off, 1), 0);
	assert_true(llabs(off - SKEW) < STALL_NS / 4);
}

static void test_without_an_old_offset_it_is_measured(void **state)
{
	int64_t off = SKEW + 5000000;

	assert_int_equal(clock__offset_ns(other_clock, &off, 0), 0);
	assert_true(off != SKEW + 5000000);
	assert_true(llabs(off - SKEW) < STALL_NS / 4);
}

static void test_a_failed_read_leaves_the_offset(void **state)
{
	int64_t off = 42;

	fail = 1;
	assert_int_equal(clock__offset_ns(other_clock, &off, 1), -1);
	assert_int_equal(off, 42);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_the_tightest_read_wins, setup),
		cmocka_unit_test_setup(test_a_consistent_offset_is_kept, setup),
		cmocka_unit_test_setup(test_a_step_is_followed, setup),
		cmocka_unit_test_setup(test_without_an_old_offset_it_is_measured, setup),
		cmocka_unit_test_setup(test_a_failed_read_leaves_the_offset, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
