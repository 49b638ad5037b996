// SPDX-License-Identifier: Apache-2.0
/* flamewatch agent: sample the whole host and ship batches to a server. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <libgen.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "agent/agent_metrics.h"
#include "agent/continuous.h"
#include "agent/privileges.h"
#include "agent/shipper.h"
#include "cmd/cmd.h"
#include "cmd/collect_opts.h"
#include "common/batch.h"
#include "common/log.h"
#include "common/timeparse.h"

/*
 * What a stop may spend delivering the queue, counted from the signal:
 * below the time supervisors wait before SIGKILL (Kubernetes 30 s, systemd
 * 90 s by default), which ends the agent with whatever is still queued.
 */
#define DRAIN_TIMEOUT_NS 10000000000ULL

static void _usage(FILE *out)
{
	fprintf(out,
"usage: flamewatch agent --server URL [--token T] [--ca-file FILE] [--node NAME] [-F HZ]\n"
"                        [--interval 10s] [--buffer-mb 16] [--drain-timeout 10s]\n"
"                        [--unwind-table-mb 16]\n"
"\n"
"Samples every CPU of this host and ships the stacks to a flamewatch server.\n"
"Runs in the host's pid namespace (pids are the host's, as NVML reports them).\n"
"\n"
"  --server URL         http://HOST:PORT or https://HOST:PORT of the server\n"
"  --ca-file FILE       https: trust the CAs in this PEM file, not the system's\n"
"                       store; the certificate must also name HOST\n"
"  --token T            bearer token (or FLAMEWATCH_TOKEN in the environment)\n"
"  --node NAME          this host's name in the data (default: the hostname)\n"
"  -F, --freq HZ        samples per second per CPU (default 19)\n"
"  --interval DUR       how often to ship a batch (default 10s)\n"
"  --buffer-mb N        memory kept while the server is unreachable (default 16);\n"
"                       when full, the oldest batches are dropped\n"
"  --drain-timeout DUR  on SIGTERM or SIGINT, how long to keep delivering what is\n"
"                       queued (default 10s; 0: not at all)\n"
"  --unwind-table-mb N  cap on unwind tables loaded into the kernel (default 16)\n");
	collect_opts__usage(out);
	fprintf(out,
"  --metrics-listen H:P serve /metrics (Prometheus text) here: GPU metrics,\n"
"                       off-CPU blocks with and without their stack, and what\n"
"                       was delivered, dropped and is buffered\n"
"  --cuda-lib-dir DIR   copy libflamewatch-cuda.so (shipped beside this binary) into\n"
"                       DIR at start, for CUDA_INJECTION64_PATH=DIR/libflamewatch-cuda.so\n"
"                       (or FLAMEWATCH_CUDA_LIB_DIR in the environment)\n");
}

#define CUDA_LIB "libflamewatch-cuda.so"

/*
 * Installs the CUDA injection library that ships beside this binary into dir
 * (a host directory that CUDA workloads mount). A new file is renamed over the
 * old one, so processes that loaded the old library keep their copy. A missing
 * library only warns: CPU profiling does not depend on it.
 */
static int _install_cuda_lib(const char *dir)
{
	char exe[PATH_MAX], src[PATH_MAX + 32], tmp[PATH_MAX], dst[PATH_MAX];
	int in = -1, out = -1, ret = -1;
	char buf[65536];
	ssize_t n, len;

	len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (len < 0)
		return -1;
	exe[len] = '\0';
	snprintf(src, sizeof(src), "%s/" CUDA_LIB, dirname(exe));
	if (snprintf(dst, sizeof(dst), "%s/" CUDA_LIB, dir) >= (int)sizeof(dst) ||
	    snprintf(tmp, sizeof(tmp), "%s/." CUDA_LIB ".%d", dir, (int)getpid()) >= (int)sizeof(tmp)) {
		fprintf(stderr, "flamewatch: error: --cuda-lib-dir: path too long\n");
		return -1;
	}
	in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0) {
		pr_warn("no %s beside this binary (%s); CUDA workloads get no GPU time profiling\n",
			CUDA_LIB, strerror(errno));
		return 0;
	}
	out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (out < 0) {
		fprintf(stderr, "flamewatch: error: --cuda-lib-dir: cannot write %s: %s\n", tmp,
			strerror(errno));
		goto out;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n)
			break;
	if (n != 0 || fchmod(out, 0644) || fsync(out) || close(out)) {
		out = -1;
		fprintf(stderr, "flamewatch: error: --cuda-lib-dir: cannot copy %s to %s: %s\n",
			src, tmp, strerror(errno));
		unlink(tmp);
		goto out;
	}
	out = -1;
	if (rename(tmp, dst)) {
		fprintf(stderr, "flamewatch: error: --cuda-lib-dir: cannot rename %s to %s: %s\n",
			tmp, dst, strerror(errno));
		unlink(tmp);
		goto out;
	}
	pr_info("installed %s for CUDA workloads (CUDA_INJECTION64_PATH=%s)\n", CUDA_LIB, dst);
	ret = 0;
out:
	if (out >= 0)
		close(out);
	close(in);
	return ret;
}

struct agent {
	struct event_base *base;
	struct shipper *shipper;
	struct continuous cont;
	struct agent_metrics *metrics;
	uint64_t stop_ns;	/* CLOCK_MONOTONIC of the first stop signal */
};

static uint64_t _mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void _on_gpu_round(void *ctx, const struct batch *b, uint32_t first)
{
	struct agent *a = ctx;

	agent_metrics__round(a->metrics, b, first);
}

static void _deliver(void *ctx, struct batch *b)
{
	struct agent *a = ctx;

	shipper__push(a->shipper, b);
}

static void _on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct agent *a = arg;

	(void)sig;
	(void)what;
	if (!a->stop_ns)
		a->stop_ns = _mono_ns();
	event_base_loopexit(a->base, NULL);
}

/*
 * Delivers what is queued, the last flush included, by timeout_ns after the
 * stop signal; a server that cannot be reached ends it sooner (see
 * shipper__drain()). Then says what was left.
 */
static void _drain(struct agent *a, uint64_t timeout_ns)
{
	uint64_t deadline = (a->stop_ns ? a->stop_ns : _mono_ns()) + timeout_ns, now;
	struct shipper_stats st;
	const char *why;
	char late[64];

	shipper__drain(a->shipper);
	while (!shipper__idle(a->shipper) && !shipper__gave_up(a->shipper) &&
	       (now = _mono_ns()) < deadline) {
		struct timeval tv = { (deadline - now) / 1000000000ULL,
				      (deadline - now) % 1000000000ULL / 1000 };

		/* The drain breaks the loop when it is over; this ends it at the deadline. */
		event_base_loopexit(a->base, &tv);
		event_base_dispatch(a->base);
	}
	shipper__stats(a->shipper, &st);
	pr_info("shipped %llu batches (%llu samples, %.1f MiB); dropped %llu samples; "
		"%llu batches left undelivered\n",
		(unsigned long long)st.batches_sent, (unsigned long long)st.samples_sent,
		st.bytes_sent / 1048576.0, (unsigned long long)st.samples_dropped,
		(unsigned long long)st.queued_batches);
	if (!st.queued_batches)
		return;
	why = shipper__gave_up(a->shipper);
	if (!why) {
		snprintf(late, sizeof(late), "not acknowledged within --drain-timeout (%.1f s)",
			 timeout_ns / 1e9);
		why = late;
	}
	pr_warn("could not deliver %llu batches (%llu samples, %llu bytes): %s\n",
		(unsigned long long)st.queued_batches, (unsigned long long)st.queued_samples,
		(unsigned long long)st.queued_bytes, why);
}

static int _parse_ul(const char *opt, const char *arg, unsigned long max, unsigned long *out)
{
	char *end;

	errno = 0;
	*out = strtoul(arg, &end, 10);
	if (errno || *end || !arg[0] || arg[0] == '-' || *out == 0 || *out > max) {
		fprintf(stderr, "flamewatch: error: %s: '%s' is not a number between 1 and %lu\n",
			opt, arg, max);
		return -1;
	}
	return 0;
}

int cmd_agent(int argc, char **argv)
{
	/* The collection options (collect_opts.h) are appended to these. */
	static const struct option own[] = {
		{ "server", required_argument, NULL, 's' },
		{ "token", required_argument, NULL, 't' },
		{ "ca-file", required_argument, NULL, 'A' },
		{ "node", required_argument, NULL, 'n' },
		{ "freq", required_argument, NULL, 'F' },
		{ "interval", required_argument, NULL, 'i' },
		{ "buffer-mb", required_argument, NULL, 'b' },
		{ "drain-timeout", required_argument, NULL, 'D' },
		{ "unwind-table-mb", required_argument, NULL, 'U' },
		{ "metrics-listen", required_argument, NULL, 'M' },
		{ "cuda-lib-dir", required_argument, NULL, 'C' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	struct option longopts[32];
	struct shipper_opts so = { .max_buffer = 16u << 20 };
	struct continuous_opts co = {
		.freq_hz = 19, .unwind_mb = CONTINUOUS_UNWIND_MB, .interval_ns = 10000000000ULL,
		.max_samples = 200000, .deliver = _deliver,
		.gpu_interval_ns = CONTINUOUS_GPU_INTERVAL_NS,
		.gpu_pcie_interval_ns = CONTINUOUS_GPU_PCIE_INTERVAL_NS,
		.gpu_process_interval_ns = CONTINUOUS_GPU_PROCESS_INTERVAL_NS, .on_gpu_round = _on_gpu_round,
	};
	const char *metrics_listen = NULL;
	struct agent a = { 0 };
	struct event *sigint = NULL, *sigterm = NULL;
	uint64_t drain_ns = DRAIN_TIMEOUT_NS;
	const char *cuda_dir = getenv("FLAMEWATCH_CUDA_LIB_DIR");
	char host[256], err[512];
	unsigned long v;
	int64_t ns;
	int err_no;
	int c, rc = 1;

	if (collect_opts__longopts(longopts, sizeof(longopts) / sizeof(longopts[0]), own, NULL))
		return 1;
	so.token = getenv("FLAMEWATCH_TOKEN");
	optind = 1;
	while ((c = getopt_long(argc, argv, "F:vh", longopts, NULL)) != -1) {
		switch (c) {
		case 's':
			so.url = optarg;
			break;
		case 't':
			so.token = optarg;
			break;
		case 'A':
			so.ca_file = optarg;
			break;
		case 'n':
			so.node = optarg;
			break;
		case 'F':
			if (_parse_ul("-F", optarg, 100000, &v))
				return 2;
			co.freq_hz = v;
			break;
		case 'i':
			if (duration__parse(optarg, &ns) || ns < 100000000LL) {
				fprintf(stderr, "flamewatch: error: --interval: '%s' is not a duration "
					"of 100ms or more\n", optarg);
				return 2;
			}
			co.interval_ns = ns;
			break;
		case 'b':
			if (_parse_ul("--buffer-mb", optarg, 1 << 16, &v))
				return 2;
			so.max_buffer = v << 20;
			break;
		case 'D':
			if (strcmp(optarg, "0") &&
			    (duration__parse(optarg, &ns) || ns > 3600000000000LL)) {
				fprintf(stderr, "flamewatch: error: --drain-timeout: '%s' is not a "
					"duration of 1h or less (0: no drain)\n", optarg);
				return 2;
			}
			drain_ns = strcmp(optarg, "0") ? (uint64_t)ns : 0;
			break;
		case 'U':
			if (_parse_ul("--unwind-table-mb", optarg, 1 << 20, &v))
				return 2;
			co.unwind_mb = v;
			break;
		case 'M':
			metrics_listen = optarg;
			break;
		case 'C':
			cuda_dir = optarg;
			break;
		case 'v':
			log__set_level(LOG_DEBUG);
			break;
		case 'h':
			_usage(stdout);
			return 0;
		default:
			err_no = collect_opts__parse(&co, c, optarg);
			if (err_no < 0)
				return 2;
			if (err_no > 0) {
				_usage(stderr);
				return 2;
			}
			break;
		}
	}
	if (!so.url) {
		fprintf(stderr, "flamewatch: error: --server URL is required\n");
		_usage(stderr);
		return 2;
	}
	if (!so.node) {
		if (gethostname(host, sizeof(host)))
			snprintf(host, sizeof(host), "unknown");
		host[sizeof(host) - 1] = '\0';
		so.node = host;
	}
	if (cmd__check_kernel())
		return 1;
	if (cuda_dir && cuda_dir[0] && _install_cuda_lib(cuda_dir))
		return 1;

	/*
	 * glibc raises its mmap threshold to the size of every mmapped block
	 * freed (up to 32 MiB): after the first flush freed zstd's workspace,
	 * a flush's large short-lived buffers came from the heap, and their
	 * pages stayed between flushes among the blocks that live on. A fixed
	 * threshold keeps blocks of 64 KiB and more in mappings of their own,
	 * given back when freed (less RSS at the peak and after, for a few
	 * dozen mmap calls a flush: bench/README.md). The agent only: the
	 * server's allocations are another matter.
	 */
	mallopt(M_MMAP_THRESHOLD, 64 << 10);
	a.base = event_base_new();
	if (!a.base)
		return 1;
	a.shipper = shipper__new(a.base, &so, err, sizeof(err));
	if (!a.shipper) {
		fprintf(stderr, "flamewatch: error: %s\n", err);
		goto out;
	}
	co.ctx = &a;
	if (continuous__start(&a.cont, a.base, &co))
		goto out;
	if (metrics_listen) {
		a.metrics = agent_metrics__start(a.base, metrics_listen, so.node,
						 co.gpu_interval_ns, co.gpu_process_interval_ns,
						 a.cont.gpu);
		if (!a.metrics)
			goto out;
	}
	agent_metrics__set_collector(a.metrics, a.cont.collector);
	agent_metrics__set_shipper(a.metrics, a.shipper);
	agent_metrics__set_gpu_busy(a.metrics, a.cont.busy);
	sigint = evsignal_new(a.base, SIGINT, _on_signal, &a);
	sigterm = evsignal_new(a.base, SIGTERM, _on_signal, &a);
	if (!sigint || !sigterm || event_add(sigint, NULL) || event_add(sigterm, NULL))
		goto out;
	signal(SIGPIPE, SIG_IGN);
	/*
	 * Loaded and attached: from here on the agent reads processes and binaries,
	 * makes unwind-table maps and ships over a connected socket. A bug in
	 * any of that must not hand out the rest of root's powers.
	 */
	err_no = privileges__drop(privileges__agent_set());
	if (err_no)
		pr_warn("cannot drop capabilities: %s\n", strerror(-err_no));
	pr_info("sampling at %u Hz, shipping to %s as node %s\n", co.freq_hz, so.url, so.node);
	event_base_dispatch(a.base);

	/*
	 * /metrics reads the collector and the GPU poller, which the stop
	 * frees: it goes first.
	 */
	agent_metrics__free(a.metrics);
	a.metrics = NULL;
	/* The last batches, flushed before the BPF programs go, then the drain. */
	continuous__stop(&a.cont);
	_drain(&a, drain_ns);
	rc = 0;
out:
	continuous__stop(&a.cont);
	if (sigint)
		event_free(sigint);
	if (sigterm)
		event_free(sigterm);
	agent_metrics__free(a.metrics);
	shipper__free(a.shipper);
	event_base_free(a.base);
	return rc;
}
