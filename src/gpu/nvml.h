/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_GPU_NVML_H
#define FW_GPU_NVML_H

#include <stddef.h>
#include <stdint.h>

/*
 * GPU hardware metrics from NVML, dlopen'd at run time so that the agent
 * runs (without GPU metrics) where the driver is absent.
 *
 * Each nvml__collect() call is one round: per GPU (labels gpu = index,
 * uuid, name) and per process on it (plus pid, comm, and container/pod when
 * its cgroup names them) the metrics below, as batch_metric points. A
 * symbol the library lacks, or a query answering NOT_SUPPORTED (or
 * NO_PERMISSION), makes that metric unavailable for that GPU: logged once,
 * then never asked again and never exported (not even as 0). Other
 * failures (GPU lost, a transient error) skip the point of that round only.
 *
 * PIDs are NVML's, which are the host's: the agent must run in the host
 * pid namespace (DaemonSet hostPID: true) for comm and cgroup lookups.
 */

#include "format/gpu_metrics.h"

struct nvml;
struct batch;

/*
 * Loads lib (NULL: "libnvidia-ml.so.1", found the dynamic loader's way, so
 * LD_LIBRARY_PATH applies), initialises NVML and looks at every GPU.
 * Returns NULL with errno set when there is no library (ENOENT; one info
 * line logged) or NVML does not initialise (EIO; one warning).
 */
struct nvml *nvml__open(const char *lib);
/*
 * How far apart the rounds will be (default 1 s; 0: back to back). Below a
 * second, utilisation comes from nvmlDeviceGetSamples (every driver sample,
 * each at its own time) instead of nvmlDeviceGetUtilizationRates, and both
 * it and the per-process queries are made about once a second (every
 * round when back to back), not every round.
 */
void nvml__set_interval(struct nvml *n, uint64_t interval_ns);
/*
 * How often the two costly queries are made (0: every round): the PCIe
 * byte counters (default NVML_PCIE_INTERVAL_NS; sooner where the driver's
 * counters are 32 bits, the sooner the faster they move, so that they
 * cannot wrap twice between reads at 4x the last rate), whose
 * rates cover the whole time since the last read and are exported every
 * round, and the per-process utilisation (default NVML_PROCESS_INTERVAL_NS;
 * the driver keeps only each process's latest sample).
 */
#define NVML_PCIE_INTERVAL_NS (5 * 1000000000ULL)
#define NVML_PROCESS_INTERVAL_NS (1 * 1000000000ULL)
void nvml__set_costly_intervals(struct nvml *n, uint64_t pcie_ns, uint64_t process_ns);
/*
 * Whether per-process utilisation always comes from the driver's
 * per-process query (1), or (0, the default) from the GPU's utilisation
 * while the GPU's running-process lists name one process only: the same
 * figure without the query's cost (nvml.c explains).
 */
void nvml__set_process_query_always(struct nvml *n, int always);
/*
 * Who runs on each GPU, from the running-process lists of the last round
 * that read them: for the busy timeline of the GPU's hardware monitors,
 * which is the GPU's, and a process's only while it is alone on it.
 */
struct nvml_occupant {
	char uuid[96];			/* "GPU-..." as NVML names it; "" unknown */
	unsigned int index;		/* NVML's index */
	unsigned int sole_pid;		/* the one process on it; 0: none, several or unknown */
	int64_t lists_ns;		/* Unix time the lists were read; 0: never */
};

/* Fills out[] for up to max GPUs; returns how many. */
size_t nvml__occupants(const struct nvml *n, struct nvml_occupant *out, size_t max);
/* Shuts NVML down and unloads it. Accepts NULL. */
void nvml__close(struct nvml *n);
unsigned int nvml__ngpus(const struct nvml *n);
/* Is metric m available on GPU i (as far as known so far)? */
int nvml__available(const struct nvml *n, unsigned int gpu, enum nvml_metric m);

/*
 * One round: appends this round's points to b (its dict interns the names
 * and labels). now_ns is the Unix time of the round: the timestamp of
 * every point except sampled ones (utilisation from nvmlDeviceGetSamples,
 * per-process utilisation), which carry the driver's own sample times, and
 * the clock by which the values that hardly change (maximum clocks, power
 * limit, slowdown temperature, MIG mode) are asked again every 60 s; they
 * are exported every round. PCIe rates come from the driver's byte
 * counters, so the first round has none (the second has).
 * Returns the number of points added or -ENOMEM (b keeps what was added).
 */
int nvml__collect(struct nvml *n, struct batch *b, int64_t now_ns);

struct nvml_stats {
	uint64_t rounds;
	uint64_t calls;		/* NVML queries made in rounds */
	uint64_t points;
	uint64_t cpu_ns;	/* thread CPU time spent in rounds */
	uint64_t max_cpu_ns;	/* the costliest round */
	uint64_t wall_ns;	/* elapsed time in rounds (some NVML queries sleep) */
	uint64_t max_wall_ns;	/* the longest round */
	uint64_t sole_process_reads;	/* per-process reads that were the GPU's (one process) */
};
void nvml__stats(const struct nvml *n, struct nvml_stats *out);

/* The NVML queries a round may make, for the cost breakdown. */
enum nvml_query {
	NVML_Q_UTILIZATION,
	NVML_Q_SAMPLES,
	NVML_Q_MEMORY,
	NVML_Q_CLOCK,
	NVML_Q_MAX_CLOCK,
	NVML_Q_POWER,
	NVML_Q_POWER_LIMIT,
	NVML_Q_TEMPERATURE,
	NVML_Q_TEMPERATURE_THRESHOLD,
	NVML_Q_PCIE_THROUGHPUT,
	NVML_Q_FIELD_VALUES,
	NVML_Q_CLOCK_REASONS,
	NVML_Q_ENERGY,
	NVML_Q_MIG_MODE,
	NVML_Q_PROCESS_UTILIZATION,
	NVML_Q_RUNNING_PROCESSES,
	NVML_Q_MAX,
};

/*
 * Thread CPU time around every query from now on (two clock reads per
 * query: for `flamewatch gpu --breakdown`, not for the agent).
 */
void nvml__set_profile(struct nvml *n, int on);
/*
 * Query q's name (NVML's function), calls and CPU time so far (cpu_ns is 0
 * unless profiling). Returns the name, NULL when q is out of range.
 */
const char *nvml__query_cost(const struct nvml *n, enum nvml_query q, uint64_t *calls,
			     uint64_t *cpu_ns);

#endif
