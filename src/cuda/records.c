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

void fwc_record_add(const void *cupti_record, struct fwc_weights *w, struct fwc_names *names,
		    int64_t offset_ns, struct fwc_batch *b, struct fwc_stats *st)
{
	const CUpti_Activity *a = cupti_record;
	struct fw_cuda_record r;
	uint32_t weight = 0, canonical = 0;
	uint64_t start, end;

	st->records++;
	memset(&r, 0, sizeof(r));
	switch (a->kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
		const CUpti_ActivityKernel10 *k = cupti_record;

		weight = fwc_weights_get(w, k->correlationId, &canonical);
		start = k->start;
		end = k->end;
		r.kind = FW_CUDA_KERNEL;
		r.device = k->deviceId;
		r.stream = k->streamId;
		if (weight && (start || end)) {
			const char *name = fwc_names_intern(names, k->name);

			/* Before the batch that carries it is emitted. */
			fwc_names_announce(names, name);
			r.name_addr = (uintptr_t)name;
		}
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY: {
		const CUpti_ActivityMemcpy6 *m = cupti_record;

		/* A runtime copy is reported under the runtime call's id. */
		if (m->runtimeCorrelationId)
			weight = fwc_weights_get(w, m->runtimeCorrelationId, &canonical);
		if (!weight)
			weight = fwc_weights_get(w, m->correlationId, &canonical);
		start = m->start;
		end = m->end;
		r.kind = _copy_kind(m->copyKind);
		r.bytes = m->bytes;
		r.device = m->deviceId;
		r.stream = m->streamId;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMCPY2: {
		const CUpti_ActivityMemcpyPtoP4 *m = cupti_record;

		weight = fwc_weights_get(w, m->correlationId, &canonical);
		start = m->start;
		end = m->end;
		r.kind = _copy_kind(m->copyKind);
		r.bytes = m->bytes;
		r.device = m->deviceId;
		r.stream = m->streamId;
		break;
	}
	case CUPTI_ACTIVITY_KIND_MEMSET: {
		const CUpti_ActivityMemset4 *m = cupti_record;

		weight = fwc_weights_get(w, m->correlationId, &canonical);
		start = m->start;
		end = m->end;
		r.kind = FW_CUDA_MEMSET;
		r.bytes = m->bytes;
		r.device = m->deviceId;
		r.stream = m->streamId;
		break;
	}
	default:
		st->other++;
		return;
	}
	if (!weight) {
		st->unsampled++;
		return;
	}
	if ((!start && !end) || end < start) {
		st->untimed++;
		return;
	}
	r.correlation = canonical;
	r.start_ns = (uint64_t)_unix(start, offset_ns);
	r.end_ns = (uint64_t)_unix(end, offset_ns);
	r.weight = weight;
	st->kept++;
	st->weighted_ns[r.kind] += (end - start) * (uint64_t)weight;
	st->weighted_count[r.kind] += weight;
	b->recs[b->n++] = r;
	if (b->n == FW_CUDA_MAX_BATCH)
		fwc_batch_flush(b);
}
