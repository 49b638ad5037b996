// SPDX-License-Identifier: Apache-2.0
/* The GPU interval columns of the wire format (fields 50-59 and 81). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "common/batch.h"
#include "common/profile.h"
#include "format/wire.h"
#include "wire.pb-c.h"
#include "testutil.h"

#define NODE "gpu-node"

/* A process launching two kernels (one without a stack) and a copy, and a gpu_time sample. */
static struct batch *_make(int64_t t0)
{
	const char *names[] = { "pid", "comm", "device", "stream" };
	const char *values[] = { "42", "trainer", "1", "7" };
	struct batch *b = batch__new(1);
	struct profile *p;
	int64_t m, f1, f2, leaf, st, st2, series, k1, k2, cp, bz;
	uint32_t fr[3];

	assert_non_null(b);
	p = b->dict;
	m = profile__intern_mapping(p, "/usr/bin/python3", "abcd");
	f1 = profile__intern_named_frame(p, FRAME_NATIVE, m, 0x100, "main", NULL, 0);
	f2 = profile__intern_named_frame(p, FRAME_NATIVE, m, 0x200, "step", "step.c", 9);
	leaf = profile__intern_named_frame(p, FRAME_CUDA_KERNEL, PROFILE_NO_MAPPING, 0,
					   "gemm(float*)", NULL, 0);
	fr[0] = f1;
	fr[1] = f2;
	fr[2] = leaf;
	st = profile__intern_stack(p, fr, 2);
	st2 = profile__intern_stack(p, fr, 3);
	series = batch__intern_series(b, names, values, 4);
	k1 = profile__intern_string(p, "gemm(float*)");
	k2 = profile__intern_string(p, "relu()");
	cp = profile__intern_string(p, "[memcpy DtoH]");
	bz = profile__intern_string(p, "[busy]");
	assert_true(m >= 0 && f1 >= 0 && f2 >= 0 && leaf >= 0 && st >= 0 && st2 >= 0 &&
		    series >= 0 && k1 >= 0 && k2 >= 0 && cp >= 0 && bz >= 0);
	/*
	 * Out of start order on purpose: the encoder orders them. A busy span
	 * with 4 us idle inside it; a kernel's correlation id is not sent.
	 */
	struct batch_gpu_interval iv[4] = {
		{ .start_ns = t0 + 5000, .end_ns = t0 + 9000, .series = series, .device = 1,
		  .stream = 7, .kind = GPU_KERNEL, .name = k2, .stack = BATCH_NO_STACK,
		  .weight = 1, .correlation = 99 },
		{ .start_ns = t0 + 10000, .end_ns = t0 + 20000, .series = series, .device = 1,
		  .kind = GPU_BUSY, .name = bz, .stack = BATCH_NO_STACK, .bytes = 5000,
		  .weight = 1, .correlation = 4000 },
		{ .start_ns = t0, .end_ns = t0 + 2500, .series = series, .device = 1, .stream = 7,
		  .kind = GPU_KERNEL, .name = k1, .stack = st, .weight = 4 },
		{ .start_ns = t0 + 3000, .end_ns = t0 + 3100, .series = series, .device = 1,
		  .stream = 8, .kind = GPU_MEMCPY_DTOH, .name = cp, .stack = st, .bytes = 1 << 20,
		  .weight = 1 },
	};
	for (int i = 0; i < 4; i++)
		assert_int_equal(batch__add_gpu_interval(b, &iv[i]), 0);
	struct batch_sample s = { .ts_ns = t0, .stack = st2, .series = series,
				  .type = SAMPLE_GPU_TIME, .value = 10000 };
	assert_int_equal(batch__add_sample(b, &s), 0);
	return b;
}

static void _frames(const struct batch *b, uint32_t stack, char *out, size_t len)
{
	uint32_t n;
	const uint32_t *f = profile__stack(b->dict, stack, &n);

	out[0] = '\0';
	for (uint32_t i = 0; i < n; i++) {
		strncat(out, profile__string(b->dict, b->dict->frames[f[i]].function),
			len - strlen(out) - 2);
		strncat(out, ";", len - strlen(out) - 1);
	}
}

static void _check(const struct batch *got, int64_t t0)
{
	char st[256];
	const struct batch_gpu_interval *g = got->gpu_intervals;

	assert_int_equal(got->ngpu_intervals, 4);
	assert_int_equal(got->nsamples, 1);
	/* Ordered by start. */
	assert_int_equal(g[0].start_ns, t0);
	assert_int_equal(g[0].end_ns, t0 + 2500);
	assert_string_equal(profile__string(got->dict, g[0].name), "gemm(float*)");
	assert_int_equal(g[0].weight, 4);
	assert_int_equal(g[0].device, 1);
	assert_int_equal(g[0].stream, 7);
	assert_int_equal(g[0].kind, GPU_KERNEL);
	assert_int_equal(g[0].bytes, 0);
	_frames(got, g[0].stack, st, sizeof(st));
	assert_string_equal(st, "main;step;");
	assert_string_equal(batch__series_label(got, g[0].series, "comm"), "trainer");
	assert_string_equal(batch__series_label(got, g[0].series, "device"), "1");

	assert_int_equal(g[1].start_ns, t0 + 3000);
	assert_int_equal(g[1].kind, GPU_MEMCPY_DTOH);
	assert_int_equal(g[1].bytes, 1 << 20);
	assert_int_equal(g[1].stream, 8);
	assert_string_equal(profile__string(got->dict, g[1].name), "[memcpy DtoH]");
	assert_int_equal(g[1].stack, g[0].stack);

	assert_int_equal(g[2].start_ns, t0 + 5000);
	assert_int_equal(g[2].end_ns, t0 + 9000);
	assert_int_equal(g[2].stack, BATCH_NO_STACK);
	assert_int_equal(g[2].weight, 1);
	assert_string_equal(profile__string(got->dict, g[2].name), "relu()");
	assert_int_equal(g[2].correlation, 0);

	assert_int_equal(g[3].kind, GPU_BUSY);
	assert_int_equal(g[3].end_ns - g[3].start_ns, 10000);
	assert_int_equal(g[3].bytes, 5000);
	assert_int_equal(g[3].correlation, 4000);

	assert_int_equal(got->samples[0].type, SAMPLE_GPU_TIME);
	assert_int_equal(got->samples[0].value, 10000);
	_frames(got, got->samples[0].stack, st, sizeof(st));
	assert_string_equal(st, "main;step;gemm(float*);");
	assert_int_equal(got->dict->frames[profile__stack(got->dict, got->samples[0].stack,
							  &(uint32_t){ 0 })[2]].kind,
			 FRAME_CUDA_KERNEL);
}

static struct batch *_decode(struct wire_session_table *t, void *body, size_t len, int want)
{
	struct batch *out = NULL;
	char err[256] = "", node[64];
	uint64_t seq;
	int rc = wire__decode(t, body, len, WIRE_NONE, NULL, &out, node, sizeof(node), &seq,
			      err, sizeof(err));

	if (rc != want)
		fail_msg("decode: want %d, got %d (%s)", want, rc, err);
	if (rc)
		assert_true(err[0]);
	return out;
}

static void test_roundtrip_and_session(void **state)
{
	int64_t t0 = now_ns() - 1000000000LL;
	struct wire_encoder *e = wire_encoder__new(0x1234);
	struct wire_session_table *t = wire_sessions__new(4, 1 << 24);
	struct batch *b = _make(t0), *b2 = _make(t0 + 1000000), *got;
	void *body;
	size_t len;

	assert_non_null(e);
	assert_non_null(t);
	for (int c = WIRE_NONE; c <= WIRE_ZSTD; c++) {
		struct wire_session_table *tc = wire_sessions__new(4, 1 << 24);
		struct batch *out = NULL;
		char err[128];
		struct wire_encoder *ec = wire_encoder__new(0x99 + c);

		assert_int_equal(wire_encoder__encode(ec, NODE, b, c, &body, &len), 0);
		assert_int_equal(wire__decode(tc, body, len, c, NULL, &out, NULL, 0, NULL, err,
					      sizeof(err)), 0);
		_check(out, t0);
		batch__free(out);
		free(body);
		wire_encoder__free(ec);
		wire_sessions__free(tc);
	}

	assert_int_equal(wire_encoder__encode(e, NODE, b, WIRE_NONE, &body, &len), 0);
	got = _decode(t, body, len, 0);
	_check(got, t0);
	batch__free(got);
	free(body);
	wire_encoder__ack(e, wire_encoder__seq(e));
	/* The second batch builds on the first's stacks and strings without resending them. */
	assert_int_equal(wire_encoder__encode(e, NODE, b2, WIRE_NONE, &body, &len), 0);
	{
		Flamewatch__Wire__Batch *m = flamewatch__wire__batch__unpack(NULL, len, body);

		assert_non_null(m);
		assert_int_equal(m->n_stacks, 0);
		assert_int_equal(m->n_strings, 0);
		assert_int_equal(m->n_gpu_start_delta, 4);
		flamewatch__wire__batch__free_unpacked(m, NULL);
	}
	got = _decode(t, body, len, 0);
	_check(got, t0 + 1000000);
	batch__free(got);
	free(body);
	batch__free(b);
	batch__free(b2);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

typedef void (*mutate_fn)(Flamewatch__Wire__Batch *m);
static void _m_stack(Flamewatch__Wire__Batch *m) { m->gpu_stack[0] = 1000; }
static void _m_series(Flamewatch__Wire__Batch *m) { m->gpu_series[1] = 77; }
static void _m_name(Flamewatch__Wire__Batch *m) { m->gpu_name[2] = 5000; }
static void _m_kind(Flamewatch__Wire__Batch *m) { m->gpu_kind[0] = GPU_ACTIVITY_KIND_MAX; }
static void _m_columns(Flamewatch__Wire__Batch *m) { m->n_gpu_bytes--; }
static void _m_start(Flamewatch__Wire__Batch *m) { m->gpu_start_delta[0] = 1; }
static void _m_duration(Flamewatch__Wire__Batch *m) { m->gpu_duration[1] = UINT64_MAX; }
static void _m_weight(Flamewatch__Wire__Batch *m) { m->gpu_weight[0] = 0; }
static void _m_idle_long(Flamewatch__Wire__Batch *m) { m->gpu_busy_idle[3] = 10001; }
static void _m_idle_kernel(Flamewatch__Wire__Batch *m) { m->gpu_busy_idle[0] = 5; }
static void _m_idle_columns(Flamewatch__Wire__Batch *m) { m->n_gpu_busy_idle--; }

static void test_invalid_columns(void **state)
{
	mutate_fn fns[] = { _m_stack, _m_series, _m_name, _m_kind, _m_columns, _m_start,
			    _m_duration, _m_weight, _m_idle_long, _m_idle_kernel, _m_idle_columns };
	int64_t t0 = now_ns() - 1000000000LL;
	struct batch *b = _make(t0);

	for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
		struct wire_encoder *e = wire_encoder__new(0x777 + i);
		struct wire_session_table *t = wire_sessions__new(4, 1 << 24);
		Flamewatch__Wire__Batch *m;
		void *body, *bad;
		size_t len, blen;

		assert_int_equal(wire_encoder__encode(e, NODE, b, WIRE_NONE, &body, &len), 0);
		m = flamewatch__wire__batch__unpack(NULL, len, body);
		assert_non_null(m);
		assert_int_equal(m->n_gpu_weight, 4);	/* one weight is not 1 */
		assert_int_equal(m->n_gpu_busy_idle, 4);	/* one span has idle inside */
		fns[i](m);
		blen = flamewatch__wire__batch__get_packed_size(m);
		bad = malloc(blen);
		flamewatch__wire__batch__pack(m, bad);
		_decode(t, bad, blen, -EINVAL);
		/* Refused whole: the session was not created, the good batch still decodes. */
		assert_int_equal(wire_sessions__count(t), 0);
		batch__free(_decode(t, body, len, 0));
		flamewatch__wire__batch__free_unpacked(m, NULL);
		free(bad);
		free(body);
		wire_encoder__free(e);
		wire_sessions__free(t);
	}
	batch__free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_and_session),
		cmocka_unit_test(test_invalid_columns),
	};

	return cmocka_run_group_tests_name("wire_gpu", tests, NULL, NULL);
}
