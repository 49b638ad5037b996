// SPDX-License-Identifier: Apache-2.0
#include <arpa/inet.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/x509v3.h>

#include "common/log.h"
#include "common/tls.h"

/*
 * The binary carries its own OpenSSL, built for Debian's layout: its
 * default trust store (OPENSSLDIR/certs) does not exist on Red Hat or
 * Alpine. So unless SSL_CERT_FILE or SSL_CERT_DIR says otherwise, the
 * first CA bundle found here is the system's store: Debian and Ubuntu
 * (and Arch, Gentoo), Fedora and RHEL, openSUSE, Alpine.
 */
static const char *const SYSTEM_BUNDLES[] = {
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/ssl/cert.pem",
};

/*
 * The certificate that failed verification, for tls__explain: OpenSSL
 * keeps no peer certificate after a failed handshake. Each client has one
 * connection on its thread (the store's under its lock, the agent's
 * shipper on its event loop), so one buffer per thread is enough; it is
 * cleared for every new session.
 */
static __thread char failed_cert[512];

static void _name(X509_NAME *n, char *buf, size_t len)
{
	if (!n || !X509_NAME_oneline(n, buf, (int)len))
		snprintf(buf, len, "?");
}

static int _on_verify(int ok, X509_STORE_CTX *st)
{
	X509 *x = X509_STORE_CTX_get_current_cert(st);

	if (!ok && !failed_cert[0] && x) {
		char subject[240], issuer[240];

		_name(X509_get_subject_name(x), subject, sizeof(subject));
		_name(X509_get_issuer_name(x), issuer, sizeof(issuer));
		snprintf(failed_cert, sizeof(failed_cert), "%s issued by %s", subject, issuer);
	}
	return ok;
}

unsigned long tls__first_error(void)
{
	unsigned long first = ERR_get_error();

	/* The first error is the root cause; later ones repeat it higher up. */
	while (ERR_get_error())
		;
	return first;
}

void tls__drain_errors(char *buf, size_t len)
{
	unsigned long e = tls__first_error();

	if (!len)
		return;
	buf[0] = '\0';
	if (e)
		ERR_error_string_n(e, buf, len);
}

static int _load_system_store(SSL_CTX *ctx, char *err, size_t err_len)
{
	char why[256];

	if (getenv("SSL_CERT_FILE") || getenv("SSL_CERT_DIR")) {
		if (SSL_CTX_set_default_verify_paths(ctx) == 1)
			return 0;
		tls__drain_errors(why, sizeof(why));
		snprintf(err, err_len, "cannot load the CAs named by SSL_CERT_FILE/SSL_CERT_DIR: %s",
			 why);
		return -EINVAL;
	}
	for (size_t i = 0; i < sizeof(SYSTEM_BUNDLES) / sizeof(SYSTEM_BUNDLES[0]); i++) {
		if (access(SYSTEM_BUNDLES[i], R_OK))
			continue;
		if (SSL_CTX_load_verify_locations(ctx, SYSTEM_BUNDLES[i], NULL) == 1) {
			pr_debug("tls: trusting the CAs of %s\n", SYSTEM_BUNDLES[i]);
			return 0;
		}
		tls__drain_errors(why, sizeof(why));
		pr_warn("tls: cannot load the system's CAs from %s: %s\n", SYSTEM_BUNDLES[i], why);
	}
	snprintf(err, err_len, "no system CA bundle found (looked for %s and the others usual on "
		 "Linux): give a CA file, or set SSL_CERT_FILE", SYSTEM_BUNDLES[0]);
	return -ENOENT;
}

/* A context of either side that speaks TLS 1.2 or later; NULL with errno set. */
static SSL_CTX *_new_ctx(const SSL_METHOD *method, char *err, size_t err_len)
{
	SSL_CTX *ctx = SSL_CTX_new(method);
	char why[256];

	if (!ctx) {
		tls__drain_errors(why, sizeof(why));
		snprintf(err, err_len, "cannot create a TLS context: %s", why);
		errno = ENOMEM;
		return NULL;
	}
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		snprintf(err, err_len, "cannot require TLS 1.2");
		SSL_CTX_free(ctx);
		errno = EINVAL;
		return NULL;
	}
	return ctx;
}

SSL_CTX *tls__client_ctx(const char *ca_file, char *err, size_t err_len)
{
	SSL_CTX *ctx = _new_ctx(TLS_client_method(), err, err_len);
	char why[256];
	int e = 0;

	if (!ctx)
		return NULL;
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, _on_verify);
	if (ca_file) {
		if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
			tls__drain_errors(why, sizeof(why));
			snprintf(err, err_len, "cannot load the CA file %s: %s", ca_file, why);
			e = -EINVAL;
			goto fail;
		}
	} else {
		e = _load_system_store(ctx, err, err_len);
		if (e)
			goto fail;
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	errno = -e;
	return NULL;
}

SSL_CTX *tls__server_ctx(const char *cert_file, const char *key_file, char *err,
			 size_t err_len)
{
	SSL_CTX *ctx = _new_ctx(TLS_server_method(), err, err_len);
	char why[256];
	int e = -EINVAL;

	if (!ctx)
		return NULL;
	if (SSL_CTX_use_certificate_chain_file(ctx, cert_file) != 1) {
		tls__drain_errors(why, sizeof(why));
		snprintf(err, err_len, "cannot load the certificate %s: %s", cert_file, why);
		goto fail;
	}
	/* OpenSSL checks here that the key belongs to the certificate. */
	if (SSL_CTX_use_PrivateKey_file(ctx, key_file, SSL_FILETYPE_PEM) != 1) {
		unsigned long code = tls__first_error();

		ERR_error_string_n(code, why, sizeof(why));
		if (ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH)
			snprintf(err, err_len, "the private key %s does not belong to the "
				 "certificate %s", key_file, cert_file);
		else
			snprintf(err, err_len, "cannot load the private key %s: %s", key_file, why);
		goto fail;
	}
	return ctx;
fail:
	SSL_CTX_free(ctx);
	errno = -e;
	return NULL;
}

SSL *tls__client_ssl(SSL_CTX *ctx, const char *host, char *err, size_t err_len)
{
	unsigned char addr[16];
	SSL *ssl = SSL_new(ctx);
	bool is_ip = inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
	char why[256];

	if (!ssl)
		goto fail;
	failed_cert[0] = '\0';
	/* An address is matched against the certificate's IP SANs, a name against its DNS names. */
	if (is_ip) {
		if (X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), host) != 1)
			goto fail;
	} else {
		if (SSL_set_tlsext_host_name(ssl, host) != 1 || SSL_set1_host(ssl, host) != 1)
			goto fail;
	}
	return ssl;
fail:
	tls__drain_errors(why, sizeof(why));
	snprintf(err, err_len, "cannot set up TLS for %s: %s", host, why[0] ? why : "out of memory");
	SSL_free(ssl);
	errno = ENOMEM;
	return NULL;
}

void tls__explain(const SSL *ssl, const char *ca_file, unsigned long code, const char *what,
		  char *buf, size_t len)
{
	long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
	char why[256];

	if (v != X509_V_OK) {
		X509_VERIFY_PARAM *p = SSL_get0_param((SSL *)ssl);
		char *ip = X509_VERIFY_PARAM_get1_ip_asc(p);
		const char *host = X509_VERIFY_PARAM_get0_host(p, 0);

		ERR_clear_error();
		snprintf(buf, len, "certificate verification failed: %s (certificate %s; expected "
			 "host %s; trusted CAs from %s)", X509_verify_cert_error_string(v),
			 failed_cert[0] ? failed_cert : "?", host ? host : ip ? ip : "?",
			 ca_file ? ca_file : "the system's store");
		OPENSSL_free(ip);
		return;
	}
	if (code) {
		ERR_error_string_n(code, why, sizeof(why));
		/* A plain HTTP answer to our ClientHello reads as a bad record version. */
		snprintf(buf, len, "%s%s", why, strstr(why, "wrong version number") ||
			 strstr(why, "packet length too long") ?
			 " (does this port speak TLS? it looks like plain HTTP)" : "");
		return;
	}
	snprintf(buf, len, "%s", what ? what : "unknown TLS error");
}
