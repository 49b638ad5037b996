/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_TLS_H
#define FW_COMMON_TLS_H

#include <stddef.h>

#include <openssl/ssl.h>

/*
 * TLS on OpenSSL for flamewatch's two HTTP clients (the ClickHouse store's
 * and the agent's shipper) and its server. The verification settings live
 * here only: a client always checks the peer's certificate chain against
 * its CA file (or the system's trust store) and that the certificate names
 * the host it dialled; TLS 1.2 is the oldest version spoken.
 */

/*
 * A client context. ca_file (borrowed) is a PEM file of trusted CAs; NULL
 * means the system's trust store (SSL_CERT_FILE/SSL_CERT_DIR, then the
 * bundle of the usual distributions). There is deliberately no way to
 * turn verification off: a private CA is one ca_file away. Returns an
 * owned context, or NULL with errno set and the reason in err.
 */
SSL_CTX *tls__client_ctx(const char *ca_file, char *err, size_t err_len);

/*
 * A server context from a PEM certificate chain and its private key
 * (borrowed paths). Returns an owned context, or NULL with errno set and
 * the reason in err.
 */
SSL_CTX *tls__server_ctx(const char *cert_file, const char *key_file, char *err,
			 size_t err_len);

/*
 * A client session on ctx (borrowed) for host, a name or an IP address
 * (borrowed): it sends host as SNI (names only) and accepts only a
 * certificate issued for it. Returns an owned SSL, or NULL with the reason
 * in err.
 */
SSL *tls__client_ssl(SSL_CTX *ctx, const char *host, char *err, size_t err_len);

/*
 * Why a handshake or a transfer on ssl failed, in words, into buf: the
 * certificate verification result if that failed (naming the certificate,
 * the host expected and ca_file, NULL for the system's store), else the
 * OpenSSL error code (see tls__first_error), else what (may be NULL): a
 * failure that left no error behind, e.g. "connection closed".
 */
void tls__explain(const SSL *ssl, const char *ca_file, unsigned long code, const char *what,
		  char *buf, size_t len);

/* Empties OpenSSL's error queue of this thread; returns its first (root) error, or 0. */
unsigned long tls__first_error(void);

/* Empties OpenSSL's error queue of this thread into buf, "" if it was empty. */
void tls__drain_errors(char *buf, size_t len);

#endif
