// SPDX-License-Identifier: Apache-2.0
/* libflamewatch-cuda.so internals: record conversion, weights, sampling. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <cupti_activity.h>

#include "cuda/fwc.h"

static struct fwc_weights W;
static struct fwc_names N;

struct sink {
	struct fw_cuda_record recs[4096];
	uint32_t n, batches, max_batch;
};

static void _collect(const struct fw_cuda_record *r, uint32_t count, void *ctx)
{
	struct sink *s = ctx;

	assert_true(count >= 1 && count <= FW_CUDA_MAX_BATCH);
	s->batches++;
	if (count > s->max_batch)
		s->max_batch = count;
	for (uint32_t i = 0; i < count && s->n < 4096; i++)
		s->recs[s->n++] = r[i];
}

static CUpti_ActivityKernel10 _kernel(uint32_t corr, uint64_t start, uint64_t dur, const char *name)
{
	CUpti_ActivityKernel10 k;

	memset(&k, 0, sizeof(k));
	k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
	k.correlationId = corr;
	k.start = start;
	k.end = start + dur;
	k.deviceId = 1;
	k.streamId = 13;
	k.name = name;
	return k;
}

static void test_records_convert(void **state)
{
	static struct sink s;
	struct fwc_batch b = { .emit = _collect, .ctx = &s };
	struct fwc_stats st = { 0 };
	char name_copy[] = "_Z6kernelPf";
	CUpti_ActivityKernel10 k = _kernel(10, 1000, 500, name_copy);
	CUpti_ActivityMemcpy6 m;
	CUpti_ActivityMemset4 z;

	memset(&W, 0, sizeof(W));
	fwc_weights_put(&W, 10, 10, 3);
	fwc_weights_put(&W, 21, 20, 2);	/* a driver id aliased to its runtime call */
	fwc_weights_put(&W, 30, 30, 1);
	fwc_record_add(&k, &W, &N, 5000, &b, &st);

	memset(&m, 0, sizeof(m));
	m.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
	m.copyKind = CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
	m.bytes = 4096;
	m.start = 2000;
	m.end = 2100;
	m.correlationId = 21;
	fwc_record_add(&m, &W, &N, 5000, &b, &st);

	memset(&z, 0, sizeof(z));
	z.kind = CUPTI_ACTIVITY_KIND_MEMSET;
	z.bytes = 64;
	z.start = 3000;
	z.end = 3010;
	z.correlationId = 30;
	fwc_record_add(&z, &W, &N, 5000, &b, &st);

	k = _kernel(99, 1, 1, name_copy);	/* not kept: dropped */
	fwc_record_add(&k, &W, &N, 5000, &b, &st);
	k = _kernel(10, 0, 0, name_copy);	/* no timestamps */
	k.end = 0;
	fwc_record_add(&k, &W, &N, 5000, &b, &st);
	fwc_batch_flush(&b);

	assert_int_equal(s.n, 3);
	assert_int_equal(s.recs[0].kind, FW_CUDA_KERNEL);
	assert_int_equal(s.recs[0].correlation, 10);
	assert_int_equal(s.recs[0].start_ns, 6000);
	assert_int_equal(s.recs[0].end_ns, 6500);
	assert_int_equal(s.recs[0].weight, 3);
	assert_int_equal(s.recs[0].device, 1);
	assert_int_equal(s.recs[0].stream, 13);
	/* The library's own copy, which outlives CUPTI's. */
	assert_ptr_not_equal((const char *)(uintptr_t)s.recs[0].name_addr, name_copy);
	name_copy[0] = 'X';
	assert_string_equal((const char *)(uintptr_t)s.recs[0].name_addr, "_Z6kernelPf");
	assert_int_equal(s.recs[1].kind, FW_CUDA_MEMCPY_DTOH);
	assert_int_equal(s.recs[1].correlation, 20);
	assert_int_equal(s.recs[1].bytes, 4096);
	assert_int_equal(s.recs[1].name_addr, 0);
	assert_int_equal(s.recs[2].kind, FW_CUDA_MEMSET);
	assert_int_equal(st.unsampled, 1);
	assert_int_equal(st.untimed, 1);
	assert_int_equal(st.weighted_ns[FW_CUDA_KERNEL], 1500);
}

static void test_batches_bounded(void **state)
{
	static struct sink s;
	struct fwc_batch b = { .emit = _collect, .ctx = &s };
	struct fwc_stats st = { 0 };
	CUpti_ActivityKernel10 k;

	memset(&W, 0, sizeof(W));
	for (uint32_t i = 1; i <= 1000; i++) {
		fwc_weights_put(&W, i, i, 1);
		k = _kernel(i, i * 10, 5, "_Z1kv");
		fwc_record_add(&k, &W, &N, 0, &b, &st);
	}
	fwc_batch_flush(&b);
	assert_int_equal(s.n, 1000);
	assert_int_equal(s.max_batch, FW_CUDA_MAX_BATCH);
	assert_int_equal(s.batches, (1000 + FW_CUDA_MAX_BATCH - 1) / FW_CUDA_MAX_BATCH);
}

/* A synthetic stream through sampling and the record path: weights add up
 * exactly to the launches up to the last kept one, and weighted GPU time is
 * exact for equal durations and close for varied ones. */
static void test_sampled_totals(void **state)
{
	static struct sink s;
	struct fwc_thread_sampler ts;
	uint64_t p = fwc_sampler_probability(100, 1000);	/* keep ~10 % */
	uint64_t last_kept = 0, wsum = 0, true_ns = 0, true_upto = 0;
	uint64_t est_const = 0, est_var = 0;
	struct fwc_stats st = { 0 };

	fwc_sampler_seed(&ts, 42);
	memset(&W, 0, sizeof(W));
	for (uint32_t i = 1; i <= 50000; i++) {
		uint64_t dur = 1000 + (i * 7919u) % 9000;	/* varied, 1-10 us */
		uint32_t w = fwc_sampler_take(&ts, FWC_KERNEL, p, 1);

		true_ns += dur;
		if (w) {
			struct fwc_batch b = { .emit = NULL };
			CUpti_ActivityKernel10 k = _kernel(i, 0, dur, "_Z1kv");

			fwc_weights_put(&W, i, i, w);
			fwc_record_add(&k, &W, &N, 0, &b, &st);
			assert_int_equal(b.recs[0].weight, w);
			wsum += w;
			last_kept = i;
			true_upto = true_ns;
			est_const += 1000 * (uint64_t)w;
			est_var += dur * w;
		}
	}
	assert_int_equal(wsum, last_kept);
	assert_int_equal(est_const, 1000 * last_kept);
	assert_int_equal(st.weighted_ns[FW_CUDA_KERNEL], est_var);
	assert_true(st.kept > 4000 && st.kept < 6000);
	assert_true(llabs((long long)est_var - (long long)true_upto) < (long long)(true_upto / 50));
	(void)s;
}

static void test_sampler_classes_and_multiplier(void **state)
{
	struct fwc_thread_sampler ts;

	fwc_sampler_seed(&ts, 1);
	/* Keep-all with a duty-cycle multiplier of 10: each launch stands for 10. */
	assert_int_equal(fwc_sampler_take(&ts, FWC_KERNEL, UINT32_MAX, 10), 10);
	assert_int_equal(fwc_sampler_take(&ts, FWC_NONE, UINT32_MAX, 10), 0);
	/* Gaps are per class: copies never carry kernels' weight. */
	for (int i = 0; i < 5; i++)
		assert_int_equal(fwc_sampler_take(&ts, FWC_KERNEL, 0, 1), 0);
	assert_int_equal(fwc_sampler_take(&ts, FWC_MEMCPY, UINT32_MAX, 1), 1);
	assert_int_equal(fwc_sampler_take(&ts, FWC_KERNEL, UINT32_MAX, 1), 6);
	assert_int_equal(fwc_sampler_probability(10, 5), UINT32_MAX);
	assert_true(fwc_sampler_probability(0, 5) > 0);
}

static void test_weights_and_names(void **state)
{
	uint32_t c = 0;
	const char *a, *b2;
	char buf[32];

	memset(&W, 0, sizeof(W));
	fwc_weights_put(&W, 5, 4, 7);
	assert_int_equal(fwc_weights_get(&W, 5, &c), 7);
	assert_int_equal(c, 4);
	assert_int_equal(fwc_weights_get(&W, 5 + FWC_WEIGHT_SLOTS, &c), 0);
	fwc_weights_put(&W, 5 + FWC_WEIGHT_SLOTS, 5 + FWC_WEIGHT_SLOTS, 2);	/* same slot: replaced */
	assert_int_equal(fwc_weights_get(&W, 5, &c), 0);

	strcpy(buf, "_Z3fooi");
	a = fwc_names_intern(&N, buf);
	/* Another pointer to the same text: the same copy. */
	b2 = fwc_names_intern(&N, "_Z3fooi");
	assert_ptr_equal(a, b2);
	assert_string_equal(fwc_names_intern(&N, NULL), fwc_name_unknown);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_records_convert),
		cmocka_unit_test(test_batches_bounded),
		cmocka_unit_test(test_sampled_totals),
		cmocka_unit_test(test_sampler_classes_and_multiplier),
		cmocka_unit_test(test_weights_and_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
