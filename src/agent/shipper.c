// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <malloc.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "agent/shipper.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/tls.h"
#include "format/wire.h"

#define BACKOFF_MIN_MS 1000
#define BACKOFF_MAX_MS 60000
#define REQUEST_TIMEOUT_S 30
/*
 * The server answers a line of JSON. evhttp keeps an answer's headers and
 * body in memory, however long: a broken or hostile server could stream
 * gigabytes into the agent. Past this the request fails (and is retried).
 */
#define ANSWER_MAX_BYTES (64u << 10)
/*
 * While draining for a stop: a server that answers but is busy (a 503 when
 * its ingest budget is spent) is asked again this soon; a server that does
 * not answer twice in a row is given up on, as the backoff that would wait
 * for it does not fit in a stop.
 */
#define DRAIN_RETRY_MS 200
#define DRAIN_MAX_MISSES 2
struct queued {
	struct batch *b;
	size_t bytes;
	struct queued *next;
};

struct shipper {
	struct event_base *base;
	struct evhttp_connection *conn;
	/*
	 * https: libevent cannot reconnect a TLS bufferevent (its SSL object
	 * is spent), so a connection that closed or failed is replaced by a
	 * new one, outside of libevent's callbacks, before the next request.
	 */
	SSL_CTX *tls;
	SSL *ssl;		/* conn's session, owned by its bufferevent */
	bool conn_dead;
	char *ca_file;
	const char *host;	/* in uri */
	int port;
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
	int answer_error;	/* enum evhttp_request_error of the request, or -1 */
	bool waiting;		/* a retry is scheduled */
	uint32_t failures_in_row;
	uint64_t last_warn_s, last_drop_warn_s, last_reset_warn_s;
	bool draining;
	uint32_t drain_misses;	/* requests in a row with no answer while draining */
	char gave_up[768];	/* why the drain stopped trying; "" while it goes on */
	struct shipper_stats stats;
};

static void _kick(struct shipper *s);

static void _on_close(struct evhttp_connection *conn, void *arg)
{
	struct shipper *s = arg;

	(void)conn;
	if (s->tls)
		s->conn_dead = true;
}

/* A new connection to the server; over TLS with a new session. Returns 0 or -errno. */
static int _connect(struct shipper *s, char *err, size_t err_len)
{
	struct bufferevent *bev = NULL;

	if (s->tls) {
		SSL *ssl = tls__client_ssl(s->tls, s->host, err, err_len);

		if (!ssl)
			return -ENOMEM;
		bev = bufferevent_openssl_socket_new(s->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING,
						     BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
		if (!bev) {
			SSL_free(ssl);
			snprintf(err, err_len, "out of memory");
			return -ENOMEM;
		}
		/* HTTP frames every message; a close without close_notify loses nothing. */
		bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
		s->ssl = ssl;
	}
	/* With bev NULL, evhttp makes (and remakes) a plain socket itself. */
	s->conn = evhttp_connection_base_bufferevent_new(s->base, NULL, bev, s->host, s->port);
	if (!s->conn) {
		if (bev)
			bufferevent_free(bev);
		s->ssl = NULL;
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	evhttp_connection_set_timeout(s->conn, REQUEST_TIMEOUT_S);
	evhttp_connection_set_max_headers_size(s->conn, ANSWER_MAX_BYTES);
	evhttp_connection_set_max_body_size(s->conn, ANSWER_MAX_BYTES);
	evhttp_connection_set_closecb(s->conn, _on_close, s);
	s->conn_dead = false;
	return 0;
}

/* Why a request got no answer, for the log: TLS says more than "no connection". */
static void _why_failed(struct shipper *s, char *why, size_t len)
{
	const char *what = s->answer_error == EVREQ_HTTP_TIMEOUT ? "no answer in time" :
			   s->answer_error == EVREQ_HTTP_INVALID_HEADER ? "an invalid or oversized answer" :
			   s->answer_error == EVREQ_HTTP_DATA_TOO_LONG ? "an answer over 64 KiB" :
			   "no connection";
	struct bufferevent *bev;
	unsigned long code = 0, e;

	if (!s->tls) {
		snprintf(why, len, "%s", what);
		return;
	}
	bev = evhttp_connection_get_bufferevent(s->conn);
	while (bev && (e = bufferevent_get_openssl_error(bev)))
		if (!code)
			code = e;
	if (!code)
		code = tls__first_error();
	tls__explain(s->ssl, s->ca_file, code, what, why, len);
}

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
	s->stats.queued_samples -= q->b->nsamples;
	s->stats.queued_bytes -= q->bytes;
	batch__free(q->b);
	free(q);
}

/*
 * True at most once a minute per *last_s: an unreachable server or a full
 * buffer must not flood the log.
 */
static bool _may_warn(uint64_t *last_s)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	if (*last_s && (uint64_t)ts.tv_sec - *last_s < 60)
		return false;
	*last_s = ts.tv_sec ? ts.tv_sec : 1;
	return true;
}

static void _retry_in(struct shipper *s, uint64_t ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };

	s->waiting = true;
	evtimer_add(s->retry, &tv);
}

static void _retry_later(struct shipper *s, const char *why)
{
	uint32_t shift = s->failures_in_row < 6 ? s->failures_in_row : 6;
	uint64_t ms = (uint64_t)BACKOFF_MIN_MS << shift;

	if (ms > BACKOFF_MAX_MS)
		ms = BACKOFF_MAX_MS;
	/* Up to a quarter of jitter, so a fleet does not retry in lockstep. */
	ms += _random_u64() % (ms / 4 + 1);
	s->failures_in_row++;
	s->stats.failures++;
	if (_may_warn(&s->last_warn_s))
		pr_warn("cannot deliver to the server (%s); %llu batches (%.1f MiB) kept for later\n",
			why, (unsigned long long)s->stats.queued_batches,
			s->stats.queued_bytes / 1048576.0);
	_retry_in(s, ms);
}

/* A drain is over once nothing is left: let the caller's loop go on. */
static void _drain_check(struct shipper *s)
{
	if (s->draining && shipper__idle(s))
		event_base_loopbreak(s->base);
}

/*
 * A request failed: with code 0 it got no answer (why says what happened),
 * else the server answered code. Retried with backoff, or while draining,
 * at once or given up (see shipper__drain()).
 */
static void _failed(struct shipper *s, int code, const char *why)
{
	bool later = code >= 500 || code == 408 || code == 429;

	if (!s->draining) {
		_retry_later(s, why);
		return;
	}
	s->stats.failures++;
	if (code ? !later : ++s->drain_misses >= DRAIN_MAX_MISSES) {
		snprintf(s->gave_up, sizeof(s->gave_up), code ? "the server answered %s" :
			 "the server cannot be reached (%s)", why);
		event_base_loopbreak(s->base);
		return;
	}
	_retry_in(s, code ? DRAIN_RETRY_MS : 0);
}

static void _on_retry(evutil_socket_t fd, short what, void *arg)
{
	struct shipper *s = arg;
	char err[256];

	(void)fd;
	(void)what;
	s->waiting = false;
	if (s->conn_dead) {
		evhttp_connection_free(s->conn);
		s->conn = NULL;
		s->ssl = NULL;
		if (_connect(s, err, sizeof(err))) {
			s->conn_dead = true;
			_failed(s, 0, err);
			return;
		}
	}
	_kick(s);
}

/* The start of the server's answer, as text for the log ("" when none). */
static void _answer_text(struct evhttp_request *req, char *buf, size_t len)
{
	struct evbuffer *in = req ? evhttp_request_get_input_buffer(req) : NULL;
	ev_ssize_t n = in ? evbuffer_copyout(in, buf, len - 1) : 0;

	buf[n > 0 ? n : 0] = '\0';
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '\r' || (unsigned char)*p < ' ')
			*p = ' ';
}

static void _on_response(struct evhttp_request *req, void *arg)
{
	struct shipper *s = arg;
	int code = req ? evhttp_request_get_response_code(req) : 0;
	char why[768];

	s->in_flight = false;
	if (code == 200) {
		s->stats.batches_sent++;
		s->stats.samples_sent += s->head->b->nsamples;
		wire_encoder__ack(s->enc, wire_encoder__seq(s->enc));
		s->failures_in_row = 0;
		s->drain_misses = 0;
		_pop(s);
		_kick(s);
		_drain_check(s);
		return;
	}
	if (code == 409 && wire_encoder__has_base(s->enc)) {
		/*
		 * The batch built on entries the server no longer holds: it
		 * forgot our session (its budget, an idle hour, a restart). The
		 * same batch goes again at once in a new session, with every
		 * entry it uses: nothing is dropped. A 409 for a batch that built
		 * on nothing is something else, and is retried like a 5xx.
		 */
		s->stats.sessions_reset++;
		s->drain_misses = 0;
		if (_may_warn(&s->last_reset_warn_s)) {
			_answer_text(req, why, 200);
			pr_info("the server no longer holds this agent's session (%s); the batch goes "
				"again with its dictionary (%llu times so far)\n",
				why[0] ? why : "HTTP 409", (unsigned long long)s->stats.sessions_reset);
		}
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
		s->drain_misses = 0;
		_pop(s);
		_kick(s);
		_drain_check(s);
		return;
	}
	if (code) {
		snprintf(why, sizeof(why), "HTTP %d%s", code, code == 401 ? ", check --token" : "");
	} else {
		_why_failed(s, why, sizeof(why));
		if (s->tls)
			s->conn_dead = true;
	}
	_failed(s, code, why);
}

static void _on_answer_error(enum evhttp_request_error e, void *arg)
{
	struct shipper *s = arg;

	s->answer_error = e;
}

static void _free_body(const void *data, size_t len, void *arg)
{
	(void)len;
	(void)arg;
	free((void *)data);
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
	if (s->conn_dead) {
		/* Replaced from the retry timer: we may be inside the old one's callback. */
		struct timeval now = { 0, 0 };

		s->waiting = true;
		evtimer_add(s->retry, &now);
		return;
	}
	err = wire_encoder__encode(s->enc, s->node, s->head->b, WIRE_ZSTD, &body, &len);
	if (err) {
		pr_warn("cannot encode a batch of %u samples: %s; dropped\n",
			s->head->b->nsamples, strerror(-err));
		s->stats.batches_rejected++;
		s->stats.samples_dropped += s->head->b->nsamples;
		_pop(s);
		_kick(s);
		_drain_check(s);
		return;
	}
	req = evhttp_request_new(_on_response, s);
	if (!req) {
		free(body);
		_failed(s, 0, "out of memory");
		return;
	}
	s->answer_error = -1;
	evhttp_request_set_error_cb(req, _on_answer_error);
	h = evhttp_request_get_output_headers(req);
	evhttp_add_header(h, "Host", s->host_header);
	evhttp_add_header(h, "Content-Type", "application/x-protobuf");
	evhttp_add_header(h, "Content-Encoding", "zstd");
	if (s->auth)
		evhttp_add_header(h, "Authorization", s->auth);
	/* Sent from where it lies, freed once written: no copy of the batch. */
	if (evbuffer_add_reference(evhttp_request_get_output_buffer(req), body, len, _free_body,
				   NULL)) {
		free(body);
		evhttp_request_free(req);
		_failed(s, 0, "out of memory");
		return;
	}
	/*
	 * The encoded batch and zstd's workspace were a flush's largest
	 * short-lived buffers, many times the batch's size: give back the pages
	 * of what the heap kept of them, or the agent's RSS keeps them until
	 * the next flush.
	 */
	malloc_trim(0);
	if (evhttp_make_request(s->conn, req, EVHTTP_REQ_POST, s->path)) {
		_failed(s, 0, "cannot send");
		return;
	}
	if (s->tls) {
		/*
		 * The request goes out as several TLS records, one write(2) each:
		 * without TCP_NODELAY the body waits for the server's delayed ACK.
		 * The socket exists once the request is made (a blocking resolve).
		 */
		int fd = bufferevent_getfd(evhttp_connection_get_bufferevent(s->conn)), one = 1;

		if (fd >= 0)
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	s->stats.bytes_sent += len;
	s->in_flight = true;
}

void shipper__push(struct shipper *s, struct batch *b)
{
	struct queued *q = calloc(1, sizeof(*q));
	uint64_t dropped = 0, dropped_samples = 0;

	if (!q) {
		s->stats.batches_dropped++;
		s->stats.samples_dropped += b->nsamples;
		batch__free(b);
		return;
	}
	/*
	 * A batch is filled in tables and arrays that grow by doubling and by
	 * 64 KiB chunks: a small one holds many times its content. Trimmed,
	 * it holds what it carries, and the cap counts that. A failure to
	 * trim leaves it whole, counted at what it holds.
	 */
	batch__compact(b);
	q->b = b;
	q->bytes = sizeof(*q) + batch__memory(b);
	if (s->tail)
		s->tail->next = q;
	else
		s->head = q;
	s->tail = q;
	s->stats.queued_batches++;
	s->stats.queued_samples += b->nsamples;
	s->stats.queued_bytes += q->bytes;
	/* Over the cap, the oldest go; never the one on the wire. */
	while (s->stats.queued_bytes > s->max_buffer && s->head != s->tail &&
	       !(s->in_flight && s->head->next == s->tail)) {
		struct queued *victim = s->in_flight ? s->head->next : s->head;

		dropped++;
		dropped_samples += victim->b->nsamples;
		s->stats.batches_dropped++;
		s->stats.samples_dropped += victim->b->nsamples;
		if (victim == s->head) {
			_pop(s);
		} else {
			s->head->next = victim->next;
			if (s->tail == victim)
				s->tail = s->head;
			s->stats.queued_batches--;
			s->stats.queued_samples -= victim->b->nsamples;
			s->stats.queued_bytes -= victim->bytes;
			batch__free(victim->b);
			free(victim);
		}
	}
	if (dropped && _may_warn(&s->last_drop_warn_s))
		pr_warn("the buffer is full (%.1f MiB, %llu batches): dropped the oldest %llu "
			"batches (%llu samples); %llu batches dropped so far\n",
			s->max_buffer / 1048576.0, (unsigned long long)s->stats.queued_batches,
			(unsigned long long)dropped, (unsigned long long)dropped_samples,
			(unsigned long long)s->stats.batches_dropped);
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
	if (!scheme || (strcmp(scheme, "http") && strcmp(scheme, "https")) || !host || !host[0]) {
		snprintf(err, err_len, "--server: '%s' is not an http[s]://HOST:PORT URL", o->url);
		errno = EINVAL;
		goto fail;
	}
	if (!strcmp(scheme, "https")) {
		s->tls = tls__client_ctx(o->ca_file, err, err_len);
		if (!s->tls)
			goto fail;
		if (o->ca_file && !(s->ca_file = strdup(o->ca_file))) {
			snprintf(err, err_len, "out of memory");
			errno = ENOMEM;
			goto fail;
		}
	} else if (o->ca_file) {
		snprintf(err, err_len, "--ca-file needs an https:// --server");
		errno = EINVAL;
		goto fail;
	}
	port = evhttp_uri_get_port(s->uri);
	if (port < 0)
		port = s->tls ? 443 : 80;
	s->host = host;
	s->port = port;
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
	s->retry = evtimer_new(base, _on_retry, s);
	if (!s->host_header || !s->node || (o->token && !s->auth) || !s->enc || !s->retry) {
		snprintf(err, err_len, "out of memory");
		errno = ENOMEM;
		goto fail;
	}
	if (_connect(s, err, err_len)) {
		errno = ENOMEM;
		goto fail;
	}
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
	SSL_CTX_free(s->tls);
	free(s->ca_file);
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

void shipper__drain(struct shipper *s)
{
	s->draining = true;
	s->drain_misses = 0;
	s->gave_up[0] = '\0';
	if (s->waiting) {
		/* A TLS connection to replace is replaced at once, from the timer. */
		evtimer_del(s->retry);
		s->waiting = false;
	}
	_kick(s);
}

const char *shipper__gave_up(const struct shipper *s)
{
	return s->gave_up[0] ? s->gave_up : NULL;
}

void shipper__stats(const struct shipper *s, struct shipper_stats *out)
{
	*out = s->stats;
	out->max_bytes = s->max_buffer;
}
