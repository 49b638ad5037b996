// SPDX-License-Identifier: Apache-2.0
/* dispatch_scale: record weights from the monitors' kernel counts. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "gpu/dispatch_scale.h"

#define SEC 1000000000LL
#define T0 (1700000000LL * SEC)
#define PID 4242
#define D 30

/*
 * One second of a launch-bound loop at `launches` a second on GPU 0, of
 * which the duty-cycled windows' records stand for `seen_share` (each
 * record weight D), with the monitors covering `covered` of the second.
 * Returns the weights the scale gave back.
 */
static uint64_t _second(struct dispatch_scale *s, int64_t sec, double launches, double seen_share,
			double covered, bool duty_cycled, uint32_t pid, uint32_t rec_dev)
{
	int64_t start = T0 + sec * SEC;
	uint32_t records = (uint32_t)(launches * seen_share / D + 0.5);
	uint64_t got = 0;

	/* The child's decodes: ten covered ranges of 100 ms. */
	for (int i = 0; i < 10; i++) {
		int64_t a = start + i * SEC / 10, b = a + (int64_t)(SEC / 10 * covered);

		if (b > a)
			dispatch_scale__counted(s, pid, 0, a, b, (uint64_t)(launches / 10 * covered),
						start + SEC + SEC / 2);
	}
	/* The records of the second, handed over 0.5 s after it. */
	for (uint32_t i = 0; i < records; i++)
		got += dispatch_scale__record(s, pid, rec_dev, start + (int64_t)i * (SEC / (records + 1)) + 1,
					      duty_cycled ? D : 1, duty_cycled, start + SEC + SEC / 2);
	return got;
}

static void test_windows_short_of_launches_are_scaled_to_the_count(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();
	struct dispatch_scale_stats st;
	uint64_t got = 0, want = 0;

	/* The windows stand for 92 % of what the GPU dispatched. */
	for (int sec = 0; sec < 60; sec++) {
		uint64_t w = _second(s, sec, 90000, 0.92, 1.0, true, PID, 0);

		if (sec >= 10) {
			got += w;
			want += 90000;
		}
	}
	assert_true(fabs(dispatch_scale__factor(s, PID) - 1 / 0.92) < 0.005);
	/* The weights from then on add up to the launches, not 92 % of them. */
	assert_true(fabs((double)got / (double)want - 1) < 0.01);
	dispatch_scale__stats(s, &st);
	assert_true(st.seconds_used >= 50);
	assert_true(st.records_scaled > 0);
	assert_int_equal(st.processes, 1);
	assert_int_equal(st.implausible, 0);
	dispatch_scale__forget(s, PID);
	assert_true(dispatch_scale__factor(s, PID) == 1.0);
	dispatch_scale__free(s);
}

static void test_no_factor_before_the_seconds_are_over(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();

	/* Two seconds only: none is over by SETTLE at the last record. */
	_second(s, 0, 90000, 0.9, 1.0, true, PID, 0);
	_second(s, 1, 90000, 0.9, 1.0, true, PID, 0);
	assert_true(dispatch_scale__factor(s, PID) == 1.0);
	dispatch_scale__free(s);
}

static void test_seconds_the_monitors_did_not_cover_are_not_used(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();
	struct dispatch_scale_stats st;

	/* NVML named the process alone for half of each second only. */
	for (int sec = 0; sec < 30; sec++)
		_second(s, sec, 90000, 0.9, 0.5, true, PID, 0);
	assert_true(dispatch_scale__factor(s, PID) == 1.0);
	dispatch_scale__stats(s, &st);
	assert_int_equal(st.seconds_used, 0);
	assert_true(st.seconds_dropped >= 20);
	dispatch_scale__free(s);
}

static void test_every_record_collected_is_left_alone(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();
	uint64_t got = 0;

	for (int sec = 0; sec < 30; sec++)
		got += _second(s, sec, 3000, 0.5 * D, 1.0, false, PID, 0);
	assert_true(dispatch_scale__factor(s, PID) == 1.0);
	assert_int_equal(got, 30 * 1500);

	/* A switch to duty-cycled: seconds with exact records in them do not count. */
	for (int sec = 30; sec < 60; sec++)
		_second(s, sec, 90000, 0.8, 1.0, true, PID, 0);
	assert_true(fabs(dispatch_scale__factor(s, PID) - 1 / 0.8) < 0.01);
	dispatch_scale__free(s);
}

static void test_a_process_on_two_gpus_is_not_scaled(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();
	struct dispatch_scale_stats st;

	for (int sec = 0; sec < 30; sec++)
		_second(s, sec, 90000, 0.9, 1.0, true, PID, sec < 15 ? 0 : 1);
	assert_true(dispatch_scale__factor(s, PID) == 1.0);
	dispatch_scale__stats(s, &st);
	assert_int_equal(st.mixed, 1);
	dispatch_scale__free(s);
}

static void test_counts_not_the_process_alone_are_not_believed(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();
	struct dispatch_scale_stats st;
	uint64_t got = 0;

	/* Records for a fifth of the dispatches: another client on the GPU. */
	for (int sec = 0; sec < 30; sec++)
		got = _second(s, sec, 90000, 0.2, 1.0, true, PID, 0);
	assert_true(dispatch_scale__factor(s, PID) == 1.0);
	assert_int_equal(got, 600 * D);
	dispatch_scale__stats(s, &st);
	assert_true(st.implausible > 0);
	dispatch_scale__free(s);
}

static void test_a_library_that_stopped_collecting_does_not_inflate(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();

	for (int sec = 0; sec < 20; sec++)
		_second(s, sec, 90000, 0.9, 1.0, true, PID, 0);
	/* Another CUPTI client took the process: dispatches, no records. */
	for (int sec = 20; sec < 40; sec++)
		_second(s, sec, 90000, 0, 1.0, true, PID, 0);
	/* Back: its first records find the factor of before. */
	dispatch_scale__record(s, PID, 0, T0 + 40 * SEC, D, true, T0 + 41 * SEC);
	assert_true(fabs(dispatch_scale__factor(s, PID) - 1 / 0.9) < 0.01);
	dispatch_scale__free(s);
}

static void test_late_counts_of_a_second_used_are_ignored(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();
	double f;

	for (int sec = 0; sec < 30; sec++)
		_second(s, sec, 90000, 0.9, 1.0, true, PID, 0);
	f = dispatch_scale__factor(s, PID);
	/* A second already used, counted again, must not count twice. */
	for (int i = 0; i < 100; i++)
		dispatch_scale__counted(s, PID, 0, T0 + 10 * SEC, T0 + 11 * SEC, 900000, T0 + 40 * SEC);
	dispatch_scale__record(s, PID, 0, T0 + 30 * SEC, D, true, T0 + 40 * SEC);
	assert_true(fabs(dispatch_scale__factor(s, PID) - f) < 0.01);
	/* Hostile ranges: empty, reversed, before 1970. */
	dispatch_scale__counted(s, PID, 0, T0, T0, 5, T0);
	dispatch_scale__counted(s, PID, 0, T0 + 1, T0, 5, T0);
	dispatch_scale__counted(s, PID, 0, -SEC, SEC, 5, T0);
	assert_int_equal(dispatch_scale__record(s, PID, 0, -1, 7, true, T0), 7);
	assert_int_equal(dispatch_scale__record(NULL, PID, 0, T0, 0, true, T0), 1);
	dispatch_scale__free(s);
}

static void test_times_far_ahead_take_no_second(void **state)
{
	struct dispatch_scale *a = dispatch_scale__new(), *b = dispatch_scale__new();
	struct dispatch_scale_stats sa, sb;

	/* b also hears of a record and counts an hour ahead (a clock gone wrong). */
	dispatch_scale__record(b, PID, 0, T0 + 3600 * SEC, D, true, T0);
	dispatch_scale__counted(b, PID, 0, T0 + 3600 * SEC, T0 + 3601 * SEC, 5, T0);
	for (int sec = 0; sec < 40; sec++) {
		_second(a, sec, 90000, 0.9, 1.0, true, PID, 0);
		_second(b, sec, 90000, 0.9, 1.0, true, PID, 0);
	}
	dispatch_scale__stats(a, &sa);
	dispatch_scale__stats(b, &sb);
	assert_int_equal(sb.seconds_used, sa.seconds_used);
	assert_true(fabs(dispatch_scale__factor(b, PID) - dispatch_scale__factor(a, PID)) < 1e-9);
	dispatch_scale__free(a);
	dispatch_scale__free(b);
}

static void test_many_processes_evict_the_stalest(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();

	/* Processes NVML names alone, one after another, that never load the library. */
	for (uint32_t pid = 1; pid <= 1000; pid++)
		dispatch_scale__counted(s, pid, 0, T0 + pid * SEC, T0 + pid * SEC + SEC, 100,
					T0 + pid * SEC + SEC);
	for (int sec = 1000; sec < 1030; sec++)
		_second(s, sec, 90000, 0.9, 1.0, true, PID, 0);
	assert_true(fabs(dispatch_scale__factor(s, PID) - 1 / 0.9) < 0.01);
	dispatch_scale__free(s);
}

static void test_records_far_short_of_the_count_are_told_once(void **state)
{
	struct dispatch_scale *s = dispatch_scale__new();
	struct dispatch_scale_stats st;
	double by = 0;
	int told = 0;

	/* Records of 2 % of the dispatches (CUPTI lost the rest): said once. */
	for (int sec = 0; sec < 30; sec++) {
		_second(s, sec, 90000, 0.02, 1.0, true, PID, 0);
		if (dispatch_scale__short(s, PID, &by))
			told++;
	}
	assert_int_equal(told, 1);
	assert_true(by > 40 && by < 60);
	assert_true(dispatch_scale__factor(s, PID) == 1.0);
	dispatch_scale__stats(s, &st);
	assert_int_equal(st.short_processes, 1);
	/* Whole again: no longer short, and said again if it falls short again. */
	for (int sec = 30; sec < 130; sec++)
		_second(s, sec, 90000, 1.0, 1.0, true, PID, 0);
	assert_false(dispatch_scale__short(s, PID, &by));
	dispatch_scale__stats(s, &st);
	assert_int_equal(st.short_processes, 0);
	for (int sec = 130; sec < 230; sec++)
		_second(s, sec, 90000, 0.02, 1.0, true, PID, 0);
	assert_true(dispatch_scale__short(s, PID, &by));
	dispatch_scale__free(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_windows_short_of_launches_are_scaled_to_the_count),
		cmocka_unit_test(test_no_factor_before_the_seconds_are_over),
		cmocka_unit_test(test_seconds_the_monitors_did_not_cover_are_not_used),
		cmocka_unit_test(test_every_record_collected_is_left_alone),
		cmocka_unit_test(test_a_process_on_two_gpus_is_not_scaled),
		cmocka_unit_test(test_counts_not_the_process_alone_are_not_believed),
		cmocka_unit_test(test_a_library_that_stopped_collecting_does_not_inflate),
		cmocka_unit_test(test_records_far_short_of_the_count_are_told_once),
		cmocka_unit_test(test_late_counts_of_a_second_used_are_ignored),
		cmocka_unit_test(test_times_far_ahead_take_no_second),
		cmocka_unit_test(test_many_processes_evict_the_stalest),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
