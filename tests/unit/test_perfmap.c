// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "symbolize/perfmap.h"

#define BASIC FW_TEST_DATA "/fixtures/perfmap_basic.map"
#include "symbol_results.h"

static void check(const char *path, const struct q *qs, size_t n)
{
	check_resolver(perfmap__resolve, path, qs, n);
}

static void test_entries_and_boundaries(void **state)
{
	static const struct q qs[] = {
		{ 0x7f0000001000, "LazyCompile:*fib /srv/app/fib.js:3", 0 },
		{ 0x7f00000010ff, "LazyCompile:*fib /srv/app/fib.js:3", 0xff },
		{ 0x7f0000001100, "Interpreter", 0 },		/* end is exclusive */
		{ 0x7f000000117f, "Interpreter", 0x7f },
		{ 0x7f0000001180, NULL, 0 },
		{ 0x7f0000000fff, NULL, 0 },
		{ 0x7f0000005010, "UPPER", 0x10 },		/* upper-case hex */
		{ 0x7f0000003004, "ns::Widget<int>::spin()", 4 },	/* demangled */
		{ 0x7f0000004000, "spaced  name", 0 },		/* CRLF, inner spaces */
		{ 0x7f0000007000, NULL, 0 },			/* malformed size */
		{ 0xffffffffffffff00, "name_overflow", 0xff00 },	/* end clamped */
		{ 0x10, NULL, 0 },
		{ 0x7f0000001000, "LazyCompile:*fib /srv/app/fib.js:3", 0 },	/* duplicate */
	};

	check(BASIC, qs, sizeof(qs) / sizeof(qs[0]));
}

/* JITs reuse code memory: the entry written last wins where they overlap. */
static void test_later_entries_override(void **state)
{
	static const struct q qs[] = {
		{ 0x7f0000000820, "java.lang.String::equals", 0x20 },
		{ 0x7f0000002100, "old_code", 0x100 },
		{ 0x7f0000002450, "new code reusing old", 0x50 },
		{ 0x7f0000002500, "old_code", 0x500 },
		{ 0x7f0000002fff, "old_code", 0xfff },
		{ 0x7f0000003000, "ns::Widget<int>::spin()", 0 },	/* size-0 line ignored */
	};

	check(BASIC, qs, sizeof(qs) / sizeof(qs[0]));
}

static void test_missing_and_invalid(void **state)
{
	uint64_t addrs[3] = { 0x7f0000001000, 2, 3 };
	struct results r = { 0 };

	assert_int_equal(perfmap__resolve("/tmp/perf-no-such-pid-0.map", addrs, 3, collect, &r),
			 -ENOENT);
	results_check_once(&r, 3);
	for (int i = 0; i < 3; i++)
		assert_null(r.name[i]);
	results_free(&r);

	assert_int_equal(perfmap__resolve(BASIC, addrs, 0, collect, &r), 0);
	assert_int_equal(perfmap__resolve(BASIC, NULL, 3, collect, &r), -EINVAL);
	assert_int_equal(perfmap__resolve(BASIC, addrs, 3, NULL, &r), -EINVAL);
	assert_int_equal(perfmap__resolve(NULL, addrs, 3, collect, &r), -EINVAL);
	results_check_once(&r, 0);
}

/* An empty map (a JIT that has not written yet) resolves nothing, no error. */
static void test_empty(void **state)
{
	char path[] = "/tmp/fw-test-perfmap-XXXXXX";
	uint64_t addrs[1] = { 0x1000 };
	struct results r = { 0 };
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(perfmap__resolve(path, addrs, 1, collect, &r), 0);
	results_check_once(&r, 1);
	assert_null(r.name[0]);
	unlink(path);
	results_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_entries_and_boundaries),
		cmocka_unit_test(test_later_entries_override),
		cmocka_unit_test(test_missing_and_invalid),
		cmocka_unit_test(test_empty),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
