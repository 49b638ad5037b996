// SPDX-License-Identifier: Apache-2.0
/*
 * The agent's outage buffer (src/agent/shipper.c) against a real HTTP server
 * on a loopback socket, in the same event loop: the server decodes every
 * body with wire__decode(), as flamewatch server does, and can be told to
 * answer 503 (busy) for a while.
 *
 *   - a batch is compacted when queued and counts what it really holds (the
 *     heap's own figures), so a small --buffer-mb holds many small batches;
 *   - compaction keeps every string, frame, stack and series, and the
 *     tables keep working;
 *   - a full buffer drops the oldest batches and counts them;
 *   - a drain sends everything queued at once, asks a busy server (503)
 *     again, and gives up when the server refuses the connection;
 *   - a server that forgets every session right after its batch still gets
 *     every batch, each sent again in a new session after its 409;
 *   - a 409 for a batch that built on nothing is not a lost session: it is
 *     retried after a backoff, not reset and resent in a loop.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>

#include "agent/shipper.h"
#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "format/wire.h"

#define PERIOD_NS 52631579ULL	/* 19 Hz */
#define NSAMPLES 30

static int64_t _t0(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return ((int64_t)ts.tv_sec - 3600) * 1000000000LL;
}

/*
 * A batch such as a light host's agent ships every second: a few processes,
 * a dozen stacks of ten named frames, NSAMPLES samples at t0 + i s + j ms.
 */
static struct batch *_make(int64_t t0, int i)
{
	struct batch *b = batch__new(PERIOD_NS);
	const char *names[3] = { "pid", "comm", "exe" };
	uint32_t stacks[12], series[3];
	char pid[16], comm[32], fn[64];
	struct profile *p;
	int64_t libc, app;

	assert_non_null(b);
	p = b->dict;
	libc = profile__intern_mapping(p, "/usr/lib/x86_64-linux-gnu/libc.so.6", "4f1e2d");
	app = profile__intern_mapping(p, "/usr/local/bin/some-service", "9a8b7c6d5e");
	assert_true(libc >= 0 && app >= 0);
	for (int k = 0; k < 3; k++) {
		const char *values[3] = { pid, comm, "/usr/local/bin/some-service" };
		int64_t id;

		snprintf(pid, sizeof(pid), "%d", 1000 + k);
		snprintf(comm, sizeof(comm), "worker-%d", k);
		id = batch__intern_series(b, names, values, 3);
		assert_true(id >= 0);
		series[k] = id;
	}
	for (int s = 0; s < 12; s++) {
		uint32_t f[10];
		int64_t id;

		for (int d = 0; d < 10; d++) {
			id = profile__intern_frame(p, FRAME_NATIVE, d ? app : libc,
						   0x1000 + d * 0x100 + (d > 6 ? s * 16 : 0));
			assert_true(id >= 0);
			snprintf(fn, sizeof(fn), "service::module::function_%d_%d", d,
				 d > 6 ? s : 0);
			assert_int_equal(profile__set_frame_name(p, id, fn, "src/module.cc", 10 + d), 0);
			f[d] = id;
		}
		id = profile__intern_stack(p, f, 10);
		assert_true(id >= 0);
		stacks[s] = id;
	}
	for (int j = 0; j < NSAMPLES; j++) {
		struct batch_sample smp = {
			.ts_ns = t0 + (int64_t)i * 1000000000LL + j * 1000000LL,
			.stack = stacks[j % 12], .series = series[j % 3],
			.tid = 1000 + j % 3, .cpu = j % 2, .type = SAMPLE_CPU, .value = 1,
		};

		assert_int_equal(batch__add_sample(b, &smp), 0);
	}
	return b;
}

/* ---- the server ---------------------------------------------------------- */

struct server {
	struct event_base *base;
	struct evhttp *http;
	struct wire_session_table *sessions;
	int port;
	int busy_left;		/* answer 503 to this many requests first */
	int always_409;		/* answer 409 to everything, as a confused proxy might */
	int n503, n200, n409;
	int64_t first_ts[256];	/* the first sample time of each batch taken */
	int nbatches;
};

static void _on_ingest(struct evhttp_request *req, void *arg)
{
	struct server *sv = arg;
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t len = evbuffer_get_length(in);
	struct batch *b = NULL;
	char node[64], err[256];
	uint64_t seq;
	int rc;

	if (sv->busy_left > 0) {
		sv->busy_left--;
		sv->n503++;
		evhttp_send_reply(req, 503, "Busy", NULL);
		return;
	}
	if (sv->always_409) {
		sv->n409++;
		evhttp_send_reply(req, 409, "Conflict", NULL);
		return;
	}
	rc = wire__decode(sv->sessions, evbuffer_pullup(in, len), len, WIRE_ZSTD, NULL, &b, node,
			  sizeof(node), &seq, err, sizeof(err));
	if (rc == -ESTALE) {
		sv->n409++;
		evhttp_send_reply(req, 409, "Stale", NULL);
		return;
	}
	assert_int_equal(rc, 0);
	assert_string_equal(node, "unit-node");
	assert_int_equal(b->nsamples, NSAMPLES);
	assert_true(sv->nbatches < 256);
	sv->first_ts[sv->nbatches++] = b->samples[0].ts_ns;
	batch__free(b);
	sv->n200++;
	evhttp_send_reply(req, 200, "OK", NULL);
}

static void _server_start(struct server *sv, struct event_base *base)
{
	struct evhttp_bound_socket *h;
	struct sockaddr_in sa;
	socklen_t sl = sizeof(sa);

	memset(sv, 0, sizeof(*sv));
	sv->base = base;
	sv->http = evhttp_new(base);
	sv->sessions = wire_sessions__new(16, 64 << 20);
	assert_non_null(sv->http);
	assert_non_null(sv->sessions);
	h = evhttp_bind_socket_with_handle(sv->http, "127.0.0.1", 0);
	assert_non_null(h);
	assert_int_equal(getsockname(evhttp_bound_socket_get_fd(h), (struct sockaddr *)&sa, &sl), 0);
	sv->port = ntohs(sa.sin_port);
	evhttp_set_cb(sv->http, "/api/v1/ingest", _on_ingest, sv);
}

static void _server_stop(struct server *sv)
{
	evhttp_free(sv->http);
	wire_sessions__free(sv->sessions);
}

/* A port nobody listens on: bound, then closed. */
static int _closed_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t sl = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM, 0), port;

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
	port = ntohs(sa.sin_port);
	close(fd);
	return port;
}

static struct shipper *_shipper(struct event_base *base, int port, size_t max_buffer)
{
	struct shipper_opts o = { .node = "unit-node", .max_buffer = max_buffer };
	struct shipper *s;
	char url[64], err[256];

	snprintf(url, sizeof(url), "http://127.0.0.1:%d", port);
	o.url = url;
	s = shipper__new(base, &o, err, sizeof(err));
	assert_non_null(s);
	return s;
}

/* Runs the loop until cond(s) or 10 s; returns whether cond held. */
static int _run_until(struct event_base *base, struct shipper *s,
		      int (*cond)(const struct shipper *s))
{
	struct timeval tick = { 0, 20000 };

	for (int i = 0; i < 500 && !cond(s); i++) {
		event_base_loopexit(base, &tick);
		event_base_dispatch(base);
	}
	return cond(s);
}

static int _waiting(const struct shipper *s)
{
	struct shipper_stats st;

	shipper__stats(s, &st);
	return st.failures > 0;
}

static int _drained(const struct shipper *s)
{
	return shipper__idle(s) || shipper__gave_up(s);
}

#ifdef __SANITIZE_ADDRESS__
/* libasan's; GCC 12 installs no <sanitizer/allocator_interface.h> to declare it. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

static size_t _heap_in_use(void)
{
#ifdef __SANITIZE_ADDRESS__
	/* ASan's allocator stands in for glibc's, which mallinfo2() describes. */
	return __sanitizer_get_current_allocated_bytes();
#else
	struct mallinfo2 mi = mallinfo2();

	return mi.uordblks + mi.hblkhd;
#endif
}

/* ---- compaction ---------------------------------------------------------- */

static void test_compact_keeps_content(void **state)
{
	struct batch *b = _make(_t0(), 0);
	struct profile *p = b->dict;
	uint32_t nstr = intern__count(p->strings), nstacks = profile__nstacks(p);
	char **strs = calloc(nstr, sizeof(*strs));
	struct profile_frame *frames = malloc(p->nframes * sizeof(*frames));
	uint32_t nframes = p->nframes, n;
	size_t before = batch__memory(b), nl;
	const struct batch_label *l;

	(void)state;
	assert_non_null(strs);
	assert_non_null(frames);
	for (uint32_t i = 0; i < nstr; i++)
		strs[i] = strdup(profile__string(p, i));
	memcpy(frames, p->frames, nframes * sizeof(*frames));

	assert_int_equal(batch__compact(b), 0);
	assert_true(batch__memory(b) * 4 < before);
	assert_int_equal(intern__count(p->strings), nstr);
	for (uint32_t i = 0; i < nstr; i++) {
		assert_string_equal(profile__string(p, i), strs[i]);
		/* The index still finds every key. */
		assert_int_equal(profile__intern_string(p, strs[i]), i);
		free(strs[i]);
	}
	assert_int_equal(p->nframes, nframes);
	assert_memory_equal(p->frames, frames, nframes * sizeof(*frames));
	assert_int_equal(profile__nstacks(p), nstacks);
	for (uint32_t s = 0; s < nstacks; s++) {
		const uint32_t *f = profile__stack(p, s, &n);

		assert_int_equal(n, 10);
		assert_int_equal(profile__intern_stack(p, f, n), s);
	}
	l = batch__series(b, 2, &nl);
	assert_int_equal(nl, 3);
	assert_string_equal(batch__series_label(b, 2, "comm"), "worker-2");
	(void)l;
	/* Growing again after compaction works. */
	assert_int_equal(profile__intern_string(p, "a string added later"), nstr);
	assert_string_equal(profile__string(p, nstr), "a string added later");
	for (int j = 0; j < 100; j++) {
		struct batch_sample smp = { .ts_ns = b->samples[0].ts_ns + j, .value = 1 };

		assert_int_equal(batch__add_sample(b, &smp), 0);
	}
	assert_int_equal(b->nsamples, NSAMPLES + 100);
	free(strs);
	free(frames);
	batch__free(b);
}

/* ---- the buffer's accounting --------------------------------------------- */

/*
 * 60 light batches against a 1 MiB buffer, the server down (it answers
 * 503): none may be dropped, and what the buffer counts must be what the
 * heap holds for them.
 */
static void test_buffer_counts_real_bytes(void **state)
{
	struct event_base *base = event_base_new();
	int64_t t0 = _t0();
	struct shipper_stats st0, st;
	struct server sv;
	struct shipper *s;
	size_t heap0, heap;

	(void)state;
	assert_non_null(base);
	_server_start(&sv, base);
	sv.busy_left = 1000;
	s = _shipper(base, sv.port, 1 << 20);
	/* The first batch goes out and gets a 503: the rest wait for the backoff. */
	shipper__push(s, _make(t0, 0));
	assert_true(_run_until(base, s, _waiting));
	for (int i = 1; i < 10; i++)
		shipper__push(s, _make(t0, i));
	shipper__stats(s, &st0);
	heap0 = _heap_in_use();
	for (int i = 10; i < 60; i++)
		shipper__push(s, _make(t0, i));
	heap = _heap_in_use();
	shipper__stats(s, &st);

	assert_int_equal(st.batches_dropped, 0);
	assert_int_equal(st.samples_dropped, 0);
	assert_int_equal(st.queued_batches, 60);
	assert_int_equal(st.queued_samples, 60 * NSAMPLES);
	assert_true(st.queued_bytes <= st.max_bytes);
	/*
	 * The 50 batches pushed last hold heap - heap0 bytes (their malloc
	 * headers included, which the count leaves out): the count is that,
	 * within a few percent.
	 */
	print_message("50 batches: %zu bytes of heap, %llu counted\n", heap - heap0,
		      (unsigned long long)(st.queued_bytes - st0.queued_bytes));
	assert_true(st.queued_bytes - st0.queued_bytes <= (heap - heap0) * 105 / 100);
	assert_true(st.queued_bytes - st0.queued_bytes >= (heap - heap0) * 90 / 100);

	shipper__free(s);
	_server_stop(&sv);
	event_base_free(base);
}

/*
 * A full buffer drops the oldest batches, counts them, and keeps the newest;
 * the server is busy (503) when the drain starts, and the drain asks again
 * until it takes them, in order.
 */
static void test_full_buffer_drops_oldest(void **state)
{
	struct event_base *base = event_base_new();
	int64_t t0 = _t0();
	struct shipper_stats st;
	struct server sv;
	struct shipper *s;
	size_t one;
	uint64_t kept;

	(void)state;
	assert_non_null(base);
	_server_start(&sv, base);
	sv.busy_left = 1;
	s = _shipper(base, sv.port, 256 << 10);
	shipper__push(s, _make(t0, 0));
	assert_true(_run_until(base, s, _waiting));
	shipper__stats(s, &st);
	one = st.queued_bytes;
	for (int i = 1; i < 100; i++)
		shipper__push(s, _make(t0, i));
	shipper__stats(s, &st);
	kept = st.queued_batches;
	assert_true(kept >= 2 && kept < 100);
	assert_true(st.queued_bytes <= 256 << 10);
	assert_true(st.queued_bytes + one > 256 << 10);
	assert_int_equal(st.batches_dropped, 100 - kept);
	assert_int_equal(st.samples_dropped, (100 - kept) * NSAMPLES);

	sv.busy_left = 2;
	shipper__drain(s);
	assert_true(_run_until(base, s, _drained));
	assert_null(shipper__gave_up(s));
	assert_int_equal(sv.n503, 3);
	assert_int_equal(sv.nbatches, (int)kept);
	for (int k = 0; k < sv.nbatches; k++)
		assert_int_equal(sv.first_ts[k], t0 + (int64_t)(100 - kept + k) * 1000000000LL);
	shipper__stats(s, &st);
	assert_int_equal(st.batches_sent, kept);
	assert_int_equal(st.queued_batches, 0);
	assert_int_equal(st.queued_bytes, 0);

	shipper__free(s);
	_server_stop(&sv);
	event_base_free(base);
}

/* Draining to a port nobody listens on ends at once, with the reason and the batches kept. */
static void test_drain_gives_up_when_refused(void **state)
{
	struct event_base *base = event_base_new();
	int64_t t0 = _t0();
	struct shipper_stats st;
	struct shipper *s;

	(void)state;
	assert_non_null(base);
	s = _shipper(base, _closed_port(), 1 << 20);
	shipper__push(s, _make(t0, 0));
	assert_true(_run_until(base, s, _waiting));
	shipper__push(s, _make(t0, 1));
	shipper__push(s, _make(t0, 2));
	shipper__drain(s);
	/* Without the drain, the next try would wait out the backoff, past the 10 s. */
	assert_true(_run_until(base, s, _drained));
	assert_non_null(shipper__gave_up(s));
	assert_non_null(strstr(shipper__gave_up(s), "cannot be reached"));
	shipper__stats(s, &st);
	assert_int_equal(st.queued_batches, 3);
	assert_int_equal(st.queued_samples, 3 * NSAMPLES);
	assert_int_equal(st.batches_sent, 0);
	shipper__free(s);
	event_base_free(base);
}

static int _idle(const struct shipper *s)
{
	return shipper__idle(s);
}

/*
 * The server's budget holds no session: each is forgotten right after its
 * batch, so every batch but the first builds on a session the server no
 * longer holds. Each gets 409, goes again at once in a new session with
 * its dictionary, and arrives whole and in order; nothing is dropped.
 */
static void test_forgotten_session_resent(void **state)
{
	struct event_base *base = event_base_new();
	int64_t t0 = _t0();
	struct wire_session_stats ws;
	struct shipper_stats st;
	struct server sv;
	struct shipper *s;

	(void)state;
	assert_non_null(base);
	_server_start(&sv, base);
	wire_sessions__free(sv.sessions);
	sv.sessions = wire_sessions__new(16, 1024);
	assert_non_null(sv.sessions);
	s = _shipper(base, sv.port, 8 << 20);
	for (int i = 0; i < 20; i++)
		shipper__push(s, _make(t0, i));
	assert_true(_run_until(base, s, _idle));
	assert_int_equal(sv.nbatches, 20);
	for (int k = 0; k < 20; k++)
		assert_int_equal(sv.first_ts[k], t0 + (int64_t)k * 1000000000LL);
	assert_int_equal(sv.n409, 19);
	shipper__stats(s, &st);
	assert_int_equal(st.batches_sent, 20);
	assert_int_equal(st.samples_sent, 20 * NSAMPLES);
	assert_int_equal(st.sessions_reset, 19);
	assert_int_equal(st.batches_rejected, 0);
	assert_int_equal(st.batches_dropped, 0);
	assert_int_equal(st.samples_dropped, 0);
	/* Resent at once, not after a backoff. */
	assert_int_equal(st.failures, 0);
	wire_sessions__stats(sv.sessions, &ws);
	assert_int_equal(ws.forgotten[WIRE_FORGOT_BUDGET], 20);

	shipper__free(s);
	_server_stop(&sv);
	event_base_free(base);
}

/*
 * A 409 for the first batch of a session (it built on nothing the server
 * could have forgotten) cannot be mended by another new session: the batch
 * waits out the backoff like one that got a 5xx, and is delivered once the
 * server takes it. It used to be reset and resent at once, in a loop.
 */
static void test_409_without_base_retried(void **state)
{
	struct event_base *base = event_base_new();
	int64_t t0 = _t0();
	struct shipper_stats st;
	struct server sv;
	struct shipper *s;

	(void)state;
	assert_non_null(base);
	_server_start(&sv, base);
	sv.always_409 = 1;
	s = _shipper(base, sv.port, 8 << 20);
	shipper__push(s, _make(t0, 0));
	assert_true(_run_until(base, s, _waiting));
	shipper__stats(s, &st);
	assert_int_equal(sv.n409, 1);
	assert_int_equal(st.sessions_reset, 0);
	assert_int_equal(st.queued_batches, 1);
	assert_int_equal(st.batches_rejected, 0);

	sv.always_409 = 0;
	assert_true(_run_until(base, s, _idle));
	assert_int_equal(sv.nbatches, 1);
	shipper__stats(s, &st);
	assert_int_equal(st.batches_sent, 1);
	assert_int_equal(st.sessions_reset, 0);
	assert_int_equal(st.samples_dropped, 0);

	shipper__free(s);
	_server_stop(&sv);
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compact_keeps_content),
		cmocka_unit_test(test_buffer_counts_real_bytes),
		cmocka_unit_test(test_full_buffer_drops_oldest),
		cmocka_unit_test(test_drain_gives_up_when_refused),
		cmocka_unit_test(test_forgotten_session_resent),
		cmocka_unit_test(test_409_without_base_retried),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
