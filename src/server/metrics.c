// SPDX-License-Identifier: Apache-2.0
#include "common/strbuf.h"
#include "format/wire.h"
#include "server/metrics.h"
#include "store/store.h"

static const char *const _route_names[ROUTE_MAX] = {
	[ROUTE_INGEST] = "ingest",
	[ROUTE_INGEST_PPROF] = "ingest_pprof",
	[ROUTE_INGEST_FOLDED] = "ingest_folded",
	[ROUTE_PROFILE] = "profile",
	[ROUTE_FLAMECHART] = "flamechart",
	[ROUTE_SERIES] = "series",
	[ROUTE_CPU_STRIPS] = "cpu_strips",
	[ROUTE_LABELS] = "labels",
	[ROUTE_LABEL_VALUES] = "label_values",
	[ROUTE_HEALTHZ] = "healthz",
	[ROUTE_METRICS] = "metrics",
	[ROUTE_GPU_METRICS] = "gpu_metrics",
	[ROUTE_STATIC] = "static",
	[ROUTE_GPU_KERNELS] = "gpu_kernels",
	[ROUTE_GPU_KERNELS_TOP] = "gpu_kernels_top",
	[ROUTE_GPU_IDLE] = "gpu_idle",
	[ROUTE_OTHER] = "other",
};

static const char *const _class_names[STATUS_CLASS_MAX] = { "2xx", "4xx", "5xx" };

const char *server_route__name(enum server_route r)
{
	return r < ROUTE_MAX ? _route_names[r] : "other";
}

static void _counter(struct strbuf *o, const char *name, const char *help, uint64_t v)
{
	strbuf__printf(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name,
		       (unsigned long long)v);
}

static void _gauge(struct strbuf *o, const char *name, const char *help, uint64_t v)
{
	strbuf__printf(o, "# HELP %s %s\n# TYPE %s gauge\n%s %llu\n", name, help, name, name,
		       (unsigned long long)v);
}

static void _sessions(struct strbuf *o, const struct wire_session_table *t)
{
	static const char *const why[WIRE_FORGOT_MAX] = {
		[WIRE_FORGOT_BUDGET] = "budget", [WIRE_FORGOT_ENDED] = "ended",
		[WIRE_FORGOT_IDLE] = "idle",
	};
	struct wire_session_stats st;

	wire_sessions__stats(t, &st);
	_gauge(o, "flamewatch_ingest_sessions", "Agent sessions whose dictionaries are held.",
	       st.sessions);
	_gauge(o, "flamewatch_ingest_session_bytes", "Bytes the held session dictionaries take.",
	       st.bytes);
	_gauge(o, "flamewatch_ingest_session_max_bytes",
	       "The budget for session dictionaries (--max-session-memory).", st.max_bytes);
	strbuf__puts(o, "# HELP flamewatch_ingest_sessions_forgotten_total Sessions forgotten: "
			"budget (least recently used, over --max-session-memory), ended (their agent "
			"started another), idle (unused for an hour).\n"
			"# TYPE flamewatch_ingest_sessions_forgotten_total counter\n");
	for (int k = 0; k < WIRE_FORGOT_MAX; k++)
		strbuf__printf(o, "flamewatch_ingest_sessions_forgotten_total{reason=\"%s\"} %llu\n",
			       why[k], (unsigned long long)st.forgotten[k]);
}

void server_metrics__write(const struct server_metrics *m, struct store *store,
			   const struct wire_session_table *sessions, struct strbuf *o)
{
	struct store_stats st;

	strbuf__puts(o, "# HELP flamewatch_http_requests_total HTTP requests by route and status class.\n"
			"# TYPE flamewatch_http_requests_total counter\n");
	for (int r = 0; r < ROUTE_MAX; r++)
		for (int c = 0; c < STATUS_CLASS_MAX; c++)
			strbuf__printf(o, "flamewatch_http_requests_total{route=\"%s\",code=\"%s\"} %llu\n",
				       _route_names[r], _class_names[c],
				       (unsigned long long)m->requests[r][c]);
	strbuf__puts(o, "# HELP flamewatch_http_request_seconds_total Time spent handling requests, by route.\n"
			"# TYPE flamewatch_http_request_seconds_total counter\n");
	for (int r = 0; r < ROUTE_MAX; r++)
		strbuf__printf(o, "flamewatch_http_request_seconds_total{route=\"%s\"} %.6f\n",
			       _route_names[r], m->request_ns[r] / 1e9);
	_counter(o, "flamewatch_ingest_bytes_total", "Request body bytes of accepted ingest requests.",
		 m->ingest_bytes);
	_counter(o, "flamewatch_ingest_samples_total", "Samples stored.", m->ingest_samples);
	_counter(o, "flamewatch_ingest_batches_total", "Batches stored.", m->ingest_batches);
	_counter(o, "flamewatch_ingest_rejected_auth_total", "Ingest requests refused for their token.",
		 m->ingest_rejected_auth);
	_counter(o, "flamewatch_ingest_rejected_limits_total", "Ingest requests over a size limit.",
		 m->ingest_rejected_limits);
	_counter(o, "flamewatch_ingest_rejected_invalid_total", "Ingest requests with malformed bodies.",
		 m->ingest_rejected_invalid);
	_counter(o, "flamewatch_ingest_session_unknown_total",
		 "Ingest requests answered 409: built on a session the server no longer holds "
		 "(the agent sends the batch again with its dictionary).", m->ingest_session_unknown);
	if (sessions)
		_sessions(o, sessions);
	_counter(o, "flamewatch_retention_runs_total", "Retention passes run.", m->retention_runs);
	_counter(o, "flamewatch_http_connections_refused_total",
		 "Connections answered 503 for --max-connections.", m->conn_refused);
	_counter(o, "flamewatch_http_connections_closed_idle_total",
		 "Connections closed while idle: for a newcomer at the cap, or a request head "
		 "that took too long.", m->conn_closed_idle);
	_counter(o, "flamewatch_http_bodies_refused_total",
		 "Requests answered 503 for --max-body-memory.", m->body_refused);
	_counter(o, "flamewatch_http_accept_errors_total",
		 "accept() calls that failed (descriptors or memory short).", m->accept_errors);
	if (store && store__stats(store, &st) == 0) {
		_gauge(o, "flamewatch_store_bytes", "Bytes the store occupies on disk.", st.bytes_on_disk);
		_gauge(o, "flamewatch_store_series", "Series (label sets) stored.", st.series);
		_gauge(o, "flamewatch_store_stacks", "Distinct stacks stored.", st.stacks);
		_gauge(o, "flamewatch_store_frames", "Distinct frames stored.", st.frames);
		_counter(o, "flamewatch_store_samples_written_total", "Samples written since start.",
			 st.samples_written);
	}
}
