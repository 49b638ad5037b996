// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/queue.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "common/clock.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/timeparse.h"
#include "common/tls.h"
#include "format/wire.h"
#include "server/gate.h"
#include "server/request.h"
#include "server/routes_gpu.h"
#include "server/server.h"
#include "server/static.h"
#include "store/selector.h"
#include "store/store.h"

#define MAX_SESSIONS 4096
#define MAX_SESSION_BYTES (256u << 20)
/* Connections the kernel queues while the server is not accepting. */
#define LISTEN_BACKLOG 511

static enum status_class _class(int status)
{
	return status < 400 ? STATUS_2XX : status < 500 ? STATUS_4XX : STATUS_5XX;
}

void request__reply(struct request *r, int status, const char *content_type,
		    const void *body, size_t len)
{
	struct evbuffer *buf = evbuffer_new();
	struct evkeyvalq *h = evhttp_request_get_output_headers(r->req);

	r->status = status;
	if (content_type)
		evhttp_add_header(h, "Content-Type", content_type);
	evhttp_add_header(h, "Cache-Control", "no-store");
	if (buf && len)
		evbuffer_add(buf, body, len);
	evhttp_send_reply(r->req, status, NULL, buf);
	if (buf)
		evbuffer_free(buf);
}

void request__reply_json(struct request *r, int status, struct strbuf *body)
{
	if (body->oom) {
		request__error(r, 500, "out of memory");
		return;
	}
	request__reply(r, status, "application/json", body->buf, body->len);
}

void request__error(struct request *r, int status, const char *fmt, ...)
{
	struct strbuf sb = STRBUF_INIT;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	strbuf__puts(&sb, "{\"error\":");
	strbuf__json_string(&sb, msg);
	strbuf__puts(&sb, "}\n");
	request__reply(r, status, "application/json", sb.buf, sb.len);
	strbuf__release(&sb);
}

const char *request__param(struct request *r, const char *name)
{
	return evhttp_find_header(&r->params, name);
}

int request__selector(struct request *r, struct selector **sel)
{
	const char *q = request__param(r, "query");
	char err[256];

	*sel = NULL;
	if (!q || !q[0])
		return 0;
	*sel = selector__parse(q, err, sizeof(err));
	if (!*sel) {
		request__error(r, 400, "query: %s", err);
		return -1;
	}
	return 0;
}

int request__window(struct request *r, int64_t *from, int64_t *to)
{
	const char *f = request__param(r, "from"), *t = request__param(r, "to");

	if (param__parse_time(t ? t : "now", to)) {
		request__error(r, 400, "to: '%.64s' is not a time up to 2200-01-01 (Unix seconds, "
			       "RFC 3339 or now-1h)", t ? t : "now");
		return -1;
	}
	if (f) {
		if (param__parse_time(f, from)) {
			request__error(r, 400, "from: '%.64s' is not a time up to 2200-01-01 (Unix "
				       "seconds, RFC 3339 or now-1h)", f);
			return -1;
		}
	} else {
		*from = *to > 3600LL * 1000000000LL ? *to - 3600LL * 1000000000LL : 0;
	}
	if (*from >= *to) {
		request__error(r, 400, "from must be before to");
		return -1;
	}
	return 0;
}

/*
 * Bearer tokens are compared in constant time: a timing difference must not
 * reveal how much of a guess was right.
 */
static bool _token_ok(struct evhttp_request *req, const char *want)
{
	const char *auth;
	size_t wl, gl;
	unsigned char diff = 0;

	if (!want)
		return true;
	auth = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
	if (!auth || strncasecmp(auth, "Bearer ", 7))
		return false;
	auth += 7;
	wl = strlen(want);
	gl = strlen(auth);
	for (size_t i = 0; i < wl; i++)
		diff |= (unsigned char)want[i] ^ (unsigned char)(i < gl ? auth[i] : 0);
	return diff == 0 && gl == wl;
}

static void _serve_healthz(struct request *r)
{
	request__reply(r, 200, "text/plain", "ok\n", 3);
}

static void _serve_metrics(struct request *r)
{
	struct strbuf sb = STRBUF_INIT;

	server_metrics__write(&r->srv->metrics, r->srv->store, &sb);
	strbuf__printf(&sb, "# HELP flamewatch_http_connections Connections open.\n"
		       "# TYPE flamewatch_http_connections gauge\nflamewatch_http_connections %zu\n"
		       "# HELP flamewatch_http_body_bytes Request body bytes let in and not yet "
		       "answered.\n# TYPE flamewatch_http_body_bytes gauge\n"
		       "flamewatch_http_body_bytes %zu\n", gate__connections(r->srv->gate),
		       gate__body_bytes(r->srv->gate));
	routes__gpu_prometheus(r->srv->store, &sb);
	if (sb.oom) {
		request__error(r, 500, "out of memory");
	} else {
		request__reply(r, 200, "text/plain; version=0.0.4", sb.buf, sb.len);
	}
	strbuf__release(&sb);
}

static void _dispatch(struct evhttp_request *req, void *arg)
{
	struct server *srv = arg;
	struct request r = { .srv = srv, .req = req, .route = ROUTE_OTHER };
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	enum evhttp_cmd_type method = evhttp_request_get_command(req);
	const char *path = evhttp_uri_get_path(uri), *query = evhttp_uri_get_query(uri);
	bool is_get = method == EVHTTP_REQ_GET || method == EVHTTP_REQ_HEAD;
	bool is_post = method == EVHTTP_REQ_POST;
	uint64_t t0 = clock__mono_ns();
	const char *why;
	int refuse, retry;

	TAILQ_INIT(&r.params);
	/* The gate reads each head first; what it refused ends here. */
	refuse = gate__begin(srv->gate, req, &why, &retry);
	if (refuse) {
		struct evkeyvalq *h = evhttp_request_get_output_headers(req);
		char v[16];

		evhttp_add_header(h, "Connection", "close");
		if (retry) {
			snprintf(v, sizeof(v), "%d", retry);
			evhttp_add_header(h, "Retry-After", v);
		}
		request__error(&r, refuse, "%s", why);
		goto out;
	}
	if (!path)
		path = "/";
	if (query && evhttp_parse_query_str(query, &r.params)) {
		request__error(&r, 400, "malformed query string");
		goto out;
	}

	if (!strcmp(path, "/healthz")) {
		r.route = ROUTE_HEALTHZ;
		_serve_healthz(&r);
		goto out;
	}
	if (!strncmp(path, "/api/v1/ingest", 14)) {
		r.route = !strcmp(path, "/api/v1/ingest/pprof") ? ROUTE_INGEST_PPROF :
			  !strcmp(path, "/api/v1/ingest/folded") ? ROUTE_INGEST_FOLDED :
			  ROUTE_INGEST;
		if (!_token_ok(req, srv->write_token)) {
			srv->metrics.ingest_rejected_auth++;
			evhttp_add_header(evhttp_request_get_output_headers(req),
					  "WWW-Authenticate", "Bearer");
			request__error(&r, 401, "missing or wrong bearer token");
			goto out;
		}
		if (!is_post) {
			request__error(&r, 405, "ingest takes POST");
			goto out;
		}
		if (!strcmp(path, "/api/v1/ingest"))
			routes__ingest(&r);
		else if (r.route == ROUTE_INGEST_PPROF)
			routes__ingest_pprof(&r);
		else if (r.route == ROUTE_INGEST_FOLDED)
			routes__ingest_folded(&r);
		else
			request__error(&r, 404, "no such ingest endpoint: %s", path);
		goto out;
	}
	/* The UI's own files need no token: the page is what asks for one. */
	if (static__is_ui_path(path)) {
		r.route = ROUTE_STATIC;
		if (!is_get)
			request__error(&r, 405, "%s takes GET", path);
		else
			static__serve(&r, path);
		goto out;
	}
	if (!strcmp(path, "/metrics") || !strncmp(path, "/api/", 5)) {
		r.route = !strcmp(path, "/metrics") ? ROUTE_METRICS : ROUTE_OTHER;
		if (!_token_ok(req, srv->read_token)) {
			evhttp_add_header(evhttp_request_get_output_headers(req),
					  "WWW-Authenticate", "Bearer");
			request__error(&r, 401, "missing or wrong bearer token");
			goto out;
		}
		if (!is_get) {
			request__error(&r, 405, "%s takes GET", path);
			goto out;
		}
	}
	if (!strcmp(path, "/metrics")) {
		_serve_metrics(&r);
	} else if (!strcmp(path, "/api/v1/profile")) {
		r.route = ROUTE_PROFILE;
		routes__profile(&r);
	} else if (!strcmp(path, "/api/v1/gpu/kernels")) {
		r.route = ROUTE_GPU_KERNELS;
		routes__gpu_kernels(&r);
	} else if (!strcmp(path, "/api/v1/gpu/kernels/top")) {
		r.route = ROUTE_GPU_KERNELS_TOP;
		routes__gpu_kernels_top(&r);
	} else if (!strcmp(path, "/api/v1/gpu/idle")) {
		r.route = ROUTE_GPU_IDLE;
		routes__gpu_idle(&r);
	} else if (!strcmp(path, "/api/v1/flamechart")) {
		r.route = ROUTE_FLAMECHART;
		routes__flamechart(&r);
	} else if (!strcmp(path, "/api/v1/series")) {
		r.route = ROUTE_SERIES;
		routes__series(&r);
	} else if (!strcmp(path, "/api/v1/gpu/metrics")) {
		r.route = ROUTE_GPU_METRICS;
		routes__gpu_metrics(&r);
	} else if (!strcmp(path, "/api/v1/cpu/strips")) {
		r.route = ROUTE_CPU_STRIPS;
		routes__cpu_strips(&r);
	} else if (!strcmp(path, "/api/v1/labels")) {
		r.route = ROUTE_LABELS;
		routes__labels(&r);
	} else if (!strncmp(path, "/api/v1/labels/", 15) && strlen(path) > 22 &&
		   !strcmp(path + strlen(path) - 7, "/values")) {
		char name[256];
		size_t len = strlen(path) - 15 - 7;

		r.route = ROUTE_LABEL_VALUES;
		if (len >= sizeof(name)) {
			request__error(&r, 400, "label name too long");
			goto out;
		}
		memcpy(name, path + 15, len);
		name[len] = '\0';
		routes__label_values(&r, name);
	} else {
		request__error(&r, 404, "no such endpoint: %s", path);
	}
out:
	srv->metrics.requests[r.route][_class(r.status)]++;
	srv->metrics.request_ns[r.route] += clock__mono_ns() - t0;
	evhttp_clear_headers(&r.params);
}

int server__parse_listen(const char *listen, char *host, size_t host_len, uint16_t *port)
{
	const char *colon;
	size_t hl;
	char *end;
	unsigned long p;

	if (listen[0] == '[') {
		const char *close = strchr(listen, ']');

		if (!close || close[1] != ':')
			return -EINVAL;
		hl = close - listen - 1;
		listen++;
		colon = close + 1;
	} else {
		colon = strrchr(listen, ':');
		if (!colon)
			return -EINVAL;
		hl = colon - listen;
	}
	if (hl == 0 || hl >= host_len)
		return -EINVAL;
	memcpy(host, listen, hl);
	host[hl] = '\0';
	errno = 0;
	p = strtoul(colon + 1, &end, 10);
	if (errno || *end || !colon[1] || p > 65535)
		return -EINVAL;
	*port = p;
	return 0;
}

int server__is_loopback(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;

	if (!strcmp(host, "localhost"))
		return 1;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return 0;
}

/* evhttp asks for each accepted connection's bufferevent: a TLS one. */
static struct bufferevent *_tls_bev(struct event_base *base, void *arg)
{
	struct server *s = arg;
	SSL *ssl = SSL_new(s->tls);
	struct bufferevent *bev;

	if (!ssl)
		return NULL;
	bev = bufferevent_openssl_socket_new(base, -1, ssl, BUFFEREVENT_SSL_ACCEPTING,
					     BEV_OPT_CLOSE_ON_FREE);
	if (!bev)
		SSL_free(ssl);
	return bev;
}

struct server *server__new(struct event_base *base, struct store *store,
			   const struct server_opts *opts, char *err, size_t err_len)
{
	struct server *s = calloc(1, sizeof(*s));
	struct gate_opts go = {
		.max_connections = opts->max_connections,
		.max_body = opts->max_body,
		.max_body_memory = opts->max_body_memory,
	};
	struct evutil_addrinfo hints = {
		.ai_family = AF_UNSPEC,
		.ai_socktype = SOCK_STREAM,
		.ai_flags = EVUTIL_AI_PASSIVE | EVUTIL_AI_ADDRCONFIG,
	}, *ai = NULL;
	struct evconnlistener *lev;
	char host[256], portstr[8];
	uint16_t port;
	evutil_socket_t fd;
	int rc;

	if (!s)
		return NULL;
	if (server__parse_listen(opts->listen, host, sizeof(host), &port)) {
		snprintf(err, err_len, "--listen: '%s' is not HOST:PORT", opts->listen);
		errno = EINVAL;
		goto fail;
	}
	s->base = base;
	s->store = store;
	s->max_body = opts->max_body;
	s->default_hz = opts->default_hz ? opts->default_hz : 19;
	s->write_token = opts->write_token ? strdup(opts->write_token) : NULL;
	s->read_token = opts->read_token ? strdup(opts->read_token) : NULL;
	s->sessions = wire_sessions__new(MAX_SESSIONS, MAX_SESSION_BYTES);
	s->http = evhttp_new(base);
	if (!s->http || !s->sessions || (opts->write_token && !s->write_token) ||
	    (opts->read_token && !s->read_token)) {
		snprintf(err, err_len, "out of memory");
		errno = ENOMEM;
		goto fail;
	}
	evhttp_set_max_body_size(s->http, opts->max_body);
	/* The gate answers long heads (414, 431) first; this is evhttp's backstop. */
	evhttp_set_max_headers_size(s->http, GATE_HEAD_MAX + 1024);
	evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST);
	evhttp_set_timeout(s->http, 60);
	evhttp_set_gencb(s->http, _dispatch, s);
	if (opts->tls_cert) {
		s->tls = tls__server_ctx(opts->tls_cert, opts->tls_key, err, err_len);
		if (!s->tls)
			goto fail;
		go.make_bev = _tls_bev;
		go.make_arg = s;
	}
	/* Our own listener: a deeper backlog than evhttp's 128, paused by the gate. */
	snprintf(portstr, sizeof(portstr), "%u", port);
	rc = evutil_getaddrinfo(host, portstr, &hints, &ai);
	if (rc) {
		snprintf(err, err_len, "cannot listen on %s: %s", opts->listen,
			 evutil_gai_strerror(rc));
		errno = EINVAL;
		goto fail;
	}
	lev = evconnlistener_new_bind(base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE |
				      LEV_OPT_CLOSE_ON_EXEC, LISTEN_BACKLOG, ai->ai_addr,
				      (int)ai->ai_addrlen);
	evutil_freeaddrinfo(ai);
	if (!lev) {
		snprintf(err, err_len, "cannot listen on %s: %s", opts->listen, strerror(errno));
		goto fail;
	}
	s->sock = evhttp_bind_listener(s->http, lev);
	if (!s->sock) {
		evconnlistener_free(lev);
		snprintf(err, err_len, "out of memory");
		errno = ENOMEM;
		goto fail;
	}
	s->gate = gate__new(base, s->http, lev, &go, &s->metrics, err, err_len);
	if (!s->gate)
		goto fail;
	fd = evhttp_bound_socket_get_fd(s->sock);
	/*
	 * bufferevent_openssl writes a reply as several TLS records, one
	 * write(2) each; with Nagle the last one waits for the client's
	 * delayed ACK (40 ms). Accepted sockets inherit TCP_NODELAY.
	 */
	if (s->tls) {
		int one = 1;

		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	{
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);

		if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
			s->port = ntohs(ss.ss_family == AF_INET6 ?
					((struct sockaddr_in6 *)&ss)->sin6_port :
					((struct sockaddr_in *)&ss)->sin_port);
	}
	return s;
fail:
	server__free(s);
	return NULL;
}

void server__free(struct server *s)
{
	if (!s)
		return;
	gate__stop(s->gate);
	if (s->http)
		evhttp_free(s->http);
	gate__free(s->gate);
	SSL_CTX_free(s->tls);
	wire_sessions__free(s->sessions);
	free(s->write_token);
	free(s->read_token);
	free(s);
}

uint16_t server__port(const struct server *s)
{
	return s->port;
}
