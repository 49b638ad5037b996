/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_GPU_POLLER_H
#define FW_GPU_POLLER_H

#include <stdint.h>

/*
 * NVML rounds on a thread of their own. No query of a round sleeps where
 * the driver has the PCIe byte counters, but with older drivers PCIe
 * throughput is measured over 20 ms, twice per GPU
 * per round: 40 ms per GPU, which on an 8-GPU node would stall the agent's
 * 100 ms event loop for a third of a second every round. The thread fills
 * a staging batch; the event loop moves its points into the batch being
 * filled with gpu_poller__drain().
 */
struct gpu_poller;
struct batch;
struct nvml_stats;
struct nvml_occupant;

/*
 * Opens NVML (lib as for nvml__open), tells it the interval
 * (nvml__set_interval, nvml__set_costly_intervals,
 * nvml__set_process_query_always) and starts the thread; NULL (errno set)
 * without NVML.
 */
struct gpu_poller *gpu_poller__start(const char *lib, uint64_t interval_ns, uint64_t pcie_ns,
				     uint64_t process_ns, int process_query_always);
/* Stops and joins the thread, closes NVML. Accepts NULL. */
void gpu_poller__free(struct gpu_poller *p);
/*
 * Appends the points of the rounds done since the last call to b (names
 * and labels interned in b's dictionary). Returns the number added, or
 * -ENOMEM (the points not moved stay staged).
 */
int gpu_poller__drain(struct gpu_poller *p, struct batch *b);
void gpu_poller__stats(struct gpu_poller *p, struct nvml_stats *out);
unsigned int gpu_poller__ngpus(const struct gpu_poller *p);
/* nvml__occupants() as of the thread's last round (under its lock). */
size_t gpu_poller__occupants(struct gpu_poller *p, struct nvml_occupant *out, size_t max);

#endif
