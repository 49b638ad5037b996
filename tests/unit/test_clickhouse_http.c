// SPDX-License-Identifier: Apache-2.0
/*
 * The ClickHouse store's HTTP client (src/store/chhttp.c) against a scripted
 * HTTP server on a loopback socket: chunked, Content-Length and
 * close-delimited bodies, error statuses with ClickHouse's message, the
 * resend on a kept-alive connection the server closed, the request line,
 * headers and body it sends; and store__open()'s refusals of bad
 * clickhouse:// URIs, which need no server.
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "store/chhttp.h"
#include "store/rowbinary.h"
#include "store/store.h"

/* One scripted exchange: the reply to send, and whether to close afterwards. */
struct step {
	const char *reply;
	int close_after;
};

struct server {
	int lfd;
	int port;
	const struct step *steps;
	int nsteps;
	pthread_t th;
	/* What the client sent, request by request. */
	char reqs[8][4096];
	int nreqs;
	int conns;		/* connections accepted */
};

static int _read_request(int fd, char *buf, size_t cap)
{
	size_t len = 0, body = 0;
	char *end = NULL;

	while (len + 1 < cap) {
		ssize_t n = recv(fd, buf + len, cap - 1 - len, 0);

		if (n <= 0)
			return -1;
		len += (size_t)n;
		buf[len] = '\0';
		if (!end && (end = strstr(buf, "\r\n\r\n"))) {
			char *cl = strcasestr(buf, "Content-Length:");

			body = cl ? strtoul(cl + 15, NULL, 10) : 0;
		}
		if (end && len >= (size_t)(end + 4 - buf) + body)
			return 0;
	}
	return -1;
}

static void *_serve(void *arg)
{
	struct server *s = arg;
	int fd = -1;

	for (int i = 0; i < s->nsteps; i++) {
		if (fd < 0) {
			fd = accept(s->lfd, NULL, NULL);
			if (fd < 0)
				break;
			s->conns++;
		}
		if (_read_request(fd, s->reqs[s->nreqs], sizeof(s->reqs[0]))) {
			/* The client gave up on this connection: the step is retried on a new one. */
			close(fd);
			fd = -1;
			i--;
			continue;
		}
		s->nreqs++;
		send(fd, s->steps[i].reply, strlen(s->steps[i].reply), MSG_NOSIGNAL);
		if (s->steps[i].close_after) {
			close(fd);
			fd = -1;
		}
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void _start(struct server *s, const struct step *steps, int n)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	memset(s, 0, sizeof(*s));
	s->steps = steps;
	s->nsteps = n;
	s->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(s->lfd >= 0);
	assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s->lfd, 4), 0);
	assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&a, &len), 0);
	s->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&s->th, NULL, _serve, s), 0);
}

static void _stop(struct server *s)
{
	shutdown(s->lfd, SHUT_RDWR);
	pthread_join(s->th, NULL);
	close(s->lfd);
}

static struct chhttp *_client(const struct server *s, const char *user)
{
	char port[16];
	struct chhttp_opts o = { .host = "127.0.0.1", .port = port, .user = user,
				 .password = "p@ss", .timeout_s = 10 };
	struct chhttp *c;
	char err[256];

	snprintf(port, sizeof(port), "%d", s->port);
	c = chhttp__new(&o, err, sizeof(err));
	assert_non_null(c);
	return c;
}

static void test_bodies_and_errors(void **state)
{
	static const struct step steps[] = {
		{ "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nKeep-Alive: timeout=10\r\n\r\n"
		  "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", 0 },
		{ "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc", 0 },
		{ "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 70\r\n\r\n"
		  "Code: 60, e.displayText() = DB::Exception: Table x doesn't exist\nmore\n", 0 },
		/* Closed after answering, as ClickHouse does after its keep-alive timeout. */
		{ "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 1 },
		{ "HTTP/1.0 200 OK\r\nConnection: close\r\n\r\nuntil close", 1 },
	};
	struct strbuf resp = STRBUF_INIT;
	struct server s;
	struct chhttp *c;
	char err[256];

	(void)state;
	_start(&s, steps, 5);
	c = _client(&s, "fw");

	assert_int_equal(chhttp__post(c, NULL, "wait_end_of_query=1", "SELECT 1", 8, &resp, err,
				      sizeof(err)), 0);
	assert_int_equal(resp.len, 11);
	assert_memory_equal(resp.buf, "hello world", 11);

	resp.len = 0;
	assert_int_equal(chhttp__post(c, "INSERT INTO t FORMAT RowBinary", NULL, "\x01\x02", 2, &resp,
				      err, sizeof(err)), 0);
	assert_int_equal(resp.len, 3);
	assert_memory_equal(resp.buf, "abc", 3);

	resp.len = 0;
	assert_int_equal(chhttp__post(c, NULL, NULL, "SELECT * FROM x", 15, &resp, err, sizeof(err)),
			 -EIO);
	assert_non_null(strstr(err, "HTTP 500"));
	assert_non_null(strstr(err, "Code: 60"));
	assert_null(strstr(err, "more"));	/* the first line only */

	assert_int_equal(chhttp__post(c, NULL, NULL, "SELECT 2", 8, &resp, err, sizeof(err)), 0);
	/* The server closed that connection: the next request goes on a new one. */
	resp.len = 0;
	assert_int_equal(chhttp__post(c, NULL, NULL, "SELECT 3", 8, &resp, err, sizeof(err)), 0);
	assert_int_equal(resp.len, 11);
	assert_memory_equal(resp.buf, "until close", 11);
	chhttp__free(c);
	_stop(&s);

	assert_int_equal(s.nreqs, 5);
	assert_int_equal(s.conns, 2);
	/* Request lines: settings, then the URL-encoded query; Basic auth of fw:p@ss. */
	assert_true(!strncmp(s.reqs[0], "POST /?wait_end_of_query=1 HTTP/1.1\r\n", 37));
	assert_non_null(strstr(s.reqs[0], "Authorization: Basic Znc6cEBzcw==\r\n"));
	assert_non_null(strstr(s.reqs[0], "\r\n\r\nSELECT 1"));
	assert_true(!strncmp(s.reqs[1], "POST /?query=INSERT%20INTO%20t%20FORMAT%20RowBinary HTTP/1.1",
			     60));
	assert_non_null(strstr(s.reqs[1], "Content-Length: 2\r\n"));
	strbuf__release(&resp);
}

static void test_refused_connection(void **state)
{
	struct server s;
	struct chhttp *c;
	char err[256];

	(void)state;
	/* A port nobody listens on: bind one, then close it. */
	_start(&s, NULL, 0);
	_stop(&s);
	c = _client(&s, NULL);
	assert_int_equal(chhttp__post(c, NULL, NULL, "SELECT 1", 8, NULL, err, sizeof(err)),
			 -ECONNREFUSED);
	assert_non_null(strstr(err, "cannot connect to 127.0.0.1"));
	chhttp__free(c);
}

static void test_rowbinary(void **state)
{
	struct strbuf b = STRBUF_INIT;
	char long_name[300];
	struct rbr r;

	(void)state;
	memset(long_name, 'k', sizeof(long_name) - 1);
	long_name[sizeof(long_name) - 1] = '\0';
	rb__u64(&b, 0x0102030405060708ULL);
	rb__str(&b, long_name);		/* a two-byte length */
	rb__str(&b, "");
	rb__i64(&b, -5);
	rb__varint(&b, 300);
	r = (struct rbr){ (uint8_t *)b.buf, (uint8_t *)b.buf + b.len, false };
	assert_true(rbr__u64(&r) == 0x0102030405060708ULL);
	assert_string_equal(rbr__str(&r), long_name);
	assert_string_equal(rbr__str(&r), "");
	assert_true(rbr__i64(&r) == -5);
	assert_int_equal(rbr__varint(&r), 300);
	assert_false(r.bad);
	assert_false(rbr__more(&r));
	/* Past the end: bad, zeros. */
	assert_true(rbr__u64(&r) == 0);
	assert_true(r.bad);
	/* A string longer than what is left. */
	b.len = 0;
	rb__varint(&b, 50);
	strbuf__append(&b, "short", 5);
	r = (struct rbr){ (uint8_t *)b.buf, (uint8_t *)b.buf + b.len, false };
	assert_string_equal(rbr__str(&r), "");
	assert_true(r.bad);
	strbuf__release(&b);
}

static void _refused(const char *uri, int want_errno, const char *words)
{
	char err[256] = "";
	struct store *s = store__open(uri, err, sizeof(err));

	if (s)
		fail_msg("%s was accepted", uri);
	assert_int_equal(errno, want_errno);
	if (!strstr(err, words))
		fail_msg("%s: \"%s\" lacks \"%s\"", uri, err, words);
}

static void test_bad_uris(void **state)
{
	(void)state;
	_refused("clickhouse://", EINVAL, "no host");
	_refused("clickhouse://h:80x/db", EINVAL, "expected clickhouse://HOST[:PORT]/DB");
	_refused("clickhouse://h/bad-name", EINVAL, "bad database name");
	_refused("clickhouse://h/9db", EINVAL, "bad database name");
	_refused("clickhouse://h/db?secure=yes", EINVAL, "secure=yes: expected 1 or 0");
	_refused("clickhouse://h/db?ca=ca.pem", EINVAL, "ca=ca.pem needs secure=1");
	/* The CA file is read at open, before any connection: missing, or not PEM. */
	_refused("clickhouse://h/db?secure=1&ca=/nonexistent/ca.pem", EINVAL,
		 "cannot load the CA file /nonexistent/ca.pem");
	_refused("clickhouse://h/db?secure=1&ca=" FW_TEST_DATA "/unit/test_clickhouse_http.c", EINVAL,
		 "cannot load the CA file " FW_TEST_DATA "/unit/test_clickhouse_http.c");
	_refused("clickhouse://h/db?compress=1", EINVAL, "unknown option \"compress\"");
	_refused("clickhouse://h/db?user", EINVAL, "needs a value");
	_refused("clickhouse://[::1/db", EINVAL, "bad IPv6 address");
	_refused("clickhous://h/db", EPROTONOSUPPORT, "unsupported store URI scheme");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bodies_and_errors),
		cmocka_unit_test(test_refused_connection),
		cmocka_unit_test(test_rowbinary),
		cmocka_unit_test(test_bad_uris),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
