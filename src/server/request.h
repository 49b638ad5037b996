/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the server's route files: one request's context, replies
 * (request.c) and parameters (params.c).
 */
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
	uint64_t sessions_logged;	/* sessions forgotten for the budget, as last logged */
	int64_t sessions_log_s;		/* CLOCK_MONOTONIC s of that log line */
};

struct request {
	struct server *srv;
	struct evhttp_request *req;
	const char *path;		/* borrowed from req's URI; "/" when it has none */
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
 * RFC 3339, or now-1h style, at most PARAM_MAX_TIME_NS); defaults: the
 * last hour (from at least 0). Replies 400 and returns -1 on a bad value.
 */
int request__window(struct request *r, int64_t *from, int64_t *to);
/*
 * The selector in ?query= into *sel (owned; NULL for "everything"). Replies
 * 400 and returns -1 on a bad selector.
 */
struct selector;
int request__selector(struct request *r, struct selector **sel);
/*
 * The profile type in ?type= (cpu, gpu_time or offcpu; absent: cpu) as a
 * SAMPLE_* value. Replies 400 and returns -1 on any other.
 */
int request__type(struct request *r, uint32_t *type);

/*
 * Query parameters (params.c). Times a request names end at 2200-01-01
 * and durations at ten years, so that a time plus a few durations (a grid
 * step, a lookback) stays far inside int64 wherever a route or a store
 * adds them.
 */
#define PARAM_MAX_TIME_NS (7258118400LL * 1000000000LL)
#define PARAM_MAX_DURATION_NS (3650LL * 86400 * 1000000000LL)
/* A node name, as long as the wire lets an agent send it. */
#define PARAM_MAX_NODE_LEN 255
/* param__parse_duration(): a plain number is nanoseconds too. */
#define PARAM_BARE_NS 1u

/*
 * Text alone, s borrowed: 0, or -EINVAL (empty, not of the form: signs,
 * blanks, trailing bytes) or -ERANGE (outside [min, max], overflow
 * included), leaving *out untouched. uint: decimal digits only. duration:
 * as duration__parse() takes them (10s, 1m30s, 500ms). double: a finite
 * decimal number (no nan, inf, hex). time: as time__parse() takes them, at
 * most PARAM_MAX_TIME_NS.
 */
int param__parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);
int param__parse_duration(const char *s, unsigned int flags, int64_t min, int64_t max,
			  int64_t *out);
int param__parse_double(const char *s, double min, double max, double *out);
int param__parse_time(const char *s, int64_t *out);

/*
 * Parameter name of r through the parsers above: absent gives def; a bad
 * value replies 400 naming the parameter and the range it takes, and
 * returns -1. bool takes 0, 1, false, true; text (borrowed, NULL when
 * absent) at most max_len bytes and no control characters.
 */
int request__uint_param(struct request *r, const char *name, uint64_t def, uint64_t min,
			uint64_t max, uint64_t *out);
int request__duration_param(struct request *r, const char *name, unsigned int flags,
			    int64_t def, int64_t min, int64_t max, int64_t *out);
int request__double_param(struct request *r, const char *name, double def, double min,
			  double max, double *out);
int request__bool_param(struct request *r, const char *name, bool def, bool *out);
int request__text_param(struct request *r, const char *name, size_t max_len, const char **out);

#endif
