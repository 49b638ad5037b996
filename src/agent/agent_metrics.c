// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/http.h>

#include "agent/agent_metrics.h"
#include "agent/gpu_busy.h"
#include "agent/collector.h"
#include "agent/cpu_profile.h"
#include "agent/cuda/cuda_tracker.h"
#include "agent/shipper.h"
#include "common/batch.h"
#include "common/hostport.h"
#include "common/log.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "format/prom_points.h"
#include "gpu/nvml.h"
#include "gpu/poller.h"

struct agent_metrics {
	struct evhttp *http;
	struct prom_points *points;
	const char *node;
	struct gpu_poller *gpu;
	struct collector *collector;
	struct shipper *shipper;
	struct gpu_busy *busy;
	int64_t max_age_ns;
};

/*
 * How GPU records found the stacks of their launches (src/gpu/cuda_join.h):
 * the share of GPU time under a stack not its own, or none, says how far
 * the GPU flame graph can be trusted.
 */
static void _cuda_join(const struct cuda_join_stats *st, struct strbuf *sb)
{
	strbuf__printf(sb, "# HELP flamewatch_agent_cuda_launches_total Launch probes read.\n"
		       "# TYPE flamewatch_agent_cuda_launches_total counter\n"
		       "flamewatch_agent_cuda_launches_total %llu\n"
		       "# HELP flamewatch_agent_cuda_launches_unmatched_total Launches that left "
		       "without any record (failed calls, or records lost).\n"
		       "# TYPE flamewatch_agent_cuda_launches_unmatched_total counter\n"
		       "flamewatch_agent_cuda_launches_unmatched_total %llu\n",
		       (unsigned long long)st->launches, (unsigned long long)st->launches_unmatched);
	strbuf__printf(sb, "# HELP flamewatch_agent_cuda_records_total GPU activity records, by how "
		       "they found a launch stack: joined, joined_late (waited for it), "
		       "fallback_same (an earlier launch of the same kernel), fallback_other (the "
		       "process's last launch), lost (none).\n"
		       "# TYPE flamewatch_agent_cuda_records_total counter\n");
	for (int h = 0; h < CUDA_JOIN_HOW_MAX; h++)
		strbuf__printf(sb, "flamewatch_agent_cuda_records_total{how=\"%s\"} %llu\n",
			       cuda_join_how__name(h), (unsigned long long)st->how[h]);
	strbuf__printf(sb, "# HELP flamewatch_agent_cuda_gpu_seconds_total GPU time of those "
		       "records, by how.\n"
		       "# TYPE flamewatch_agent_cuda_gpu_seconds_total counter\n");
	for (int h = 0; h < CUDA_JOIN_HOW_MAX; h++)
		strbuf__printf(sb, "flamewatch_agent_cuda_gpu_seconds_total{how=\"%s\"} %.9f\n",
			       cuda_join_how__name(h), (double)st->how_ns[h] / 1e9);
	strbuf__printf(sb, "# HELP flamewatch_agent_cuda_records_unjoined_total Records that left "
		       "without their own launch, by why: unnamed (carried from launches none "
		       "kept), distance (their launch left or never came), age (waited too long), "
		       "count (too many waiting), gone (their process exited), no_stack (their "
		       "launch's stack was not unwound), memory.\n"
		       "# TYPE flamewatch_agent_cuda_records_unjoined_total counter\n");
	for (int w = 0; w < CUDA_JOIN_WHY_MAX; w++)
		strbuf__printf(sb, "flamewatch_agent_cuda_records_unjoined_total{why=\"%s\"} %llu\n",
			       cuda_join_why__name(w), (unsigned long long)st->why[w]);
}

/* What looking for libflamewatch-cuda.so costs (src/agent/cuda/cuda_tracker.c). */
static void _cuda_tracker(struct agent_metrics *m, struct strbuf *sb)
{
	struct cuda_tracker_stats st;

	if (collector__cuda_stats(m->collector, &st))
		return;
	strbuf__printf(sb, "# HELP flamewatch_agent_cuda_maps_reads_total /proc/PID/maps files "
		       "read looking for libflamewatch-cuda.so.\n"
		       "# TYPE flamewatch_agent_cuda_maps_reads_total counter\n"
		       "flamewatch_agent_cuda_maps_reads_total %llu\n"
		       "# HELP flamewatch_agent_cuda_full_scans_total Looks at every process for "
		       "libflamewatch-cuda.so.\n"
		       "# TYPE flamewatch_agent_cuda_full_scans_total counter\n"
		       "flamewatch_agent_cuda_full_scans_total %llu\n"
		       "# HELP flamewatch_agent_cuda_lib_watch 1: the dynamic loaders report loads "
		       "of libflamewatch-cuda.so; 0: new processes are polled.\n"
		       "# TYPE flamewatch_agent_cuda_lib_watch gauge\n"
		       "flamewatch_agent_cuda_lib_watch %u\n"
		       "# HELP flamewatch_agent_cuda_loaders Dynamic loader files hooked.\n"
		       "# TYPE flamewatch_agent_cuda_loaders gauge\n"
		       "flamewatch_agent_cuda_loaders %u\n"
		       "# HELP flamewatch_agent_cuda_lib_events_total Loads of libflamewatch-cuda.so "
		       "the loaders reported.\n"
		       "# TYPE flamewatch_agent_cuda_lib_events_total counter\n"
		       "flamewatch_agent_cuda_lib_events_total %llu\n"
		       "# HELP flamewatch_agent_cuda_lib_events_lost_total Loads not reported: the "
		       "ring buffer was full.\n"
		       "# TYPE flamewatch_agent_cuda_lib_events_lost_total counter\n"
		       "flamewatch_agent_cuda_lib_events_lost_total %llu\n",
		       (unsigned long long)st.maps_reads, (unsigned long long)st.full_scans,
		       st.watching, st.loaders, (unsigned long long)st.lib_events,
		       (unsigned long long)st.lib_events_lost);
	strbuf__printf(sb, "# HELP flamewatch_agent_cuda_processes Processes whose "
		       "libflamewatch-cuda.so collects every activity record (all) or, where "
		       "that would cost them more than its limit, duty-cycles them.\n"
		       "# TYPE flamewatch_agent_cuda_processes gauge\n"
		       "flamewatch_agent_cuda_processes{records=\"all\"} %u\n"
		       "flamewatch_agent_cuda_processes{records=\"duty_cycled\"} %u\n"
		       "# HELP flamewatch_agent_cuda_collection_switches_total Changes between "
		       "the two.\n"
		       "# TYPE flamewatch_agent_cuda_collection_switches_total counter\n"
		       "flamewatch_agent_cuda_collection_switches_total %llu\n",
		       st.records_all, st.records_duty_cycled,
		       (unsigned long long)st.collection_switches);
	strbuf__printf(sb, "# HELP flamewatch_agent_cuda_count_scaled_processes Processes whose "
		       "duty-cycled records' weights are scaled by the kernels their GPU's monitors "
		       "counted.\n"
		       "# TYPE flamewatch_agent_cuda_count_scaled_processes gauge\n"
		       "flamewatch_agent_cuda_count_scaled_processes %u\n"
		       "# HELP flamewatch_agent_cuda_count_seconds_total Seconds of a process's "
		       "kernel counts used for its scale, or dropped (not covered by the monitors, "
		       "not duty-cycled throughout, or late).\n"
		       "# TYPE flamewatch_agent_cuda_count_seconds_total counter\n"
		       "flamewatch_agent_cuda_count_seconds_total{result=\"used\"} %llu\n"
		       "flamewatch_agent_cuda_count_seconds_total{result=\"dropped\"} %llu\n"
		       "# HELP flamewatch_agent_cuda_count_scaled_records_total Kernel records whose "
		       "weight the scale changed.\n"
		       "# TYPE flamewatch_agent_cuda_count_scaled_records_total counter\n"
		       "flamewatch_agent_cuda_count_scaled_records_total %llu\n"
		       "# HELP flamewatch_agent_cuda_count_implausible_total Scales out of range, "
		       "not used: the counts were not the process's kernels alone, or records "
		       "were lost.\n"
		       "# TYPE flamewatch_agent_cuda_count_implausible_total counter\n"
		       "flamewatch_agent_cuda_count_implausible_total %llu\n"
		       "# HELP flamewatch_agent_cuda_count_short_processes Processes whose "
		       "duty-cycled records stand for under half the kernels the GPU's monitors "
		       "counted: their GPU time is short.\n"
		       "# TYPE flamewatch_agent_cuda_count_short_processes gauge\n"
		       "flamewatch_agent_cuda_count_short_processes %u\n",
		       st.scale.processes, (unsigned long long)st.scale.seconds_used,
		       (unsigned long long)st.scale.seconds_dropped,
		       (unsigned long long)st.scale.records_scaled,
		       (unsigned long long)st.scale.implausible, st.scale.short_processes);
	_cuda_join(&st.join, sb);
}

/* What the shipper delivered, dropped and holds (src/agent/shipper.c). */
static void _shipper(struct agent_metrics *m, struct strbuf *sb)
{
	struct shipper_stats st;

	if (!m->shipper)
		return;
	shipper__stats(m->shipper, &st);
	strbuf__printf(sb, "# HELP flamewatch_agent_batches_sent_total Batches the server accepted.\n"
		       "# TYPE flamewatch_agent_batches_sent_total counter\n"
		       "flamewatch_agent_batches_sent_total %llu\n"
		       "# HELP flamewatch_agent_samples_sent_total Samples in the batches the server "
		       "accepted.\n"
		       "# TYPE flamewatch_agent_samples_sent_total counter\n"
		       "flamewatch_agent_samples_sent_total %llu\n"
		       "# HELP flamewatch_agent_sent_bytes_total Compressed bytes of the batches sent.\n"
		       "# TYPE flamewatch_agent_sent_bytes_total counter\n"
		       "flamewatch_agent_sent_bytes_total %llu\n"
		       "# HELP flamewatch_agent_batches_dropped_total Batches dropped, oldest first, "
		       "because the buffer (--buffer-mb) was full.\n"
		       "# TYPE flamewatch_agent_batches_dropped_total counter\n"
		       "flamewatch_agent_batches_dropped_total %llu\n"
		       "# HELP flamewatch_agent_batches_rejected_total Batches the server refused "
		       "for good (400, 413, 415) or that could not be encoded.\n"
		       "# TYPE flamewatch_agent_batches_rejected_total counter\n"
		       "flamewatch_agent_batches_rejected_total %llu\n"
		       "# HELP flamewatch_agent_samples_dropped_total Samples of the batches dropped "
		       "or rejected.\n"
		       "# TYPE flamewatch_agent_samples_dropped_total counter\n"
		       "flamewatch_agent_samples_dropped_total %llu\n"
		       "# HELP flamewatch_agent_delivery_failures_total Requests that failed and "
		       "will be tried again.\n"
		       "# TYPE flamewatch_agent_delivery_failures_total counter\n"
		       "flamewatch_agent_delivery_failures_total %llu\n"
		       "# HELP flamewatch_agent_sessions_reset_total Times the server had lost the "
		       "agent's dictionary (it restarted).\n"
		       "# TYPE flamewatch_agent_sessions_reset_total counter\n"
		       "flamewatch_agent_sessions_reset_total %llu\n"
		       "# HELP flamewatch_agent_buffer_batches Batches waiting to be delivered.\n"
		       "# TYPE flamewatch_agent_buffer_batches gauge\n"
		       "flamewatch_agent_buffer_batches %llu\n"
		       "# HELP flamewatch_agent_buffer_samples Samples in the batches waiting.\n"
		       "# TYPE flamewatch_agent_buffer_samples gauge\n"
		       "flamewatch_agent_buffer_samples %llu\n"
		       "# HELP flamewatch_agent_buffer_bytes Memory the batches waiting hold.\n"
		       "# TYPE flamewatch_agent_buffer_bytes gauge\n"
		       "flamewatch_agent_buffer_bytes %llu\n"
		       "# HELP flamewatch_agent_buffer_max_bytes The buffer's cap (--buffer-mb).\n"
		       "# TYPE flamewatch_agent_buffer_max_bytes gauge\n"
		       "flamewatch_agent_buffer_max_bytes %llu\n",
		       (unsigned long long)st.batches_sent, (unsigned long long)st.samples_sent,
		       (unsigned long long)st.bytes_sent, (unsigned long long)st.batches_dropped,
		       (unsigned long long)st.batches_rejected, (unsigned long long)st.samples_dropped,
		       (unsigned long long)st.failures, (unsigned long long)st.sessions_reset,
		       (unsigned long long)st.queued_batches, (unsigned long long)st.queued_samples,
		       (unsigned long long)st.queued_bytes, (unsigned long long)st.max_bytes);
}

/*
 * Off-CPU time: BPF walks the stacks of the blocks it predicts will reach
 * --off-cpu-min. How much blocked time came without its stack says how
 * far the off-CPU flame graph can be trusted; walks of blocks that ended
 * short are what the prediction wasted.
 */
static void _offcpu(const struct agent_metrics *m, struct strbuf *sb)
{
	struct collector_offcpu_stats st;

	if (collector__offcpu_stats(m->collector, &st))
		return;
	strbuf__printf(sb, "# HELP flamewatch_agent_offcpu_blocks_total Blocks of at least "
		       "--off-cpu-min, by whether their stack was walked or not (not_taken: "
		       "charged under \"" CPU_PROFILE_OFFCPU_NO_STACK "\").\n"
		       "# TYPE flamewatch_agent_offcpu_blocks_total counter\n"
		       "flamewatch_agent_offcpu_blocks_total{stack=\"walked\"} %llu\n"
		       "flamewatch_agent_offcpu_blocks_total{stack=\"not_taken\"} %llu\n"
		       "# HELP flamewatch_agent_offcpu_blocked_seconds_total Their blocked time.\n"
		       "# TYPE flamewatch_agent_offcpu_blocked_seconds_total counter\n"
		       "flamewatch_agent_offcpu_blocked_seconds_total{stack=\"walked\"} %.9f\n"
		       "flamewatch_agent_offcpu_blocked_seconds_total{stack=\"not_taken\"} %.9f\n"
		       "# HELP flamewatch_agent_offcpu_wasted_walks_total Stack walks of blocks "
		       "that ended under --off-cpu-min: what predicting long blocks cost for "
		       "nothing.\n"
		       "# TYPE flamewatch_agent_offcpu_wasted_walks_total counter\n"
		       "flamewatch_agent_offcpu_wasted_walks_total %llu\n"
		       "# HELP flamewatch_agent_offcpu_lost_total Blocks not charged: the ring "
		       "buffer was full, no per-thread state could be had, or their times could "
		       "not be read (unseen).\n"
		       "# TYPE flamewatch_agent_offcpu_lost_total counter\n"
		       "flamewatch_agent_offcpu_lost_total{why=\"ring_buffer\"} %llu\n"
		       "flamewatch_agent_offcpu_lost_total{why=\"thread_state\"} %llu\n"
		       "flamewatch_agent_offcpu_lost_total{why=\"unseen\"} %llu\n",
		       (unsigned long long)st.taken, (unsigned long long)st.not_taken,
		       st.taken_ns / 1e9, st.not_taken_ns / 1e9,
		       (unsigned long long)st.walks_short, (unsigned long long)st.lost_ringbuf,
		       (unsigned long long)st.lost_thread, (unsigned long long)st.lost_unseen);
}

static void _reply(struct evhttp_request *req, int code, const char *type, const char *body,
		   size_t len)
{
	struct evbuffer *out = evbuffer_new();

	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", type);
	if (out)
		evbuffer_add(out, body, len);
	evhttp_send_reply(req, code, code == 200 ? "OK" : "Error", out);
	if (out)
		evbuffer_free(out);
}

/*
 * The GPUs' own busy timeline (agent/gpu_busy.h): which devices it runs
 * on, and how many of its spans found their process.
 */
static void _gpu_busy(const struct agent_metrics *m, struct strbuf *sb)
{
	struct gpu_busy_stats st;

	if (!m->busy)
		return;
	gpu_busy__stats(m->busy, &st);
	strbuf__printf(sb, "# HELP flamewatch_agent_gpu_busy_devices GPUs whose busy timeline "
		       "comes from their own performance monitors now (PM sampling).\n"
		       "# TYPE flamewatch_agent_gpu_busy_devices gauge\n"
		       "flamewatch_agent_gpu_busy_devices %llu\n"
		       "# HELP flamewatch_agent_gpu_busy_spans_total Spans of the monitors' timeline, "
		       "by what became of them: busy and coverage went to the process alone on "
		       "the GPU, unowned had none.\n"
		       "# TYPE flamewatch_agent_gpu_busy_spans_total counter\n"
		       "flamewatch_agent_gpu_busy_spans_total{to=\"busy\"} %llu\n"
		       "flamewatch_agent_gpu_busy_spans_total{to=\"coverage\"} %llu\n"
		       "flamewatch_agent_gpu_busy_spans_total{to=\"unowned\"} %llu\n"
		       "# HELP flamewatch_agent_gpu_busy_starts_total Starts of the gpu-busy child.\n"
		       "# TYPE flamewatch_agent_gpu_busy_starts_total counter\n"
		       "flamewatch_agent_gpu_busy_starts_total %llu\n"
		       "# HELP flamewatch_agent_gpu_busy_yielding 1 while the monitors are left to "
		       "DCGM's host engine (--gpu-busy auto).\n"
		       "# TYPE flamewatch_agent_gpu_busy_yielding gauge\n"
		       "flamewatch_agent_gpu_busy_yielding %llu\n"
		       "# HELP flamewatch_agent_gpu_busy_parked 1 while no GPU's sole process needs "
		       "the monitors: every record of it collected, or none alone (--gpu-busy auto).\n"
		       "# TYPE flamewatch_agent_gpu_busy_parked gauge\n"
		       "flamewatch_agent_gpu_busy_parked %llu\n"
		       "# HELP flamewatch_agent_gpu_busy_dispatches_total Kernels the GPUs dispatched, "
		       "as their monitors count them (0 where the chip does not).\n"
		       "# TYPE flamewatch_agent_gpu_busy_dispatches_total counter\n"
		       "flamewatch_agent_gpu_busy_dispatches_total %llu\n"
		       "# HELP flamewatch_agent_gpu_busy_decode_cpu_seconds_total CPU time of the "
		       "gpu-busy child decoding the monitors' samples.\n"
		       "# TYPE flamewatch_agent_gpu_busy_decode_cpu_seconds_total counter\n"
		       "flamewatch_agent_gpu_busy_decode_cpu_seconds_total %.6f\n",
		       (unsigned long long)st.devices, (unsigned long long)st.busy_spans,
		       (unsigned long long)st.cover_spans, (unsigned long long)st.unowned_spans,
		       (unsigned long long)st.starts, (unsigned long long)st.yielding,
		       (unsigned long long)st.parked, (unsigned long long)st.dispatches, (double)st.decode_cpu_ns / 1e9);
}

static void _on_request(struct evhttp_request *req, void *arg)
{
	struct agent_metrics *m = arg;
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	struct strbuf sb = STRBUF_INIT;
	struct nvml_stats st;

	if (!path || strcmp(path, "/metrics")) {
		_reply(req, 404, "text/plain", "only /metrics here\n", 19);
		return;
	}
	_cuda_tracker(m, &sb);
	_shipper(m, &sb);
	_gpu_busy(m, &sb);
	_offcpu(m, &sb);
	gpu_poller__stats(m->gpu, &st);
	strbuf__printf(&sb, "# HELP flamewatch_agent_gpu_rounds_total NVML collection rounds.\n"
		       "# TYPE flamewatch_agent_gpu_rounds_total counter\n"
		       "flamewatch_agent_gpu_rounds_total %llu\n"
		       "# HELP flamewatch_agent_gpu_round_cpu_seconds_total CPU time spent in NVML rounds.\n"
		       "# TYPE flamewatch_agent_gpu_round_cpu_seconds_total counter\n"
		       "flamewatch_agent_gpu_round_cpu_seconds_total %.9f\n"
		       "# HELP flamewatch_agent_gpu_round_wall_seconds_total Elapsed time of NVML rounds.\n"
		       "# TYPE flamewatch_agent_gpu_round_wall_seconds_total counter\n"
		       "flamewatch_agent_gpu_round_wall_seconds_total %.9f\n"
		       "# HELP flamewatch_agent_gpu_round_max_wall_seconds The longest NVML round.\n"
		       "# TYPE flamewatch_agent_gpu_round_max_wall_seconds gauge\n"
		       "flamewatch_agent_gpu_round_max_wall_seconds %.9f\n"
		       "# HELP flamewatch_agent_gpu_round_max_cpu_seconds CPU time of the costliest NVML round.\n"
		       "# TYPE flamewatch_agent_gpu_round_max_cpu_seconds gauge\n"
		       "flamewatch_agent_gpu_round_max_cpu_seconds %.9f\n"
		       "# HELP flamewatch_agent_gpu_nvml_calls_total NVML queries made in rounds.\n"
		       "# TYPE flamewatch_agent_gpu_nvml_calls_total counter\n"
		       "flamewatch_agent_gpu_nvml_calls_total %llu\n"
		       "# HELP flamewatch_agent_gpus GPUs NVML reports.\n"
		       "# TYPE flamewatch_agent_gpus gauge\n"
		       "flamewatch_agent_gpus %u\n",
		       (unsigned long long)st.rounds, st.cpu_ns / 1e9, st.wall_ns / 1e9,
		       st.max_wall_ns / 1e9, st.max_cpu_ns / 1e9, (unsigned long long)st.calls, gpu_poller__ngpus(m->gpu));
	prom_points__write(m->points, &sb, gpu_metric__help, gpu_metric__type);
	if (sb.oom)
		_reply(req, 500, "text/plain", "out of memory\n", 14);
	else
		_reply(req, 200, "text/plain; version=0.0.4", sb.buf, sb.len);
	strbuf__release(&sb);
}

struct agent_metrics *agent_metrics__start(struct event_base *base, const char *listen,
					   const char *node, uint64_t gpu_interval_ns,
					   uint64_t gpu_process_interval_ns, struct gpu_poller *gpu)
{
	struct agent_metrics *m = calloc(1, sizeof(*m));
	char host[256];
	uint16_t port;

	if (!m)
		return NULL;
	m->node = node;
	m->gpu = gpu;
	/*
	 * A process that left the GPU stops showing after three rounds (at
	 * least 5 s) past the time its utilisation is asked again: until then
	 * its last sample is its current value.
	 */
	m->max_age_ns = 3 * (int64_t)gpu_interval_ns;
	if (m->max_age_ns < 5000000000LL)
		m->max_age_ns = 5000000000LL;
	m->max_age_ns += (int64_t)gpu_process_interval_ns;
	if (hostport__parse(listen, host, sizeof(host), &port)) {
		fprintf(stderr, "flamewatch: error: --metrics-listen: '%s' is not HOST:PORT\n", listen);
		goto err;
	}
	m->points = prom_points__new();
	m->http = evhttp_new(base);
	if (!m->points || !m->http)
		goto err;
	if (evhttp_bind_socket(m->http, host, port)) {
		fprintf(stderr, "flamewatch: error: --metrics-listen: cannot listen on %s: %s\n",
			listen, strerror(errno));
		goto err;
	}
	evhttp_set_allowed_methods(m->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_gencb(m->http, _on_request, m);
	pr_info("agent metrics on http://%s/metrics\n", listen);
	return m;
err:
	agent_metrics__free(m);
	return NULL;
}

void agent_metrics__set_collector(struct agent_metrics *m, struct collector *c)
{
	if (m)
		m->collector = c;
}

void agent_metrics__set_shipper(struct agent_metrics *m, struct shipper *s)
{
	if (m)
		m->shipper = s;
}

void agent_metrics__set_gpu_busy(struct agent_metrics *m, struct gpu_busy *g)
{
	if (m)
		m->busy = g;
}

void agent_metrics__free(struct agent_metrics *m)
{
	if (!m)
		return;
	if (m->http)
		evhttp_free(m->http);
	prom_points__free(m->points);
	free(m);
}

void agent_metrics__round(struct agent_metrics *m, const struct batch *b, uint32_t first)
{
	const char *names[66], *values[66];
	struct timespec now;
	int64_t newest = 0;

	if (!m)
		return;
	for (uint32_t i = first; i < b->nmetrics; i++) {
		const struct batch_metric *bm = &b->metrics[i];
		const struct batch_label *l;
		size_t n, k = 0;

		l = batch__series(b, bm->series, &n);
		for (size_t j = 0; j < n && k < 64; j++) {
			names[k] = profile__string(b->dict, l[j].name);
			values[k++] = profile__string(b->dict, l[j].value);
		}
		names[k] = "node";
		values[k++] = m->node;
		if (prom_points__put(m->points, profile__string(b->dict, bm->name), names, values,
				     k, NULL, bm->ts_ns, bm->value))
			pr_debug("agent metrics: out of memory\n");
		if (bm->ts_ns > newest)
			newest = bm->ts_ns;
	}
	clock_gettime(CLOCK_REALTIME, &now);
	prom_points__expire(m->points, (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec -
				       m->max_age_ns);
}
