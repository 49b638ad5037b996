// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <openssl/err.h>

#include "chhttp.h"
#include "common/log.h"
#include "common/tls.h"

struct chhttp {
	char *host, *port, *auth, *params;
	int timeout_s;
	int fd;
	SSL_CTX *tls;		/* NULL: plain HTTP */
	SSL *ssl;		/* the session on fd when tls */
	char *ca_file;
	bool reused;		/* fd has served a request before */
	/* Bytes received but not consumed yet. */
	char *in;
	size_t in_len, in_cap, in_pos;
};

static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static char *_base64(const char *s)
{
	size_t n = strlen(s), o = 0;
	char *out = malloc(4 * ((n + 2) / 3) + 1);

	if (!out)
		return NULL;
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)(unsigned char)s[i] << 16;

		if (i + 1 < n)
			v |= (uint32_t)(unsigned char)s[i + 1] << 8;
		if (i + 2 < n)
			v |= (unsigned char)s[i + 2];
		out[o++] = B64[v >> 18 & 63];
		out[o++] = B64[v >> 12 & 63];
		out[o++] = i + 1 < n ? B64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? B64[v & 63] : '=';
	}
	out[o] = '\0';
	return out;
}

struct chhttp *chhttp__new(const struct chhttp_opts *o, char *err, size_t err_len)
{
	struct chhttp *c = calloc(1, sizeof(*c));

	if (!c)
		goto oom;
	if (o->secure) {
		c->tls = tls__client_ctx(o->ca_file, err, err_len);
		if (!c->tls) {
			int e = errno;

			chhttp__free(c);
			errno = e;
			return NULL;
		}
		if (o->ca_file && !(c->ca_file = strdup(o->ca_file)))
			goto oom;
	}
	c->fd = -1;
	c->timeout_s = o->timeout_s > 0 ? o->timeout_s : 300;
	c->host = strdup(o->host);
	c->port = strdup(o->port);
	c->params = strdup(o->params ? o->params : "");
	if (!c->host || !c->port || !c->params)
		goto oom;
	if (o->user && o->user[0]) {
		char *up = malloc(strlen(o->user) + strlen(o->password ? o->password : "") + 2);

		if (!up)
			goto oom;
		sprintf(up, "%s:%s", o->user, o->password ? o->password : "");
		c->auth = _base64(up);
		free(up);
		if (!c->auth)
			goto oom;
	}
	return c;
oom:
	chhttp__free(c);
	snprintf(err, err_len, "out of memory");
	errno = ENOMEM;
	return NULL;
}

static void _disconnect(struct chhttp *c)
{
	/* No close_notify: the connection is dropped, not ended, and the data is framed. */
	SSL_free(c->ssl);
	c->ssl = NULL;
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	c->reused = false;
	c->in_len = c->in_pos = 0;
}

void chhttp__free(struct chhttp *c)
{
	if (!c)
		return;
	_disconnect(c);
	free(c->host);
	free(c->port);
	free(c->auth);
	free(c->params);
	free(c->ca_file);
	SSL_CTX_free(c->tls);
	free(c->in);
	free(c);
}

/*
 * A handshake gets a shorter timeout than a query: a plain HTTP port given
 * with secure=1 may wait for the end of a request line that never comes.
 */
#define HANDSHAKE_TIMEOUT_S 10

static void _set_timeout(int fd, int seconds)
{
	struct timeval tv = { .tv_sec = seconds };

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

/* TLS on the freshly connected c->fd. */
static int _handshake(struct chhttp *c, char *err, size_t err_len)
{
	int limit = c->timeout_s < HANDSHAKE_TIMEOUT_S ? c->timeout_s : HANDSHAKE_TIMEOUT_S;
	char why[512];
	int rc, e;

	c->ssl = tls__client_ssl(c->tls, c->host, err, err_len);
	if (!c->ssl || SSL_set_fd(c->ssl, c->fd) != 1) {
		_disconnect(c);
		return -ENOMEM;
	}
	ERR_clear_error();
	errno = 0;
	_set_timeout(c->fd, limit);
	rc = SSL_connect(c->ssl);
	e = errno;
	if (rc == 1) {
		_set_timeout(c->fd, c->timeout_s);
		return 0;
	}
	switch (SSL_get_error(c->ssl, rc)) {
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		snprintf(why, sizeof(why), "no answer within %d s (does this port speak TLS?)",
			 limit);
		rc = -ETIMEDOUT;
		break;
	case SSL_ERROR_SYSCALL:
		tls__explain(c->ssl, c->ca_file, tls__first_error(), e ? strerror(e) :
			     "the server closed the connection (does this port speak TLS?)",
			     why, sizeof(why));
		rc = e ? -e : -ECONNRESET;
		break;
	default:
		tls__explain(c->ssl, c->ca_file, tls__first_error(), NULL, why, sizeof(why));
		rc = -EPROTO;
		break;
	}
	snprintf(err, err_len, "TLS handshake with ClickHouse at %s:%s failed: %s", c->host,
		 c->port, why);
	_disconnect(c);
	return rc;
}

static int _connect(struct chhttp *c, char *err, size_t err_len)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res = NULL, *ai;
	struct timeval tv = { .tv_sec = c->timeout_s };
	int rc, e = ECONNREFUSED, one = 1;

	rc = getaddrinfo(c->host, c->port, &hints, &res);
	if (rc) {
		snprintf(err, err_len, "cannot resolve %s:%s: %s", c->host, c->port,
			 gai_strerror(rc));
		return -EHOSTUNREACH;
	}
	for (ai = res; ai; ai = ai->ai_next) {
		int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);

		if (fd < 0) {
			e = errno;
			continue;
		}
		setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (!connect(fd, ai->ai_addr, ai->ai_addrlen)) {
			c->fd = fd;
			break;
		}
		e = errno;
		close(fd);
	}
	freeaddrinfo(res);
	if (c->fd < 0) {
		snprintf(err, err_len, "cannot connect to %s:%s: %s", c->host, c->port,
			 strerror(e));
		return -e;
	}
	return c->tls ? _handshake(c, err, err_len) : 0;
}

/*
 * One SSL_read or SSL_write result as a byte count, 0 for the end of the
 * stream, or -errno. With blocking sockets, "want read/write" only means
 * the socket's timeout expired. A peer that closes without close_notify
 * reads as a reset, not an end: HTTP's framing decides where a body ends.
 */
static ssize_t _tls_result(struct chhttp *c, int ok, size_t n)
{
	if (ok == 1)
		return (ssize_t)n;
	switch (SSL_get_error(c->ssl, ok)) {
	case SSL_ERROR_ZERO_RETURN:
		return 0;
	case SSL_ERROR_WANT_READ:
	case SSL_ERROR_WANT_WRITE:
		return -EAGAIN;
	case SSL_ERROR_SYSCALL:
		if (errno == EINTR)
			return -EINTR;
		return errno ? -errno : -ECONNRESET;
	default: {
		char why[256];

		tls__drain_errors(why, sizeof(why));
		pr_debug("clickhouse: TLS with %s:%s: %s\n", c->host, c->port, why);
		return -ECONNRESET;
	}
	}
}

static ssize_t _send(struct chhttp *c, const void *p, size_t len)
{
	size_t n = 0;
	ssize_t r;
	int ok;

	if (!c->ssl)
		return send(c->fd, p, len, MSG_NOSIGNAL);
	errno = 0;
	ok = SSL_write_ex(c->ssl, p, len, &n);
	r = _tls_result(c, ok, n);
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

static ssize_t _recv(struct chhttp *c, void *p, size_t len)
{
	size_t n = 0;
	ssize_t r;
	int ok;

	if (!c->ssl)
		return recv(c->fd, p, len, 0);
	errno = 0;
	ok = SSL_read_ex(c->ssl, p, len, &n);
	r = _tls_result(c, ok, n);
	if (r < 0) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

static int _send_all(struct chhttp *c, const void *p, size_t len)
{
	const char *s = p;

	while (len) {
		ssize_t n = _send(c, s, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads more bytes into c->in. Returns the count, 0 at end of stream, or -errno. */
static ssize_t _fill(struct chhttp *c)
{
	ssize_t n;

	if (c->in_pos && c->in_pos == c->in_len)
		c->in_pos = c->in_len = 0;
	if (c->in_cap - c->in_len < 65536) {
		size_t cap = c->in_cap ? c->in_cap * 2 : 131072;
		char *p = realloc(c->in, cap);

		if (!p)
			return -ENOMEM;
		c->in = p;
		c->in_cap = cap;
	}
	do {
		n = _recv(c, c->in + c->in_len, c->in_cap - c->in_len);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
	c->in_len += (size_t)n;
	return n;
}

/* One CRLF-terminated line (CRLF stripped, NUL-terminated in place); NULL with *e set. */
static char *_line(struct chhttp *c, int *e)
{
	for (;;) {
		/* Nothing read yet: in is still NULL, and memchr must not see it. */
		char *nl = c->in_len > c->in_pos ?
			   memchr(c->in + c->in_pos, '\n', c->in_len - c->in_pos) : NULL;
		ssize_t n;

		if (nl) {
			char *line = c->in + c->in_pos;

			c->in_pos = (size_t)(nl - c->in) + 1;
			*nl = '\0';
			if (nl > line && nl[-1] == '\r')
				nl[-1] = '\0';
			return line;
		}
		if (c->in_len - c->in_pos > 65536) {
			*e = -EPROTO;
			return NULL;
		}
		/* Keep the partial line while reading more. */
		if (c->in_pos) {
			memmove(c->in, c->in + c->in_pos, c->in_len - c->in_pos);
			c->in_len -= c->in_pos;
			c->in_pos = 0;
		}
		n = _fill(c);
		if (n <= 0) {
			*e = n ? (int)n : -ECONNRESET;
			return NULL;
		}
	}
}

/* Moves len bytes of body (or all until close when len is SIZE_MAX) into out. */
static int _body(struct chhttp *c, size_t len, struct strbuf *out)
{
	while (len) {
		size_t have = c->in_len - c->in_pos, take = have < len ? have : len;
		ssize_t n;

		if (take) {
			if (out)
				strbuf__append(out, c->in + c->in_pos, take);
			c->in_pos += take;
			if (len != SIZE_MAX)
				len -= take;
			continue;
		}
		n = _fill(c);
		if (n < 0)
			return (int)n;
		if (!n)
			return len == SIZE_MAX ? 0 : -ECONNRESET;
	}
	return out && out->oom ? -ENOMEM : 0;
}

static int _exchange(struct chhttp *c, const char *head, size_t head_len, const void *body,
		     size_t len, struct strbuf *resp, char *err, size_t err_len, bool *got_any)
{
	struct strbuf ebody = STRBUF_INIT;
	struct strbuf *out;
	size_t clen = SIZE_MAX;
	bool chunked = false, keep = true;
	int status = 0, e = 0;
	char *line;

	*got_any = false;
	e = _send_all(c, head, head_len);
	if (!e && len)
		e = _send_all(c, body, len);
	if (e)
		goto fail;
	line = _line(c, &e);
	if (!line)
		goto fail;
	*got_any = true;
	if (sscanf(line, "HTTP/%*d.%*d %d", &status) != 1) {
		e = -EPROTO;
		goto fail;
	}
	while ((line = _line(c, &e)) && line[0]) {
		if (!strncasecmp(line, "Content-Length:", 15))
			clen = strtoull(line + 15, NULL, 10);
		else if (!strncasecmp(line, "Transfer-Encoding:", 18) && strcasestr(line, "chunked"))
			chunked = true;
		else if (!strncasecmp(line, "Connection:", 11) && strcasestr(line, "close"))
			keep = false;
	}
	if (!line)
		goto fail;
	out = status == 200 ? resp : &ebody;
	if (chunked) {
		for (;;) {
			size_t n;

			line = _line(c, &e);
			if (!line)
				goto fail;
			n = strtoull(line, NULL, 16);
			if (!n)
				break;
			e = _body(c, n, out);
			if (e)
				goto fail;
			line = _line(c, &e);
			if (!line)
				goto fail;
		}
		/* Trailers, up to the empty line. */
		while ((line = _line(c, &e)) && line[0])
			;
		if (!line)
			goto fail;
	} else {
		if (clen == SIZE_MAX)
			keep = false;
		e = _body(c, clen, out);
		if (e)
			goto fail;
	}
	if (!keep)
		_disconnect(c);
	else
		c->reused = true;
	if (status != 200) {
		char *nl;

		strbuf__putc(&ebody, '\0');
		nl = ebody.buf ? strchr(ebody.buf, '\n') : NULL;
		if (nl)
			*nl = '\0';
		snprintf(err, err_len, "ClickHouse answered HTTP %d: %s", status,
			 ebody.buf ? ebody.buf : "");
		strbuf__release(&ebody);
		return -EIO;
	}
	return 0;
fail:
	strbuf__release(&ebody);
	_disconnect(c);
	/* ClickHouse's https_port hangs up on plain HTTP without a word. */
	snprintf(err, err_len, "ClickHouse at %s:%s: %s%s", c->host, c->port, strerror(-e),
		 !c->tls && !*got_any && e == -ECONNRESET ?
		 " (if this is ClickHouse's https_port, add secure=1)" : "");
	return e;
}

static void _urlencode(struct strbuf *sb, const char *s)
{
	static const char hex[] = "0123456789ABCDEF";

	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
		    ch == '-' || ch == '_' || ch == '.' || ch == '~') {
			strbuf__putc(sb, (char)ch);
		} else {
			strbuf__putc(sb, '%');
			strbuf__putc(sb, hex[ch >> 4]);
			strbuf__putc(sb, hex[ch & 15]);
		}
	}
}

int chhttp__post(struct chhttp *c, const char *query, const char *extra, const void *body,
		 size_t len, struct strbuf *resp, char *err, size_t err_len)
{
	struct strbuf head = STRBUF_INIT;
	size_t resp_len = resp ? resp->len : 0;
	int e = 0;

	strbuf__puts(&head, "POST /?");
	strbuf__puts(&head, c->params);
	if (extra && extra[0]) {
		if (c->params[0])
			strbuf__putc(&head, '&');
		strbuf__puts(&head, extra);
	}
	if (query) {
		if (c->params[0] || (extra && extra[0]))
			strbuf__putc(&head, '&');
		strbuf__puts(&head, "query=");
		_urlencode(&head, query);
	}
	strbuf__printf(&head, " HTTP/1.1\r\nHost: %s:%s\r\nConnection: keep-alive\r\n"
		       "Content-Length: %zu\r\n", c->host, c->port, len);
	if (c->auth)
		strbuf__printf(&head, "Authorization: Basic %s\r\n", c->auth);
	strbuf__puts(&head, "\r\n");
	if (head.oom) {
		strbuf__release(&head);
		snprintf(err, err_len, "out of memory");
		return -ENOMEM;
	}
	for (int attempt = 0; attempt < 2; attempt++) {
		bool reused, got_any = false;

		if (c->fd < 0) {
			e = _connect(c, err, err_len);
			if (e)
				break;
		}
		reused = c->reused;
		if (resp) {
			resp->len = resp_len;
			if (resp->buf)
				resp->buf[resp_len] = '\0';
		}
		e = _exchange(c, head.buf, head.len, body, len, resp, err, err_len, &got_any);
		/* An idle kept-alive connection the server closed: it never saw the request. */
		if (e && e != -EIO && reused && !got_any)
			continue;
		break;
	}
	strbuf__release(&head);
	return e;
}
