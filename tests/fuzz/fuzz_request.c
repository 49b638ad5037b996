// SPDX-License-Identifier: Apache-2.0
/*
 * libFuzzer target for the parameters of every route. fuzz_http feeds raw
 * bytes, which rarely make a well-formed request and almost never a query
 * string a route reads; here the input is decoded into one request that
 * is always well formed:
 *
 *   byte 0        the route (index into routes[], modulo its size)
 *   then pieces   separated by '\n'; each piece's first byte picks a
 *                 parameter name from names[] (the names the routes read),
 *                 the rest is its value. A value whose first byte is below
 *                 0x20 starts with tokens[that byte] (values the parsers
 *                 treat specially: 0s, 9223372036s, nan, now-1h ...),
 *                 followed by the rest of the piece.
 *                 A piece led by 0xff is "NAME=VALUE" as given, for names
 *                 not in the list; 0xfe starts the body (POST routes): the
 *                 rest of the input, newlines included.
 *
 * Names and values are percent-encoded, so every byte reaches the route.
 * The server is real (evhttp, the routes, a SQLite store in a temporary
 * directory) and its store holds CPU samples, CPU and GPU intervals and
 * GPU metric points both at a fixed time (T0 below, reachable from the
 * tokens) and at start-up's "now" (the default window), so the code after
 * the parsing runs too. After every input the server must still answer
 * /healthz, and no answer may be a 500: a bad parameter is the client's
 * fault (4xx), and nothing in a healthy store fails.
 *
 * Seed inputs are in tests/fuzz/corpus/request, one or more per route.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "common/batch.h"
#include "common/log.h"
#include "common/profile.h"
#include "server/server.h"
#include "store/store.h"

#define NS 1000000000LL
/* 2023-11-14T22:13:20Z: tokens "1700000000" ... reach it. */
#define T0 (1700000000LL * NS)
#define MAX_BODY 4096
#define MAX_PIECES 24

static const struct {
	const char *method, *path;
} routes[] = {
	{ "GET", "/api/v1/profile" },
	{ "GET", "/api/v1/flamechart" },
	{ "GET", "/api/v1/series" },
	{ "GET", "/api/v1/labels" },
	{ "GET", "/api/v1/labels/comm/values" },
	{ "GET", "/api/v1/cpu/strips" },
	{ "GET", "/api/v1/gpu/kernels" },
	{ "GET", "/api/v1/gpu/kernels/top" },
	{ "GET", "/api/v1/gpu/idle" },
	{ "GET", "/api/v1/gpu/metrics" },
	{ "GET", "/metrics" },
	{ "GET", "/healthz" },
	{ "GET", "/ui/index.html" },
	{ "POST", "/api/v1/ingest/folded" },
	{ "POST", "/api/v1/ingest/pprof" },
	{ "POST", "/api/v1/ingest" },
};
#define NROUTES (sizeof(routes) / sizeof(routes[0]))

static const char *const names[] = {
	"from", "to", "step", "query", "type", "format", "max_nodes", "hz",
	"max_samples", "by", "align", "resolution", "max_intervals", "limit", "pid",
	"node", "source", "threshold", "min_gap", "labels",
};
#define NNAMES (sizeof(names) / sizeof(names[0]))

static const char *const tokens[] = {
	"0", "0s", "0ms", "0m", "0h00m", "-1", "1ms", "1s", "1m", "1h", "7d",
	"9223372036s", "9223372036854775807", "18446744073709551616", "4294967296",
	"1700000000", "1700000060.5", "1700003600", "now", "now-1h", "now+1m",
	"2262-04-11T23:47:16Z", "nan", "inf", "1e308", "100", "json", "folded",
	"gpu_time", "{pid=\"7\"}", "{node=\"fz\"}", "flamewatch_gpu_utilization_percent",
};
#define NTOKENS (sizeof(tokens) / sizeof(tokens[0]))

static struct event_base *base;
static struct server *srv;
static uint16_t port;
static char dir[] = "/tmp/fw-fuzz-request-XXXXXX";

static int _rm(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	return remove(path);
}

static void _cleanup(void)
{
	nftw(dir, _rm, 16, FTW_DEPTH | FTW_PHYS);
}

/*
 * pid 7 "seven" on node fz: CPU samples on two stacks every 10 ms (cpu and
 * gpu_time), CPU busy intervals, kernels (some sampled, weight 4) and a
 * copy, process and node GPU utilisation every second; all from t for 60 s.
 */
static void _fill(struct store *st, int64_t t)
{
	const char *ln[] = { "pid", "comm", "gpu" }, *lv[] = { "7", "seven", "0" };
	struct batch *b = batch__new(NS / 19);
	struct profile *p;
	int64_t m, series, node_series, st1, st2, comm, kname, util, putil;
	uint32_t fr[3];

	if (!b)
		abort();
	p = b->dict;
	m = profile__intern_mapping(p, "/bin/seven", "");
	fr[0] = profile__intern_named_frame(p, FRAME_NATIVE, m, 0x10, "main", NULL, 0);
	fr[1] = profile__intern_named_frame(p, FRAME_NATIVE, m, 0x20, "train", "t.c", 3);
	fr[2] = profile__intern_named_frame(p, FRAME_NATIVE, m, 0x30, "wait", "t.c", 9);
	st1 = profile__intern_stack(p, fr, 2);
	st2 = profile__intern_stack(p, fr, 3);
	series = batch__intern_series(b, ln, lv, 2);
	node_series = batch__intern_series(b, ln + 2, lv + 2, 1);
	comm = profile__intern_string(p, "seven");
	kname = profile__intern_string(p, "gemm(float*)");
	util = profile__intern_string(p, "flamewatch_gpu_utilization_percent");
	putil = profile__intern_string(p, "flamewatch_gpu_process_utilization_percent");
	for (int i = 0; i < 6000; i++) {
		struct batch_sample s = {
			.ts_ns = t + i * 10000000LL, .stack = i % 3 ? st1 : st2, .series = series,
			.tid = 7 + i % 2, .cpu = i % 4, .type = i % 5 ? SAMPLE_CPU : SAMPLE_GPU_TIME,
			.value = i % 5 ? 1 : 5000,
		};

		if (batch__add_sample(b, &s))
			abort();
	}
	for (int i = 0; i < 600; i++) {
		struct batch_cpu_interval c = {
			.start_ns = t + i * 100000000LL, .end_ns = t + i * 100000000LL + 40000000LL,
			.series = series, .cpu = i % 4, .tid = 7, .comm = comm,
		};
		struct batch_gpu_interval g = {
			.start_ns = t + i * 100000000LL + 50000000LL,
			.end_ns = t + i * 100000000LL + 80000000LL, .series = series,
			.kind = i % 7 ? GPU_KERNEL : GPU_MEMCPY_HTOD, .name = kname,
			.stack = i % 2 ? st1 : BATCH_NO_STACK, .correlation = i,
			.bytes = i % 7 ? 0 : 4096, .weight = i < 300 ? 1 : 4,
		};

		if (batch__add_cpu_interval(b, &c) || batch__add_gpu_interval(b, &g))
			abort();
	}
	for (int i = 0; i < 60; i++) {
		struct batch_metric n = { .ts_ns = t + i * NS, .series = node_series, .name = util,
					  .value = i % 3 ? 90 : 0 };
		struct batch_metric q = { .ts_ns = t + i * NS, .series = series, .name = putil,
					  .value = i % 2 ? 50 : 2 };

		if (batch__add_metric(b, &n) || batch__add_metric(b, &q))
			abort();
	}
	if (series < 0 || node_series < 0 || st1 < 0 || st2 < 0 || store__write_metrics(st, "fz", b) ||
	    store__write(st, "fz", b))
		abort();
	batch__free(b);
}

static void _setup(void)
{
	char err[256];
	struct server_opts o = { .listen = "127.0.0.1:0", .max_body = 1 << 20, .default_hz = 19 };
	struct store *st;
	struct timespec now;

	log__set_level(LOG_WARN);
	if (!mkdtemp(dir))
		abort();
	atexit(_cleanup);
	st = store__open(dir, err, sizeof(err));
	base = event_base_new();
	if (!st || !base)
		abort();
	clock_gettime(CLOCK_REALTIME, &now);
	_fill(st, T0);
	_fill(st, (int64_t)now.tv_sec * NS - 30 * NS);
	srv = server__new(base, st, &o, err, sizeof(err));
	if (!srv)
		abort();
	port = server__port(srv);
}

/* Sends data, half-closes, and runs the loop until the server closes. */
static size_t _exchange(const void *data, size_t size, char *reply, size_t reply_len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
	size_t got = 0, sent = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || (connect(fd, (void *)&a, sizeof(a)) && errno != EINPROGRESS))
		abort();
	for (int spins = 0; spins < 1000000; spins++) {
		char buf[4096];
		ssize_t n;

		if (sent < size) {
			n = send(fd, (const char *)data + sent, size - sent, MSG_NOSIGNAL);
			if (n > 0)
				sent += (size_t)n;
			else if (n < 0 && errno != EAGAIN && errno != ENOTCONN)
				sent = size;
		}
		event_base_loop(base, EVLOOP_NONBLOCK);
		n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			break;
		if (n > 0) {
			size_t keep = got < reply_len ? reply_len - got : 0;

			memcpy(reply + got, buf, (size_t)n < keep ? (size_t)n : keep);
			got += (size_t)n < keep ? (size_t)n : keep;
		}
	}
	close(fd);
	return got;
}

struct req {
	char *buf;
	size_t len, cap;
};

static void _put(struct req *q, const void *p, size_t n)
{
	if (q->len + n > q->cap) {
		size_t cap = (q->len + n) * 2 + 256;
		char *b = realloc(q->buf, cap);

		if (!b)
			abort();
		q->buf = b;
		q->cap = cap;
	}
	if (n)
		memcpy(q->buf + q->len, p, n);
	q->len += n;
}

static void _puts(struct req *q, const char *s)
{
	_put(q, s, strlen(s));
}

/* Percent-encodes every byte but letters and digits. */
static void _put_encoded(struct req *q, const uint8_t *p, size_t n)
{
	static const char hex[] = "0123456789ABCDEF";

	for (size_t i = 0; i < n; i++) {
		char e[3] = { '%', hex[p[i] >> 4], hex[p[i] & 15] };

		if ((p[i] >= '0' && p[i] <= '9') || (p[i] >= 'a' && p[i] <= 'z') ||
		    (p[i] >= 'A' && p[i] <= 'Z'))
			_put(q, &p[i], 1);
		else
			_put(q, e, 3);
	}
}

/* One parameter piece: NAME=VALUE into the query. */
static void _piece(struct req *query, const uint8_t *p, size_t n)
{
	const uint8_t *eq;

	if (!n)
		return;
	if (query->len)
		_puts(query, "&");
	if (p[0] == 0xff) {
		eq = memchr(p + 1, '=', n - 1);
		if (!eq)
			eq = p + n;
		_put_encoded(query, p + 1, eq - (p + 1));
		_puts(query, "=");
		if (eq < p + n)
			_put_encoded(query, eq + 1, p + n - eq - 1);
		return;
	}
	_puts(query, names[p[0] % NNAMES]);
	_puts(query, "=");
	p++;
	n--;
	if (n && p[0] < 0x20) {
		_put_encoded(query, (const uint8_t *)tokens[p[0] % NTOKENS],
			     strlen(tokens[p[0] % NTOKENS]));
		p++;
		n--;
	}
	_put_encoded(query, p, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char health[] = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
	struct req query = { 0 }, body = { 0 }, rq = { 0 };
	char reply[8192], head[128];
	const uint8_t *p, *end;
	size_t n;
	int pieces = 0;

	if (!srv)
		_setup();
	if (!size)
		return 0;
	p = data + 1;
	end = data + size;
	while (p < end && pieces++ < MAX_PIECES) {
		const uint8_t *nl = memchr(p, '\n', end - p);

		if (p[0] == 0xfe) {
			_put(&body, p + 1, end - p - 1 < MAX_BODY ? end - p - 1 : MAX_BODY);
			break;
		}
		if (!nl)
			nl = end;
		_piece(&query, p, nl - p);
		p = nl + 1;
	}
	_puts(&rq, routes[data[0] % NROUTES].method);
	_puts(&rq, " ");
	_puts(&rq, routes[data[0] % NROUTES].path);
	if (query.len) {
		_puts(&rq, "?");
		_put(&rq, query.buf, query.len);
	}
	snprintf(head, sizeof(head), " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
		 "Content-Length: %zu\r\n\r\n", body.len);
	_puts(&rq, head);
	if (body.len)
		_put(&rq, body.buf, body.len);

	n = _exchange(rq.buf, rq.len, reply, sizeof(reply) - 1);
	reply[n] = '\0';
	if (getenv("FW_FUZZ_VERBOSE"))
		fprintf(stderr, "%.*s\n-> %.*s\n", (int)rq.len, rq.buf,
			(int)strcspn(reply, "\r"), reply);
	if (strncmp(reply, "HTTP/1.1 ", 9) || !strncmp(reply, "HTTP/1.1 500", 12)) {
		fprintf(stderr, "fuzz_request: %.*s\n-> %.300s\n", (int)(rq.len < 2000 ? rq.len : 2000),
			rq.buf, n ? reply : "(no answer)");
		abort();
	}
	n = _exchange(health, sizeof(health) - 1, reply, sizeof(reply) - 1);
	reply[n] = '\0';
	if (strncmp(reply, "HTTP/1.1 200", 12))
		abort();
	free(query.buf);
	free(body.buf);
	free(rq.buf);
	return 0;
}
