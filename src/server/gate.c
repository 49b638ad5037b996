// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>

#include "common/clock.h"
#include "common/log.h"
#include "server/gate.h"
#include "server/metrics.h"

#define NS 1000000000ULL
/* A client beyond the connection cap gets this long to send its request. */
#define REFUSED_TIMEOUT_S 10
/* Accepting pauses this long after an error, shorter when an idle connection was closed. */
#define ACCEPT_PAUSE_MS 500
#define ACCEPT_PAUSE_FREED_MS 20
#define LOG_EVERY_S 10
/*
 * Descriptors kept out of the connections' reach: these for the store, the
 * loop and logs, and two a CPU for the sampler under `run`.
 */
#define FD_RESERVE 64

/* What evhttp is handed in place of a refused request: the server answers it. */
static const char _refused_request[] = "GET / HTTP/1.1\r\nConnection: close\r\n\r\n";

enum conn_state {
	C_HEAD,		/* reading a request head, held back */
	C_BODY,		/* passing `left` body bytes of a request let in */
	C_SKIP,		/* reading past an over-long head to its end, then refusing */
	C_DRAIN,	/* reading past `left` body bytes of a refused request, then refusing */
	C_DONE,		/* refusal handed over: whatever else comes is dropped */
	C_CHUNKED,	/* a chunked body let in: all passes, the connection closes after */
};

struct conn {
	TAILQ_ENTRY(conn) all;
	TAILQ_ENTRY(conn) idle;		/* while in C_HEAD with no request in progress */
	TAILQ_ENTRY(conn) fixup;	/* until evhttp's connection object is known */
	struct gate *g;
	struct bufferevent *bev;
	struct evhttp_connection *evcon;
	struct evbuffer_cb_entry *cbent;
	struct evbuffer *held;		/* read, not yet handed to evhttp */
	enum conn_state state;
	uint64_t since_ns;		/* start of the current wait */
	uint64_t left;
	size_t reserved;		/* of the body budget */
	size_t scanned;			/* head bytes already looked at */
	unsigned eol;			/* end-of-head matcher, see _eol() */
	bool line1;			/* the request line's end was seen */
	bool busy;			/* a request was handed over, its reply not done */
	bool over_cap, closing, feeding, on_idle, on_fixup;
	int refuse, retry_after;
	char why[128];
};

struct gate {
	struct gate *next;		/* in _gates */
	struct event_base *base;
	struct evhttp *http;
	struct evconnlistener *lev;
	struct server_metrics *m;
	struct event *fixup_ev, *sweep_ev, *resume_ev;
	struct evbuffer *tmp;
	struct bufferevent *(*make_bev)(struct event_base *, void *);
	void *make_arg;
	TAILQ_HEAD(, conn) conns, idle, fixups;
	size_t nconns, max_conns, max_fds;
	size_t max_body, budget, held;
	bool paused_full, paused_error;
	uint64_t accept_errors, accept_log_ns;
	int accept_errno;
};

/* The listener's error callback gets evhttp's argument: find the gate by listener. */
static struct gate *_gates;

static void _listener_update(struct gate *g)
{
	if (!g->lev)
		return;
	if (g->paused_full || g->paused_error)
		evconnlistener_disable(g->lev);
	else
		evconnlistener_enable(g->lev);
}

static void _idle_add(struct conn *c)
{
	if (!c->on_idle && !c->closing) {
		TAILQ_INSERT_TAIL(&c->g->idle, c, idle);
		c->on_idle = true;
	}
}

static void _idle_del(struct conn *c)
{
	if (c->on_idle) {
		TAILQ_REMOVE(&c->g->idle, c, idle);
		c->on_idle = false;
	}
}

static void _release(struct conn *c)
{
	c->g->held -= c->reserved;
	c->reserved = 0;
}

/*
 * Closes through evhttp, as its own read timeout would: evhttp frees the
 * connection (no request of it is in the user's hands while we close).
 * Deferred, so that nothing of evhttp's is on the stack.
 */
static void _close(struct conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	_idle_del(c);
	bufferevent_trigger_event(c->bev, BEV_EVENT_READING | BEV_EVENT_TIMEOUT,
				  BEV_TRIG_DEFER_CALLBACKS);
}

static bool _close_idle(struct gate *g)
{
	struct conn *c = TAILQ_FIRST(&g->idle);

	if (!c)
		return false;
	g->m->conn_closed_idle++;
	_close(c);
	return true;
}

static void _conn_gone(struct conn *c)
{
	struct gate *g = c->g;

	_release(c);
	_idle_del(c);
	if (c->on_fixup)
		TAILQ_REMOVE(&g->fixups, c, fixup);
	TAILQ_REMOVE(&g->conns, c, all);
	g->nconns--;
	evbuffer_free(c->held);
	free(c);
	if (g->paused_full && g->nconns < g->max_fds) {
		g->paused_full = false;
		_listener_update(g);
	}
}

/* Appends src to a bufferevent's input, whose end libevent keeps frozen. */
static void _append(struct evbuffer *in, struct evbuffer *src)
{
	if (!evbuffer_get_length(src))
		return;
	if (evbuffer_add_buffer(in, src)) {
		evbuffer_unfreeze(in, 0);
		evbuffer_add_buffer(in, src);
		evbuffer_freeze(in, 0);
	}
}

/*
 * The end of a request head is its first empty line; lines end in "\n" or
 * "\r\n", as evhttp reads them. eol: 0 inside a line, 1 at the start of a
 * line, 2 after a '\r' there. Returns true at the end.
 */
static bool _eol(unsigned *eol, unsigned char ch)
{
	if (ch == '\n') {
		if (*eol)
			return true;
		*eol = 1;
	} else {
		*eol = ch == '\r' && *eol == 1 ? 2 : 0;
	}
	return false;
}

static bool _is(const char *p, size_t n, const char *word)
{
	return strlen(word) == n && !strncasecmp(p, word, n);
}

static bool _method_is(const char *p, size_t n, const char *method)
{
	return n == strlen(method) && !memcmp(p, method, n);
}

void gate__parse_head(const char *p, size_t len, size_t max_body, struct gate_head *h)
{
	const char *end = p + len, *nl = memchr(p, '\n', len), *sp, *line;
	size_t n, ncl = 0;
	bool te = false, chunked = false, special = false, bad_cl = false;
	uint64_t cl = 0;

	memset(h, 0, sizeof(*h));
	n = nl ? (size_t)(nl - p) : len;
	if (n && p[n - 1] == '\r')
		n--;
	if (n > GATE_URL_MAX) {
		h->refuse = 414;
		snprintf(h->why, sizeof(h->why), "request line longer than %u bytes", GATE_URL_MAX);
		return;
	}
	sp = memchr(p, ' ', n);
	if (!nl || !sp || sp == p) {
		h->refuse = 400;
		snprintf(h->why, sizeof(h->why), "malformed request line");
		return;
	}
	/*
	 * The methods libevent 2.1 reads a body for, spelt as it matches them:
	 * all it knows but HEAD and TRACE. GET and DELETE too: a body the gate
	 * held back there left evhttp waiting for it, and the client unanswered.
	 */
	h->body = _method_is(p, sp - p, "GET") || _method_is(p, sp - p, "POST") ||
		  _method_is(p, sp - p, "PUT") || _method_is(p, sp - p, "DELETE") ||
		  _method_is(p, sp - p, "OPTIONS") || _method_is(p, sp - p, "CONNECT") ||
		  _method_is(p, sp - p, "PATCH");
	for (line = nl + 1; line < end; line = nl + 1) {
		const char *colon, *v, *ve;

		nl = memchr(line, '\n', end - line);
		if (!nl)
			break;
		n = nl - line;
		if (n && line[n - 1] == '\r')
			n--;
		if (!n)
			break;
		if (line[0] == ' ' || line[0] == '\t') {
			/* evhttp appends a folded line to the header before it. */
			if (special) {
				h->refuse = 400;
				snprintf(h->why, sizeof(h->why),
					 "folded Content-Length or Transfer-Encoding header");
				return;
			}
			continue;
		}
		special = false;
		colon = memchr(line, ':', n);
		if (!colon)
			continue;	/* evhttp refuses the request */
		for (v = colon + 1, ve = line + n; v < ve && (*v == ' ' || *v == '\t'); v++)
			;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		if (_is(line, colon - line, "Content-Length")) {
			special = true;
			ncl++;
			bad_cl |= v == ve;
			for (cl = 0; v < ve; v++) {
				if (*v < '0' || *v > '9' || cl > (UINT64_MAX - 9) / 10) {
					bad_cl = true;
					break;
				}
				cl = cl * 10 + (*v - '0');
			}
		} else if (_is(line, colon - line, "Transfer-Encoding")) {
			special = true;
			chunked = !te && _is(v, ve - v, "chunked");
			te = true;
		} else if (_is(line, colon - line, "Expect")) {
			h->expect_continue = _is(v, ve - v, "100-continue");
		}
	}
	if (!h->body)
		return;		/* evhttp reads no body, whatever the headers say */
	/* evhttp reads "chunked" alone; with it, Content-Length is ignored. */
	if (te && !chunked) {
		h->refuse = 411;
		snprintf(h->why, sizeof(h->why), "Transfer-Encoding other than chunked: send "
			 "Content-Length");
	} else if (chunked && ncl) {
		h->refuse = 400;
		snprintf(h->why, sizeof(h->why), "both Transfer-Encoding and Content-Length");
	} else if (chunked) {
		/* Its size is known once read: it may take up to --max-body. */
		h->chunked = true;
		h->length = max_body;
	} else if (ncl > 1 || bad_cl) {
		h->refuse = 400;
		snprintf(h->why, sizeof(h->why), "bad Content-Length");
	} else if (cl > max_body) {
		h->refuse = 413;
		snprintf(h->why, sizeof(h->why), "body of %llu bytes is over --max-body %zu",
			 (unsigned long long)cl, max_body);
	} else {
		h->length = cl;
	}
}

/* Hands evhttp the stand-in request; the server answers it with c->refuse. */
static void _refuse_now(struct conn *c, struct evbuffer *out)
{
	evbuffer_add(out, _refused_request, sizeof(_refused_request) - 1);
	c->state = C_DONE;
	c->busy = true;
}

/*
 * Refuses the request whose head was just read; drain: body bytes to read
 * past first, so that the client, still sending, is not reset.
 */
static void _refuse(struct conn *c, int status, int retry_after, uint64_t drain,
		    struct evbuffer *out)
{
	c->refuse = status;
	c->retry_after = retry_after;
	c->since_ns = clock__mono_ns();
	if (drain) {
		c->state = C_DRAIN;
		c->left = drain;
	} else {
		_refuse_now(c, out);
	}
}

/* Over a head too long to keep: read past it to its end, then refuse. */
static void _skip(struct conn *c, int status, const char *what, unsigned max)
{
	c->refuse = status;
	snprintf(c->why, sizeof(c->why), "%s longer than %u bytes", what, max);
	c->state = C_SKIP;
	c->since_ns = clock__mono_ns();
	_idle_del(c);
}

/* Looks for a complete head in c->held; returns false to wait for more. */
static bool _head(struct conn *c, struct evbuffer *out)
{
	struct gate *g = c->g;
	size_t avail = evbuffer_get_length(c->held), n = avail < GATE_HEAD_MAX + 1 ?
							  avail : GATE_HEAD_MAX + 1;
	const unsigned char *p = evbuffer_pullup(c->held, n);
	size_t end = 0;
	struct gate_head h;

	if (!p) {
		_close(c);
		return false;
	}
	for (; c->scanned < n; c->scanned++) {
		if (!c->line1 && p[c->scanned] == '\n')
			c->line1 = true;
		if (_eol(&c->eol, p[c->scanned])) {
			end = ++c->scanned;
			break;
		}
	}
	if (!end) {
		if (!c->line1 && c->scanned > GATE_URL_MAX + 2) {
			_skip(c, 414, "request line", GATE_URL_MAX);
			evbuffer_drain(c->held, c->scanned);
			return true;
		}
		if (c->scanned > GATE_HEAD_MAX) {
			_skip(c, 431, "request head", GATE_HEAD_MAX);
			evbuffer_drain(c->held, c->scanned);
			return true;
		}
		return false;
	}
	c->scanned = 0;
	c->eol = 1;
	c->line1 = false;
	_idle_del(c);
	gate__parse_head((const char *)p, end, g->max_body, &h);
	if (h.refuse) {
		snprintf(c->why, sizeof(c->why), "%s", h.why);
		evbuffer_drain(c->held, end);
		_refuse(c, h.refuse, 0, 0, out);
		return true;
	}
	if (c->over_cap) {
		g->m->conn_refused++;
		snprintf(c->why, sizeof(c->why), "the server has %zu connections open "
			 "(--max-connections); try again later", g->max_conns);
		evbuffer_drain(c->held, end);
		_refuse(c, 503, 1, h.expect_continue || h.chunked ? 0 : h.length, out);
		return true;
	}
	if (h.length > g->budget - g->held) {
		g->m->body_refused++;
		snprintf(c->why, sizeof(c->why), "request bodies in memory would exceed "
			 "--max-body-memory %zu; try again later", g->budget);
		evbuffer_drain(c->held, end);
		_refuse(c, 503, 2, h.expect_continue || h.chunked ? 0 : h.length, out);
		return true;
	}
	c->reserved = h.length;
	g->held += h.length;
	evbuffer_remove_buffer(c->held, out, end);
	c->busy = true;
	if (h.chunked) {
		/*
		 * Where the body ends is evhttp's to find: everything passes,
		 * and the reply closes the connection, so that nothing after
		 * the body reaches evhttp without a look.
		 */
		c->state = C_CHUNKED;
	} else if (h.length) {
		c->state = C_BODY;
		c->left = h.length;
	}
	return true;
}

/* Moves what c->held may pass to out, in order; drops what it must not. */
static void _run(struct conn *c, struct evbuffer *out)
{
	for (;;) {
		size_t avail = evbuffer_get_length(c->held), n;

		if (c->closing || c->state == C_DONE) {
			evbuffer_drain(c->held, avail);
			return;
		}
		if (!avail)
			return;
		switch (c->state) {
		case C_HEAD:
			if (c->busy || !_head(c, out))
				return;
			break;
		case C_BODY:
			n = avail < c->left ? avail : c->left;
			evbuffer_remove_buffer(c->held, out, n);
			c->left -= n;
			if (!c->left)
				c->state = C_HEAD;
			break;
		case C_DRAIN:
			n = avail < c->left ? avail : c->left;
			evbuffer_drain(c->held, n);
			c->left -= n;
			if (c->left)
				return;
			_refuse_now(c, out);
			break;
		case C_SKIP: {
			const unsigned char *p = evbuffer_pullup(c->held, avail);
			size_t i;

			for (i = 0; p && i < avail && !_eol(&c->eol, p[i]); i++)
				;
			evbuffer_drain(c->held, i < avail ? i + 1 : avail);
			if (i == avail)
				return;
			_refuse_now(c, out);
			break;
		}
		case C_CHUNKED:
			evbuffer_remove_buffer(c->held, out, avail);
			return;
		case C_DONE:
			return;
		}
	}
}

/*
 * Called as bytes are read into the connection's input, before evhttp
 * looks at them: they join c->held, and what may pass goes back.
 */
static void _on_input(struct evbuffer *in, const struct evbuffer_cb_info *info, void *arg)
{
	struct conn *c = arg;
	struct gate *g = c->g;
	size_t old;

	if (!info->n_added || c->feeding)
		return;
	/*
	 * Body bytes of a request let in stay where they were read: moving
	 * them would split the buffer's last chain at every read.
	 */
	if (c->state == C_BODY && !c->closing && info->n_added <= c->left) {
		c->left -= info->n_added;
		if (!c->left)
			c->state = C_HEAD;
		return;
	}
	if (c->state == C_CHUNKED && !c->closing)
		return;
	c->feeding = true;
	/* The input holds what was let in before, then the new bytes. */
	old = evbuffer_get_length(in) - info->n_added;
	if (old)
		evbuffer_remove_buffer(in, g->tmp, old);
	evbuffer_add_buffer(c->held, in);
	_run(c, g->tmp);
	_append(in, g->tmp);
	c->feeding = false;
	/* Pipelined requests wait for the one in progress, within bounds. */
	if (c->busy && evbuffer_get_length(c->held) > GATE_HEAD_MAX)
		bufferevent_disable(c->bev, EV_READ);
}

static void _on_close(struct evhttp_connection *evcon, void *arg)
{
	struct conn *c = arg;

	(void)evcon;
	evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->cbent);
	_conn_gone(c);
}

/*
 * evhttp makes its connection object right after asking for the
 * bufferevent: find it there, by the callback argument it gives the
 * bufferevent, to be told when it closes. Until then the gate holds a
 * reference, so that a connection evhttp dropped while setting it up is
 * still safe to look at.
 */
static void _on_fixup(evutil_socket_t fd, short what, void *arg)
{
	struct gate *g = arg;
	struct conn *c;

	(void)fd;
	(void)what;
	while ((c = TAILQ_FIRST(&g->fixups))) {
		struct bufferevent *bev = c->bev;
		bufferevent_data_cb rd, wr;
		bufferevent_event_cb ev;
		void *cbarg = NULL;

		TAILQ_REMOVE(&g->fixups, c, fixup);
		c->on_fixup = false;
		bufferevent_getcb(bev, &rd, &wr, &ev, &cbarg);
		if (cbarg && evhttp_connection_get_bufferevent(cbarg) == bev) {
			c->evcon = cbarg;
			evhttp_connection_set_closecb(c->evcon, _on_close, c);
			bufferevent_decref(bev);
			continue;
		}
		/* Dropped: freed by evhttp, or (no descriptor) never taken up. */
		evbuffer_remove_cb_entry(bufferevent_get_input(bev), c->cbent);
		_conn_gone(c);
		if (bufferevent_getfd(bev) < 0)
			bufferevent_free(bev);
		bufferevent_decref(bev);
	}
}

/* evhttp's bevcb: every accepted connection starts here. */
static struct bufferevent *_new_bev(struct event_base *base, void *arg)
{
	struct gate *g = arg;
	struct bufferevent *bev;
	struct conn *c;

	bev = g->make_bev ? g->make_bev(base, g->make_arg) :
	      bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	c = calloc(1, sizeof(*c));
	if (c)
		c->held = evbuffer_new();
	if (bev && c && c->held)
		c->cbent = evbuffer_add_cb(bufferevent_get_input(bev), _on_input, c);
	if (!bev || !c || !c->held || !c->cbent) {
		/* evhttp serves it with a socket bufferevent of its own, ungated. */
		if (c && c->held)
			evbuffer_free(c->held);
		free(c);
		if (bev)
			bufferevent_free(bev);
		return NULL;
	}
	c->g = g;
	c->bev = bev;
	c->state = C_HEAD;
	c->eol = 1;
	c->since_ns = clock__mono_ns();
	bufferevent_incref(bev);
	TAILQ_INSERT_TAIL(&g->fixups, c, fixup);
	c->on_fixup = true;
	event_active(g->fixup_ev, EV_TIMEOUT, 0);
	if (g->nconns >= g->max_conns && !_close_idle(g))
		c->over_cap = true;
	TAILQ_INSERT_TAIL(&g->conns, c, all);
	g->nconns++;
	if (!c->over_cap)
		_idle_add(c);
	if (g->nconns >= g->max_fds && !g->paused_full) {
		g->paused_full = true;
		_listener_update(g);
	}
	return bev;
}

/* One line per LOG_EVERY_S with a count, however often accept() fails. */
static void _log_accept_errors(struct gate *g, uint64_t now)
{
	if (!g->accept_log_ns)
		pr_warn("cannot accept a connection: %s; closing idle connections and pausing "
			"(repeats are counted, one line every %d s)\n", strerror(g->accept_errno),
			LOG_EVERY_S);
	else
		pr_warn("cannot accept a connection: %s, %llu times in %llu s\n",
			strerror(g->accept_errno), (unsigned long long)g->accept_errors,
			(unsigned long long)((now - g->accept_log_ns) / NS));
	g->accept_errors = 0;
	g->accept_log_ns = now;
}

/*
 * accept() failed for a reason other than a race (EMFILE, ENFILE, ENOBUFS,
 * ...): libevent would log it and try again at once, as long as the
 * listening socket stays readable. Pause instead.
 */
static void _on_accept_error(struct evconnlistener *lev, void *arg)
{
	int err = errno;
	struct gate *g;
	uint64_t now = clock__mono_ns();
	struct timeval tv = { 0, ACCEPT_PAUSE_MS * 1000 };

	(void)arg;
	for (g = _gates; g && g->lev != lev; g = g->next)
		;
	if (!g)
		return;
	g->m->accept_errors++;
	g->accept_errors++;
	g->accept_errno = err;
	if (!g->accept_log_ns || now - g->accept_log_ns >= LOG_EVERY_S * NS)
		_log_accept_errors(g, now);
	if (err == EMFILE || err == ENFILE) {
		/*
		 * The rest of the process holds more descriptors than reserved:
		 * the caps come down to what there is, one kept spare, so that
		 * a newcomer is accepted and closes an idle connection instead.
		 */
		if (g->nconns > 1 && g->nconns < g->max_fds) {
			g->max_fds = g->nconns;
			if (g->max_conns > g->max_fds - 1)
				g->max_conns = g->max_fds - 1;
			pr_warn("out of descriptors at %zu connections: serving at most %zu\n",
				g->nconns, g->max_conns);
		}
		/* The one idle longest gives its own back. */
		if (_close_idle(g))
			tv.tv_usec = ACCEPT_PAUSE_FREED_MS * 1000;
	}
	g->paused_error = true;
	_listener_update(g);
	evtimer_add(g->resume_ev, &tv);
}

static void _on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct gate *g = arg;

	(void)fd;
	(void)what;
	g->paused_error = false;
	_listener_update(g);
}

/* Once a second: heads that take too long, refusals the client does not finish. */
static void _on_sweep(evutil_socket_t fd, short what, void *arg)
{
	struct gate *g = arg;
	uint64_t now = clock__mono_ns();
	struct conn *c;

	(void)fd;
	(void)what;
	TAILQ_FOREACH(c, &g->conns, all) {
		uint64_t limit = c->over_cap && c->state == C_HEAD ? REFUSED_TIMEOUT_S :
				 GATE_HEAD_TIMEOUT_S;

		if (c->closing || c->on_fixup || c->busy || c->state == C_BODY ||
		    c->state == C_CHUNKED ||
		    c->state == C_DONE)
			continue;
		if (now - c->since_ns > limit * NS) {
			g->m->conn_closed_idle++;
			_close(c);
		}
	}
	if (g->accept_errors && now - g->accept_log_ns >= LOG_EVERY_S * NS)
		_log_accept_errors(g, now);
}

static struct conn *_find(struct gate *g, struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct conn *c;

	if (!evcon)
		return NULL;
	TAILQ_FOREACH(c, &g->conns, all)
		if (c->evcon == evcon)
			return c;
	return NULL;
}

/*
 * The reply is written: the body it answered is gone, and the next request
 * (pipelined, held back) may go in. evhttp looks at its input again right
 * after this.
 */
static void _on_reply_done(struct evhttp_request *req, void *arg)
{
	struct gate *g = arg;
	struct conn *c = _find(g, req);

	if (!c)
		return;
	_release(c);
	c->busy = false;
	c->since_ns = clock__mono_ns();
	if (c->state != C_HEAD)
		return;
	_idle_add(c);
	if (evbuffer_get_length(c->held)) {
		c->feeding = true;
		_run(c, g->tmp);
		_append(bufferevent_get_input(c->bev), g->tmp);
		c->feeding = false;
	}
	bufferevent_enable(c->bev, EV_READ);
}

int gate__begin(struct gate *g, struct evhttp_request *req, const char **why,
		int *retry_after_s)
{
	struct conn *c = _find(g, req);

	*why = NULL;
	*retry_after_s = 0;
	if (!c)
		return 0;
	evhttp_request_set_on_complete_cb(req, _on_reply_done, g);
	if (c->state == C_CHUNKED)
		evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
	if (!c->refuse)
		return 0;
	*why = c->why;
	*retry_after_s = c->retry_after;
	return c->refuse;
}

size_t gate__connections(const struct gate *g)
{
	return g->nconns;
}

size_t gate__body_bytes(const struct gate *g)
{
	return g->held;
}

size_t gate__max_connections(const struct gate *g)
{
	return g->max_conns;
}

struct gate *gate__new(struct event_base *base, struct evhttp *http, struct evconnlistener *lev,
		       const struct gate_opts *o, struct server_metrics *m, char *err,
		       size_t err_len)
{
	struct gate *g = calloc(1, sizeof(*g));
	struct timeval every = { 1, 0 };
	struct rlimit rl;
	size_t soft = 1024, reserve, want;
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);

	if (!g)
		goto oom;
	TAILQ_INIT(&g->conns);
	TAILQ_INIT(&g->idle);
	TAILQ_INIT(&g->fixups);
	g->base = base;
	g->http = http;
	g->lev = lev;
	g->m = m;
	g->make_bev = o->make_bev;
	g->make_arg = o->make_arg;
	g->max_body = o->max_body;
	g->budget = o->max_body_memory ? o->max_body_memory : 4 * o->max_body;
	g->tmp = evbuffer_new();
	g->fixup_ev = event_new(base, -1, 0, _on_fixup, g);
	g->sweep_ev = event_new(base, -1, EV_PERSIST, _on_sweep, g);
	g->resume_ev = evtimer_new(base, _on_resume, g);
	if (!g->tmp || !g->fixup_ev || !g->sweep_ev || !g->resume_ev ||
	    event_add(g->sweep_ev, &every))
		goto oom;

	/* Each connection is a descriptor: stay within the limit, whatever was asked. */
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		soft = rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > SIZE_MAX ? SIZE_MAX :
		       (size_t)rl.rlim_cur;
	reserve = FD_RESERVE + 2 * (ncpu > 0 ? (size_t)ncpu : 1);
	g->max_fds = soft > reserve + 16 ? soft - reserve : 16;
	want = o->max_connections ? o->max_connections : GATE_DEFAULT_CONNECTIONS;
	g->max_conns = g->max_fds - g->max_fds / 8;
	if (want < g->max_conns)
		g->max_conns = want;
	if (o->max_connections && o->max_connections > g->max_conns)
		pr_warn("--max-connections %zu lowered to %zu: the descriptor limit is %zu\n",
			o->max_connections, g->max_conns, soft);
	pr_debug("serving at most %zu connections (%zu descriptors); request bodies in memory: "
		 "at most %zu bytes\n", g->max_conns, g->max_fds, g->budget);

	evhttp_set_bevcb(http, _new_bev, g);
	evconnlistener_set_error_cb(lev, _on_accept_error);
	g->next = _gates;
	_gates = g;
	return g;
oom:
	snprintf(err, err_len, "out of memory");
	gate__free(g);
	errno = ENOMEM;
	return NULL;
}

void gate__stop(struct gate *g)
{
	struct gate **pp;

	if (!g)
		return;
	for (pp = &_gates; *pp; pp = &(*pp)->next) {
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	}
	g->lev = NULL;
	if (g->sweep_ev)
		event_del(g->sweep_ev);
	if (g->resume_ev)
		event_del(g->resume_ev);
}

void gate__free(struct gate *g)
{
	struct conn *c;

	if (!g)
		return;
	gate__stop(g);
	/* What evhttp_free() left: connections it freed before we knew them. */
	while ((c = TAILQ_FIRST(&g->conns))) {
		struct bufferevent *bev = c->on_fixup ? c->bev : NULL;

		_conn_gone(c);
		if (bev)
			bufferevent_decref(bev);
	}
	if (g->fixup_ev)
		event_free(g->fixup_ev);
	if (g->sweep_ev)
		event_free(g->sweep_ev);
	if (g->resume_ev)
		event_free(g->resume_ev);
	if (g->tmp)
		evbuffer_free(g->tmp);
	free(g);
}
