// SPDX-License-Identifier: Apache-2.0
/*
 * The flame graph JSON: merged tree, preorder, heaviest child first, and
 * trimming to max_nodes that keeps parents and accounts for what it cut.
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
#include "format/flamegraph.h"
#include "golden.h"

/* Two processes; "work" is reached through two call sites that must merge. */
static struct profile *_make(void)
{
	struct profile *p = profile__new(1000000, 0);
	int64_t bin = profile__intern_mapping(p, "/usr/bin/app", "ab12");
	int64_t kmap = profile__intern_mapping(p, "[kernel.kallsyms]", NULL);
	uint32_t f_main = profile__intern_frame(p, FRAME_NATIVE, bin, 0x10);
	uint32_t f_work1 = profile__intern_frame(p, FRAME_NATIVE, bin, 0x20);
	uint32_t f_work2 = profile__intern_frame(p, FRAME_NATIVE, bin, 0x24);
	uint32_t f_idle = profile__intern_frame(p, FRAME_NATIVE, bin, 0x30);
	uint32_t f_sys = profile__intern_frame(p, FRAME_KERNEL, kmap, 0xffffffff81000000ULL);
	uint32_t s1[] = { f_main, f_work1 }, s2[] = { f_main, f_work2 }, s3[] = { f_main, f_idle, f_sys };
	uint32_t s4[] = { f_main };
	uint32_t app = profile__intern_string(p, "app"), dbg = profile__intern_string(p, "dbg\"x");

	profile__set_frame_name(p, f_main, "main", NULL, 0);
	profile__set_frame_name(p, f_work1, "work", NULL, 0);
	profile__set_frame_name(p, f_work2, "work", NULL, 0);
	profile__set_frame_name(p, f_idle, "idle", NULL, 0);
	profile__set_frame_name(p, f_sys, "do_syscall_64", NULL, 0);
	profile__add_sample(p, profile__intern_stack(p, s1, 2), 1, 1, 0, app, 5);
	profile__add_sample(p, profile__intern_stack(p, s2, 2), 1, 2, 1, app, 3);
	profile__add_sample(p, profile__intern_stack(p, s3, 3), 1, 1, 0, app, 1);
	profile__add_sample(p, profile__intern_stack(p, s4, 1), 2, 2, 0, dbg, 2);
	return p;
}

static void test_full_tree(void **state)
{
	struct profile *p = _make();
	struct strbuf sb = STRBUF_INIT;

	assert_int_equal(flamegraph__write_json(p, "samples", 1000, &sb), 0);
	strbuf__putc(&sb, '\n');
	golden__check(FW_TEST_DATA "/golden/flamegraph_full.json", sb.buf, sb.len);
	/* Merged by name: one "work" node under app's main, weighing 8. */
	assert_non_null(strstr(sb.buf, "\"total\":11"));
	assert_non_null(strstr(sb.buf, "\"trimmed\":{\"nodes\":0,\"value\":0}"));
	strbuf__release(&sb);
	profile__free(p);
}

static void test_trimmed_tree(void **state)
{
	struct profile *p = _make();
	struct strbuf sb = STRBUF_INIT;

	/*
	 * all(11) app(9) main(9) work(8) dbg(2) main(2) idle(1) syscall(1):
	 * four nodes keep totals >= 8; the ties at 2 and 1 are cut entirely.
	 */
	assert_int_equal(flamegraph__write_json(p, "samples", 5, &sb), 0);
	strbuf__putc(&sb, '\n');
	golden__check(FW_TEST_DATA "/golden/flamegraph_trimmed.json", sb.buf, sb.len);
	assert_non_null(strstr(sb.buf, "\"trimmed\":{\"nodes\":4,\"value\":3}"));
	strbuf__release(&sb);
	profile__free(p);
}

static void test_empty_profile(void **state)
{
	struct profile *p = profile__new(1, 0);
	struct strbuf sb = STRBUF_INIT;

	assert_int_equal(flamegraph__write_json(p, "samples", 10, &sb), 0);
	assert_non_null(strstr(sb.buf, "\"total\":0"));
	assert_non_null(strstr(sb.buf, "\"n\":[0]"));
	strbuf__release(&sb);
	profile__free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_tree),
		cmocka_unit_test(test_trimmed_tree),
		cmocka_unit_test(test_empty_profile),
	};

	return cmocka_run_group_tests_name("flamegraph", tests, NULL, NULL);
}
