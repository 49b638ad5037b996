// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "agent/shipper.h"
#include "common/batch.h"
#include "common/log.h"
#include "format/wire.h"

#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 60000
#define REQUEST_TIMEOUT_S 30
/*
 * The session dictionary grows with every process that is sampled (its
 * series: pid, comm, exe) and every new stack; past this cap the next
 * batch starts a new session and re-sends only what it refers to. The
 * agent's whole memory budget is 8 MiB, so the wire format's default cap
 * (the same 8 MiB) would let process churn alone use all of it; 2 MiB is
 * about 7,000 new processes (~300 bytes each), and a reset costs one
 * batch carrying the strings, frames and stacks still in use.
 */
#define SHIPPER_DICT_MAX_BYTES (2u << 20)

struct queued {
	struct batch *b;
	size_t bytes;
	struct queued *next;
};

struct shipper {
	struct event_base *base;
	struct evhttp_connection *conn;
	struct evhttp_uri *uri;
	char *host_header;
	char path[512];
	char *auth;
	char *node;
	size_t max_buffer;
	struct wire_encoder *enc;
	struct queued *head, *tail;
	struct event *retry;
	bool in_flight;
	bool waiting;		/* a retry is scheduled */
	uint32_t failures_in_row;
	uint64_t last_warn_s;
	struct shipper_stats stats;
};

static void _kick(struct shipper *s);

static uint64_t _random_u64(void)
{
	uint64_t v = 0;
	FILE *f = fopen("/dev/urandom", "re");

	if (f) {
		if (fread(&v, sizeof(v), 1, f) != 1)
			v = 0;
		fclose(f);
	}
	if (!v) {
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		v = ((uint64_t)ts.tv_sec << 32) ^ ts.tv_nsec ^ ((uint64_t)getpid() << 16);
	}
	return v;
}

static void _pop(struct shipper *s)
{
	struct queued *q = s->head;

	s->head = q->next;
	if (!s->head)
		s->tail = NULL;
	s->stats.queued_batches--;
	s->stats.queued_bytes -= q->bytes;
	batch__free(q->b);
	free(q);
}

/* Warns at most once a minute: an unreachable server must not flood the log. */
static void _warn_limited(struct shipper *s, const char *fmt, const char *what)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (s->last_warn_s && (uint64_t)ts.tv_sec - s->last_warn_s < 60)
		return;
	s->last_warn_s = ts.tv_sec ? ts.tv_sec : 1;
	pr_warn(fmt, what, (unsigned long long)s->stats.queued_batches,
		s->stats.queued_bytes / 1048576.0);
}

static void _retry_later(struct shipper *s, const char *why)
{
	uint32_t shift = s->failures_in_row < 6 ? s->failures_in_row : 6;
	uint64_t ms = (uint64_t)BACKOFF_MIN_MS << shift;
	struct timeval tv;

	if (ms > BACKOFF_MAX_MS)
		ms = BACKOFF_MAX_MS;
	/* Up to a quarter of jitter, so a fleet does not retry in lockstep. */
	ms += _random_u64() % (ms / 4 + 1);
	s->failures_in_row++;
	s->stats.failures++;
	_warn_limited(s, "cannot deliver to the server (%s); %llu batches (%.1f MiB) "
		      "kept for later\n", why);
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	s->waiting = true;
	evtimer_add(s->retry, &tv);
}

static void _on_retry(evutil_socket_t fd, short what, void *arg)
{
	struct shipper *s = arg;

	(void)fd;
	(void)what;
	s->waiting = false;
	_kick(s);
}

static void _on_response(struct evhttp_request *req, void *arg)
{
	struct shipper *s = arg;
	int code = req ? evhttp_request_get_response_code(req) : 0;
	char why[64];

	s->in_flight = false;
	if (code == 200) {
		s->stats.batches_sent++;
		s->stats.samples_sent += s->head->b->nsamples;
		wire_encoder__ack(s->enc, wire_encoder__seq(s->enc));
		s->failures_in_row = 0;
		_pop(s);
		_kick(s);
		return;
	}
	if (code == 409) {
		/* The server lost our dictionary (it restarted): start a new session. */
		s->stats.sessions_reset++;
		wire_encoder__reset(s->enc);
		_kick(s);
		return;
	}
	if (code == 400 || code == 413 || code == 415) {
		/* Sending it again cannot help; keep the queue moving. */
		pr_warn("the server refused a batch of %u samples (HTTP %d); dropped\n",
			s->head->b->nsamples, code);
		s->stats.batches_rejected++;
		s->stats.samples_dropped += s->head->b->nsamples;
		_pop(s);
		_kick(s);
		return;
	}
	if (code)
		snprintf(why, sizeof(why), "HTTP %d%s", code, code == 401 ? ", check --token" : "");
	else
		snprintf(why, sizeof(why), "no connection");
	_retry_later(s, why);
}

static void _kick(struct shipper *s)
{
	struct evhttp_request *req;
	struct evkeyvalq *h;
	void *body = NULL;
	size_t len = 0;
	int err;

	if (s->in_flight || s->waiting || !s->head)
		return;
	err = wire_encoder__encode(s->enc, s->node, s->head->b, WIRE_ZSTD, &body, &len);
	if (err) {
		pr_warn("cannot encode a batch of %u samples: %s; dropped\n",
			s->head->b->nsamples, strerror(-err));
		s->stats.batches_rejected++;
		_pop(s);
		_kick(s);
		return;
	}
	req = evhttp_request_new(_on_response, s);
	if (!req) {
		free(body);
		_retry_later(s, "out of memory");
		return;
	}
	h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", s->host_header);
	evhttp_add_header(h, "Content-Type", "application/x-protobuf");
	evhttp_add_header(h, "Content-Encoding", "zstd");
	if (s->auth)
		evhttp_add_header(h, "Authorization", s->auth);
	evbuffer_add(evhttp_request_get_output_buffer(req), body, len);
	free(body);
	if (evhttp_make_request(s->conn, req, EVHTTP_REQ_POST, s->path)) {
		_retry_later(s, "cannot send");
		return;
	}
	s->stats.bytes_sent += len;
	s->in_flight = true;
}

void shipper__push(struct shipper *s, struct batch *b)
{
	struct queued *q = calloc(1, sizeof(*q));

	if (!q) {
		s->stats.batches_dropped++;
		s->stats.samples_dropped += b->nsamples;
		batch__free(b);
		return;
	}
	q->b = b;
	q->bytes = batch__memory(b);
	if (s->tail)
		s->tail->next = q;
	else
		s->head = q;
	s->tail = q;
	s->stats.queued_batches++;
	s->stats.queued_bytes += q->bytes;
	/* Over the cap, the oldest go; never the one on the wire. */
	while (s->stats.queued_bytes > s->max_buffer && s->head != s->tail &&
	       !(s->in_flight && s->head->next == s->tail)) {
		struct queued *victim = s->in_flight ? s->head->next : s->head;

		s->stats.batches_dropped++;
		s->stats.samples_dropped += victim->b->nsamples;
		if (victim == s->head) {
			_pop(s);
		} else {
			s->head->next = victim->next;
			if (s->tail == victim)
				s->tail = s->head;
			s->stats.queued_batches--;
			s->stats.queued_bytes -= victim->bytes;
			batch__free(victim->b);
			free(victim);
		}
	}
	_kick(s);
}

struct shipper *shipper__new(struct event_base *base, const struct shipper_opts *o,
			     char *err, size_t err_len)
{
	struct shipper *s = calloc(1, sizeof(*s));
	const char *scheme, *host, *path;
	char hh[300];
	int port;

	if (!s)
		return NULL;
	s->base = base;
	s->max_buffer = o->max_buffer;
	s->uri = evhttp_uri_parse(o->url);
	scheme = s->uri ? evhttp_uri_get_scheme(s->uri) : NULL;
	host = s->uri ? evhttp_uri_get_host(s->uri) : NULL;
	if (!scheme || strcmp(scheme, "http") || !host || !host[0]) {
		snprintf(err, err_len, "--server: '%s' is not an http://HOST:PORT URL%s", o->url,
			 scheme && !strcmp(scheme, "https") ?
			 " (https is not supported yet: put a TLS proxy in front)" : "");
		errno = EINVAL;
		goto fail;
	}
	port = evhttp_uri_get_port(s->uri);
	if (port < 0)
		port = 80;
	path = evhttp_uri_get_path(s->uri);
	snprintf(s->path, sizeof(s->path), "%s/api/v1/ingest",
		 path && strcmp(path, "/") ? path : "");
	snprintf(hh, sizeof(hh), "%s:%d", host, port);
	s->host_header = strdup(hh);
	s->node = strdup(o->node);
	if (o->token && asprintf(&s->auth, "Bearer %s", o->token) < 0)
		s->auth = NULL;
	s->enc = wire_encoder__new(_random_u64());
	if (s->enc)
		wire_encoder__set_max_bytes(s->enc, SHIPPER_DICT_MAX_BYTES);
	s->conn = evhttp_connection_base_new(base, NULL, host, port);
	s->retry = evtimer_new(base, _on_retry, s);
	if (!s->host_header || !s->node || (o->token && !s->auth) || !s->enc || !s->conn ||
	    !s->retry) {
		snprintf(err, err_len, "out of memory");
		errno = ENOMEM;
		goto fail;
	}
	evhttp_connection_set_timeout(s->conn, REQUEST_TIMEOUT_S);
	return s;
fail:
	shipper__free(s);
	return NULL;
}

void shipper__free(struct shipper *s)
{
	if (!s)
		return;
	while (s->head)
		_pop(s);
	if (s->conn)
		evhttp_connection_free(s->conn);
	if (s->retry)
		event_free(s->retry);
	if (s->uri)
		evhttp_uri_free(s->uri);
	wire_encoder__free(s->enc);
	free(s->host_header);
	free(s->node);
	free(s->auth);
	free(s);
}

int shipper__idle(const struct shipper *s)
{
	return !s->head && !s->in_flight;
}

void shipper__stats(const struct shipper *s, struct shipper_stats *out)
{
	*out = s->stats;
}
