// SPDX-License-Identifier: Apache-2.0
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/strbuf.h"

static void check(const char *in, const char *want)
{
	struct strbuf sb = STRBUF_INIT;

	strbuf__json_string(&sb, in);
	assert_false(sb.oom);
	assert_string_equal(sb.buf, want);
	strbuf__release(&sb);
}

static void test_json_escapes(void **state)
{
	check("plain", "\"plain\"");
	check("q\"b\\s", "\"q\\\"b\\\\s\"");
	check("a\nb\tc\r\x01", "\"a\\nb\\tc\\r\\u0001\"");
}

static void test_json_utf8(void **state)
{
	check("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5", "\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x94\xa5\"");
	/* Invalid bytes, overlong forms, surrogates and truncation become U+FFFD. */
	check("bad\xff", "\"bad\xef\xbf\xbd\"");
	check("\xc0\xaf", "\"\xef\xbf\xbd\xef\xbf\xbd\"");
	check("\xed\xa0\x80", "\"\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\"");
	check("\xe2\x82", "\"\xef\xbf\xbd\xef\xbf\xbd\"");
}

static void test_printf_and_detach(void **state)
{
	struct strbuf sb = STRBUF_INIT;
	size_t len;
	char *p;

	for (int i = 0; i < 1000; i++)
		strbuf__printf(&sb, "%d,", i);
	p = strbuf__detach(&sb, &len);
	assert_int_equal(len, 3890);
	assert_null(sb.buf);
	free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_json_escapes),
		cmocka_unit_test(test_json_utf8),
		cmocka_unit_test(test_printf_and_detach),
	};

	return cmocka_run_group_tests_name("strbuf", tests, NULL, NULL);
}
