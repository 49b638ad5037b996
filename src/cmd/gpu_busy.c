// SPDX-License-Identifier: Apache-2.0
/*
 * flamewatch gpu-busy: the node's GPU busy timeline from PM sampling
 * (gpu/pm_busy.h), as lines on stdout for the agent that runs it as a child
 * process. A child, because CUPTI's profiler takes a lot of memory (bench/README.md) and may
 * misbehave inside the driver: the agent's own memory and life stay apart.
 *
 * The lines (a contract with the agent's reader; all times Unix ns):
 *   device <idx> <uuid> <chip> <interval_ns>    sampling started on CUDA device idx
 *   busy <idx> <start> <end> <idle_ns>          consecutive busy samples of one decode,
 *                                               and the idle time inside them
 *   covered <idx> <start> <end> [<dispatches>]  what one loss-free decode's samples cover,
 *                                               and the kernels dispatched in it (where counted)
 *   error <idx|-> <step> <code> <message...>    a device (-: all) cannot be sampled
 *   stats <idx> samples=N busy_samples=N overflows=N decode_errors=N decode_cpu_ns=N
 *         dispatches=N (kernels the GPU dispatched; 0 where the chip does not count them)
 * A busy span running on past a decode ends there and starts again in the
 * next one: the reader merges touching spans. Time outside every covered
 * range is unknown, not idle.
 *
 * It stops on SIGTERM, SIGINT, or EOF on stdin (the parent died).
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cmd/cmd.h"
#include "common/clock.h"
#include "common/timeparse.h"
#include "gpu/pm_busy.h"

#define STATS_NS (10 * 1000000000ULL)
#define RETRY_NS (30 * 1000000000ULL)

enum dev_state {
	DEV_SAMPLING,
	DEV_RETRY,	/* HARDWARE_BUSY: someone else holds the counters */
	DEV_FAILED,	/* cannot be sampled, ever */
};

struct slot {
	enum dev_state state;
	struct pm_busy_dev *dev;
	struct pm_busy_stats base;	/* of the sessions before this one */
	char last_step[64];		/* the last error printed */
	int last_code;
	int printed_error;
	uint64_t retry_at;		/* CLOCK_MONOTONIC */
};

static volatile sig_atomic_t _stop;

static void _on_signal(int sig)
{
	_stop = 1;
}

static void _usage(FILE *out)
{
	fprintf(out,
"usage: flamewatch gpu-busy [--interval DUR] [--decode DUR] [--cupti PATH] [--cuda PATH]\n"
"                           [--stats DUR] [--retry DUR]\n"
"\n"
"Samples every CUDA device's performance monitors through CUPTI's PM sampling\n"
"and prints its busy spans as lines on stdout, for `flamewatch agent`. One\n"
"sample per --interval (default 100us), decoded every --decode (default\n"
"100ms); stats lines every --stats (10s); a device another profiler holds is\n"
"tried again every --retry (30s). DUR takes ns, us, ms, s (and m, h).\n"
"CUPTI: --cupti, else $FLAMEWATCH_CUPTI, else libcupti.so.13/.12; libcuda:\n"
"--cuda, else $FLAMEWATCH_LIBCUDA, else libcuda.so.1. Stops on SIGTERM,\n"
"SIGINT or EOF on stdin.\n");
}

/* A duration with ns or us too, which duration__parse leaves out. */
static int _parse_dur(const char *s, uint64_t *ns)
{
	static const struct {
		const char *unit;
		uint64_t ns;
	} small[] = { { "ns", 1 }, { "us", 1000 } };
	int64_t v;

	for (size_t i = 0; i < sizeof(small) / sizeof(small[0]); i++) {
		size_t n = strlen(s), u = strlen(small[i].unit);
		char *end;
		unsigned long long x;

		if (n <= u || strcmp(s + n - u, small[i].unit) || s[0] < '0' || s[0] > '9')
			continue;
		errno = 0;
		x = strtoull(s, &end, 10);
		if (errno || end != s + n - u || x > UINT64_MAX / small[i].ns)
			return -1;
		*ns = x * small[i].ns;
		return 0;
	}
	if (duration__parse(s, &v) || v < 0)
		return -1;
	*ns = (uint64_t)v;
	return 0;
}

static void _on_busy(void *ctx, int dev, uint64_t start, uint64_t end, uint64_t idle)
{
	printf("busy %d %llu %llu %llu\n", dev, (unsigned long long)start, (unsigned long long)end,
	       (unsigned long long)idle);
}

static void _on_covered(void *ctx, int dev, uint64_t start, uint64_t end, uint64_t dispatches)
{
	if (dispatches == PM_NO_DISPATCHES)
		printf("covered %d %llu %llu\n", dev, (unsigned long long)start, (unsigned long long)end);
	else
		printf("covered %d %llu %llu %llu\n", dev, (unsigned long long)start,
		       (unsigned long long)end, (unsigned long long)dispatches);
}

static const struct pm_busy_sink _sink = { _on_busy, _on_covered, NULL };

static void _print_error(const char *dev, const struct pm_busy_error *e)
{
	/* One line whatever the library said. */
	char msg[sizeof(e->msg)];

	snprintf(msg, sizeof(msg), "%s", e->msg[0] ? e->msg : "-");
	for (char *c = msg; *c; c++)
		if (*c == '\n' || *c == '\r')
			*c = ' ';
	printf("error %s %s %d %s\n", dev, e->step[0] ? e->step : "-", e->code, msg);
}

static void _start(struct pm_busy *pb, int idx, struct slot *s, const struct pm_busy_config *cfg)
{
	struct pm_busy_error e = { 0 };

	s->dev = pm_busy__start(pb, idx, cfg, &e);
	if (s->dev) {
		s->state = DEV_SAMPLING;
		s->printed_error = 0;
		printf("device %d %s %s %llu\n", idx, pm_busy__uuid(pb, idx), pm_busy__chip(s->dev),
		       (unsigned long long)pm_busy__interval_ns(s->dev));
		return;
	}
	/* A retried device says nothing while the reason stays the same. */
	if (!s->printed_error || s->last_code != e.code || strcmp(s->last_step, e.step)) {
		char d[16];

		snprintf(d, sizeof(d), "%d", idx);
		_print_error(d, &e);
		snprintf(s->last_step, sizeof(s->last_step), "%s", e.step);
		s->last_code = e.code;
		s->printed_error = 1;
	}
	if (e.code == PM_BUSY_HARDWARE_BUSY) {
		s->state = DEV_RETRY;
	} else {
		s->state = DEV_FAILED;
	}
}

static void _add_stats(struct pm_busy_stats *to, const struct pm_busy_stats *a)
{
	to->samples += a->samples;
	to->busy_samples += a->busy_samples;
	to->overflows += a->overflows;
	to->decode_errors += a->decode_errors;
	to->restarts += a->restarts;
	to->decode_cpu_ns += a->decode_cpu_ns;
	to->dispatches += a->dispatches;
}

/* Ends a session, keeping its counts for the stats lines. */
static void _stop_dev(struct slot *s)
{
	struct pm_busy_stats st;

	if (!s->dev)
		return;
	pm_busy__stop(s->dev, &_sink, &st);
	_add_stats(&s->base, &st);
	s->dev = NULL;
}

static void _print_stats(int idx, const struct slot *s)
{
	struct pm_busy_stats st = s->base;

	if (s->dev) {
		struct pm_busy_stats cur;

		pm_busy__get_stats(s->dev, &cur);
		_add_stats(&st, &cur);
	}
	printf("stats %d samples=%llu busy_samples=%llu overflows=%llu decode_errors=%llu decode_cpu_ns=%llu "
	       "dispatches=%llu\n",
	       idx, (unsigned long long)st.samples, (unsigned long long)st.busy_samples,
	       (unsigned long long)st.overflows, (unsigned long long)st.decode_errors,
	       (unsigned long long)st.decode_cpu_ns, (unsigned long long)st.dispatches);
}

/* Whether stdin is still open: its EOF means the parent died. */
static int _stdin_open(void)
{
	char buf[256];
	ssize_t n = read(0, buf, sizeof(buf));

	return n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN));
}

static int _loop(struct pm_busy *pb, struct slot *slots, int n, const struct pm_busy_config *cfg,
		 uint64_t stats_ns, uint64_t retry_ns, sigset_t *waitmask)
{
	uint64_t now = clock__mono_ns(), next_decode = now + cfg->decode_ns, next_stats = now + stats_ns;
	int stdin_open = 1;

	for (;;) {
		struct pollfd pfd = { .fd = 0, .events = POLLIN };
		uint64_t wake = next_decode < next_stats ? next_decode : next_stats;
		int live = 0;
		struct timespec ts;

		for (int i = 0; i < n; i++)
			if (slots[i].state == DEV_RETRY && slots[i].retry_at < wake)
				wake = slots[i].retry_at;
		now = clock__mono_ns();
		ts.tv_sec = wake > now ? (time_t)((wake - now) / 1000000000ULL) : 0;
		ts.tv_nsec = wake > now ? (long)((wake - now) % 1000000000ULL) : 0;
		if (ppoll(stdin_open ? &pfd : NULL, stdin_open ? 1 : 0, &ts, waitmask) > 0 &&
		    (pfd.revents & (POLLIN | POLLHUP | POLLERR)) && !_stdin_open())
			return 0;
		if (_stop)
			return 0;
		if (pfd.revents & POLLNVAL)
			stdin_open = 0;
		now = clock__mono_ns();
		if (now >= next_decode) {
			for (int i = 0; i < n; i++) {
				struct pm_busy_error e = { 0 };

				if (slots[i].state != DEV_SAMPLING || !pm_busy__decode(slots[i].dev, &_sink, &e))
					continue;
				/* The restart after a loss failed: as if starting failed. */
				_stop_dev(&slots[i]);
				slots[i].printed_error = 0;
				{
					char d[16];

					snprintf(d, sizeof(d), "%d", i);
					_print_error(d, &e);
				}
				snprintf(slots[i].last_step, sizeof(slots[i].last_step), "%s", e.step);
				slots[i].last_code = e.code;
				slots[i].printed_error = 1;
				slots[i].state = e.code == PM_BUSY_HARDWARE_BUSY ? DEV_RETRY : DEV_FAILED;
				slots[i].retry_at = now + retry_ns;
			}
			/* A late wake-up (a stopped VM, a slow decode) does not make a burst. */
			next_decode += cfg->decode_ns;
			if (next_decode <= now)
				next_decode = now + cfg->decode_ns;
		}
		for (int i = 0; i < n; i++) {
			if (slots[i].state != DEV_RETRY || now < slots[i].retry_at)
				continue;
			_start(pb, i, &slots[i], cfg);
			slots[i].retry_at = now + retry_ns;
		}
		if (now >= next_stats) {
			for (int i = 0; i < n; i++)
				if (slots[i].state != DEV_FAILED || slots[i].base.samples)
					_print_stats(i, &slots[i]);
			next_stats += stats_ns;
			if (next_stats <= now)
				next_stats = now + stats_ns;
		}
		for (int i = 0; i < n; i++)
			live += slots[i].state != DEV_FAILED;
		/* Flushed after every decode: the reader acts on whole decodes. */
		if (fflush(stdout) == EOF)
			return 0;	/* the reader is gone */
		if (!live)
			return 1;
	}
}

int cmd_gpu_busy(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "interval", required_argument, NULL, 'i' },
		{ "decode", required_argument, NULL, 'd' },
		{ "cupti", required_argument, NULL, 'c' },
		{ "cuda", required_argument, NULL, 'C' },
		{ "stats", required_argument, NULL, 's' },
		{ "retry", required_argument, NULL, 'r' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	struct pm_busy_config cfg = { PM_BUSY_DEFAULT_INTERVAL_NS, PM_BUSY_DEFAULT_DECODE_NS, 0 };
	uint64_t stats_ns = STATS_NS, retry_ns = RETRY_NS;
	const char *cupti = NULL, *cuda = NULL;
	struct pm_busy_error e = { 0 };
	struct slot *slots = NULL;
	struct pm_busy *pb = NULL;
	struct sigaction sa;
	sigset_t block, waitmask;
	int c, n, live = 0, rc = 1;

	optind = 1;
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		uint64_t *to = c == 'i' ? &cfg.interval_ns : c == 'd' ? &cfg.decode_ns : c == 's' ? &stats_ns
			       : &retry_ns;
		const char *opt = c == 'i' ? "interval" : c == 'd' ? "decode" : c == 's' ? "stats" : "retry";

		switch (c) {
		case 'i':
		case 'd':
		case 's':
		case 'r':
			if (_parse_dur(optarg, to) || !*to) {
				fprintf(stderr,
					"flamewatch: error: --%s: '%s' is not a positive duration (e.g. 100us, 1s)\n",
					opt, optarg);
				return 2;
			}
			break;
		case 'c':
			cupti = optarg;
			break;
		case 'C':
			cuda = optarg;
			break;
		case 'h':
			_usage(stdout);
			return 0;
		default:
			_usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "flamewatch: error: gpu-busy takes no arguments ('%s')\n", argv[optind]);
		return 2;
	}
	/* The hardware's range is not published: these bounds keep the buffers sane. */
	if (cfg.interval_ns < 1000 || cfg.interval_ns > 1000000000ULL) {
		fprintf(stderr, "flamewatch: error: --interval must be between 1us and 1s\n");
		return 2;
	}
	if (cfg.decode_ns < 10000000ULL || cfg.decode_ns > 10000000000ULL || cfg.decode_ns < cfg.interval_ns ||
	    cfg.decode_ns / cfg.interval_ns > 1000000) {
		fprintf(stderr, "flamewatch: error: --decode must be between 10ms and 10s, at least --interval "
				"and at most 1000000 intervals\n");
		return 2;
	}

	/* Signals are taken only while waiting, so that none cuts a CUPTI call short. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = _on_signal;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&block);
	sigaddset(&block, SIGTERM);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &waitmask);
	sigdelset(&waitmask, SIGTERM);
	sigdelset(&waitmask, SIGINT);

	pb = pm_busy__open(cupti, cuda, &e);
	if (!pb) {
		_print_error("-", &e);
		goto out;
	}
	n = pm_busy__ndevices(pb);
	slots = calloc((size_t)n, sizeof(*slots));
	if (!slots) {
		fprintf(stderr, "flamewatch: error: out of memory\n");
		goto out;
	}
	for (int i = 0; i < n; i++) {
		_start(pb, i, &slots[i], &cfg);
		slots[i].retry_at = clock__mono_ns() + retry_ns;
		live += slots[i].state != DEV_FAILED;
	}
	fflush(stdout);
	if (live)
		rc = _loop(pb, slots, n, &cfg, stats_ns, retry_ns, &waitmask);
	for (int i = 0; i < n; i++)
		_stop_dev(&slots[i]);
	/* The last counts, after the last decode. */
	for (int i = 0; i < n; i++)
		if (slots[i].base.samples)
			_print_stats(i, &slots[i]);
out:
	fflush(stdout);
	free(slots);
	pm_busy__close(pb);
	return rc;
}
