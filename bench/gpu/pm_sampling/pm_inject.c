// SPDX-License-Identifier: Apache-2.0
/*
 * libpm_inject.so: PM sampling from inside an unmodified CUDA application,
 * loaded as CUDA_INJECTION64_PATH as libflamewatch-cuda.so is. The driver
 * calls InitializeInjection inside cuInit, before the application has a
 * context; a thread started there enables sampling, which tells whether
 * the product's library could do it at that point.
 *
 *   PMS_OUT       file prefix (required): PREFIX.samples.csv, PREFIX.meta.txt
 *   PMS_METRICS   comma-separated metrics (default gr__cycles_active.sum,gr__cycles_elapsed.max)
 *   PMS_INTERVAL  sample interval in ns (default 100000)
 *   PMS_HWBUF     hardware buffer bytes (default 64 MiB)
 *   PMS_MAXSAMPLES, PMS_DECODE_MS  counter data image capacity, decode period
 *   PMS_CUPTI_PATH  libcupti to load
 *
 * Samples are appended to PREFIX.samples.csv as they are decoded, so the
 * file is useful even when the process exits without running atexit.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pms.h"

static struct pms *P;
static FILE *Meta, *Samples;
static pthread_mutex_t Lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t _now(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static uint64_t _env(const char *name, uint64_t def)
{
	const char *s = getenv(name);

	return s && *s ? strtoull(s, NULL, 10) : def;
}

static void _clock_pairs(const char *tag)
{
	for (int i = 0; i < 10; i++) {
		uint64_t r0 = _now(CLOCK_REALTIME), c = pms__cupti_now(), r1 = _now(CLOCK_REALTIME);

		fprintf(Meta, "clock_cupti %s %llu %llu %llu\n", tag, (unsigned long long)r0, (unsigned long long)r1,
			(unsigned long long)c);
	}
}

static void _at_exit(void)
{
	struct pms_stats st;

	pthread_mutex_lock(&Lock);
	if (P && Meta) {
		pms__stop(P);
		pms__get_stats(P, &st);
		_clock_pairs("after");
		fprintf(Meta, "samples %llu\noverflow %llu\ndecode_errors %llu\ndecode_cpu_ns %llu\ndecode_wall_ns %llu\n",
			(unsigned long long)st.samples, (unsigned long long)st.overflow,
			(unsigned long long)st.decode_errors, (unsigned long long)st.decode_cpu_ns,
			(unsigned long long)st.decode_wall_ns);
		if (pms__last_error(P)->step[0])
			fprintf(Meta, "last_error %s %d %s\n", pms__last_error(P)->step, pms__last_error(P)->code,
				pms__last_error(P)->msg);
	}
	if (Meta)
		fclose(Meta);
	if (Samples)
		fclose(Samples);
	Meta = Samples = NULL;
	pthread_mutex_unlock(&Lock);
}

static void *_main(void *arg)
{
	const char *prefix = arg;
	const char *metrics = getenv("PMS_METRICS");
	struct pms_config cfg = {
		.device = 0,
		.metrics = metrics && *metrics ? metrics : "gr__cycles_active.sum,gr__cycles_elapsed.max",
		.interval_ns = _env("PMS_INTERVAL", 100000),
		.hw_buf_bytes = _env("PMS_HWBUF", 64u << 20),
		.max_samples = (uint32_t)_env("PMS_MAXSAMPLES", 10000),
		.decode_ms = (unsigned)_env("PMS_DECODE_MS", 50),
	};
	struct pms_error e = { 0 };
	char path[512];
	uint64_t t0 = _now(CLOCK_MONOTONIC);

	snprintf(path, sizeof(path), "%s.meta.txt", prefix);
	Meta = fopen(path, "w");
	if (!Meta)
		return NULL;
	fprintf(Meta, "mode inject\nmetrics %s\ninterval_ns %llu\nhwbuf_bytes %zu\ninit_rt %llu\n", cfg.metrics,
		(unsigned long long)cfg.interval_ns, cfg.hw_buf_bytes, (unsigned long long)_now(CLOCK_REALTIME));
	fflush(Meta);
	if (pms__load(NULL)) {
		fprintf(Meta, "open_error load 0 cannot load CUPTI\n");
		fflush(Meta);
		return NULL;
	}
	P = pms__open(&cfg, &e);
	if (!P) {
		fprintf(Meta, "open_error %s %d %s\n", e.step, e.code, e.msg);
		fflush(Meta);
		return NULL;
	}
	snprintf(path, sizeof(path), "%s.samples.csv", prefix);
	Samples = fopen(path, "w");
	if (Samples) {
		fprintf(Samples, "start,end");
		for (size_t i = 0; i < pms__nmetrics(P); i++)
			fprintf(Samples, ",%s", pms__metric(P, i));
		fputc('\n', Samples);
		pms__set_stream(P, Samples);
	}
	_clock_pairs("before");
	if (pms__start(P)) {
		fprintf(Meta, "start_error %s %d %s\n", pms__last_error(P)->step, pms__last_error(P)->code,
			pms__last_error(P)->msg);
		fflush(Meta);
		return NULL;
	}
	fprintf(Meta, "open_ms %.3f\nstarted_rt %llu\nchip %s\n", (_now(CLOCK_MONOTONIC) - t0) / 1e6,
		(unsigned long long)_now(CLOCK_REALTIME), pms__chip(P));
	fflush(Meta);
	atexit(_at_exit);
	return NULL;
}

__attribute__((visibility("default"))) int InitializeInjection(void)
{
	static char prefix[400];
	const char *out = getenv("PMS_OUT");
	pthread_t t;

	if (!out || !*out)
		return 1;
	snprintf(prefix, sizeof(prefix), "%s", out);
	/* Not inside cuInit itself: the driver is still initialising. */
	if (pthread_create(&t, NULL, _main, prefix) == 0)
		pthread_detach(t);
	return 1;
}
