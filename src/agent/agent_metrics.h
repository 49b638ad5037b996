/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_AGENT_AGENT_METRICS_H
#define FW_AGENT_AGENT_METRICS_H

#include <stdint.h>

/*
 * `flamewatch agent --metrics-listen ADDR`: /metrics on the agent itself,
 * the newest value of each GPU metric (as the server shows them, with the
 * node label), the collector's own cost and the shipper's counters. Fed
 * after every GPU round.
 */
struct agent_metrics;
struct batch;
struct collector;
struct event_base;
struct gpu_busy;
struct gpu_poller;
struct shipper;

/* Prints the reason and returns NULL on failure. Borrows node (kept) and gpu (may be NULL). */
struct agent_metrics *agent_metrics__start(struct event_base *base, const char *listen,
					   const char *node, uint64_t gpu_interval_ns,
					   uint64_t gpu_process_interval_ns, struct gpu_poller *gpu);
void agent_metrics__free(struct agent_metrics *m);
/* Takes the points b->metrics[first..] of the round just done. */
void agent_metrics__round(struct agent_metrics *m, const struct batch *b, uint32_t first);
/*
 * Exports too what finding libflamewatch-cuda.so costs c (cuda_tracker.h).
 * Borrows c, which must outlive m. Accepts a NULL m.
 */
void agent_metrics__set_collector(struct agent_metrics *m, struct collector *c);
/*
 * Exports too what s delivered, dropped and holds (shipper.h). Borrows s,
 * which must outlive m. Accepts a NULL m.
 */
void agent_metrics__set_shipper(struct agent_metrics *m, struct shipper *s);
/* Exports too the GPUs' busy timeline (gpu_busy.h); g may be NULL. Borrowed. */
void agent_metrics__set_gpu_busy(struct agent_metrics *m, struct gpu_busy *g);

#endif
