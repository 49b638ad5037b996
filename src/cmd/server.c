// SPDX-License-Identifier: Apache-2.0
/* flamewatch server: ingest, storage, query API and /metrics. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include <event2/event.h>

#include "cmd/cmd.h"
#include "common/hostport.h"
#include "common/log.h"
#include "common/timeparse.h"
#include "server/server.h"
#include "store/store.h"

#define RETENTION_INTERVAL_S 60

static void _usage(FILE *out)
{
	fprintf(out,
"usage: flamewatch server [--listen HOST:PORT] [--data DIR | --store URI] [--token T]\n"
"                         [--read-token T] [--write-token T] [--retention 7d]\n"
"                         [--max-body BYTES] [--max-body-memory BYTES]\n"
"                         [--max-session-memory BYTES]\n"
"                         [--max-connections N] [--insecure]\n"
"                         [--tls-cert FILE --tls-key FILE]\n"
"\n"
"Stores what agents send and answers the query API.\n"
"\n"
"  --listen HOST:PORT   where to listen (default 127.0.0.1:7171)\n"
"  --data DIR           SQLite data directory (default /var/lib/flamewatch)\n"
"  --store URI          sqlite:DIR or clickhouse://[USER[:PASS]@]HOST:8123/DB\n"
"  --token T            bearer token for both ingest and the API (or FLAMEWATCH_TOKEN\n"
"                       in the environment)\n"
"  --write-token T      bearer token for ingest only\n"
"  --read-token T       bearer token for the API only\n"
"  --retention DUR      drop data older than this (default 7d)\n"
"  --max-body BYTES     largest request accepted (default 64 MiB)\n"
"  --max-body-memory BYTES  request bodies held in memory at once, over all\n"
"                       connections; beyond it a request gets 503 and Retry-After\n"
"                       (default 4 x --max-body)\n"
"  --max-session-memory BYTES  agents' session dictionaries held at once; past\n"
"                       it the least recently used are forgotten, and their\n"
"                       agents send the next batch with its dictionary again\n"
"                       (default 512 MiB)\n"
"  --max-connections N  connections served at once (default 1024, and at most\n"
"                       what the descriptor limit leaves); at the cap the one\n"
"                       idle longest is closed, with none idle a newcomer gets 503\n"
"  --insecure           allow a non-loopback --listen without both tokens\n"
"  --tls-cert FILE      serve HTTPS with this PEM certificate (chain: server first)\n"
"  --tls-key FILE       the certificate's private key (PEM)\n"
"  --agent-hz HZ        -F assumed for CPU samples stored without their period\n"
"                       (data from before schema version 2; default 19)\n");
}

static void _on_signal(evutil_socket_t sig, short what, void *arg)
{
	(void)sig;
	(void)what;
	event_base_loopexit(arg, NULL);
}

struct retention {
	struct store *store;
	int64_t keep_ns;
};

static void _on_retention(evutil_socket_t fd, short what, void *arg)
{
	struct retention *r = arg;
	struct timespec now;
	int err;

	(void)fd;
	(void)what;
	clock_gettime(CLOCK_REALTIME, &now);
	err = store__retain(r->store, (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec - r->keep_ns);
	if (err)
		pr_warn("retention: %s\n", strerror(-err));
}

/*
 * Every connection is a descriptor, and the usual soft limit (1024) is far
 * below what the hard limit allows: take it all. prlimit() rather than
 * setrlimit(), which systemd's @resources filter forbids; and only when
 * there is something to raise.
 */
static void _raise_nofile(void)
{
	struct rlimit rl, want;

	if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= rl.rlim_max)
		return;
	want = (struct rlimit){ .rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max };
	if (prlimit(0, RLIMIT_NOFILE, &want, NULL)) {
		pr_debug("cannot raise the descriptor limit from %llu to %llu: %s\n",
			 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
			 strerror(errno));
		return;
	}
	pr_debug("raised the descriptor limit from %llu to %llu\n",
		 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max);
}

/*
 * Off loopback, each side (ingest, the API) needs its token: one token
 * alone leaves the other side open to anyone who can reach the port.
 */
static int _check_tokens(const struct cmd_server_opts *o, const char *host)
{
	if (hostport__is_loopback(host) || o->insecure)
		return 0;
	if (!o->write_token && !o->read_token) {
		fprintf(stderr, "flamewatch: error: --listen %s is reachable from other machines: "
			"give --token (or --read-token and --write-token), or --insecure\n",
			o->listen);
		return -1;
	}
	if (!o->write_token) {
		fprintf(stderr, "flamewatch: error: --listen %s is reachable from other machines "
			"and only --read-token is given: anyone could send data (ingest). Give "
			"--write-token too (or --token for both), or --insecure\n", o->listen);
		return -1;
	}
	if (!o->read_token) {
		fprintf(stderr, "flamewatch: error: --listen %s is reachable from other machines "
			"and only --write-token is given: anyone could read profiles (the API). "
			"Give --read-token too (or --token for both), or --insecure\n", o->listen);
		return -1;
	}
	return 0;
}

int cmd__serve(const struct cmd_server_opts *o, struct event_base *base, struct store **store_out,
	       struct server **server_out)
{
	struct server_opts so = {
		.listen = o->listen,
		.write_token = o->write_token,
		.read_token = o->read_token,
		.max_body = o->max_body,
		.max_connections = o->max_connections,
		.max_body_memory = o->max_body_memory,
		.max_session_memory = o->max_session_memory,
		.default_hz = o->hz,
		.tls_cert = o->tls_cert,
		.tls_key = o->tls_key,
	};
	char host[256], err[512], uri[4096];
	struct store *store;
	struct server *srv;
	uint16_t port;

	if (hostport__parse(o->listen, host, sizeof(host), &port)) {
		fprintf(stderr, "flamewatch: error: --listen: '%s' is not HOST:PORT\n", o->listen);
		return -1;
	}
	/* Already while the store opens: OpenSSL writes to ClickHouse with write(2). */
	signal(SIGPIPE, SIG_IGN);
	if (_check_tokens(o, host))
		return -1;
	if (o->max_body_memory && o->max_body_memory < o->max_body) {
		fprintf(stderr, "flamewatch: error: --max-body-memory %zu is less than --max-body "
			"%zu: no body of the largest size could ever be taken\n",
			o->max_body_memory, o->max_body);
		return -1;
	}
	_raise_nofile();
	if (!o->tls_cert != !o->tls_key) {
		fprintf(stderr, "flamewatch: error: --tls-cert and --tls-key go together\n");
		return -1;
	}
	/* Allowed, as before TLS existed; but say what it means. */
	if (!hostport__is_loopback(host) && !o->tls_cert)
		fprintf(stderr, "flamewatch: warning: --listen %s without --tls-cert: tokens and "
			"profiles cross the network in clear text\n", o->listen);
	if (o->store_uri) {
		snprintf(uri, sizeof(uri), "%s", o->store_uri);
	} else {
		if (mkdir(o->data_dir, 0750) && errno != EEXIST) {
			fprintf(stderr, "flamewatch: error: cannot create the data directory %s: %s\n",
				o->data_dir, strerror(errno));
			return -1;
		}
		snprintf(uri, sizeof(uri), "sqlite:%s", o->data_dir);
	}
	store = store__open(uri, err, sizeof(err));
	if (!store) {
		fprintf(stderr, "flamewatch: error: cannot open the store %s: %s\n", uri, err);
		return -1;
	}
	srv = server__new(base, store, &so, err, sizeof(err));
	if (!srv) {
		fprintf(stderr, "flamewatch: error: %s\n", err);
		store__close(store);
		return -1;
	}
	*store_out = store;
	*server_out = srv;
	return 0;
}

const char *cmd__scheme(const struct cmd_server_opts *o)
{
	return o->tls_cert ? "https" : "http";
}

const char *cmd__listen_host(const struct cmd_server_opts *o)
{
	static char host[256];
	uint16_t port;

	if (hostport__parse(o->listen, host, sizeof(host), &port))
		return o->listen;
	return host;
}

int cmd__parse_server_opt(struct cmd_server_opts *o, int c, const char *arg)
{
	switch (c) {
	case 'l':
		o->listen = arg;
		return 0;
	case 'D':
		o->data_dir = arg;
		return 0;
	case 'S':
		o->store_uri = arg;
		return 0;
	case 't':
		o->write_token = o->read_token = arg;
		return 0;
	case 'W':
		o->write_token = arg;
		return 0;
	case 'R':
		o->read_token = arg;
		return 0;
	case 'r':
		if (duration__parse(arg, &o->retention_ns) || o->retention_ns < 60000000000LL) {
			fprintf(stderr, "flamewatch: error: --retention: '%s' is not a duration of a "
				"minute or more (7d, 36h, 90m)\n", arg);
			return -1;
		}
		return 0;
	case 'B': {
		char *end;
		unsigned long long v = strtoull(arg, &end, 10);

		if (*end || !arg[0] || arg[0] == '-' || v < 1024 || v > (1ULL << 32)) {
			fprintf(stderr, "flamewatch: error: --max-body: '%s' is not a size between "
				"1 KiB and 4 GiB in bytes\n", arg);
			return -1;
		}
		o->max_body = v;
		return 0;
	}
	case 'M': {
		char *end;
		unsigned long long v;

		errno = 0;
		v = strtoull(arg, &end, 10);
		if (errno || *end || !arg[0] || arg[0] == '-' || v < 1024 || v > (1ULL << 40)) {
			fprintf(stderr, "flamewatch: error: --max-body-memory: '%s' is not a size "
				"between 1 KiB and 1 TiB in bytes\n", arg);
			return -1;
		}
		o->max_body_memory = v;
		return 0;
	}
	case 'E': {
		char *end;
		unsigned long long v;

		errno = 0;
		v = strtoull(arg, &end, 10);
		if (errno || *end || !arg[0] || arg[0] == '-' || v < 1024 || v > (1ULL << 40)) {
			fprintf(stderr, "flamewatch: error: --max-session-memory: '%s' is not a size "
				"between 1 KiB and 1 TiB in bytes\n", arg);
			return -1;
		}
		o->max_session_memory = v;
		return 0;
	}
	case 'C': {
		char *end;
		unsigned long v;

		errno = 0;
		v = strtoul(arg, &end, 10);
		if (errno || *end || !arg[0] || arg[0] == '-' || v == 0 || v > 1000000) {
			fprintf(stderr, "flamewatch: error: --max-connections: '%s' is not a number "
				"between 1 and 1000000\n", arg);
			return -1;
		}
		o->max_connections = v;
		return 0;
	}
	case 'I':
		o->insecure = true;
		return 0;
	case 'c':
		o->tls_cert = arg;
		return 0;
	case 'k':
		o->tls_key = arg;
		return 0;
	case 'H': {
		char *end;
		unsigned long v = strtoul(arg, &end, 10);

		if (*end || !arg[0] || v == 0 || v > 100000) {
			fprintf(stderr, "flamewatch: error: --agent-hz: '%s' is not a frequency\n", arg);
			return -1;
		}
		o->hz = v;
		return 0;
	}
	}
	return 1;
}

void cmd__server_defaults(struct cmd_server_opts *o, const char *data_dir)
{
	memset(o, 0, sizeof(*o));
	o->listen = "127.0.0.1:7171";
	o->data_dir = data_dir;
	o->retention_ns = 7LL * 24 * 3600 * 1000000000LL;
	o->max_body = 64u << 20;
	o->hz = 19;
}

int cmd__run_loop(struct event_base *base, struct store *store, int64_t retention_ns)
{
	struct retention ret = { .store = store, .keep_ns = retention_ns };
	struct timeval every = { RETENTION_INTERVAL_S, 0 };
	struct event *sigint, *sigterm, *timer;
	int rc;

	/*
	 * libevent puts back, when a signal event is freed, the disposition it
	 * found. Ignoring the signals first makes that "ignore": the caller's
	 * stop (the last samples saved, BPF programs detached) is then not cut
	 * short by a second signal. `timeout` sends two, one to the process and
	 * one to its group, and a user may press Ctrl-C twice; SIGKILL still
	 * stops at once.
	 */
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	sigint = evsignal_new(base, SIGINT, _on_signal, base);
	sigterm = evsignal_new(base, SIGTERM, _on_signal, base);
	timer = event_new(base, -1, EV_PERSIST, _on_retention, &ret);
	if (!sigint || !sigterm || !timer || event_add(sigint, NULL) || event_add(sigterm, NULL) ||
	    event_add(timer, &every)) {
		fprintf(stderr, "flamewatch: error: cannot set up the event loop\n");
		rc = -1;
		goto out;
	}
	signal(SIGPIPE, SIG_IGN);
	_on_retention(-1, 0, &ret);
	rc = event_base_dispatch(base) < 0 ? -1 : 0;
out:
	if (sigint)
		event_free(sigint);
	if (sigterm)
		event_free(sigterm);
	if (timer)
		event_free(timer);
	return rc;
}

const struct option cmd__server_longopts[] = {
	{ "listen", required_argument, NULL, 'l' },
	{ "data", required_argument, NULL, 'D' },
	{ "store", required_argument, NULL, 'S' },
	{ "token", required_argument, NULL, 't' },
	{ "write-token", required_argument, NULL, 'W' },
	{ "read-token", required_argument, NULL, 'R' },
	{ "retention", required_argument, NULL, 'r' },
	{ "max-body", required_argument, NULL, 'B' },
	{ "max-body-memory", required_argument, NULL, 'M' },
	{ "max-session-memory", required_argument, NULL, 'E' },
	{ "max-connections", required_argument, NULL, 'C' },
	{ "insecure", no_argument, NULL, 'I' },
	{ "agent-hz", required_argument, NULL, 'H' },
	{ "tls-cert", required_argument, NULL, 'c' },
	{ "tls-key", required_argument, NULL, 'k' },
	{ "verbose", no_argument, NULL, 'v' },
	{ "help", no_argument, NULL, 'h' },
	{}
};

int cmd_server(int argc, char **argv)
{
	struct cmd_server_opts o;
	struct event_base *base;
	struct store *store = NULL;
	struct server *srv = NULL;
	int c, rc = 1;

	cmd__server_defaults(&o, "/var/lib/flamewatch");
	/* As for the agent: a token in the environment stays out of ps. */
	if (getenv("FLAMEWATCH_TOKEN") && getenv("FLAMEWATCH_TOKEN")[0])
		o.write_token = o.read_token = getenv("FLAMEWATCH_TOKEN");
	optind = 1;
	while ((c = getopt_long(argc, argv, "vh", cmd__server_longopts, NULL)) != -1) {
		if (c == 'h') {
			_usage(stdout);
			return 0;
		}
		if (c == 'v') {
			log__set_level(LOG_DEBUG);
			continue;
		}
		if (c == '?' || cmd__parse_server_opt(&o, c, optarg)) {
			if (c == '?')
				_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "flamewatch: error: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	base = event_base_new();
	if (!base) {
		fprintf(stderr, "flamewatch: error: cannot create the event loop\n");
		return 1;
	}
	if (cmd__serve(&o, base, &store, &srv))
		goto out;
	fprintf(stderr, "flamewatch: listening on %s://%s:%u (data in %s)\n",
		cmd__scheme(&o), cmd__listen_host(&o), server__port(srv), o.store_uri ? o.store_uri : o.data_dir);
	rc = cmd__run_loop(base, store, o.retention_ns) ? 1 : 0;
out:
	server__free(srv);
	store__close(store);
	event_base_free(base);
	return rc;
}
