/* SPDX-License-Identifier: Apache-2.0 */
/* Shared by the server's route files: one request's context and replies. */
#ifndef FW_SERVER_REQUEST_H
#define FW_SERVER_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "server/metrics.h"

struct gate;
struct store;
struct strbuf;
struct wire_session_table;

struct server {
	struct event_base *base;
	struct evhttp *http;
	struct evhttp_bound_socket *sock;
	struct store *store;
	struct wire_session_table *sessions;
	struct ssl_ctx_st *tls;		/* NULL: plain HTTP */
	char *write_token, *read_token;
	size_t max_body;
	unsigned int default_hz;
	uint16_t port;
	struct server_metrics metrics;
	struct gate *gate;		/* connections, heads, body budget (gate.c) */
};

struct request {
	struct server *srv;
	struct evhttp_request *req;
	struct evkeyvalq params;
	enum server_route route;
	int status;
};

/* Replies; each records the status for /metrics. body is borrowed. */
void request__reply(struct request *r, int status, const char *content_type,
		    const void *body, size_t len);
void request__reply_json(struct request *r, int status, struct strbuf *body);
/* {"error": msg} with the status. */
void request__error(struct request *r, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* A query parameter, or NULL. Borrowed. */
const char *request__param(struct request *r, const char *name);
/*
 * The query window from `from` and `to` (Unix seconds with fractions,
 * RFC 3339, or now-1h style); defaults: the last hour. Replies 400 and
 * returns -1 on a bad value.
 */
int request__window(struct request *r, int64_t *from, int64_t *to);
/*
 * The selector in ?query= into *sel (owned; NULL for "everything"). Replies
 * 400 and returns -1 on a bad selector.
 */
struct selector;
int request__selector(struct request *r, struct selector **sel);

void routes__ingest(struct request *r);
void routes__ingest_pprof(struct request *r);
void routes__ingest_folded(struct request *r);
void routes__profile(struct request *r);
/* GPU activity intervals and the kernel table (routes_gpu_kernels.c). */
void routes__gpu_kernels(struct request *r);
void routes__gpu_kernels_top(struct request *r);
/* CPU samples of a process while its GPU was idle (routes_gpu_idle.c). */
void routes__gpu_idle(struct request *r);
void routes__flamechart(struct request *r);
void routes__series(struct request *r);
void routes__labels(struct request *r);
void routes__label_values(struct request *r, const char *name);
void routes__cpu_strips(struct request *r);

#endif
