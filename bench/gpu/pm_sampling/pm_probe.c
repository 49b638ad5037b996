// SPDX-License-Identifier: Apache-2.0
/*
 * pm_probe: can CUPTI's PM sampling be the GPU busy timeline? (issue 25)
 *
 *   pm_probe list   [--chip C] [--pattern S] [--describe]   metrics PM sampling offers
 *   pm_probe passes --chip C --metrics M                    passes a metric set needs
 *   pm_probe truth  [options] --out PREFIX                  sampling beside a known workload
 *   pm_probe cost   --pm on|off [options] --out FILE        step times, for interleaved runs
 *   pm_probe hold   --seconds S [options] --out PREFIX      sampling only, no work of its own
 *   pm_probe work   --out PREFIX                            the known workload, no CUPTI
 *   pm_probe try    [--attempts N] [--gap-ms G]             enable/start/stop, errors only
 *
 * options: --metrics M (comma-separated) --interval NS --hwbuf BYTES
 *          --maxsamples N --decode-ms MS --ctx-first --keep-latest --device D
 *          truth only: --activity (CUPTI kernel and memcpy records beside the
 *          samples, PREFIX.activity.csv) --copies (after the schedule, host to
 *          device and back copies timed by CUDA events, PREFIX.copies.csv)
 *
 * truth and work write PREFIX.truth.csv: one row per spin kernel with the
 * GPU's %globaltimer at its first block's start and its last block's end.
 * truth and hold write PREFIX.samples.csv (CUPTI's sample timestamps and the
 * metric values) and PREFIX.meta.txt (settings, decode statistics, memory,
 * clock pairs). analyze.py turns them into the tables of bench/README.md.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "pms.h"
#include "workload.h"

#define SLOTS 1024

struct opts {
	const char *mode, *chip, *pattern, *out, *pm;
	struct pms_config cfg;
	int describe, ctx_first, attempts, gap_ms, activity, copies;
	double seconds;
};

static uint64_t now_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };

	/* Sleeping is exact enough above a millisecond; below, the host spins. */
	if (ns >= 1000000) {
		nanosleep(&ts, NULL);
		return;
	}
	for (uint64_t end = now_ns(CLOCK_MONOTONIC) + ns; now_ns(CLOCK_MONOTONIC) < end;)
		;
}

static long rss_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static void die_wl(const char *what)
{
	fprintf(stderr, "pm_probe: %s: %s\n", what, wl_error());
	exit(2);
}

/* ---- the known workload --------------------------------------------- */

struct phase {
	const char *name;
	int reps;
	int one_sm;        /* one block instead of one per SM */
	uint64_t busy_ns;
	uint64_t idle_ns;  /* host idle after each kernel (0: none) */
	int sync_each;     /* wait for each kernel before the idle */
	uint64_t after_ns; /* idle after the phase */
};

/* Busy and idle lengths around the intervals tried (20 us to 1 ms). */
static const struct phase schedule[] = {
	{ "long", 4, 0, 50000000, 300000000, 1, 0 },
	{ "mid", 8, 0, 10000000, 30000000, 1, 0 },
	{ "short", 20, 0, 2000000, 3000000, 1, 30000000 },
	{ "onesm", 4, 1, 20000000, 30000000, 1, 0 },
	{ "sub", 20, 0, 50000, 200000, 1, 30000000 },
	{ "tiny_sync", 300, 0, 4000, 0, 1, 30000000 },
	{ "tiny_async", 300, 0, 4000, 0, 0, 30000000 },
};

struct truth_row {
	int slot;
	const char *phase;
};

static int run_schedule(struct truth_row *rows)
{
	int slot = 0, sms = wl_sm_count();
	size_t i;

	if (wl_reset())
		die_wl("reset");
	sleep_ns(100000000);
	for (i = 0; i < sizeof(schedule) / sizeof(schedule[0]); i++) {
		const struct phase *ph = &schedule[i];

		for (int r = 0; r < ph->reps; r++) {
			rows[slot].slot = slot;
			rows[slot].phase = ph->name;
			if (wl_spin(ph->one_sm ? 1 : sms, ph->busy_ns, slot++))
				die_wl("spin");
			if (ph->sync_each && wl_sync())
				die_wl("sync");
			if (ph->idle_ns)
				sleep_ns(ph->idle_ns);
		}
		if (wl_sync())
			die_wl("sync");
		if (ph->after_ns)
			sleep_ns(ph->after_ns);
	}
	sleep_ns(100000000);
	return slot;
}

static void write_truth(const char *prefix, const struct truth_row *rows, int n)
{
	static uint64_t st[SLOTS], en[SLOTS];
	char path[512];
	FILE *f;

	if (wl_fetch(st, en, n))
		die_wl("fetch");
	snprintf(path, sizeof(path), "%s.truth.csv", prefix);
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(2);
	}
	fprintf(f, "slot,phase,start,end\n");
	for (int i = 0; i < n; i++)
		fprintf(f, "%d,%s,%llu,%llu\n", rows[i].slot, rows[i].phase, (unsigned long long)st[i],
			(unsigned long long)en[i]);
	fclose(f);
}

/*
 * Pairs of clocks read together: CLOCK_REALTIME around a kernel that reads
 * %globaltimer, and around cuptiGetTimestamp. The narrowest bracket bounds
 * the offset best; analyze.py picks it.
 */
static void write_clock_pairs(FILE *meta, const char *tag, int gpu)
{
	for (int i = 0; i < 20; i++) {
		uint64_t r0, r1, g = 0, c0, c1, c;

		if (gpu) {
			r0 = now_ns(CLOCK_REALTIME);
			if (wl_clock(&g))
				die_wl("clock");
			r1 = now_ns(CLOCK_REALTIME);
			fprintf(meta, "clock_gpu %s %llu %llu %llu\n", tag, (unsigned long long)r0,
				(unsigned long long)r1, (unsigned long long)g);
		}
		c0 = now_ns(CLOCK_REALTIME);
		c = pms__cupti_now();
		c1 = now_ns(CLOCK_REALTIME);
		fprintf(meta, "clock_cupti %s %llu %llu %llu\n", tag, (unsigned long long)c0, (unsigned long long)c1,
			(unsigned long long)c);
	}
}

/* ---- sampling helpers ------------------------------------------------ */

static struct pms *open_or_report(const struct opts *o, FILE *meta)
{
	struct pms_error e = { 0 };
	uint64_t t0 = now_ns(CLOCK_MONOTONIC);
	struct pms *p = pms__open(&o->cfg, &e);

	if (!p) {
		fprintf(stderr, "pm_probe: %s failed: %s (%d)\n", e.step, e.msg, e.code);
		if (meta)
			fprintf(meta, "open_error %s %d %s\n", e.step, e.code, e.msg);
		return NULL;
	}
	if (meta)
		fprintf(meta, "open_ms %.3f\nchip %s\n", (now_ns(CLOCK_MONOTONIC) - t0) / 1e6, pms__chip(p));
	return p;
}

static void write_samples(const char *prefix, struct pms *p)
{
	const struct pms_sample *s;
	char path[512];
	size_t n, m = pms__nmetrics(p);
	FILE *f;

	snprintf(path, sizeof(path), "%s.samples.csv", prefix);
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		return;
	}
	fprintf(f, "start,end");
	for (size_t j = 0; j < m; j++)
		fprintf(f, ",%s", pms__metric(p, j));
	fputc('\n', f);
	s = pms__samples(p, &n);
	for (size_t i = 0; i < n; i++) {
		fprintf(f, "%llu,%llu", (unsigned long long)s[i].start, (unsigned long long)s[i].end);
		for (size_t j = 0; j < m; j++)
			fprintf(f, ",%.9g", s[i].v[j]);
		fputc('\n', f);
	}
	fclose(f);
}

static void write_stats(FILE *meta, struct pms *p)
{
	struct pms_stats st;
	const struct pms_error *e = pms__last_error(p);

	pms__get_stats(p, &st);
	fprintf(meta,
		"samples %llu\ndecode_calls %llu\ndecode_full %llu\noverflow %llu\ndecode_errors %llu\n"
		"incomplete %llu\nmax_per_decode %llu\ndecode_cpu_ns %llu\ndecode_wall_ns %llu\neval_ns %llu\n"
		"config_image_bytes %zu\ncounter_data_bytes %zu\ncounter_avail_bytes %zu\n",
		(unsigned long long)st.samples, (unsigned long long)st.decode_calls,
		(unsigned long long)st.decode_full, (unsigned long long)st.overflow,
		(unsigned long long)st.decode_errors, (unsigned long long)st.incomplete,
		(unsigned long long)st.max_per_decode, (unsigned long long)st.decode_cpu_ns,
		(unsigned long long)st.decode_wall_ns, (unsigned long long)st.eval_ns, st.config_image_bytes,
		st.counter_data_bytes, st.counter_avail_bytes);
	if (e->step[0])
		fprintf(meta, "last_error %s %d %s\n", e->step, e->code, e->msg);
}

static FILE *open_meta(const char *prefix, const struct opts *o)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s.meta.txt", prefix);
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(2);
	}
	fprintf(f, "mode %s\nmetrics %s\ninterval_ns %llu\nhwbuf_bytes %zu\nmax_samples %u\ndecode_ms %u\n"
		   "ctx_first %d\nkeep_latest %d\nuid %d\n",
		o->mode, o->cfg.metrics, (unsigned long long)o->cfg.interval_ns, o->cfg.hw_buf_bytes,
		o->cfg.max_samples, o->cfg.decode_ms, o->ctx_first, o->cfg.keep_latest, (int)getuid());
	return f;
}

static void mem_line(FILE *meta, const char *tag, int have_ctx)
{
	size_t fr = 0, tot = 0;

	if (have_ctx && wl_mem(&fr, &tot))
		die_wl("mem");
	fprintf(meta, "mem %s rss_kb %ld gpu_free %zu\n", tag, rss_kb(), fr);
}

/* ---- modes ----------------------------------------------------------- */

/* Copy-engine work, which kernels' truth does not cover: does a metric see it? */
static void run_copies(const char *prefix)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s.copies.csv", prefix);
	f = fopen(path, "w");
	if (!f) {
		perror(path);
		exit(2);
	}
	fprintf(f, "to_device,rt_start,rt_end,event_ms\n");
	sleep_ns(100000000);
	for (int dir = 1; dir >= 0; dir--) {
		for (int i = 0; i < 4; i++) {
			uint64_t r0 = now_ns(CLOCK_REALTIME), r1;
			float ms = 0;

			if (wl_copy(dir, &ms))
				die_wl("copy");
			r1 = now_ns(CLOCK_REALTIME);
			fprintf(f, "%d,%llu,%llu,%.4f\n", dir, (unsigned long long)r0, (unsigned long long)r1, ms);
			sleep_ns(30000000);
		}
	}
	fclose(f);
}

static int mode_truth(const struct opts *o, int with_pm)
{
	static struct truth_row rows[SLOTS];
	FILE *meta = open_meta(o->out, o), *act = NULL;
	struct pms *p = NULL;
	uint64_t t0;
	int n;

	if (wl_driver_init())
		die_wl("cuInit");
	if (o->ctx_first) {
		if (wl_init(o->cfg.device, SLOTS))
			die_wl("init");
		mem_line(meta, "before_open", 1);
	} else {
		mem_line(meta, "before_open", 0);
	}
	if (with_pm) {
		p = open_or_report(o, meta);
		if (!p) {
			fclose(meta);
			return 3;
		}
	}
	mem_line(meta, "after_open", o->ctx_first);
	if (!o->ctx_first) {
		if (wl_init(o->cfg.device, SLOTS))
			die_wl("init");
		mem_line(meta, "after_ctx", 1);
	}
	if (o->copies && wl_copy_init(64u << 20))
		die_wl("copy init");
	write_clock_pairs(meta, "before", 1);
	if (o->activity) {
		char path[512];

		snprintf(path, sizeof(path), "%s.activity.csv", o->out);
		act = fopen(path, "w");
		if (!act || pms__activity_start(act))
			fprintf(meta, "activity_error could not enable activity records\n");
	}
	if (p) {
		t0 = now_ns(CLOCK_MONOTONIC);
		if (pms__start(p)) {
			const struct pms_error *e = pms__last_error(p);

			fprintf(meta, "start_error %s %d %s\n", e->step, e->code, e->msg);
			fprintf(stderr, "pm_probe: %s failed: %s (%d)\n", e->step, e->msg, e->code);
			fclose(meta);
			return 3;
		}
		fprintf(meta, "start_ms %.3f\n", (now_ns(CLOCK_MONOTONIC) - t0) / 1e6);
		mem_line(meta, "after_start", 1);
	}
	t0 = now_ns(CLOCK_MONOTONIC);
	n = run_schedule(rows);
	fprintf(meta, "schedule_wall_ns %llu\n", (unsigned long long)(now_ns(CLOCK_MONOTONIC) - t0));
	if (o->copies)
		run_copies(o->out);
	if (act) {
		pms__activity_stop();
		fclose(act);
	}
	if (p) {
		pms__stop(p);
		write_stats(meta, p);
		write_samples(o->out, p);
	}
	write_clock_pairs(meta, "after", 1);
	write_truth(o->out, rows, n);
	pms__close(p);
	fclose(meta);
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Runs steps of one kind for `seconds`; prints median, p10, p90 in us. */
static void time_steps(FILE *out, const char *kind, double seconds)
{
	static uint64_t t[200000];
	uint64_t end = now_ns(CLOCK_MONOTONIC) + (uint64_t)(seconds * 1e9);
	size_t n = 0;
	int sms = wl_sm_count();

	while (now_ns(CLOCK_MONOTONIC) < end && n < sizeof(t) / sizeof(t[0])) {
		uint64_t s = now_ns(CLOCK_MONOTONIC);

		if (!strcmp(kind, "tiny")) {
			for (int k = 0; k < 100; k++)
				if (wl_tiny())
					die_wl("tiny");
		} else if (wl_fma(sms * 8, 20000)) {
			die_wl("fma");
		}
		if (wl_sync())
			die_wl("sync");
		t[n++] = now_ns(CLOCK_MONOTONIC) - s;
	}
	qsort(t, n, sizeof(t[0]), cmp_u64);
	fprintf(out, " %s_steps=%zu %s_med_us=%.2f %s_p10_us=%.2f %s_p90_us=%.2f", kind, n, kind, t[n / 2] / 1e3,
		kind, t[n / 10] / 1e3, kind, t[n * 9 / 10] / 1e3);
}

static uint64_t cpu_ns(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000ull +
	       (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000ull;
}

static int mode_cost(const struct opts *o)
{
	int on = o->pm && !strcmp(o->pm, "on");
	FILE *out = fopen(o->out, "a");
	struct pms *p = NULL;
	uint64_t c0, w0;

	if (!out) {
		perror(o->out);
		return 2;
	}
	if (wl_driver_init())
		die_wl("cuInit");
	if (on) {
		p = open_or_report(o, NULL);
		if (!p)
			return 3;
	}
	if (wl_init(o->cfg.device, SLOTS))
		die_wl("init");
	if (p && pms__start(p)) {
		fprintf(stderr, "pm_probe: start failed: %s\n", pms__last_error(p)->msg);
		return 3;
	}
	time_steps(stdout, "tiny", 0.2); /* warm-up, not reported */
	time_steps(stdout, "fma", 0.2);
	printf("\n");
	c0 = cpu_ns();
	w0 = now_ns(CLOCK_MONOTONIC);
	fprintf(out, "pm=%s interval_ns=%llu pid=%d", on ? "on" : "off", (unsigned long long)o->cfg.interval_ns,
		(int)getpid());
	time_steps(out, "tiny", o->seconds / 2);
	time_steps(out, "fma", o->seconds / 2);
	fprintf(out, " cpu_ms=%.1f wall_ms=%.1f", (cpu_ns() - c0) / 1e6, (now_ns(CLOCK_MONOTONIC) - w0) / 1e6);
	if (p) {
		struct pms_stats st;

		pms__stop(p);
		pms__get_stats(p, &st);
		fprintf(out, " decode_cpu_ms=%.1f samples=%llu overflow=%llu", st.decode_cpu_ns / 1e6,
			(unsigned long long)st.samples, (unsigned long long)st.overflow);
	}
	fprintf(out, "\n");
	fclose(out);
	pms__close(p);
	return 0;
}

static int mode_hold(const struct opts *o)
{
	FILE *meta = open_meta(o->out, o);
	struct pms *p;

	if (wl_driver_init())
		die_wl("cuInit");
	mem_line(meta, "before_open", 0);
	p = open_or_report(o, meta);
	if (!p) {
		fclose(meta);
		return 3;
	}
	mem_line(meta, "after_open", 0);
	write_clock_pairs(meta, "before", 0);
	if (pms__start(p)) {
		const struct pms_error *e = pms__last_error(p);

		fprintf(meta, "start_error %s %d %s\n", e->step, e->code, e->msg);
		fclose(meta);
		return 3;
	}
	fprintf(meta, "hold_from_rt %llu\n", (unsigned long long)now_ns(CLOCK_REALTIME));
	mem_line(meta, "after_start", 0);
	fflush(meta); /* run.sh waits for this line */
	sleep_ns((uint64_t)(o->seconds * 1e9));
	pms__stop(p);
	write_clock_pairs(meta, "after", 0);
	write_stats(meta, p);
	write_samples(o->out, p);
	pms__close(p);
	fclose(meta);
	return 0;
}

static int mode_work(const struct opts *o)
{
	static struct truth_row rows[SLOTS];
	int n;

	if (wl_driver_init() || wl_init(o->cfg.device, SLOTS))
		die_wl("init");
	n = run_schedule(rows);
	write_truth(o->out, rows, n);
	return 0;
}

static int mode_try(const struct opts *o)
{
	int fails = 0;

	if (wl_driver_init())
		die_wl("cuInit");
	for (int i = 0; i < o->attempts; i++) {
		struct pms_error e = { 0 };
		struct pms *p = pms__open(&o->cfg, &e);

		if (!p) {
			printf("try %d uid %d: FAIL at %s: %s (%d)\n", i, (int)getuid(), e.step, e.msg, e.code);
			fails++;
		} else if (pms__start(p)) {
			e = *pms__last_error(p);
			printf("try %d uid %d: FAIL at %s: %s (%d)\n", i, (int)getuid(), e.step, e.msg, e.code);
			fails++;
		} else {
			struct pms_stats st;

			sleep_ns(200000000);
			pms__stop(p);
			pms__get_stats(p, &st);
			e = *pms__last_error(p);
			printf("try %d uid %d: ok, %llu samples in 200 ms, %llu decode errors%s%s%s\n", i,
			       (int)getuid(), (unsigned long long)st.samples, (unsigned long long)st.decode_errors,
			       e.step[0] ? " (last: " : "", e.step[0] ? e.msg : "", e.step[0] ? ")" : "");
		}
		pms__close(p);
		fflush(stdout);
		if (i + 1 < o->attempts)
			sleep_ns((uint64_t)o->gap_ms * 1000000ull);
	}
	return fails ? 3 : 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: pm_probe list|passes|truth|cost|hold|work|try [options] (see pm_probe.c)\n");
	exit(1);
}

int main(int argc, char **argv)
{
	struct opts o = {
		.cfg = {
			.device = 0,
			.metrics = "gr__cycles_active.sum,gr__cycles_elapsed.max",
			.interval_ns = 100000,
			.hw_buf_bytes = 64u << 20,
			.max_samples = 10000,
			.decode_ms = 50,
		},
		.attempts = 1,
		.gap_ms = 500,
		.seconds = 2.0,
	};
	size_t passes;
	int rc;

	if (argc < 2)
		usage();
	o.mode = argv[1];
	for (int i = 2; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--describe")) {
			o.describe = 1;
			continue;
		}
		if (!strcmp(a, "--ctx-first")) {
			o.ctx_first = 1;
			continue;
		}
		if (!strcmp(a, "--activity")) {
			o.activity = 1;
			continue;
		}
		if (!strcmp(a, "--copies")) {
			o.copies = 1;
			continue;
		}
		if (!strcmp(a, "--keep-latest")) {
			o.cfg.keep_latest = 1;
			continue;
		}
		if (!v)
			usage();
		i++;
		if (!strcmp(a, "--chip"))
			o.chip = v;
		else if (!strcmp(a, "--pattern"))
			o.pattern = v;
		else if (!strcmp(a, "--out"))
			o.out = v;
		else if (!strcmp(a, "--pm"))
			o.pm = v;
		else if (!strcmp(a, "--metrics"))
			o.cfg.metrics = v;
		else if (!strcmp(a, "--interval"))
			o.cfg.interval_ns = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--hwbuf"))
			o.cfg.hw_buf_bytes = strtoull(v, NULL, 10);
		else if (!strcmp(a, "--maxsamples"))
			o.cfg.max_samples = (uint32_t)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--decode-ms"))
			o.cfg.decode_ms = (unsigned)strtoul(v, NULL, 10);
		else if (!strcmp(a, "--device"))
			o.cfg.device = atoi(v);
		else if (!strcmp(a, "--seconds"))
			o.seconds = atof(v);
		else if (!strcmp(a, "--attempts"))
			o.attempts = atoi(v);
		else if (!strcmp(a, "--gap-ms"))
			o.gap_ms = atoi(v);
		else
			usage();
	}
	if (!strcmp(o.mode, "work")) {
		if (!o.out)
			usage();
		return mode_work(&o);
	}
	/* A run without PM sampling does not even load CUPTI. */
	if (!(strcmp(o.mode, "cost") == 0 && (!o.pm || strcmp(o.pm, "on")))) {
		rc = pms__load(NULL);
		if (rc)
			return 2;
	}
	if (!strcmp(o.mode, "list")) {
		if (!o.chip && wl_driver_init())
			die_wl("cuInit");
		return pms__list(o.chip, o.cfg.device, o.pattern, o.describe) ? 3 : 0;
	}
	if (!strcmp(o.mode, "passes")) {
		struct pms_error e = { 0 };

		if (!o.chip)
			usage();
		rc = pms__passes(o.chip, o.cfg.metrics, &passes, &e);
		if (rc)
			printf("passes %s: %s failed: %s (%d)\n", o.cfg.metrics, e.step, e.msg, e.code);
		else
			printf("passes %s: %zu\n", o.cfg.metrics, passes);
		return rc ? 3 : 0;
	}
	if (!strcmp(o.mode, "try"))
		return mode_try(&o);
	if (!o.out)
		usage();
	if (!strcmp(o.mode, "truth"))
		return mode_truth(&o, 1);
	if (!strcmp(o.mode, "cost"))
		return mode_cost(&o);
	if (!strcmp(o.mode, "hold"))
		return mode_hold(&o);
	usage();
	return 1;
}
