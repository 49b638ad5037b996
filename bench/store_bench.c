// SPDX-License-Identifier: Apache-2.0
/*
 * Store benchmark: a fleet of NODES nodes with CPUS CPUs sampled at HZ,
 * PROCS processes per node with STACKS distinct stacks each (Zipf-like),
 * written as each agent would send it (one batch per node every BATCH
 * seconds, each with its own dictionary), then queried. Measures ingest
 * (CPU time and wall time spent inside store__write), bytes per sample on
 * disk, and query latencies. See bench/STORE.md.
 */
#include <errno.h>
#include <ftw.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <unistd.h>

#include "common/batch.h"
#include "common/log.h"
#include "common/profile.h"
#include "store/selector.h"
#include "store/store.h"

#define SEC	1000000000LL
#define MIN	(60 * SEC)
#define HOUR	(60 * MIN)
#define NFUNCS	2000
/* Fixed and odd, so windows do not start on minute or hour boundaries. */
#define T0	(1700000000LL * SEC + 1234 * SEC + 567890123LL)

static struct {
	int nodes, cpus, hz, procs, stacks, batch_s;
	double busy;
	const char *dir;
	bool keep;
} opt = { 20, 8, 19, 10, 100, 10, 0.9, NULL, false };

static uint64_t _rng = 0x243f6a8885a308d3ULL;

static inline uint64_t _rand(void)
{
	_rng ^= _rng << 13;
	_rng ^= _rng >> 7;
	_rng ^= _rng << 17;
	return _rng;
}

static inline double _u01(void)
{
	return (double)(_rand() >> 11) / 9007199254740992.0;
}

/* Zipf-like over [0, n): p(k) ~ 1/(k+1), by inverting the harmonic CDF roughly. */
static inline uint32_t _zipf(uint32_t n)
{
	double u = _u01();

	return (uint32_t)(exp(u * log(n + 1.0)) - 1.0) % n;
}

static double _now(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Stack s of process p: a root per process, then frames shared across the fleet. */
static uint32_t _depth(uint32_t p, uint32_t s)
{
	return 8 + (p * 7 + s * 3) % 25;
}

static uint32_t _frame_fn(uint32_t p, uint32_t s, uint32_t j)
{
	if (j == 0)
		return p;
	return (uint32_t)((p * 131 + (s >> 2) * 17 + j * 29 + (j > 6 ? s * 7 : 0)) % NFUNCS);
}

struct node_state {
	int64_t stack_ids[64][512];	/* per batch: -1 until interned */
	int64_t series[64];
};

/* Formatted once: generating batches should cost little next to writing them. */
static char _fn_name[NFUNCS][48], _fn_file[NFUNCS][40], _lib_path[23][48], _lib_bid[23][48];

static void _init_names(void)
{
	for (uint32_t f = 0; f < NFUNCS; f++) {
		snprintf(_fn_name[f], sizeof(_fn_name[f]), "ns%u::Class%u::method_%u", f % 13, f % 97, f);
		snprintf(_fn_file[f], sizeof(_fn_file[f]), "src/module%u/file%u.cc", f % 13, f % 211);
	}
	for (uint32_t l = 0; l < 23; l++) {
		snprintf(_lib_path[l], sizeof(_lib_path[l]), "/usr/lib/x86_64-linux-gnu/lib%u.so", l);
		snprintf(_lib_bid[l], sizeof(_lib_bid[l]), "%040x", 0xb1d00000u + l);
	}
}

static int64_t _intern_stack(struct batch *b, uint32_t p, uint32_t s)
{
	uint32_t frames[64], n = _depth(p, s);

	for (uint32_t j = 0; j < n; j++) {
		uint32_t f = _frame_fn(p, s, j);
		bool kernel = j >= n - 3 && (s & 3) == 0;
		int64_t m = PROFILE_NO_MAPPING, id;

		if (!kernel)
			m = profile__intern_mapping(b->dict, _lib_path[f % 23], _lib_bid[f % 23]);
		id = profile__intern_frame(b->dict, kernel ? FRAME_KERNEL : FRAME_NATIVE,
					   (uint32_t)m, 0x400000 + f * 64);
		if (id < 0)
			return -ENOMEM;
		/* A frame seen before in this batch already has its name. */
		if (!b->dict->frames[id].function &&
		    profile__set_frame_name(b->dict, (uint32_t)id, _fn_name[f], _fn_file[f], f % 500))
			return -ENOMEM;
		frames[j] = (uint32_t)id;
	}
	return profile__intern_stack(b->dict, frames, n);
}

static int64_t _intern_series(struct batch *b, uint32_t node, uint32_t p)
{
	char comm[32], pid[16], exe[64], container[32];
	const char *names[] = { "comm", "pid", "exe", "container" };
	const char *values[] = { comm, pid, exe, container };

	snprintf(comm, sizeof(comm), "proc%u", p);
	snprintf(pid, sizeof(pid), "%u", 1000 + node * 1000 + p);
	snprintf(exe, sizeof(exe), "/usr/bin/proc%u", p);
	snprintf(container, sizeof(container), "pod-%u", p % 4);
	return batch__intern_series(b, names, values, 4);
}

/*
 * One node's batch over [t, t + len): each CPU ticks at HZ with a per-CPU
 * phase and a few microseconds of jitter, busy with probability busy, the
 * process and the stack Zipf-distributed. rate_div > 1 keeps one tick in
 * rate_div (the lower-rate simulation of long runs).
 */
static struct batch *_make_batch(struct node_state *ns, uint32_t node, int64_t t, int64_t len,
				 int rate_div)
{
	struct batch *b = batch__new(SEC / opt.hz);
	int64_t period = SEC / opt.hz;

	if (!b)
		return NULL;
	for (int p = 0; p < opt.procs; p++) {
		ns->series[p] = -1;
		for (int s = 0; s < opt.stacks; s++)
			ns->stack_ids[p][s] = -1;
	}
	for (int64_t tick = (t - T0 + period - 1) / period;; tick++) {
		int64_t base = T0 + tick * period;

		if (base >= t + len)
			break;
		if (rate_div > 1 && tick % rate_div)
			continue;
		for (int cpu = 0; cpu < opt.cpus; cpu++) {
			int64_t ts = base + (int64_t)(node * 7919 + cpu * 104729) % period +
				     (int64_t)(_rand() % 5000);
			uint32_t p, s;
			struct batch_sample bs;

			if (_u01() >= opt.busy)
				continue;
			p = _zipf(opt.procs);
			s = _zipf(opt.stacks);
			if (ns->series[p] < 0)
				ns->series[p] = _intern_series(b, node, p);
			if (ns->stack_ids[p][s] < 0)
				ns->stack_ids[p][s] = _intern_stack(b, p, s);
			if (ns->series[p] < 0 || ns->stack_ids[p][s] < 0)
				goto err;
			bs = (struct batch_sample){
				.ts_ns = ts, .stack = (uint32_t)ns->stack_ids[p][s],
				.series = (uint32_t)ns->series[p],
				.tid = (1000 + node * 1000 + p) * 16 + (uint32_t)(_rand() % 4),
				.cpu = (uint32_t)cpu, .type = SAMPLE_CPU, .value = 1,
			};
			if (batch__add_sample(b, &bs))
				goto err;
		}
	}
	return b;
err:
	batch__free(b);
	return NULL;
}

static double _sys_time(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static int _rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int _count_cb(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
		     int64_t value, const char *comm, uint32_t pid)
{
	(*(uint64_t *)ctx)++;
	return 0;
}

static int _series_cb(void *ctx, const char *group, int64_t bucket, int64_t sum)
{
	(*(uint64_t *)ctx)++;
	return 0;
}

struct result {
	double hours;
	int rate_div;
	uint64_t samples, batches, bytes;
	double write_cpu, write_sys, write_wall, gen_wall;
	double q_profile_all, q_profile_1h, q_profile_odd, q_profile_sel, q_series, q_series_raw;
	double q_samples;
	uint64_t profile_total;
	uint32_t stride;
};

static double _time_profile(struct store *st, int64_t from, int64_t to, const char *sel_text,
			    uint64_t *total)
{
	struct selector *sel = sel_text ? selector__parse(sel_text, NULL, 0) : NULL;
	struct profile *p = profile__new(SEC / opt.hz, 0);
	double t0 = _now(CLOCK_MONOTONIC), t;
	int err = store__profile(st, from, to, sel, SAMPLE_CPU, p);

	t = _now(CLOCK_MONOTONIC) - t0;
	if (err)
		fprintf(stderr, "store__profile: %s\n", strerror(-err));
	if (total)
		*total = profile__total(p);
	profile__free(p);
	selector__free(sel);
	return t;
}

static int _run(double hours, int rate_div, struct result *r)
{
	char dir[256], err[256];
	struct node_state *ns = calloc(1, sizeof(*ns));
	int64_t end = T0 + (int64_t)(hours * HOUR), step = opt.batch_s * SEC;
	struct store_stats stats;
	struct store *st;
	double last_report = _now(CLOCK_MONOTONIC);

	memset(r, 0, sizeof(*r));
	r->hours = hours;
	r->rate_div = rate_div;
	snprintf(dir, sizeof(dir), "%s/store-%gh", opt.dir, hours);
	nftw(dir, _rm, 16, FTW_DEPTH | FTW_PHYS);
	st = store__open(dir, err, sizeof(err));
	if (!st || !ns) {
		fprintf(stderr, "store__open %s: %s\n", dir, err);
		return -1;
	}
	for (int64_t t = T0; t < end; t += step) {
		for (int node = 0; node < opt.nodes; node++) {
			double g0 = _now(CLOCK_MONOTONIC), c0, w0, s0;
			struct batch *b = _make_batch(ns, (uint32_t)node, t, step, rate_div);
			char name[32];
			int e;

			if (!b)
				return -1;
			snprintf(name, sizeof(name), "node-%02d", node);
			s0 = _sys_time();
			c0 = _now(CLOCK_PROCESS_CPUTIME_ID);
			w0 = _now(CLOCK_MONOTONIC);
			r->gen_wall += w0 - g0;
			e = store__write(st, name, b);
			if (e) {
				fprintf(stderr, "store__write: %s\n", strerror(-e));
				return -1;
			}
			r->write_cpu += _now(CLOCK_PROCESS_CPUTIME_ID) - c0;
			r->write_sys += _sys_time() - s0;
			r->write_wall += _now(CLOCK_MONOTONIC) - w0;
			r->batches++;
			r->samples += b->nsamples;
			batch__free(b);
		}
		if (_now(CLOCK_MONOTONIC) - last_report > 10) {
			last_report = _now(CLOCK_MONOTONIC);
			fprintf(stderr, "  %.1f/%g h written, %llu samples, %.0f samples/s CPU (%.0f%% system)\n",
				(double)(t - T0) / HOUR, hours, (unsigned long long)r->samples,
				r->samples / r->write_cpu, 100 * r->write_sys / r->write_cpu);
		}
	}
	/* What the server's periodic retention call does: merge the last small blocks. */
	store__retain(st, T0 - HOUR);
	store__close(st);
	st = store__open(dir, err, sizeof(err));
	if (!st || store__stats(st, &stats)) {
		fprintf(stderr, "reopen %s: %s\n", dir, err);
		return -1;
	}
	r->bytes = stats.bytes_on_disk;
	r->q_profile_all = _time_profile(st, T0, end, NULL, &r->profile_total);
	r->q_profile_1h = _time_profile(st, end - HOUR, end, NULL, NULL);
	r->q_profile_odd = _time_profile(st, T0 + 17 * MIN + 3 * SEC, end - 13 * MIN - 7 * SEC,
					 NULL, NULL);
	r->q_profile_sel = _time_profile(st, T0, end, "{comm=\"proc3\",node=~\"node-0.*\"}", NULL);
	{
		uint64_t n = 0;
		double t0 = _now(CLOCK_MONOTONIC);

		/* Buckets on whole minutes come from rollups... */
		store__series(st, T0 - T0 % MIN, end, MIN, NULL, SAMPLE_CPU, "comm", _series_cb, &n);
		r->q_series = _now(CLOCK_MONOTONIC) - t0;
		/* ...buckets off them can only be summed from raw samples. */
		t0 = _now(CLOCK_MONOTONIC);
		store__series(st, T0, end, MIN, NULL, SAMPLE_CPU, "comm", _series_cb, &n);
		r->q_series_raw = _now(CLOCK_MONOTONIC) - t0;
		n = 0;
		t0 = _now(CLOCK_MONOTONIC);
		{
			struct profile *dict = profile__new(SEC / opt.hz, 0);

			store__samples(st, end - 15 * MIN, end, NULL, SAMPLE_CPU, 100000, dict,
				       _count_cb, &n, &r->stride);
			r->q_samples = _now(CLOCK_MONOTONIC) - t0;
			profile__free(dict);
		}
	}
	store__close(st);
	if (!opt.keep)
		nftw(dir, _rm, 16, FTW_DEPTH | FTW_PHYS);
	free(ns);
	return 0;
}

int main(int argc, char **argv)
{
	static char tmpl[] = "/tmp/fw-store-bench-XXXXXX";
	const char *hours_list = "1,24";
	int rate_div_long = 0, c;
	struct result res[8];
	int nres = 0;

	while ((c = getopt(argc, argv, "d:H:n:c:z:p:s:b:r:k")) != -1) {
		switch (c) {
		case 'd': opt.dir = optarg; break;
		case 'H': hours_list = optarg; break;
		case 'n': opt.nodes = atoi(optarg); break;
		case 'c': opt.cpus = atoi(optarg); break;
		case 'z': opt.hz = atoi(optarg); break;
		case 'p': opt.procs = atoi(optarg); break;
		case 's': opt.stacks = atoi(optarg); break;
		case 'b': opt.batch_s = atoi(optarg); break;
		case 'r': rate_div_long = atoi(optarg); break;
		case 'k': opt.keep = true; break;
		default:
			fprintf(stderr, "usage: %s [-d DIR] [-H 1,24] [-n nodes] [-c cpus] [-z hz] "
				"[-p procs] [-s stacks] [-b batch_s] [-r rate_div_for_>1h] [-k]\n", argv[0]);
			return 2;
		}
	}
	if (opt.procs > 64 || opt.stacks > 512) {
		fprintf(stderr, "at most 64 processes and 512 stacks\n");
		return 2;
	}
	if (!opt.dir && !(opt.dir = mkdtemp(tmpl))) {
		perror("mkdtemp");
		return 1;
	}
	log__set_level(LOG_WARN);
	_init_names();
	for (const char *h = hours_list; *h && nres < 8; h = strchr(h, ',') ? strchr(h, ',') + 1 : "") {
		double hours = atof(h);
		int div = hours > 1 && rate_div_long > 1 ? rate_div_long : 1;

		fprintf(stderr, "writing %g h (rate 1/%d)...\n", hours, div);
		if (_run(hours, div, &res[nres]))
			return 1;
		nres++;
	}
	printf("\n%d nodes x %d CPUs x %d Hz, %d processes x %d stacks per node, %d s batches per node\n\n",
	       opt.nodes, opt.cpus, opt.hz, opt.procs, opt.stacks, opt.batch_s);
	printf("| window | rate | samples | batches | ingest samples/s (CPU, 1 core) "
	       "| ingest samples/s (wall) | bytes/sample | profile all | profile last 1 h "
	       "| profile odd edges | profile selector | series 1 min by comm, aligned "
	       "| same, unaligned | samples last 15 min (max 100k) |\n");
	printf("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
	for (int i = 0; i < nres; i++) {
		const struct result *r = &res[i];

		printf("| %g h | 1/%d | %llu | %llu | %.0f | %.0f | %.2f | %.3f s | %.3f s | %.3f s "
		       "| %.3f s | %.3f s | %.3f s | %.3f s (stride %u) |\n",
		       r->hours, r->rate_div, (unsigned long long)r->samples,
		       (unsigned long long)r->batches, r->samples / r->write_cpu,
		       r->samples / r->write_wall, (double)r->bytes / (double)r->samples,
		       r->q_profile_all, r->q_profile_1h, r->q_profile_odd, r->q_profile_sel,
		       r->q_series, r->q_series_raw, r->q_samples, r->stride);
	}
	return 0;
}
