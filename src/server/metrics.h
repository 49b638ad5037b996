/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SERVER_METRICS_H
#define FW_SERVER_METRICS_H

#include <stdint.h>

struct strbuf;
struct store;
struct wire_session_table;

/* Server counters exported at /metrics. Single-threaded: plain integers. */
enum server_route {
	ROUTE_INGEST,
	ROUTE_INGEST_PPROF,
	ROUTE_INGEST_FOLDED,
	ROUTE_PROFILE,
	ROUTE_FLAMECHART,
	ROUTE_SERIES,
	ROUTE_LABELS,
	ROUTE_LABEL_VALUES,
	ROUTE_CPU_STRIPS,
	ROUTE_HEALTHZ,
	ROUTE_METRICS,
	ROUTE_GPU_METRICS,
	ROUTE_STATIC,
	ROUTE_GPU_KERNELS,
	ROUTE_GPU_KERNELS_TOP,
	ROUTE_GPU_IDLE,
	ROUTE_OTHER,
	ROUTE_MAX,
};

enum status_class { STATUS_2XX, STATUS_4XX, STATUS_5XX, STATUS_CLASS_MAX };

struct server_metrics {
	uint64_t requests[ROUTE_MAX][STATUS_CLASS_MAX];
	uint64_t request_ns[ROUTE_MAX];		/* summed handling time */
	uint64_t ingest_bytes;			/* request bodies accepted */
	uint64_t ingest_samples;
	uint64_t ingest_batches;
	uint64_t ingest_rejected_auth;
	uint64_t ingest_rejected_limits;	/* 413 and 400 for limits */
	uint64_t ingest_rejected_invalid;	/* malformed bodies */
	uint64_t ingest_session_unknown;	/* 409: built on a session not held */
	uint64_t retention_runs;
	uint64_t conn_refused;			/* 503: over --max-connections */
	uint64_t conn_closed_idle;		/* closed for a newcomer or a slow head */
	uint64_t body_refused;			/* 503: over --max-body-memory */
	uint64_t accept_errors;			/* accept() failed (descriptors, memory) */
};

const char *server_route__name(enum server_route r);
/* Appends the Prometheus text exposition of m, the store's and the sessions' stats. */
void server_metrics__write(const struct server_metrics *m, struct store *store,
			   const struct wire_session_table *sessions, struct strbuf *out);

#endif
