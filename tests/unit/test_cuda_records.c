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

/* Work records in recs; the busy timeline's (FW_CUDA_BUSY, _COVERAGE) apart in tl. */
struct sink {
	struct fw_cuda_record recs[4096];
	uint32_t n, batches, max_batch;
	struct fw_cuda_record tl[4096];
	uint32_t ntl;
	uint64_t tl_seen;
};

static void _collect(const struct fw_cuda_record *r, uint32_t count, void *ctx)
{
	struct sink *s = ctx;

	assert_true(count >= 1 && count <= FW_CUDA_MAX_BATCH);
	s->batches++;
	if (count > s->max_batch)
		s->max_batch = count;
	for (uint32_t i = 0; i < count; i++) {
		if (r[i].kind >= FW_CUDA_BUSY) {
			assert_int_equal(r[i].weight, 0);
			/* A busy span's idle inside: within it; nothing else's. */
			if (r[i].kind == FW_CUDA_BUSY)
				assert_true(r[i].correlation <= r[i].end_ns - r[i].start_ns);
			else
				assert_int_equal(r[i].correlation, 0);
			s->tl_seen++;
			if (s->ntl < 4096)
				s->tl[s->ntl++] = r[i];
		} else if (s->n < 4096) {
			s->recs[s->n++] = r[i];
		}
	}
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

	CUpti_ActivityKernel10 unkept = _kernel(11, 100, 1000, name_copy);

	memset(&W, 0, sizeof(W));
	fwc_weights_put(&W, 10, 10, 3);
	fwc_weights_put(&W, 11, 11, FWC_UNKEPT);	/* seen in the window, not kept */
	fwc_weights_put(&W, 21, 20, 2);	/* a driver id aliased to its runtime call */
	fwc_weights_put(&W, 30, 30, 1);
	/* Its 1000 ns ride on the next kept record of the same name: 500 x 3. */
	fwc_record_add(&unkept, &W, &N, 5000, &b, &st);
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
	assert_int_equal(st.carried, 1);
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

/* The sampler alone: the weights of the kept launches add up exactly to the
 * launches up to the last kept one. */
static void test_sampler_weights_count(void **state)
{
	struct fwc_thread_sampler ts;
	uint64_t p = fwc_sampler_probability(100, 1000);	/* keep ~10 % */
	uint64_t last_kept = 0, wsum = 0, kept = 0;

	fwc_sampler_seed(&ts, 42);
	for (uint32_t i = 1; i <= 50000; i++) {
		uint32_t w = fwc_sampler_take(&ts, FWC_KERNEL, p, 1);

		if (w) {
			wsum += w;
			last_kept = i;
			kept++;
		}
	}
	assert_int_equal(wsum, last_kept);
	assert_true(kept > 4000 && kept < 6000);
}

/*
 * A short MLP-like run through sampling and the record path: per step one
 * long GEMM-like kernel among nine short ones, ~3 % of launches kept (the
 * H200's always-on MLP run). The emitted records' duration x weight must
 * add up to the GPU time of every record, x the duty-cycle scale,
 * within half a duration per name after the exit flush: estimating from
 * the kept launches' durations alone was off by up to 17 % there.
 */
static void test_sampled_totals_exact(void **state)
{
	static struct sink s;
	struct fwc_thread_sampler ts;
	uint64_t p = fwc_sampler_probability(30, 1000);
	uint64_t true_ns = 0, true_gemm = 0, emitted = 0, emitted_gemm = 0;
	struct fwc_batch b = { .emit = _collect, .ctx = &s,
				 .scale = { [FWC_KERNEL] = 10 * FWC_SCALE_ONE } };
	struct fwc_stats st = { 0 };
	struct fwc_names *names = calloc(1, sizeof(*names));

	assert_non_null(names);
	fwc_sampler_seed(&ts, 7);
	memset(&W, 0, sizeof(W));
	for (uint32_t i = 1; i <= 30000; i++) {
		int gemm = i % 10 == 0;
		uint64_t dur = gemm ? 180000 + (i * 7919u) % 40000 : 3000 + (i * 104729u) % 4000;
		uint32_t w = fwc_sampler_take(&ts, FWC_KERNEL, p, 10);
		CUpti_ActivityKernel10 k = _kernel(i, (uint64_t)i * 1000000, dur,
						   gemm ? "_Z4gemmv" : "_Z2ewv");

		fwc_weights_put(&W, i, i, w);	/* FWC_UNKEPT when not kept */
		fwc_record_add(&k, &W, names, 0, &b, &st);
		true_ns += dur * 10;
		if (gemm)
			true_gemm += dur * 10;
		if (s.n > 3000) {	/* keep the sink small: sum and forget */
			for (uint32_t j = 0; j < s.n; j++) {
				uint64_t v = (s.recs[j].end_ns - s.recs[j].start_ns) * s.recs[j].weight;

				emitted += v;
				if (!strcmp((const char *)(uintptr_t)s.recs[j].name_addr, "_Z4gemmv"))
					emitted_gemm += v;
			}
			s.n = 0;
		}
	}
	fwc_carry_flush(names, &b, 0, &st);
	for (uint32_t j = 0; j < s.n; j++) {
		uint64_t v = (s.recs[j].end_ns - s.recs[j].start_ns) * s.recs[j].weight;

		emitted += v;
		if (!strcmp((const char *)(uintptr_t)s.recs[j].name_addr, "_Z4gemmv"))
			emitted_gemm += v;
	}
	assert_true(st.kept > 500 && st.kept < 1500);
	assert_int_equal(st.carried + st.kept - 2, 30000);	/* 2: the exit flush's */
	assert_true(llabs((long long)emitted - (long long)true_ns) <= 220000 / 2 + 7000 / 2);
	assert_true(llabs((long long)emitted_gemm - (long long)true_gemm) <= 220000 / 2);
	assert_int_equal(st.weighted_ns[FW_CUDA_KERNEL], emitted);
	free(names);
}

/* Records of launches never seen in a window (its edges) are not counted. */
static void test_unseen_not_counted(void **state)
{
	static struct sink s;
	struct fwc_batch b = { .emit = _collect, .ctx = &s };
	struct fwc_stats st = { 0 };
	CUpti_ActivityKernel10 k = _kernel(77, 10, 1000, "_Z1kv");

	memset(&W, 0, sizeof(W));
	fwc_record_add(&k, &W, &N, 0, &b, &st);
	fwc_carry_flush(&N, &b, 0, &st);
	assert_int_equal(s.n, 0);
	assert_int_equal(st.unsampled, 1);
	assert_int_equal(st.carried, 0);
}

/*
 * Activity always on (carry_unseen): a record no window saw the launch of is
 * real GPU time, carried x 1 to the next kept record of its name; kept
 * records are x 1 too (scale 1), whatever D was.
 */
static void test_unseen_carried_when_activity_all(void **state)
{
	static struct sink s;
	struct fwc_batch b = { .emit = _collect, .ctx = &s, .carry_unseen = 1 };
	struct fwc_stats st = { 0 };
	CUpti_ActivityKernel10 outside1 = _kernel(77, 10, 1000, "_Z1kv");
	CUpti_ActivityKernel10 outside2 = _kernel(78, 2000, 600, "_Z1kv");
	CUpti_ActivityKernel10 kept = _kernel(90, 3000, 400, "_Z1kv");
	CUpti_ActivityKernel10 lone = _kernel(91, 4000, 300, "_Z4lonev");

	memset(&s, 0, sizeof(s));
	for (int c = 0; c < FWC_NCLASS; c++)
		b.scale[c] = FWC_SCALE_ONE;
	memset(&W, 0, sizeof(W));
	fwc_weights_put(&W, 90, 90, 1);
	fwc_record_add(&outside1, &W, &N, 0, &b, &st);
	fwc_record_add(&outside2, &W, &N, 0, &b, &st);
	fwc_record_add(&kept, &W, &N, 0, &b, &st);
	fwc_record_add(&lone, &W, &N, 0, &b, &st);
	fwc_carry_flush(&N, &b, 0, &st);

	assert_int_equal(st.unsampled, 0);
	assert_int_equal(st.outside, 3);
	/* 400 + 1000 + 600 = 5 x 400 on the kept one, under its launch. */
	assert_int_equal(s.n, 2);
	assert_int_equal(s.recs[0].correlation, 90);
	assert_int_equal(s.recs[0].weight, 5);
	/* The name no window saw: its own record at exit, without a launch. */
	assert_int_equal(s.recs[1].correlation, 0);
	assert_int_equal(s.recs[1].weight, 1);
	assert_int_equal(s.recs[1].end_ns - s.recs[1].start_ns, 300);
	assert_int_equal(st.weighted_ns[FW_CUDA_KERNEL], 1000 + 600 + 400 + 300);
}

/*
 * What is still carried at a flush goes out under the last kept launch of
 * its name (its anchor), so that it joins that launch's stack; and a graph
 * kernel's record carries its graph's id in bytes.
 */
static void test_carry_flush_keeps_the_anchor(void **state)
{
	static struct sink s;
	struct fwc_batch b = { .emit = _collect, .ctx = &s, .carry_unseen = 1 };
	struct fwc_stats st = { 0 };
	CUpti_ActivityKernel10 kept = _kernel(40, 1000, 500, "_Z6anchorv");
	CUpti_ActivityKernel10 after = _kernel(41, 2000, 500, "_Z6anchorv");
	CUpti_ActivityKernel10 graph = _kernel(50, 3000, 200, "_Z9graphnodev");

	memset(&s, 0, sizeof(s));
	for (int c = 0; c < FWC_NCLASS; c++)
		b.scale[c] = FWC_SCALE_ONE;
	memset(&W, 0, sizeof(W));
	fwc_weights_put(&W, 40, 40, 1);
	fwc_weights_put(&W, 50, 49, 1);
	graph.graphId = 7;
	fwc_record_add(&kept, &W, &N, 0, &b, &st);
	fwc_record_add(&after, &W, &N, 0, &b, &st);	/* no window saw it: carried */
	fwc_record_add(&graph, &W, &N, 0, &b, &st);
	fwc_carry_flush(&N, &b, 0, &st);

	assert_int_equal(s.n, 3);
	assert_int_equal(s.recs[0].correlation, 40);
	assert_int_equal(s.recs[0].bytes, 0);
	assert_int_equal(s.recs[1].correlation, 49);	/* canonical */
	assert_int_equal(s.recs[1].bytes, 7);
	assert_int_equal(s.recs[2].correlation, 40);	/* the flush, under the anchor */
	assert_int_equal(s.recs[2].weight, 1);
	assert_int_equal(s.recs[2].start_ns, 2000);
}

/* A key with no kept launch for FWC_FRESH_NS is due; keys sharing a slot share it. */
static void test_fresh(void **state)
{
	static struct fwc_fresh f;
	int64_t t = 1000;

	memset(&f, 0, sizeof(f));
	assert_true(fwc_fresh_due(&f, 0xabc, t));
	fwc_fresh_mark(&f, 0xabc, t);
	assert_false(fwc_fresh_due(&f, 0xabc, t + FWC_FRESH_NS - 1));
	assert_true(fwc_fresh_due(&f, 0xabc, t + FWC_FRESH_NS));
	assert_true(fwc_fresh_due(&f, 0xdef, t));	/* another slot */
}

/* The busy spans of device dev in s, in order. */
static uint32_t _spans(struct sink *s, uint32_t dev, uint64_t (*out)[4], uint32_t max)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < s->ntl && n < max; i++)
		if (s->tl[i].kind == FW_CUDA_BUSY && s->tl[i].device == dev) {
			out[n][0] = s->tl[i].start_ns;
			out[n][1] = s->tl[i].end_ns;
			out[n][2] = s->tl[i].bytes;
			out[n++][3] = s->tl[i].correlation;
		}
	return n;
}

/*
 * Every kernel record is busy time, whatever becomes of the record: kept,
 * carried, or launched outside any window and dropped. Records closer than
 * the merge gap coalesce, per device, even a little out of order.
 */
static void test_busy_timeline_from_every_record(void **state)
{
	static struct sink s;
	struct fwc_batch b = { .emit = _collect, .ctx = &s };
	struct fwc_stats st = { 0 };
	uint64_t spans[16][4];
	CUpti_ActivityKernel10 k;

	memset(&s, 0, sizeof(s));
	memset(&W, 0, sizeof(W));
	fwc_weights_put(&W, 2, 2, 1);
	fwc_weights_put(&W, 3, 3, FWC_UNKEPT);
	/* Burst one on device 1: 1000..4000, with 2-us gaps and one record early. */
	k = _kernel(1, 1000, 1000, "_Z1av");		/* never seen: dropped, still busy */
	fwc_record_add(&k, &W, &N, 100, &b, &st);
	k = _kernel(3, 4000, 1000, "_Z1av");		/* carried */
	fwc_record_add(&k, &W, &N, 100, &b, &st);
	k = _kernel(2, 2002000 / 1000, 1998, "_Z1av");	/* kept, arrives out of order */
	fwc_record_add(&k, &W, &N, 100, &b, &st);
	/* 1 ms later, burst two; and a kernel on device 3 meanwhile. */
	k = _kernel(4, 1005000, 500, "_Z1bv");
	fwc_record_add(&k, &W, &N, 100, &b, &st);
	k = _kernel(5, 3000, 100, "_Z1cv");
	k.deviceId = 3;
	fwc_record_add(&k, &W, &N, 100, &b, &st);
	assert_int_equal(st.busy_spans, 1);	/* burst one closed by burst two */
	fwc_busy_flush(&b, 100, &st);
	fwc_batch_flush(&b);

	assert_int_equal(st.unsampled, 3);	/* the record paths are as before */
	assert_int_equal(_spans(&s, 1, spans, 16), 2);
	assert_int_equal(spans[0][0], 1100);
	assert_int_equal(spans[0][1], 5100);
	assert_int_equal(spans[0][2], FWC_BUSY_GAP_MIN_NS);
	/*
	 * Idle inside: the 2-us gap the third record bridged, less what the
	 * late record filled of it (all but 2 ns).
	 */
	assert_int_equal(spans[0][3], 2);
	assert_int_equal(spans[1][0], 1005100);
	assert_int_equal(spans[1][1], 1005600);
	assert_int_equal(spans[1][3], 0);
	assert_int_equal(_spans(&s, 3, spans, 16), 1);
	assert_int_equal(spans[0][0], 3100);
	assert_int_equal(spans[0][3], 0);
	assert_int_equal(st.busy_spans, 3);
	/* Nothing open: a second flush adds nothing. */
	fwc_busy_flush(&b, 100, &st);
	fwc_batch_flush(&b);
	assert_int_equal(s.ntl, 3);
	/* Coverage goes out as it is given. */
	fwc_coverage_add(&b, 10, 20);
	fwc_coverage_add(&b, 30, 30);	/* empty: nothing */
	fwc_batch_flush(&b);
	assert_int_equal(s.ntl, 4);
	assert_int_equal(s.tl[3].kind, FW_CUDA_COVERAGE);
	assert_int_equal(s.tl[3].start_ns, 10);
	assert_int_equal(s.tl[3].end_ns, 20);
}

/*
 * A launch-bound loop (a 3-us kernel every 20 us: 50,000 a second) would
 * ship a span per kernel; the merge gap widens within a period until a
 * device closes about FWC_BUSY_PERIOD_SPANS spans a period, and narrows
 * again once it is quiet.
 * The busy time the spans cover stays within the gaps they merged.
 */
static void test_busy_gap_adapts(void **state)
{
	static struct sink s;
	struct fwc_batch b = { .emit = _collect, .ctx = &s };
	struct fwc_stats st = { 0 };
	uint64_t t, busy = 0, last_gap = 0;
	CUpti_ActivityKernel10 k;

	memset(&s, 0, sizeof(s));
	memset(&W, 0, sizeof(W));
	for (t = 0; t < 4000000000ull; t += 20000) {	/* 4 s */
		k = _kernel(1, t, 3000, "_Z1av");
		fwc_record_add(&k, &W, &N, 0, &b, &st);
	}
	fwc_busy_flush(&b, 0, &st);
	fwc_batch_flush(&b);
	/* Finding the gap costs a few periods' worth of spans, then hardly any. */
	assert_true(s.tl_seen <= 4 * FWC_BUSY_PERIOD_SPANS + 40);
	for (uint32_t i = 0; i < s.ntl && i < 4096; i++)
		last_gap = s.tl[i].bytes;
	assert_true(last_gap >= 17000 && last_gap <= FWC_BUSY_GAP_MAX_NS);
	/*
	 * Once merged, the spans cover the loop: every kernel is inside one,
	 * and the spans less the idle inside them are exactly the kernels'
	 * time (200,000 kernels of 3 us), though they cover 20 us a kernel.
	 */
	assert_int_equal(s.ntl, s.tl_seen);
	for (uint32_t i = 0; i < s.ntl; i++) {
		assert_true(s.tl[i].correlation <= s.tl[i].end_ns - s.tl[i].start_ns);
		busy += s.tl[i].end_ns - s.tl[i].start_ns - s.tl[i].correlation;
	}
	assert_int_equal(busy, 200000ull * 3000);

	/* Then quiet: a kernel every 10 ms; the gap halves back to the minimum. */
	memset(&s, 0, sizeof(s));
	for (t = 4000000000ull; t < 12000000000ull; t += 10000000) {
		k = _kernel(1, t, 3000, "_Z1av");
		fwc_record_add(&k, &W, &N, 0, &b, &st);
	}
	fwc_busy_flush(&b, 0, &st);
	fwc_batch_flush(&b);
	assert_int_equal(s.tl[s.ntl - 1].bytes, FWC_BUSY_GAP_MIN_NS);
	assert_int_equal(s.tl[s.ntl - 1].end_ns - s.tl[s.ntl - 1].start_ns, 3000);
}

/*
 * Two streams whose records come in turns, each a little late: the
 * gaps one stream's records open are filled by the other's, and the idle
 * inside the span is only what neither covered.
 */
static void test_busy_idle_inside_two_streams(void **state)
{
	static struct sink s;
	struct fwc_batch b = { .emit = _collect, .ctx = &s };
	struct fwc_stats st = { 0 };
	uint64_t spans[16][4];
	CUpti_ActivityKernel10 k;

	memset(&s, 0, sizeof(s));
	memset(&W, 0, sizeof(W));
	/* From 10 us: stream A [0,1000) [2000,3000) [4000,5000), stream B [1000,1500) [3000,3500). */
	k = _kernel(1, 10000, 1000, "_Z1av");
	fwc_record_add(&k, &W, &N, 0, &b, &st);
	k = _kernel(2, 12000, 1000, "_Z1av");	/* gap [1000,2000) */
	fwc_record_add(&k, &W, &N, 0, &b, &st);
	k = _kernel(3, 11000, 500, "_Z1bv");	/* fills [1000,1500) */
	fwc_record_add(&k, &W, &N, 0, &b, &st);
	k = _kernel(4, 14000, 1000, "_Z1av");	/* gap [3000,4000) */
	fwc_record_add(&k, &W, &N, 0, &b, &st);
	k = _kernel(5, 13000, 500, "_Z1bv");	/* fills [3000,3500) */
	fwc_record_add(&k, &W, &N, 0, &b, &st);
	/* Inside a filled part again: counted once. */
	k = _kernel(6, 11200, 100, "_Z1bv");
	fwc_record_add(&k, &W, &N, 0, &b, &st);
	fwc_busy_flush(&b, 0, &st);
	fwc_batch_flush(&b);
	(void)state;

	assert_int_equal(_spans(&s, 1, spans, 16), 1);
	assert_int_equal(spans[0][0], 10000);
	assert_int_equal(spans[0][1], 15000);
	assert_int_equal(spans[0][3], 1000);	/* [1500,2000) and [3500,4000) */
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

/*
 * The cost of a record: the shift of the median launch call between
 * activity on and off, plus the library's own handling; calls stuck behind
 * a full launch queue (the long tail) do not move it.
 */
static void test_record_cost(void **state)
{
	static struct fwc_cost c;
	int64_t call = -1, own = -1, per;

	(void)state;
	for (int i = 0; i < 1000; i++) {
		fwc_cost_call(&c, 0, 3000 + (uint64_t)(i % 7) * 10);
		if (i < (int)FWC_COST_MIN_CALLS - 2)
			fwc_cost_call(&c, 1, 4700);
	}
	assert_int_equal(fwc_cost_per_record(&c, NULL, NULL), -1);	/* too few calls on */
	for (int i = 0; i < 1000; i++)
		fwc_cost_call(&c, 1, i % 5 == 0 ? 5000000 : 4700 + (uint64_t)(i % 7) * 10);
	fwc_cost_own(&c, 30000, 100);
	per = fwc_cost_per_record(&c, &call, &own);
	assert_int_equal(per, call + own);
	assert_int_equal(own, 300);
	assert_in_range(call, 1700 - FWC_COST_BUCKET_NS, 1700 + FWC_COST_BUCKET_NS);
	assert_in_range(fwc_cost_median(&c, 0), 3000, 3100);

	/* Cheaper with records on than off (noise): no negative cost. */
	memset(&c, 0, sizeof(c));
	for (int i = 0; i < 200; i++) {
		fwc_cost_call(&c, 0, 3000);
		fwc_cost_call(&c, 1, 2900);
	}
	assert_int_equal(fwc_cost_per_record(&c, &call, &own), 0);

	/* The decay halves a full histogram and keeps its median. */
	memset(&c, 0, sizeof(c));
	for (uint32_t i = 0; i < 2 * FWC_COST_DECAY_CALLS; i++)
		fwc_cost_call(&c, 1, i % 2 ? 2000 : 9000);
	fwc_cost_call(&c, 1, 2000);
	fwc_cost_decay(&c);
	assert_true(atomic_load(&c.total[1]) <= FWC_COST_DECAY_CALLS + 1);
	assert_in_range(fwc_cost_median(&c, 1), 2000, 2000 + FWC_COST_BUCKET_NS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_records_convert),
		cmocka_unit_test(test_batches_bounded),
		cmocka_unit_test(test_sampler_weights_count),
		cmocka_unit_test(test_sampled_totals_exact),
		cmocka_unit_test(test_unseen_not_counted),
		cmocka_unit_test(test_unseen_carried_when_activity_all),
		cmocka_unit_test(test_carry_flush_keeps_the_anchor),
		cmocka_unit_test(test_fresh),
		cmocka_unit_test(test_sampler_classes_and_multiplier),
		cmocka_unit_test(test_weights_and_names),
		cmocka_unit_test(test_busy_timeline_from_every_record),
		cmocka_unit_test(test_busy_gap_adapts),
		cmocka_unit_test(test_busy_idle_inside_two_streams),
		cmocka_unit_test(test_record_cost),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
