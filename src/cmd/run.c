// SPDX-License-Identifier: Apache-2.0
/*
 * flamewatch run: agent and server in one process, on this host. Batches
 * go straight into the store; nothing crosses the network.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent/continuous.h"
#include "cmd/cmd.h"
#include "cmd/collect_opts.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/timeparse.h"
#include "server/server.h"
#include "store/store.h"

static void _usage(FILE *out)
{
	fprintf(out,
"usage: flamewatch run [--listen HOST:PORT] [--data DIR] [-F HZ] [--token T]\n"
"                      [--read-token T] [--write-token T] [--retention 7d]\n"
"                      [--insecure] [--node NAME] [--tls-cert FILE --tls-key FILE]\n"
"\n"
"Profiles this host continuously and serves the UI and API, all in one process.\n"
"\n"
"  --listen HOST:PORT   where to serve (default 127.0.0.1:7171)\n"
"  --data DIR           where to keep the data (default /var/lib/flamewatch)\n"
"  -F, --freq HZ        samples per second per CPU (default 19)\n"
"  --token T            bearer token for both ingest and the API (needed off\n"
"                       loopback)\n"
"  --write-token T      bearer token for ingest only\n"
"  --read-token T       bearer token for the API only (off loopback, give both)\n"
"  --retention DUR      drop data older than this (default 7d)\n"
"  --node NAME          this host's name in the data (default: the hostname)\n"
"  --interval DUR       how often samples are written to the store (default 10s)\n");
	collect_opts__usage(out);
	fprintf(out,
"  --max-body BYTES     largest request accepted (default 64 MiB)\n"
"  --max-body-memory BYTES  request bodies held in memory at once; beyond it a\n"
"                       request gets 503 and Retry-After (default 4 x --max-body)\n"
"  --max-connections N  connections served at once (default 1024, and at most\n"
"                       what the descriptor limit leaves)\n"
"  --insecure           allow a non-loopback --listen without both tokens\n"
"  --tls-cert FILE      serve HTTPS with this PEM certificate (chain: server first)\n"
"  --tls-key FILE       the certificate's private key (PEM)\n");
}

struct run {
	struct store *store;
	const char *node;
	uint64_t dropped;
};

static void _deliver(void *ctx, struct batch *b)
{
	struct run *r = ctx;
	int err = store__write_metrics(r->store, r->node, b);

	if (err)
		pr_warn("cannot store %u GPU metric points: %s\n", b->nmetrics, strerror(-err));
	err = store__write(r->store, r->node, b);

	if (err) {
		r->dropped += b->nsamples;
		pr_warn("cannot store %u samples: %s\n", b->nsamples, strerror(-err));
	}
	batch__free(b);
}

int cmd_run(int argc, char **argv)
{
	/*
	 * The server's options come first in longopts and use letters, the
	 * collection options (collect_opts.h) last: run's own long options are
	 * numbered above any letter, so that none can take one of theirs
	 * (--no-cpu-strips once swallowed --store).
	 */
	enum { OPT_NODE = 256, OPT_INTERVAL };
	static const struct option extra[] = {
		{ "freq", required_argument, NULL, 'F' },
		{ "node", required_argument, NULL, OPT_NODE },
		{ "interval", required_argument, NULL, OPT_INTERVAL },
		{}
	};
	struct option longopts[32];
	struct cmd_server_opts so;
	struct continuous_opts co = {
		.freq_hz = 19, .unwind_mb = CONTINUOUS_UNWIND_MB, .interval_ns = 10000000000ULL,
		.max_samples = 200000, .deliver = _deliver,
		.gpu_interval_ns = CONTINUOUS_GPU_INTERVAL_NS,
		.gpu_pcie_interval_ns = CONTINUOUS_GPU_PCIE_INTERVAL_NS,
		.gpu_process_interval_ns = CONTINUOUS_GPU_PROCESS_INTERVAL_NS,
	};
	struct run r = { 0 };
	struct continuous cont = { 0 };
	struct event_base *base = NULL;
	struct server *srv = NULL;
	char host[256];
	int c, err, rc = 1;

	if (collect_opts__longopts(longopts, sizeof(longopts) / sizeof(longopts[0]),
				   cmd__server_longopts, extra))
		return 1;
	cmd__server_defaults(&so, "/var/lib/flamewatch");
	optind = 1;
	while ((c = getopt_long(argc, argv, "F:vh", longopts, NULL)) != -1) {
		char *end;
		unsigned long v;

		if (c == 'h') {
			_usage(stdout);
			return 0;
		}
		if (c == 'v') {
			log__set_level(LOG_DEBUG);
			continue;
		}
		if (c == 'F') {
			errno = 0;
			v = strtoul(optarg, &end, 10);
			if (errno || *end || !optarg[0] || v == 0 || v > 100000) {
				fprintf(stderr, "flamewatch: error: -F: '%s' is not a frequency\n",
					optarg);
				return 2;
			}
			co.freq_hz = v;
			continue;
		}
		if (c == OPT_NODE) {
			r.node = optarg;
			continue;
		}
		if (c == OPT_INTERVAL) {
			int64_t ns;

			if (duration__parse(optarg, &ns) || ns < 100000000LL) {
				fprintf(stderr, "flamewatch: error: --interval: '%s' is not a duration "
					"of 100ms or more\n", optarg);
				return 2;
			}
			co.interval_ns = ns;
			continue;
		}
		err = collect_opts__parse(&co, c, optarg);
		if (err < 0)
			return 2;
		if (!err)
			continue;
		if (c == '?' || cmd__parse_server_opt(&so, c, optarg)) {
			if (c == '?')
				_usage(stderr);
			return 2;
		}
	}
	if (!r.node) {
		if (gethostname(host, sizeof(host)))
			snprintf(host, sizeof(host), "localhost");
		host[sizeof(host) - 1] = '\0';
		r.node = host;
	}
	if (cmd__check_kernel())
		return 1;
	/* Exports turn sample counts into CPU time at the rate we sample. */
	so.hz = co.freq_hz;
	base = event_base_new();
	if (!base)
		return 1;
	if (cmd__serve(&so, base, &r.store, &srv))
		goto out;
	co.ctx = &r;
	if (continuous__start(&cont, base, &co))
		goto out;
	fprintf(stderr, "flamewatch: profiling this host at %u Hz; open %s://%s:%u/ "
		"(data in %s; Ctrl-C stops)\n", co.freq_hz, cmd__scheme(&so), cmd__listen_host(&so),
		server__port(srv),
		so.store_uri ? so.store_uri : so.data_dir);
	rc = cmd__run_loop(base, r.store, so.retention_ns) ? 1 : 0;
out:
	continuous__stop(&cont);
	server__free(srv);
	store__close(r.store);
	if (base)
		event_base_free(base);
	return rc;
}
