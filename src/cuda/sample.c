// SPDX-License-Identifier: Apache-2.0
/* Launch sampling and the correlation -> weight table (see fwc.h). */
#include "cuda/fwc.h"

/* xorshift64*: a few ns, good enough to decide which launches are kept. */
static inline uint64_t _next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

void fwc_sampler_seed(struct fwc_thread_sampler *s, uint64_t seed)
{
	s->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
	for (int i = 0; i < FWC_NCLASS; i++)
		s->gap[i] = 0;
}

uint32_t fwc_sampler_take(struct fwc_thread_sampler *s, enum fwc_class cls, uint64_t p_fixed,
			  uint32_t multiplier)
{
	uint64_t w;

	if (cls <= FWC_NONE || cls >= FWC_NCLASS)
		return 0;
	if (s->gap[cls] < UINT32_MAX)
		s->gap[cls]++;
	if (p_fixed < UINT32_MAX && (_next(&s->rng) >> 32) >= p_fixed)
		return 0;
	w = (uint64_t)s->gap[cls] * (multiplier ? multiplier : 1);
	s->gap[cls] = 0;
	return w > UINT32_MAX ? UINT32_MAX : (uint32_t)w;
}

uint64_t fwc_sampler_probability(uint64_t quota, uint64_t expected)
{
	if (expected <= quota)
		return UINT32_MAX;
	if (quota == 0)
		return 1;	/* never quite zero: some launch must carry the weight */
	return (quota << 32) / expected ?: 1;
}

static uint32_t _fresh_slot(uint64_t key)
{
	return (uint32_t)((key * 0x9E3779B97F4A7C15ULL) >> 52) & (FWC_FRESH_SLOTS - 1);
}

int fwc_fresh_due(struct fwc_fresh *f, uint64_t key, int64_t now_ns)
{
	int64_t at = atomic_load_explicit(&f->at[_fresh_slot(key)], memory_order_relaxed);

	return !at || now_ns - at >= FWC_FRESH_NS;
}

void fwc_fresh_mark(struct fwc_fresh *f, uint64_t key, int64_t now_ns)
{
	atomic_store_explicit(&f->at[_fresh_slot(key)], now_ns ? now_ns : 1, memory_order_relaxed);
}

void fwc_weights_put(struct fwc_weights *w, uint32_t corr, uint32_t canonical, uint32_t weight)
{
	struct fwc_weight_slot *s = &w->slot[corr & (FWC_WEIGHT_SLOTS - 1)];

	atomic_store_explicit(&s->key, 0, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);
	atomic_store_explicit(&s->val, (uint64_t)canonical << 32 | weight, memory_order_relaxed);
	atomic_store_explicit(&s->key, (uint64_t)corr + 1, memory_order_release);
}

int fwc_weights_find(struct fwc_weights *w, uint32_t corr, uint32_t *canonical, uint32_t *weight)
{
	struct fwc_weight_slot *s = &w->slot[corr & (FWC_WEIGHT_SLOTS - 1)];
	uint64_t k1, v, k2;

	k1 = atomic_load_explicit(&s->key, memory_order_acquire);
	if (k1 != (uint64_t)corr + 1)
		return 0;
	v = atomic_load_explicit(&s->val, memory_order_relaxed);
	atomic_thread_fence(memory_order_acquire);
	k2 = atomic_load_explicit(&s->key, memory_order_relaxed);
	if (k2 != k1)
		return 0;
	*canonical = (uint32_t)(v >> 32);
	*weight = (uint32_t)v;
	return 1;
}

uint32_t fwc_weights_get(struct fwc_weights *w, uint32_t corr, uint32_t *canonical)
{
	uint32_t c, weight;

	if (!fwc_weights_find(w, corr, &c, &weight) || weight == FWC_UNKEPT)
		return 0;
	*canonical = c;
	return weight;
}
