/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SERVER_GATE_H
#define FW_SERVER_GATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/*
 * What clients can make the server hold: descriptors, request heads and
 * request bodies. libevent 2.1's evhttp has no connection limit, no limit
 * on a request line and no hook between a request's head and its body, so
 * the gate makes each connection's bufferevent (evhttp's bevcb) and watches
 * its input buffer: every byte read is held back until the gate has seen
 * the whole request head, and only then handed to evhttp, or replaced by a
 * request the server answers with a refusal. Writes are evhttp's own.
 *
 * - Connections: at most max_connections are served. At the cap a new one
 *   closes the connection idle longest (no request in progress); with none
 *   idle it is answered 503 (Connection: close). Beyond what the descriptor
 *   limit allows, accepting pauses; accept() errors pause it too, close an
 *   idle connection, and are logged once per interval with a count.
 * - Heads: a request line over GATE_URL_MAX bytes gets 414, a head over
 *   GATE_HEAD_MAX 431, once the client has sent it (read past, not kept);
 *   a head must be complete within GATE_HEAD_TIMEOUT_S of the connection's
 *   start or its previous reply.
 * - Bodies: a request with a body is let in only if its Content-Length fits
 *   what is left of max_body_memory, the bytes of bodies in flight (read,
 *   or still to be read) over all connections. Otherwise it gets 503 with
 *   Retry-After once its body has been read past, so that the client sees
 *   the answer rather than a reset. A chunked body counts as max_body,
 *   and its connection closes after the reply; other Transfer-Encodings
 *   get 411.
 *
 * Single-threaded, on the server's event loop.
 */
struct bufferevent;
struct event_base;
struct evconnlistener;
struct evhttp;
struct evhttp_request;
struct server_metrics;

#define GATE_DEFAULT_CONNECTIONS 1024
#define GATE_HEAD_MAX (32u << 10)
#define GATE_URL_MAX (16u << 10)
#define GATE_HEAD_TIMEOUT_S 30

struct gate_opts {
	size_t max_connections;		/* 0: GATE_DEFAULT_CONNECTIONS */
	size_t max_body;		/* bytes; larger bodies get 413 */
	size_t max_body_memory;		/* bytes; 0: 4 x max_body */
	/* Makes a new connection's bufferevent (TLS); NULL: a plain socket one. */
	struct bufferevent *(*make_bev)(struct event_base *base, void *arg);
	void *make_arg;
};

struct gate;

/*
 * Starts gating http's connections, accepted on lev (evhttp's, borrowed).
 * Connection caps are lowered to what RLIMIT_NOFILE leaves. Counters go to
 * m (borrowed). Returns NULL with errno set and a message in err.
 */
struct gate *gate__new(struct event_base *base, struct evhttp *http, struct evconnlistener *lev,
		       const struct gate_opts *o, struct server_metrics *m, char *err,
		       size_t err_len);
/* Forgets the listener and stops the timers: call before evhttp_free(). */
void gate__stop(struct gate *g);
/* After evhttp_free(). Accepts NULL. */
void gate__free(struct gate *g);

/*
 * Called first for each request evhttp hands over. Returns 0 to serve it,
 * or the status to refuse it with: *why says why (static or owned by the
 * gate until the reply), *retry_after_s is > 0 for a 503.
 */
int gate__begin(struct gate *g, struct evhttp_request *req, const char **why,
		int *retry_after_s);

/* Connections open and bytes of bodies let in now, for /metrics. */
size_t gate__connections(const struct gate *g);
size_t gate__body_bytes(const struct gate *g);
/* The connection cap in force (after the descriptor limit). */
size_t gate__max_connections(const struct gate *g);

/*
 * What the gate reads from one complete request head (p, len: request line
 * and header lines up to and including the empty line). `body` is true for
 * methods whose body evhttp reads (POST, PUT, PATCH); refuse is 0 or the
 * status the head gets (400, 411, 413, 414), with why.
 */
struct gate_head {
	bool body;
	bool expect_continue;
	bool chunked;		/* Transfer-Encoding: chunked; length is then max_body */
	uint64_t length;	/* Content-Length, 0 without one */
	int refuse;
	char why[96];
};
void gate__parse_head(const char *p, size_t len, size_t max_body, struct gate_head *h);

#endif
