// SPDX-License-Identifier: Apache-2.0
/* What collecting activity records costs the process (see fwc.h). */
#include "cuda/fwc.h"

void fwc_cost_call(struct fwc_cost *c, int activity_on, uint64_t ns)
{
	uint64_t b = ns / FWC_COST_BUCKET_NS;
	int on = !!activity_on;

	if (b >= FWC_COST_BUCKETS)
		b = FWC_COST_BUCKETS - 1;
	atomic_fetch_add_explicit(&c->calls[on][b], 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&c->total[on], 1, memory_order_relaxed);
}

void fwc_cost_own(struct fwc_cost *c, uint64_t ns, uint64_t records)
{
	c->own_ns += ns;
	c->own_records += records;
	/* The same decay, by records: the figure follows the recent ones. */
	if (c->own_records > 16 * FWC_COST_DECAY_CALLS) {
		c->own_ns /= 2;
		c->own_records /= 2;
	}
}

/*
 * Racy against the launching threads on purpose: a call counted between
 * the halving of its bucket and of the total skews one median by one call.
 */
void fwc_cost_decay(struct fwc_cost *c)
{
	for (int on = 0; on < 2; on++) {
		uint32_t t = 0;

		if (atomic_load_explicit(&c->total[on], memory_order_relaxed) <= FWC_COST_DECAY_CALLS)
			continue;
		for (uint32_t b = 0; b < FWC_COST_BUCKETS; b++) {
			uint32_t v = atomic_load_explicit(&c->calls[on][b], memory_order_relaxed) / 2;

			atomic_store_explicit(&c->calls[on][b], v, memory_order_relaxed);
			t += v;
		}
		atomic_store_explicit(&c->total[on], t, memory_order_relaxed);
	}
}

int64_t fwc_cost_median(const struct fwc_cost *c, int on)
{
	uint64_t n = 0, seen = 0;
	uint32_t v[FWC_COST_BUCKETS];

	on = !!on;
	for (uint32_t b = 0; b < FWC_COST_BUCKETS; b++)
		n += v[b] = atomic_load_explicit(&c->calls[on][b], memory_order_relaxed);
	if (n < FWC_COST_MIN_CALLS)
		return -1;
	for (uint32_t b = 0; b < FWC_COST_BUCKETS; b++) {
		seen += v[b];
		if (2 * seen >= n)
			return (int64_t)b * FWC_COST_BUCKET_NS + FWC_COST_BUCKET_NS / 2;
	}
	return -1;	/* not reached */
}

int64_t fwc_cost_per_record(const struct fwc_cost *c, int64_t *in_call_ns, int64_t *own_ns)
{
	int64_t on = fwc_cost_median(c, 1), off = fwc_cost_median(c, 0);
	int64_t call, own;

	if (on < 0 || off < 0)
		return -1;
	call = on > off ? on - off : 0;
	own = fwc_cost_own_per_record(c);
	if (in_call_ns)
		*in_call_ns = call;
	if (own_ns)
		*own_ns = own;
	return call + own;
}
