/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SERVER_SERVER_H
#define FW_SERVER_SERVER_H

#include <stddef.h>
#include <stdint.h>

/*
 * The HTTP side of `flamewatch server` and `flamewatch run`: ingest from
 * agents and other tools, the query API, /healthz and /metrics, on
 * libevent's evhttp. Single-threaded: every request runs on the event
 * loop the caller drives.
 */
struct event_base;
struct server;
struct store;

struct server_opts {
	const char *listen;		/* "HOST:PORT"; port 0 picks a free one */
	const char *write_token;	/* bearer token for ingest; NULL: none needed */
	const char *read_token;		/* bearer token for the API; NULL: none needed */
	size_t max_body;		/* bytes; larger requests get 413 */
	size_t max_connections;		/* served at once; 0: GATE_DEFAULT_CONNECTIONS */
	size_t max_body_memory;		/* bytes of bodies held at once; 0: 4 x max_body */
	size_t max_session_memory;	/* bytes of session dictionaries; 0: the default */
	unsigned int default_hz;	/* sampling rate of stored CPU samples, for ?hz= */
	const char *tls_cert;		/* PEM certificate chain: serve HTTPS; NULL: HTTP */
	const char *tls_key;		/* its private key (PEM) */
};

/*
 * Binds and starts serving on base. Borrows base and store. Returns NULL
 * with errno set and a message in err.
 */
struct server *server__new(struct event_base *base, struct store *store,
			   const struct server_opts *opts, char *err, size_t err_len);
/* Stops listening and frees. Accepts NULL. */
void server__free(struct server *s);
/* The port actually bound. */
uint16_t server__port(const struct server *s);

#endif
