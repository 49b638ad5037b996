/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How each process's libflamewatch-cuda.so collects its activity records
 * (FW_CUDA_COLLECTION, cuda/probes.h): every record while they cost the
 * process little, else duty-cycled. The agent logs each change with the
 * cost the library measured, and counts processes by mode for /metrics.
 */
#ifndef FW_AGENT_CUDA_MODES_H
#define FW_AGENT_CUDA_MODES_H

#include <stdbool.h>
#include <stdint.h>

#include "cuda/probes.h"

struct cuda_mode {
	uint32_t pid;
	bool all;		/* every record; else duty-cycled */
	uint64_t cost_ppm;	/* every record's cost, millionths of the process's time; UINT64_MAX: unknown */
	uint64_t cost_ns;	/* per record; 0: unknown */
	uint32_t max_ppm;	/* the library's limit */
	bool by_rate;		/* duty-cycled for the launch rate, not the cost */
	uint64_t rate;		/* launches a second */
};

struct cuda_modes {
	struct cuda_mode *m;
	uint32_t n, cap;
	uint64_t switches;	/* changes of mode seen */
};

/* r: a FW_CUDA_COLLECTION record of pid. Logs a change (or the first news). */
void cuda_modes__update(struct cuda_modes *ms, uint32_t pid, const struct fw_cuda_record *r);
void cuda_modes__forget(struct cuda_modes *ms, uint32_t pid);
/* Whether pid's library said it duty-cycles its records (false: unknown or every one). */
bool cuda_modes__duty_cycled(const struct cuda_modes *ms, uint32_t pid);
/* Whether pid's library said it collects every record (false: unknown or duty-cycled). */
bool cuda_modes__complete(const struct cuda_modes *ms, uint32_t pid);
void cuda_modes__count(const struct cuda_modes *ms, uint32_t *all, uint32_t *duty_cycled);
void cuda_modes__free(struct cuda_modes *ms);

#endif
