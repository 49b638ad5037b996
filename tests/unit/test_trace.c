// SPDX-License-Identifier: Apache-2.0
/*
 * Chrome/Perfetto trace export: frames stay open across contiguous events,
 * blocked ones included, which get an off-CPU slice of their own.
 */
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
#include "common/strbuf.h"
#include "format/trace.h"
#include "golden.h"

static void test_nesting(void **state)
{
	struct profile *p = profile__new(1, 0);
	int64_t bin = profile__intern_mapping(p, "/bin/app", NULL);
	uint32_t fm = profile__intern_frame(p, FRAME_NATIVE, bin, 1);
	uint32_t fa = profile__intern_frame(p, FRAME_NATIVE, bin, 2);
	uint32_t fb = profile__intern_frame(p, FRAME_NATIVE, bin, 3);
	uint32_t sa[] = { fm, fa }, sb[] = { fm, fb };
	struct strbuf out = STRBUF_INIT;
	struct trace_event ev[3];
	struct trace_lane lane;

	profile__set_frame_name(p, fm, "main", NULL, 0);
	profile__set_frame_name(p, fa, "a", NULL, 0);
	profile__set_frame_name(p, fb, "b", NULL, 0);
	/*
	 * main;a for [1000, 3000), then main;b for [3000, 4000): main stays
	 * open for [1000, 4000). A gap before [9000, 9500) closes everything.
	 */
	ev[0] = (struct trace_event){ 1000, 3000, profile__intern_stack(p, sa, 2) };
	ev[1] = (struct trace_event){ 3000, 4000, profile__intern_stack(p, sb, 2) };
	ev[2] = (struct trace_event){ 9000, 9500, profile__intern_stack(p, sb, 2) };
	lane = (struct trace_lane){ .pid = 7, .tid = 8, .comm = "app", .events = ev, .nevents = 3 };
	assert_int_equal(trace__write_json(p, &lane, 1, &out), 0);
	golden__check(FW_TEST_DATA "/golden/trace_nesting.json", out.buf, out.len);
	assert_non_null(strstr(out.buf, "\"name\":\"main\",\"cat\":\"native\",\"ph\":\"X\",\"ts\":0.000,\"dur\":3.000"));
	strbuf__release(&out);
	profile__free(p);
}

static void test_blocked(void **state)
{
	struct profile *p = profile__new(1, 0);
	int64_t bin = profile__intern_mapping(p, "/bin/app", NULL);
	uint32_t fm = profile__intern_frame(p, FRAME_NATIVE, bin, 1);
	uint32_t fa = profile__intern_frame(p, FRAME_NATIVE, bin, 2);
	uint32_t fr = profile__intern_frame(p, FRAME_NATIVE, bin, 3);
	uint32_t fs = profile__intern_frame(p, FRAME_KERNEL, PROFILE_NO_MAPPING, 4);
	uint32_t sa[] = { fm, fa }, sr[] = { fm, fr, fs };
	struct strbuf out = STRBUF_INIT;
	struct trace_event ev[3];
	struct trace_lane lane;

	(void)state;
	profile__set_frame_name(p, fm, "main", NULL, 0);
	profile__set_frame_name(p, fa, "spin", NULL, 0);
	profile__set_frame_name(p, fr, "read", NULL, 0);
	profile__set_frame_name(p, fs, "schedule", NULL, 0);
	/*
	 * On CPU in main;spin for [1000, 3000), blocked in main;read;schedule
	 * for [3000, 7000), on CPU again from 7500: main stays open while the
	 * thread is blocked, and the block's leaf holds an off-CPU slice.
	 */
	ev[0] = (struct trace_event){ 1000, 3000, profile__intern_stack(p, sa, 2), 0 };
	ev[1] = (struct trace_event){ 3000, 7000, profile__intern_stack(p, sr, 3), TRACE_BLOCKED };
	ev[2] = (struct trace_event){ 7500, 8000, profile__intern_stack(p, sa, 2), 0 };
	lane = (struct trace_lane){ .pid = 7, .tid = 8, .comm = "app", .events = ev, .nevents = 3 };
	assert_int_equal(trace__write_json(p, &lane, 1, &out), 0);
	golden__check(FW_TEST_DATA "/golden/trace_blocked.json", out.buf, out.len);
	assert_non_null(strstr(out.buf, "{\"name\":\"off-CPU\",\"cat\":\"offcpu\",\"ph\":\"X\","
				       "\"ts\":2.000,\"dur\":4.000,\"pid\":7,\"tid\":8}"));
	assert_non_null(strstr(out.buf, "\"name\":\"main\",\"cat\":\"native\",\"ph\":\"X\",\"ts\":0.000,\"dur\":6.000"));
	assert_non_null(strstr(out.buf, "\"name\":\"schedule\",\"cat\":\"kernel\",\"ph\":\"X\",\"ts\":2.000,\"dur\":4.000"));
	assert_null(strstr(out.buf + (strstr(out.buf, "off-CPU") - out.buf) + 1, "off-CPU"));
	strbuf__release(&out);
	profile__free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nesting),
		cmocka_unit_test(test_blocked),
	};

	return cmocka_run_group_tests_name("trace", tests, NULL, NULL);
}
