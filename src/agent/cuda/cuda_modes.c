// SPDX-License-Identifier: Apache-2.0
/* How each process's library collects its records (see cuda_modes.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "agent/cuda/cuda_modes.h"
#include "common/log.h"

/* Beyond this many processes the news of new ones is dropped: the library
 * sends it again every few seconds, and a GPU node runs a handful. */
#define MODES_MAX 4096

static struct cuda_mode *_find(const struct cuda_modes *ms, uint32_t pid)
{
	for (uint32_t i = 0; i < ms->n; i++)
		if (ms->m[i].pid == pid)
			return &ms->m[i];
	return NULL;
}

static void _log(const struct cuda_mode *m)
{
	char cost[96];

	if (m->cost_ppm == UINT64_MAX)
		snprintf(cost, sizeof(cost), "their cost not measured yet");
	else
		snprintf(cost, sizeof(cost), "every record would cost %.2f %% of its time (%" PRIu64
			 " ns each)", (double)m->cost_ppm / 1e4, m->cost_ns);
	if (m->all)
		pr_info("pid %u: GPU records: every one collected: %s, limit %.2f %%\n", m->pid,
			cost, (double)m->max_ppm / 1e4);
	else if (m->by_rate)
		pr_info("pid %u: GPU records: duty-cycled, GPU time estimated and the busy timeline "
			"from the GPU's monitors: %" PRIu64 " launches a second, over the library's "
			"ceiling (%s)\n", m->pid, m->rate, cost);
	else
		pr_info("pid %u: GPU records: duty-cycled, GPU time estimated and the busy timeline "
			"from the GPU's monitors: %s, over the limit of %.2f %%\n", m->pid, cost,
			(double)m->max_ppm / 1e4);
}

void cuda_modes__update(struct cuda_modes *ms, uint32_t pid, const struct fw_cuda_record *r)
{
	struct cuda_mode *m = _find(ms, pid);
	bool all = r->weight != 0, news;

	if (!m) {
		if (ms->n == ms->cap) {
			uint32_t cap = ms->cap ? ms->cap * 2 : 8;
			struct cuda_mode *n;

			if (cap > MODES_MAX || !(n = realloc(ms->m, cap * sizeof(*n))))
				return;
			ms->m = n;
			ms->cap = cap;
		}
		m = &ms->m[ms->n++];
		m->pid = pid;
		news = true;
	} else {
		news = m->all != all;
		if (news)
			ms->switches++;
	}
	m->all = all;
	m->cost_ppm = r->bytes;
	m->cost_ns = r->correlation;
	m->max_ppm = r->stream;
	m->by_rate = r->device == FW_CUDA_BY_RATE;
	m->rate = r->name_addr;
	if (news)
		_log(m);
}

bool cuda_modes__duty_cycled(const struct cuda_modes *ms, uint32_t pid)
{
	const struct cuda_mode *m = _find(ms, pid);

	return m && !m->all;
}

bool cuda_modes__complete(const struct cuda_modes *ms, uint32_t pid)
{
	const struct cuda_mode *m = _find(ms, pid);

	return m && m->all;
}

void cuda_modes__forget(struct cuda_modes *ms, uint32_t pid)
{
	struct cuda_mode *m = _find(ms, pid);

	if (m)
		*m = ms->m[--ms->n];
}

void cuda_modes__count(const struct cuda_modes *ms, uint32_t *all, uint32_t *duty_cycled)
{
	*all = *duty_cycled = 0;
	for (uint32_t i = 0; i < ms->n; i++)
		(ms->m[i].all ? all : duty_cycled)[0]++;
}

void cuda_modes__free(struct cuda_modes *ms)
{
	free(ms->m);
	*ms = (struct cuda_modes){ 0 };
}
