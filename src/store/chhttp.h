/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_STORE_CHHTTP_H
#define FW_STORE_CHHTTP_H

#include <stdbool.h>
#include <stddef.h>

#include "common/strbuf.h"

/*
 * A small synchronous client for ClickHouse's HTTP interface: one
 * keep-alive connection, plain TCP or TLS, HTTP/1.1 with Content-Length requests
 * and Content-Length, chunked or close-delimited responses. The store calls
 * it with its own lock held, so it needs none. It is not libevent's evhttp
 * (the agent's shipper) because the store answers synchronously inside the
 * server's event loop callbacks, where running a nested loop is not safe.
 * Over TLS, OpenSSL writes with write(2), not send(MSG_NOSIGNAL): the
 * process must ignore SIGPIPE (the server and `run` do).
 */
struct chhttp;

struct chhttp_opts {
	const char *host;	/* name or address */
	const char *port;	/* "8123" */
	const char *user;	/* NULL or "": ClickHouse's default user */
	const char *password;
	const char *params;	/* URL parameters sent with every request, e.g. "database=fw" */
	int timeout_s;		/* per send/receive; 0: 300 */
	bool secure;		/* HTTPS: verify the certificate and that it names host */
	const char *ca_file;	/* trusted CAs (PEM); NULL: the system's store */
};

/*
 * Copies what it needs of o. Returns an owned client, or NULL with errno set
 * and the reason in err (a CA file that cannot be read). Connects lazily.
 */
struct chhttp *chhttp__new(const struct chhttp_opts *o, char *err, size_t err_len);
/* Accepts NULL. */
void chhttp__free(struct chhttp *c);

/*
 * POSTs body (len bytes, borrowed) with query (borrowed, may be NULL) as the
 * URL's query= parameter, and extra URL parameters (may be NULL, already
 * encoded, e.g. "wait_end_of_query=1"). ClickHouse reads the query from the
 * URL and the body as its data (INSERT ... FORMAT RowBinary), or, without
 * query, the body as the query. The response body is appended to resp
 * (borrowed; may be NULL to discard it). Returns 0 on HTTP 200; -EIO with
 * ClickHouse's message (its first line) in err for any other status or a
 * broken connection; -ETIMEDOUT, -ECONNREFUSED, -ENOMEM, ...
 *
 * A request on a kept-alive connection that the server had closed (no byte
 * of the response arrived) is sent once more on a new connection: the
 * server never saw it.
 */
int chhttp__post(struct chhttp *c, const char *query, const char *extra, const void *body,
		 size_t len, struct strbuf *resp, char *err, size_t err_len);

#endif
