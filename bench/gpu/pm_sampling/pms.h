// SPDX-License-Identifier: Apache-2.0
/*
 * pms: CUPTI PM sampling of one device, for the probe (pm_probe) and the
 * injection library (pm_inject). CUPTI is dlopen'd, as the product does.
 *
 * PM sampling programs the GPU's performance monitors to snapshot the chosen
 * counters every interval into a hardware buffer; a host thread decodes that
 * buffer into a counter data image and evaluates each sample to metric
 * values. The samples cover the whole device, not one process.
 */
#ifndef PMS_H
#define PMS_H

#include <stddef.h>
#include <stdint.h>

#define PMS_MAX_METRICS 12

struct pms_config {
	int device;              /* CUDA device ordinal */
	const char *metrics;     /* comma-separated metric names (borrowed) */
	uint64_t interval_ns;    /* GPU_TIME_INTERVAL trigger */
	size_t hw_buf_bytes;     /* hardware buffer CUPTI allocates */
	uint32_t max_samples;    /* capacity of the counter data image per decode */
	unsigned decode_ms;      /* decode thread period */
	int keep_latest;         /* hardware buffer append mode */
};

struct pms_sample {
	uint64_t start, end;     /* CUPTI's sample timestamps */
	double v[PMS_MAX_METRICS];
};

struct pms_stats {
	uint64_t samples;           /* evaluated, kept */
	uint64_t decode_calls;      /* cuptiPmSamplingDecodeData calls */
	uint64_t decode_full;       /* stops with COUNTER_DATA_FULL */
	uint64_t overflow;          /* decodes that reported overflow */
	uint64_t decode_errors;     /* failed decodes (OUT_OF_MEMORY = overflow) */
	uint64_t incomplete;        /* populated but not completed, dropped at reset */
	uint64_t max_per_decode;    /* most samples one decode pass brought */
	uint64_t decode_cpu_ns;     /* decode thread CPU time */
	uint64_t decode_wall_ns;    /* decode thread life */
	uint64_t eval_ns;           /* of decode_cpu: GetSampleInfo + Evaluate */
	size_t config_image_bytes;
	size_t counter_data_bytes;
	size_t counter_avail_bytes;
};

/* The step that failed last, CUPTI's code and message; "" when none. */
struct pms_error {
	char step[64];
	int code;
	char msg[160];
};

struct pms;

/* Loads CUPTI: path, else $PMS_CUPTI_PATH, else the usual sonames. 0 or -errno. */
int pms__load(const char *path);
/* Names the functions a product would need; NULL-terminated, static. */
const char *const *pms__symbols(void);

/* Lists the chip's base metrics whose name contains pattern (NULL: all),
 * with their description, on stdout. Needs no GPU when chip is given. */
int pms__list(const char *chip, int device, const char *pattern, int describe);
/* Number of passes the comma-separated metrics need on chip (host only). */
int pms__passes(const char *chip, const char *metrics, size_t *passes, struct pms_error *err);

/* Initialises the profiler, builds the config image, enables and configures
 * PM sampling on the device. Returns an owned object, or NULL with *err set
 * (errno too). */
struct pms *pms__open(const struct pms_config *cfg, struct pms_error *err);
/* Starts sampling and the decode thread. */
int pms__start(struct pms *p);
/* Stops sampling, decodes what is left and joins the thread. */
int pms__stop(struct pms *p);
/* Disables PM sampling and frees everything; accepts NULL. */
void pms__close(struct pms *p);

/* Samples decoded so far (borrowed; valid until the next start or close). */
const struct pms_sample *pms__samples(const struct pms *p, size_t *n);
size_t pms__nmetrics(const struct pms *p);
const char *pms__metric(const struct pms *p, size_t i);
void pms__get_stats(const struct pms *p, struct pms_stats *st);
const struct pms_error *pms__last_error(const struct pms *p);
const char *pms__chip(const struct pms *p);
/* CUPTI's clock (cuptiGetTimestamp), 0 when unavailable. */
uint64_t pms__cupti_now(void);
/* CUPTI's name for a result code. */
const char *pms__strerror(int code);

/* Kernel and memcpy activity records, for comparison in the probe: written
 * to file as "kind,start,end" (CUPTI's clock), kind "kernel" or "memcpy". */
int pms__activity_start(void *file);
int pms__activity_stop(void);

/* Samples are appended to this stream as they are decoded, as CSV lines
 * "start,end,v0,...": for processes that may never call pms__stop. */
void pms__set_stream(struct pms *p, void *file);

#endif
