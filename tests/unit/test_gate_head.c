// SPDX-License-Identifier: Apache-2.0
/*
 * gate__parse_head(): what the server's gate reads from a request head
 * before evhttp does. It must find the same body length evhttp will read
 * (or refuse the request): a difference would let a body through unbudgeted
 * or make evhttp read a body as the next request.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "server/gate.h"

#define MAX_BODY 1000

static struct gate_head _parse(const char *head)
{
	struct gate_head h;

	gate__parse_head(head, strlen(head), MAX_BODY, &h);
	return h;
}

static void test_bodies(void **state)
{
	static const struct {
		const char *head;
		bool body;
		uint64_t length;
	} cases[] = {
		{ "POST /x HTTP/1.1\r\nContent-Length: 12\r\n\r\n", true, 12 },
		{ "POST /x HTTP/1.1\nContent-Length: 12\n\n", true, 12 },
		{ "PUT /x HTTP/1.1\r\ncontent-length:\t7 \r\n\r\n", true, 7 },
		{ "PATCH /x HTTP/1.1\r\nCONTENT-LENGTH: 0\r\n\r\n", true, 0 },
		/* No Content-Length: evhttp reads no body. */
		{ "POST /x HTTP/1.1\r\nHost: a\r\n\r\n", true, 0 },
		/* libevent 2.1 waits for the body of a GET, DELETE, OPTIONS, CONNECT too... */
		{ "GET /x HTTP/1.1\r\nContent-Length: 12\r\n\r\n", true, 12 },
		{ "DELETE /x HTTP/1.1\r\nContent-Length: 5\r\n\r\n", true, 5 },
		{ "OPTIONS /x HTTP/1.1\r\nContent-Length: 5\r\n\r\n", true, 5 },
		{ "CONNECT /x HTTP/1.1\r\nContent-Length: 5\r\n\r\n", true, 5 },
		/* ... but reads none for these, whatever the headers say. */
		{ "HEAD /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", false, 0 },
		{ "TRACE /x HTTP/1.1\r\nContent-Length: 5\r\n\r\n", false, 0 },
		/* Methods are matched as evhttp matches them: exactly. */
		{ "post /x HTTP/1.1\r\nContent-Length: 12\r\n\r\n", false, 0 },
		{ "POSTX /x HTTP/1.1\r\nContent-Length: 12\r\n\r\n", false, 0 },
		/* "Content-Length " with a space is another header to evhttp. */
		{ "POST /x HTTP/1.1\r\nContent-Length : 12\r\n\r\n", true, 0 },
		/* Folded lines of other headers do not matter. */
		{ "POST /x HTTP/1.1\r\nX-A: 1\r\n 2\r\nContent-Length: 3\r\n\r\n", true, 3 },
		{ "POST /x HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", true, 1000 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gate_head h = _parse(cases[i].head);

		if (h.refuse || h.body != cases[i].body || h.length != cases[i].length)
			fail_msg("case %zu: refuse %d (%s), body %d, length %llu", i, h.refuse,
				 h.why, h.body, (unsigned long long)h.length);
	}
}

static void test_refusals(void **state)
{
	static const struct {
		const char *head;
		int status;
		const char *why;
	} cases[] = {
		{ "POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 411,
		  "Content-Length" },
		{ "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: gzip\r\n\r\n",
		  411, "Transfer-Encoding" },
		{ "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
		  400, "both" },
		{ "POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n", 400,
		  "Content-Length" },
		{ "POST /x HTTP/1.1\r\nContent-Length: +3\r\n\r\n", 400, "Content-Length" },
		{ "POST /x HTTP/1.1\r\nContent-Length: 3 4\r\n\r\n", 400, "Content-Length" },
		{ "POST /x HTTP/1.1\r\nContent-Length:\r\n\r\n", 400, "Content-Length" },
		{ "POST /x HTTP/1.1\r\nContent-Length: 3\r\n 4\r\n\r\n", 400, "folded" },
		{ "POST /x HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413, "--max-body" },
		{ "POST /x HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 400,
		  "Content-Length" },
		{ "\r\n\r\n", 400, "request line" },
		{ "GET\r\n\r\n", 400, "request line" },
		{ " GET / HTTP/1.1\r\n\r\n", 400, "request line" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct gate_head h = _parse(cases[i].head);

		if (h.refuse != cases[i].status || !strstr(h.why, cases[i].why))
			fail_msg("case %zu: refuse %d (%s), expected %d (%s)", i, h.refuse, h.why,
				 cases[i].status, cases[i].why);
	}
}

static void test_long_request_line(void **state)
{
	size_t n = GATE_URL_MAX + 64;
	char *head = malloc(n + 32);
	struct gate_head h;

	(void)state;
	assert_non_null(head);
	memcpy(head, "GET /", 5);
	memset(head + 5, 'a', n - 5);
	strcpy(head + n, " HTTP/1.1\r\n\r\n");
	gate__parse_head(head, strlen(head), MAX_BODY, &h);
	assert_int_equal(h.refuse, 414);
	/* At the limit it is read. */
	memset(head + 5, 'a', GATE_URL_MAX - 5 - 9);
	strcpy(head + GATE_URL_MAX - 9, " HTTP/1.1\r\n\r\n");
	gate__parse_head(head, strlen(head), MAX_BODY, &h);
	assert_int_equal(h.refuse, 0);
	free(head);
}

static void test_chunked(void **state)
{
	struct gate_head h;

	(void)state;
	h = _parse("POST /x HTTP/1.1\r\nTransfer-Encoding: Chunked\r\n\r\n");
	assert_int_equal(h.refuse, 0);
	assert_true(h.chunked);
	assert_int_equal(h.length, MAX_BODY);
	h = _parse("GET /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
	assert_true(h.chunked);
	h = _parse("HEAD /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
	assert_false(h.chunked);
	assert_int_equal(h.length, 0);
}

static void test_expect(void **state)
{
	struct gate_head h;

	(void)state;
	h = _parse("POST /x HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 9\r\n\r\n");
	assert_true(h.expect_continue);
	assert_int_equal(h.length, 9);
	h = _parse("POST /x HTTP/1.1\r\nExpect: something\r\nContent-Length: 9\r\n\r\n");
	assert_false(h.expect_continue);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bodies),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_long_request_line),
		cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_expect),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
