// SPDX-License-Identifier: Apache-2.0
/* Busy runs and covered ranges from one decode's samples (see pm_spans.h). */
#include <string.h>

#include "gpu/pm_spans.h"

void pm_spans__begin(struct pm_spans *s, const struct pm_busy_sink *sink, int dev, int64_t offset_ns,
		     uint64_t gap_ns)
{
	memset(s, 0, sizeof(*s));
	s->sink = sink;
	s->dev = dev;
	s->offset_ns = offset_ns;
	s->gap_ns = gap_ns;
	s->counted = 1;
}

/* A timestamp that would fall before 1970 after the shift is not emitted. */
static int _unix(const struct pm_spans *s, uint64_t t, uint64_t *out)
{
	int64_t u = (int64_t)t + s->offset_ns;

	if ((int64_t)t < 0 || u <= 0)
		return -1;
	*out = (uint64_t)u;
	return 0;
}

static void _emit_busy(struct pm_spans *s)
{
	uint64_t a, b, idle;

	if (!s->busy_open)
		return;
	s->busy_open = 0;
	idle = s->busy_idle > 0 ? (uint64_t)(s->busy_idle + 0.5) : 0;
	if (idle > s->busy_end - s->busy_start)
		idle = s->busy_end - s->busy_start;
	if (s->sink && s->sink->busy && !_unix(s, s->busy_start, &a) && !_unix(s, s->busy_end, &b))
		s->sink->busy(s->sink->ctx, s->dev, a, b, idle);
}

void pm_spans__add(struct pm_spans *s, uint64_t start, uint64_t end, int busy, double fraction,
		   double dispatches)
{
	int hole;

	if (end <= start || (s->have_last && start < s->last_start)) {
		s->lossy = 1;
		return;
	}
	hole = s->have_last && start > s->last_end + s->gap_ns;
	if (hole)
		_emit_busy(s);
	if (!s->have_last || hole) {
		if (s->ncov == PM_SPANS_MAX_COVERED) {
			s->lossy = 1;
		} else {
			s->cov[s->ncov][0] = start;
			s->cov[s->ncov][1] = end;
			s->cov_dispatches[s->ncov] = 0;
			s->ncov++;
		}
	}
	if (end > s->cov[s->ncov - 1][1])
		s->cov[s->ncov - 1][1] = end;
	if (dispatches >= 0 && dispatches < 1e12)
		s->cov_dispatches[s->ncov - 1] += dispatches;
	else
		s->counted = 0;
	if (busy) {
		if (!s->busy_open) {
			s->busy_open = 1;
			s->busy_start = start;
			s->busy_end = end;
			s->busy_idle = 0;
		}
		if (end > s->busy_end)
			s->busy_end = end;
		/* NaN and out-of-range fractions (a counter's glitch) count as busy throughout. */
		if (fraction >= 0 && fraction < 1)
			s->busy_idle += (1 - fraction) * (double)(end - start);
	} else {
		_emit_busy(s);
	}
	s->have_last = 1;
	s->last_start = start;
	if (end > s->last_end)
		s->last_end = end;
}

void pm_spans__set_lossy(struct pm_spans *s)
{
	s->lossy = 1;
}

void pm_spans__end(struct pm_spans *s)
{
	_emit_busy(s);
	if (s->lossy || !s->sink || !s->sink->covered)
		return;
	for (unsigned i = 0; i < s->ncov; i++) {
		uint64_t a, b;

		if (!_unix(s, s->cov[i][0], &a) && !_unix(s, s->cov[i][1], &b))
			s->sink->covered(s->sink->ctx, s->dev, a, b,
					 s->counted ? (uint64_t)(s->cov_dispatches[i] + 0.5) :
						      PM_NO_DISPATCHES);
	}
}
