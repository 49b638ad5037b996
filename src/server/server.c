// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/queue.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "common/clock.h"
#include "common/hostport.h"
#include "common/log.h"
#include "common/strbuf.h"
#include "common/timeparse.h"
#include "common/tls.h"
#include "format/wire.h"
#include "server/gate.h"
#include "server/request.h"
#include "server/routes.h"
#include "server/routes_gpu.h"
#include "server/server.h"
#include "server/static.h"
#include "store/store.h"

/*
 * Agents' session dictionaries (format/wire.h). The default budget is sized
 * in bench/README.md ("Session dictionaries") from what a session costs at
 * the agent's dictionary cap: it holds a fleet of agents at their largest
 * with room to spare; past it the least recently used sessions are
 * forgotten and their agents resend (no batch is lost, but each resend
 * costs a batch's whole dictionary).
 */
#define MAX_SESSIONS 4096
#define MAX_SESSION_BYTES (512ull << 20)
/* Connections the kernel queues while the server is not accepting. */
#define LISTEN_BACKLOG 511

static enum status_class _class(int status)
{
	return status < 400 ? STATUS_2XX : status < 500 ? STATUS_4XX : STATUS_5XX;
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

	server_metrics__write(&r->srv->metrics, r->srv->store, r->srv->sessions, &sb);
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

/* Who may call a route: anyone, or the holder of the read or write token. */
enum route_token { TOKEN_NONE, TOKEN_READ, TOKEN_WRITE };
/* GET takes HEAD too. */
enum route_method { METHOD_ANY, METHOD_GET, METHOD_POST };
/* How a row's path is compared with the request's. */
enum route_match {
	MATCH_EXACT,
	MATCH_PREFIX,
	MATCH_UI,		/* static__is_ui_path() */
	MATCH_LABEL_VALUES,	/* /api/v1/labels/NAME/values */
};

struct route {
	const char *path;
	enum route_match match;
	enum route_method method;
	enum route_token token;
	void (*serve)(struct request *r);
	enum server_route id;		/* counted under in /metrics */
	enum server_route refused_id;	/* counted under on a 401 or 405 */
};

static void _serve_static(struct request *r)
{
	static__serve(r, r->path);
}

static void _serve_label_values(struct request *r)
{
	char name[256];
	size_t len = strlen(r->path) - 15 - 7;

	if (len >= sizeof(name)) {
		request__error(r, 400, "label name too long");
		return;
	}
	memcpy(name, r->path + 15, len);
	name[len] = '\0';
	routes__label_values(r, name);
}

static void _no_ingest_endpoint(struct request *r)
{
	request__error(r, 404, "no such ingest endpoint: %s", r->path);
}

static void _no_endpoint(struct request *r)
{
	request__error(r, 404, "no such endpoint: %s", r->path);
}

/*
 * Every path the server answers, first match wins; the last row matches
 * any path. A request without the row's token gets 401, one with another
 * method 405, before the handler runs. The query API's refusals count as
 * "other" in /metrics, those of the other routes under their own name.
 */
static const struct route _routes[] = {
	{ .path = "/healthz", .method = METHOD_ANY, .token = TOKEN_NONE,
	  .serve = _serve_healthz, .id = ROUTE_HEALTHZ, .refused_id = ROUTE_HEALTHZ },
	{ .path = "/api/v1/ingest", .method = METHOD_POST, .token = TOKEN_WRITE,
	  .serve = routes__ingest, .id = ROUTE_INGEST, .refused_id = ROUTE_INGEST },
	{ .path = "/api/v1/ingest/pprof", .method = METHOD_POST, .token = TOKEN_WRITE,
	  .serve = routes__ingest_pprof, .id = ROUTE_INGEST_PPROF,
	  .refused_id = ROUTE_INGEST_PPROF },
	{ .path = "/api/v1/ingest/folded", .method = METHOD_POST, .token = TOKEN_WRITE,
	  .serve = routes__ingest_folded, .id = ROUTE_INGEST_FOLDED,
	  .refused_id = ROUTE_INGEST_FOLDED },
	{ .path = "/api/v1/ingest", .match = MATCH_PREFIX, .method = METHOD_POST,
	  .token = TOKEN_WRITE, .serve = _no_ingest_endpoint, .id = ROUTE_INGEST,
	  .refused_id = ROUTE_INGEST },
	/* The UI's own files need no token: the page is what asks for one. */
	{ .match = MATCH_UI, .method = METHOD_GET, .token = TOKEN_NONE,
	  .serve = _serve_static, .id = ROUTE_STATIC, .refused_id = ROUTE_STATIC },
	{ .path = "/metrics", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = _serve_metrics, .id = ROUTE_METRICS, .refused_id = ROUTE_METRICS },
	{ .path = "/api/v1/profile", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = routes__profile, .id = ROUTE_PROFILE, .refused_id = ROUTE_OTHER },
	{ .path = "/api/v1/gpu/kernels", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = routes__gpu_kernels, .id = ROUTE_GPU_KERNELS, .refused_id = ROUTE_OTHER },
	{ .path = "/api/v1/gpu/kernels/top", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = routes__gpu_kernels_top, .id = ROUTE_GPU_KERNELS_TOP,
	  .refused_id = ROUTE_OTHER },
	{ .path = "/api/v1/gpu/idle", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = routes__gpu_idle, .id = ROUTE_GPU_IDLE, .refused_id = ROUTE_OTHER },
	{ .path = "/api/v1/flamechart", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = routes__flamechart, .id = ROUTE_FLAMECHART, .refused_id = ROUTE_OTHER },
	{ .path = "/api/v1/series", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = routes__series, .id = ROUTE_SERIES, .refused_id = ROUTE_OTHER },
	{ .path = "/api/v1/gpu/metrics", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = routes__gpu_metrics, .id = ROUTE_GPU_METRICS, .refused_id = ROUTE_OTHER },
	{ .path = "/api/v1/cpu/strips", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = routes__cpu_strips, .id = ROUTE_CPU_STRIPS, .refused_id = ROUTE_OTHER },
	{ .path = "/api/v1/labels", .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = routes__labels, .id = ROUTE_LABELS, .refused_id = ROUTE_OTHER },
	{ .match = MATCH_LABEL_VALUES, .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = _serve_label_values, .id = ROUTE_LABEL_VALUES, .refused_id = ROUTE_OTHER },
	{ .path = "/api/", .match = MATCH_PREFIX, .method = METHOD_GET, .token = TOKEN_READ,
	  .serve = _no_endpoint, .id = ROUTE_OTHER, .refused_id = ROUTE_OTHER },
	{ .path = "", .match = MATCH_PREFIX, .method = METHOD_ANY, .token = TOKEN_NONE,
	  .serve = _no_endpoint, .id = ROUTE_OTHER, .refused_id = ROUTE_OTHER },
};

static bool _route_matches(const struct route *rt, const char *path)
{
	switch (rt->match) {
	case MATCH_EXACT:
		return !strcmp(path, rt->path);
	case MATCH_PREFIX:
		return !strncmp(path, rt->path, strlen(rt->path));
	case MATCH_UI:
		return static__is_ui_path(path);
	case MATCH_LABEL_VALUES:
		return !strncmp(path, "/api/v1/labels/", 15) && strlen(path) > 22 &&
		       !strcmp(path + strlen(path) - 7, "/values");
	}
	return false;
}

static const struct route *_route_find(const char *path)
{
	size_t n = sizeof(_routes) / sizeof(_routes[0]);

	for (size_t i = 0; i < n - 1; i++)
		if (_route_matches(&_routes[i], path))
			return &_routes[i];
	return &_routes[n - 1];
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
	const struct route *rt;
	const char *why, *token;
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
	r.path = path;
	if (query && evhttp_parse_query_str(query, &r.params)) {
		request__error(&r, 400, "malformed query string");
		goto out;
	}

	rt = _route_find(path);
	r.route = rt->refused_id;
	token = rt->token == TOKEN_WRITE ? srv->write_token :
		rt->token == TOKEN_READ ? srv->read_token : NULL;
	if (!_token_ok(req, token)) {
		if (rt->token == TOKEN_WRITE)
			srv->metrics.ingest_rejected_auth++;
		evhttp_add_header(evhttp_request_get_output_headers(req),
				  "WWW-Authenticate", "Bearer");
		request__error(&r, 401, "missing or wrong bearer token");
		goto out;
	}
	/* Only ingest takes POST. */
	if (rt->method == METHOD_POST && !is_post) {
		request__error(&r, 405, "ingest takes POST");
		goto out;
	}
	if (rt->method == METHOD_GET && !is_get) {
		request__error(&r, 405, "%s takes GET", path);
		goto out;
	}
	r.route = rt->id;
	rt->serve(&r);
out:
	srv->metrics.requests[r.route][_class(r.status)]++;
	srv->metrics.request_ns[r.route] += clock__mono_ns() - t0;
	evhttp_clear_headers(&r.params);
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
	if (hostport__parse(opts->listen, host, sizeof(host), &port)) {
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
	s->sessions = wire_sessions__new(MAX_SESSIONS, opts->max_session_memory ?
					 opts->max_session_memory : MAX_SESSION_BYTES);
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
