// SPDX-License-Identifier: Apache-2.0
/* CUPTI activity records -> struct fw_cuda_record batches (see fwc.h). */
#include <string.h>

#include <cupti_activity.h>

#include "cuda/fwc.h"

static uint32_t _copy_kind(uint8_t k)
{
	switch (k) {
	case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
		return FW_CUDA_MEMCPY_HTOD;
	case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
		return FW_CUDA_MEMCPY_DTOH;
	case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
	case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
		return FW_CUDA_MEMCPY_DTOD;
	default:
		return FW_CUDA_MEMCPY_OTHER;
	}
}

void fwc_batch_flush(struct fwc_batch *b)
{
	if (b->n && b->emit)
		b->emit(b->recs, b->n, b->ctx);
	b->n = 0;
}

static int64_t _unix(uint64_t t, int64_t offset_ns)
{
	return (int64_t)t + offset_ns;
}

/* dur x scale / FWC_SCALE_ONE, in 128 bits: a long kernel at a large
 * scale (D up to 1000 is 2^26 here) would overflow 64. */
static uint64_t _scaled(uint64_t dur, uint64_t scale)
{
	unsigned __int128 v = (unsigned __int128)dur * scale / FWC_SCALE_ONE;

	return v > UINT64_MAX ? UINT64_MAX : (uint64_t)v;
}

/*
 * The weight of a kept record of duration dur: itself (x the scale) plus
 * what its carry holds, as a whole number of durations; the rest stays.
 */
static uint32_t _weight_with_carry(struct fwc_carry *c, uint64_t dur, uint64_t scale,
				   uint32_t launch_weight)
{
	uint64_t want, w;

	if (!dur)
		return launch_weight;	/* nothing to carry into */
	want = _scaled(dur, scale) + c->ns;
	w = want / dur;
	if (w > UINT32_MAX)
		w = UINT32_MAX;
	c->ns = want - w * dur;
	return (uint32_t)w;
}

static void _carry_add(struct fwc_carry *c, const struct fw_cuda_record *r, uint64_t start,
		       uint64_t end, uint64_t scale)
{
	c->ns += _scaled(end - start, scale);
	c->start = start;
	c->end = end;
	c->bytes = r->bytes;
	c->device = r->device;
	c->stream = r->stream;
	c->has_last = 1;
}

static void _append(struct fwc_batch *b, const struct fw_cuda_record *r, struct fwc_stats *st)
{
	st->kept++;
	st->weighted_ns[r->kind] += (r->end_ns - r->start_ns) * (uint64_t)r->weight;
	st->weighted_count[r->kind] += r->weight;
	b->recs[b->n++] = *r;
	if (b->n == FW_CUDA_MAX_BATCH)
		fwc_batch_flush(b);
}

/* A record of the busy timeline: no GPU time of its own, not counted as kept. */
static void _append_timeline(struct fwc_batch *b, uint32_t kind, uint32_t device, int64_t start,
			     int64_t end, uint64_t gap, uint64_t idle)
{
	struct fw_cuda_record *r = &b->recs[b->n++];

	memset(r, 0, sizeof(*r));
	r->kind = kind;
	r->device = device;
	r->start_ns = (uint64_t)start;
	r->end_ns = (uint64_t)end;
	r->bytes = gap;
	r->correlation = idle;
	if (b->n == FW_CUDA_MAX_BATCH)
		fwc_batch_flush(b);
}

static void _busy_close(struct fwc_batch *b, uint32_t dev, int64_t offset_ns, struct fwc_stats *st)
{
	struct fwc_busy *u = &b->busy[dev];
	uint64_t gap = u->gap ? u->gap : FWC_BUSY_GAP_MIN_NS;

	if (!u->end)
		return;
	_append_timeline(b, FW_CUDA_BUSY, dev, _unix(u->start, offset_ns), _unix(u->end, offset_ns),
			 gap, u->idle < u->end - u->start ? u->idle : u->end - u->start);
	st->busy_spans++;
	u->end = 0;
	/*
	 * Too many spans in this period: merge wider at once; a quiet period:
	 * narrower again. Periods of a tenth of a second, so that a burst of
	 * tiny kernels is merged within one rather than after a second of spans.
	 */
	if (u->start - u->period >= FWC_BUSY_PERIOD_NS) {
		if (u->spans < FWC_BUSY_PERIOD_SPANS / 4 && gap > FWC_BUSY_GAP_MIN_NS)
			u->gap = gap / 2;
		u->period = u->start;
		u->spans = 0;
	}
	if (++u->spans > FWC_BUSY_PERIOD_SPANS && gap < FWC_BUSY_GAP_MAX_NS) {
		u->gap = gap * 2;
		u->spans = 0;
	}
}

/* A gap [a, b) merged into the open span: idle time inside it. */
static void _busy_gap(struct fwc_busy *u, uint64_t a, uint64_t b)
{
	u->idle += b - a;
	u->gaps[u->next_gap][0] = a;
	u->gaps[u->next_gap][1] = b;
	u->next_gap = (u->next_gap + 1) % FWC_BUSY_GAPS;
}

/*
 * A record inside the open span (another stream's, late): what it covers
 * of a recent gap was not idle after all. Of a gap it splits, the part
 * after it is no longer tracked and stays counted.
 */
static void _busy_fill(struct fwc_busy *u, uint64_t start, uint64_t end)
{
	for (int i = 0; i < FWC_BUSY_GAPS; i++) {
		uint64_t *g = u->gaps[i];
		uint64_t a = start > g[0] ? start : g[0];
		uint64_t b = end < g[1] ? end : g[1];

		if (b <= a)
			continue;
		u->idle -= b - a;
		if (start <= g[0])
			g[0] = b;
		else
			g[1] = a;
	}
}

/* Adds a kernel's [start, end) to its device's open span, or closes that and opens one. */
static void _busy_add(struct fwc_batch *b, uint32_t dev, uint64_t start, uint64_t end,
		      int64_t offset_ns, struct fwc_stats *st)
{
	struct fwc_busy *u;
	uint64_t gap;

	if (dev >= FWC_BUSY_DEVICES) {
		st->busy_untracked++;
		return;
	}
	u = &b->busy[dev];
	gap = u->gap ? u->gap : FWC_BUSY_GAP_MIN_NS;
	/* Records of several streams come a little out of order: overlap merges either way. */
	if (u->end && start <= u->end + gap && end + gap >= u->start) {
		if (start > u->end)
			_busy_gap(u, u->end, start);
		else if (end < u->start)
			_busy_gap(u, end, u->start);
		else if (start < u->end && end > u->start)
			_busy_fill(u, start, end);	/* not for one right after the last */
		if (start < u->start)
			u->start = start;
		if (end > u->end)
			u->end = end;
		return;
	}
	_busy_close(b, dev, offset_ns, st);
	memset(u->gaps, 0, sizeof(u->gaps));
	u->start = start;
	u->end = end;
	u->idle = 0;
}

void fwc_busy_flush(struct fwc_batch *b, int64_t offset_ns, struct fwc_stats *st)
{
	for (uint32_t d = 0; d < FWC_BUSY_DEVICES; d++)
		_busy_close(b, d, offset_ns, st);
}

void fwc_coverage_add(struct fwc_batch *b, int64_t start_ns, int64_t end_ns)
{
	if (end_ns > start_ns)
		_append_timeline(b, FW_CUDA_COVERAGE, 0, start_ns, end_ns, 0, 0);
}

void fwc_collection_add(struct fwc_batch *b, int64_t now_ns, int all, int64_t cost_ppm,
			int64_t cost_ns, uint32_t max_ppm, int by_rate, uint64_t rate)
{
	struct fw_cuda_record *r = &b->recs[b->n++];

	memset(r, 0, sizeof(*r));
	r->kind = FW_CUDA_COLLECTION;
	r->start_ns = r->end_ns = (uint64_t)now_ns;
	r->bytes = cost_ppm < 0 ? UINT64_MAX : (uint64_t)cost_ppm;
	r->correlation = cost_ns < 0 ? 0 : (uint64_t)cost_ns;
	r->weight = !!all;
	r->stream = max_ppm;
	r->device = by_rate ? FW_CUDA_BY_RATE : FW_CUDA_BY_COST;
	r->name_addr = rate;
	if (b->n == FW_CUDA_MAX_BATCH)
		fwc_batch_flush(b);
}

int fwc_record_start(const void *cupti_record, int64_t offset_ns, uint32_t *corr, int64_t *start_ns)
{
	const CUpti_Activity *a = cupti_record;
	uint64_t start;

	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		*corr = ((const CUpti_ActivityKernel10 *)a)->correlationId;
		start = ((const CUpti_ActivityKernel10 *)a)->start;
		break;
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		*corr = ((const CUpti_ActivityMemcpy6 *)a)->correlationId;
		start = ((const CUpti_ActivityMemcpy6 *)a)->start;
		break;
	case CUPTI_ACTIVITY_KIND_MEMCPY2:
		*corr = ((const CUpti_ActivityMemcpyPtoP4 *)a)->correlationId;
		start = ((const CUpti_ActivityMemcpyPtoP4 *)a)->start;
		break;
	case CUPTI_ACTIVITY_KIND_MEMSET:
		*corr = ((const CUpti_ActivityMemset4 *)a)->correlationId;
		start = ((const CUpti_ActivityMemset4 *)a)->start;
		break;
	default:
		return 0;
	}
	if (!start)
		return 0;
	*start_ns = _unix(start, offset_ns);
	return 1;
}

/* Looks corr up; 1 if the launch was seen in a window (kept or not). */
static int _find(struct fwc_weights *w, uint32_t corr, uint32_t *canonical, uint32_t *weight)
{
	return corr && fwc_weights_find(w, corr, canonical, weight);
}

void fwc_record_add(const void *cupti_record, struct fwc_weights *w, struct fwc_names *names,
		    int64_t offset_ns, struct fwc_batch *b, struct fwc_stats *st)
{
	const CUpti_Activity *a = cupti_record;
	enum fwc_class cls = FWC_KERNEL;
	uint64_t scale;
	uint32_t weight = 0, canonical = 0;
	const char *name = NULL, *cupti_name = NULL;
	struct fwc_carry *carry;
	struct fw_cuda_record r;
	uint64_t start, end;
	int seen = 0;

	st->records++;
	memset(&r, 0, sizeof(r));
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = cupti_record;

		seen = _find(w, k->correlationId, &canonical, &weight);
		start = k->start;
		end = k->end;
		r.kind = FW_CUDA_KERNEL;
		r.device = k->deviceId;
		r.stream = k->streamId;
		r.bytes = k->graphId;
		cupti_name = k->name;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = cupti_record;

		/* A runtime copy is reported under the runtime call's id. */
		seen = _find(w, m->runtimeCorrelationId, &canonical, &weight);
		if (!seen || weight == FWC_UNKEPT) {
			uint32_t c2, w2;

			if (_find(w, m->correlationId, &c2, &w2) && (!seen || w2 != FWC_UNKEPT)) {
				seen = 1;
				canonical = c2;
				weight = w2;
			}
		}
		start = m->start;
		end = m->end;
		r.kind = _copy_kind(m->copyKind);
		r.bytes = m->bytes;
		r.device = m->deviceId;
		r.stream = m->streamId;
		cls = FWC_MEMCPY;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY2: {
		const CUpti_ActivityMemcpyPtoP4 *m = cupti_record;

		seen = _find(w, m->correlationId, &canonical, &weight);
		start = m->start;
		end = m->end;
		r.kind = _copy_kind(m->copyKind);
		r.bytes = m->bytes;
		r.device = m->deviceId;
		r.stream = m->streamId;
		cls = FWC_MEMCPY;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = cupti_record;

		seen = _find(w, m->correlationId, &canonical, &weight);
		start = m->start;
		end = m->end;
		r.kind = FW_CUDA_MEMSET;
		r.bytes = m->bytes;
		r.device = m->deviceId;
		r.stream = m->streamId;
		cls = FWC_MEMSET;
		break;
	}
	default:
		st->other++;
		return;
	}
	/* Every timed kernel is busy time, whatever becomes of its record. */
	if (r.kind == FW_CUDA_KERNEL && end > start)
		_busy_add(b, r.device, start, end, offset_ns, st);
	/* Launched outside a collecting window (its edges): not ours to count,
	 * unless activity is always on (then D does not stand in for it). */
	if (!seen && !b->carry_unseen) {
		st->unsampled++;
		return;
	}
	if ((!start && !end) || end < start) {
		st->untimed++;
		return;
	}
	if (r.kind == FW_CUDA_KERNEL) {
		name = fwc_names_intern(names, cupti_name);
		carry = fwc_names_carry(names, name);
	} else {
		carry = &b->kind_carry[r.kind];
	}
	scale = b->scale[cls] ? b->scale[cls] : FWC_SCALE_ONE;
	if (!seen) {
		_carry_add(carry, &r, start, end, FWC_SCALE_ONE);
		st->outside++;
		return;
	}
	if (weight == FWC_UNKEPT) {
		_carry_add(carry, &r, start, end, scale);
		st->carried++;
		return;
	}
	if (name) {
		/* Before the batch that carries it is emitted. */
		fwc_names_announce(names, name);
		r.name_addr = (uintptr_t)name;
	}
	r.correlation = canonical;
	carry->anchor = canonical;
	r.start_ns = (uint64_t)_unix(start, offset_ns);
	r.end_ns = (uint64_t)_unix(end, offset_ns);
	r.weight = _weight_with_carry(carry, end - start, scale, weight);
	_append(b, &r, st);
}

static void _carry_emit(struct fwc_carry *c, uint32_t kind, const char *name, int64_t offset_ns,
			struct fwc_names *names, struct fwc_batch *b, struct fwc_stats *st)
{
	struct fw_cuda_record r;
	uint64_t dur = c->end - c->start, w;

	if (!c->ns || !c->has_last || !dur)
		return;
	/* The nearest whole number of durations: within half of one of exact. */
	w = (c->ns + dur / 2) / dur;
	c->ns = 0;
	if (!w)
		return;
	memset(&r, 0, sizeof(r));
	r.kind = kind;
	r.correlation = c->anchor;
	r.start_ns = (uint64_t)_unix(c->start, offset_ns);
	r.end_ns = (uint64_t)_unix(c->end, offset_ns);
	r.bytes = c->bytes;
	r.device = c->device;
	r.stream = c->stream;
	r.weight = w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
	if (name) {
		fwc_names_announce(names, name);
		r.name_addr = (uintptr_t)name;
	}
	_append(b, &r, st);
}

void fwc_carry_flush(struct fwc_names *n, struct fwc_batch *b, int64_t offset_ns,
		     struct fwc_stats *st)
{
	for (uint32_t i = 0; i < FWC_NAME_SLOTS; i++)
		if (n->by_text[i])
			_carry_emit(fwc_names_carry(n, n->by_text[i]), FW_CUDA_KERNEL, n->by_text[i],
				    offset_ns, n, b, st);
	_carry_emit(fwc_names_carry(n, fwc_name_full), FW_CUDA_KERNEL, fwc_name_full, offset_ns, n,
		    b, st);
	_carry_emit(fwc_names_carry(n, fwc_name_unknown), FW_CUDA_KERNEL, fwc_name_unknown,
		    offset_ns, n, b, st);
	for (uint32_t k = 1; k < 6; k++)
		_carry_emit(&b->kind_carry[k], k, NULL, offset_ns, n, b, st);
	fwc_busy_flush(b, offset_ns, st);
	fwc_batch_flush(b);
}
