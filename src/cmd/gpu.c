// SPDX-License-Identifier: Apache-2.0
/*
 * flamewatch gpu: read GPU metrics from NVML without BPF or a server: for
 * checking a machine's NVML (what is available, what values it gives) and
 * for measuring what a collection round costs. Needs no privileges.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/continuous.h"
#include "cmd/cmd.h"
#include "common/batch.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/profile.h"
#include "common/timeparse.h"
#include "gpu/nvml.h"

static void _usage(FILE *out)
{
	fprintf(out,
"usage: flamewatch gpu [--rounds N] [--interval DUR] [--lib PATH] [--quiet] [--breakdown]\n"
"                      [--pcie-interval DUR] [--process-interval DUR]\n"
"                      [--process-query shared|always]\n"
"\n"
"Reads GPU metrics from NVML N times (default 1), DUR apart (default 1s), and\n"
"prints every point of the last round as `name{labels} value ts_ns`, then the\n"
"CPU time one round took. --breakdown: also the calls and CPU time of each\n"
"kind of NVML query, per GPU per round. The PCIe counters and per-process\n"
"utilisation are read every 5s and 1s as by the agent, or as given (0: every\n"
"round). --process-query: as the agent's --gpu-process-query.\n");
}

/* Per query kind: calls and CPU per GPU per round, and per call. */
static void _print_breakdown(const struct nvml *n, const struct nvml_stats *st)
{
	double per = (double)st->rounds * (nvml__ngpus(n) ? nvml__ngpus(n) : 1);
	uint64_t calls, cpu_ns;

	printf("# %-48s %14s %18s %14s\n", "query", "calls/GPU/round", "cpu_us/GPU/round",
	       "cpu_us/call");
	for (int q = 0; q < NVML_Q_MAX; q++) {
		const char *name = nvml__query_cost(n, q, &calls, &cpu_ns);

		if (!name || !calls)
			continue;
		printf("# %-48s %14.3f %18.2f %14.2f\n", name, calls / per, cpu_ns / 1e3 / per,
		       cpu_ns / 1e3 / calls);
	}
}

int cmd_gpu(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "rounds", required_argument, NULL, 'n' },
		{ "interval", required_argument, NULL, 'i' },
		{ "lib", required_argument, NULL, 'L' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "breakdown", no_argument, NULL, 'b' },
		{ "pcie-interval", required_argument, NULL, 'X' },
		{ "process-interval", required_argument, NULL, 'Y' },
		{ "process-query", required_argument, NULL, 'Q' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	unsigned long rounds = 1;
	uint64_t pcie_ns = CONTINUOUS_GPU_PCIE_INTERVAL_NS;
	uint64_t process_ns = CONTINUOUS_GPU_PROCESS_INTERVAL_NS;
	int64_t interval = 1000000000LL;
	const char *lib = NULL;
	struct nvml *n = NULL;
	struct batch *b = NULL;
	struct nvml_stats st;
	int c, rc = 1, quiet = 0, breakdown = 0, query_always = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "vhq", longopts, NULL)) != -1) {
		char *end;

		switch (c) {
		case 'n':
			errno = 0;
			rounds = strtoul(optarg, &end, 10);
			if (errno || *end || !rounds || rounds > 1000000) {
				fprintf(stderr, "flamewatch: error: --rounds: '%s' is not 1..1000000\n", optarg);
				return 2;
			}
			break;
		case 'i':
			if (!strcmp(optarg, "0"))
				interval = 0;
			else if (duration__parse(optarg, &interval) || interval < 0) {
				fprintf(stderr, "flamewatch: error: --interval: '%s' is not a duration\n", optarg);
				return 2;
			}
			break;
		case 'X':
			if (continuous__parse_gpu_costly_interval("pcie-interval", optarg, &pcie_ns))
				return 2;
			break;
		case 'Y':
			if (continuous__parse_gpu_costly_interval("process-interval", optarg, &process_ns))
				return 2;
			break;
		case 'Q':
			if (continuous__parse_gpu_process_query("process-query", optarg, &query_always))
				return 2;
			break;
		case 'L':
			lib = optarg;
			break;
		case 'q':
			quiet = 1;
			break;
		case 'b':
			breakdown = 1;
			break;
		case 'v':
			log__set_level(LOG_DEBUG);
			break;
		case 'h':
			_usage(stdout);
			return 0;
		default:
			_usage(stderr);
			return 2;
		}
	}
	n = nvml__open(lib);
	if (!n) {
		fprintf(stderr, "flamewatch: error: no NVML: %s\n", strerror(errno));
		return 1;
	}
	nvml__set_interval(n, (uint64_t)interval);
	nvml__set_costly_intervals(n, pcie_ns, process_ns);
	nvml__set_process_query_always(n, query_always);
	nvml__set_profile(n, breakdown);
	b = batch__new(1);
	if (!b)
		goto out;
	for (unsigned long r = 0; r < rounds; r++) {
		if (r && interval) {
			struct timespec d = { interval / 1000000000LL, interval % 1000000000LL };

			nanosleep(&d, NULL);
		}
		if (batch__reset(b))
			goto out;
		if (nvml__collect(n, b, clock__unix_ns()) < 0)
			goto out;
	}
	for (uint32_t i = 0; i < b->nmetrics && !quiet; i++) {
		const struct batch_metric *m = &b->metrics[i];
		const struct batch_label *l;
		size_t nl;

		printf("%s{", profile__string(b->dict, m->name));
		l = batch__series(b, m->series, &nl);
		for (size_t k = 0; k < nl; k++)
			printf("%s%s=\"%s\"", k ? "," : "", profile__string(b->dict, l[k].name),
			       profile__string(b->dict, l[k].value));
		{
			char v[32];

			/* The shortest text that reads back as the same double. */
			for (int prec = 15; prec <= 17; prec++) {
				snprintf(v, sizeof(v), "%.*g", prec, m->value);
				if (strtod(v, NULL) == m->value)
					break;
			}
			printf("} %s %lld\n", v, (long long)m->ts_ns);
		}
	}
	nvml__stats(n, &st);
	if (breakdown)
		_print_breakdown(n, &st);
	printf("# rounds %llu gpus %u points %llu calls_per_round %.1f cpu_us_per_round %.1f "
	       "cpu_us_per_gpu_round %.1f max_cpu_us %.1f wall_ms_per_round %.2f max_wall_ms %.2f "
	       "sole_process_reads %llu\n",
	       (unsigned long long)st.rounds, nvml__ngpus(n), (unsigned long long)st.points,
	       (double)st.calls / st.rounds, st.cpu_ns / 1e3 / st.rounds,
	       nvml__ngpus(n) ? st.cpu_ns / 1e3 / st.rounds / nvml__ngpus(n) : 0.0,
	       st.max_cpu_ns / 1e3, st.wall_ns / 1e6 / st.rounds, st.max_wall_ns / 1e6,
	       (unsigned long long)st.sole_process_reads);
	rc = 0;
out:
	batch__free(b);
	nvml__close(n);
	return rc;
}
