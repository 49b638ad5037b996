// SPDX-License-Identifier: Apache-2.0
/*
 * Metric points (struct batch_metric) in the wire format, fields 30-33:
 * they survive encode/decode with their labels, names, times and exact
 * double values, travel in a batch with no samples, and bad columns are
 * refused without touching the session.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/batch.h"
#include "common/profile.h"
#include "format/wire.h"
#include "wire.pb-c.h"

#define T0 1700000000000000000LL
#define NODE "gpu-node"

struct body {
	void *data;
	size_t len;
};

static int64_t _gpu_series(struct batch *b, const char *gpu, const char *pid)
{
	const char *names[] = { "gpu", "uuid", "pid", "comm" };
	const char *values[] = { gpu, "GPU-0000", pid, "python3" };

	return batch__intern_series(b, names, values, pid ? 4 : 2);
}

static void _add(struct batch *b, int64_t series, const char *name, int64_t ts, double v)
{
	struct batch_metric m = { .ts_ns = ts, .series = (uint32_t)series, .value = v };
	int64_t id = profile__intern_string(b->dict, name);

	assert_true(id >= 0 && series >= 0);
	m.name = (uint32_t)id;
	assert_int_equal(batch__add_metric(b, &m), 0);
}

static int _cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Points as sorted text lines: ts name {labels} value (%.17g: exact). */
static char *_text(const struct batch *b)
{
	char **lines = calloc(b->nmetrics + 1, sizeof(char *)), *out;
	size_t total = 1;

	assert_non_null(lines);
	for (uint32_t i = 0; i < b->nmetrics; i++) {
		const struct batch_metric *m = &b->metrics[i];
		const struct batch_label *l;
		char labels[512] = "";
		size_t n, off = 0;

		l = batch__series(b, m->series, &n);
		for (size_t k = 0; k < n; k++)
			off += snprintf(labels + off, sizeof(labels) - off, "%s=%s,",
					profile__string(b->dict, l[k].name),
					profile__string(b->dict, l[k].value));
		assert_true(asprintf(&lines[i], "%lld %s {%s} %.17g\n", (long long)m->ts_ns,
				     profile__string(b->dict, m->name), labels, m->value) > 0);
		total += strlen(lines[i]);
	}
	qsort(lines, b->nmetrics, sizeof(char *), _cmp);
	out = calloc(1, total);
	for (uint32_t i = 0; i < b->nmetrics; i++) {
		strcat(out, lines[i]);
		free(lines[i]);
	}
	free(lines);
	return out;
}

static struct batch *_sample_batch(void)
{
	struct batch *b = batch__new(1000);
	int64_t g0 = _gpu_series(b, "0", NULL), g1 = _gpu_series(b, "1", NULL);
	int64_t p = _gpu_series(b, "0", "4242");

	assert_non_null(b);
	/* Out of time order on purpose, and values that need all 64 bits. */
	_add(b, g1, "flamewatch_gpu_power_watts", T0 + 5000, 250.123);
	_add(b, g0, "flamewatch_gpu_power_watts", T0 + 1000, 0.1 + 0.2);
	_add(b, g0, "flamewatch_gpu_memory_total_bytes", T0 + 1000, 150754820096.0);
	_add(b, g0, "flamewatch_gpu_energy_joules_total", T0 + 1000, 123456.789);
	_add(b, p, "flamewatch_gpu_process_utilization_percent", T0 + 800, 42);
	_add(b, g0, "flamewatch_gpu_throttle_reasons", T0 - 3000, 4);
	return b;
}

static struct batch *_roundtrip(struct wire_session_table *t, struct wire_encoder *e,
				const struct batch *b, enum wire_compression c)
{
	struct batch *out = NULL;
	struct body body;
	char node[64], err[256];
	uint64_t seq;
	int rc;

	assert_int_equal(wire_encoder__encode(e, NODE, b, c, &body.data, &body.len), 0);
	rc = wire__decode(t, body.data, body.len, c, NULL, &out, node, sizeof(node), &seq, err,
			  sizeof(err));
	if (rc)
		fail_msg("decode: %d %s", rc, err);
	wire_encoder__ack(e, seq);
	free(body.data);
	return out;
}

static void test_metrics_roundtrip(void **state)
{
	enum wire_compression cs[] = { WIRE_NONE, WIRE_GZIP, WIRE_ZSTD };

	for (size_t k = 0; k < 3; k++) {
		struct wire_session_table *t = wire_sessions__new(4, 1 << 20);
		struct wire_encoder *e = wire_encoder__new(77 + k);
		struct batch *b = _sample_batch(), *out;
		char *want, *got;

		out = _roundtrip(t, e, b, cs[k]);
		assert_false(batch__empty(out));
		assert_int_equal(out->nsamples, 0);
		assert_int_equal(out->nmetrics, 6);
		want = _text(b);
		got = _text(out);
		assert_string_equal(got, want);
		/* Decoded in time order. */
		for (uint32_t i = 1; i < out->nmetrics; i++)
			assert_true(out->metrics[i - 1].ts_ns <= out->metrics[i].ts_ns);
		free(want);
		free(got);
		batch__free(out);

		/* A second batch builds on the acked dictionary: same points again. */
		out = _roundtrip(t, e, b, cs[k]);
		want = _text(b);
		got = _text(out);
		assert_string_equal(got, want);
		free(want);
		free(got);
		batch__free(out);
		batch__free(b);
		wire_encoder__free(e);
		wire_sessions__free(t);
	}
}

/* Samples and metric points in one batch keep each other intact. */
static void test_metrics_with_samples(void **state)
{
	struct wire_session_table *t = wire_sessions__new(4, 1 << 20);
	struct wire_encoder *e = wire_encoder__new(9);
	struct batch *b = _sample_batch(), *out;
	uint32_t frame, stack;
	struct batch_sample s = { .ts_ns = T0, .tid = 7, .cpu = 1, .value = 1 };
	const char *n[] = { "pid" }, *v[] = { "7" };

	frame = profile__intern_named_frame(b->dict, FRAME_NATIVE, PROFILE_NO_MAPPING, 0x10,
					    "main", "", 0);
	stack = profile__intern_stack(b->dict, &frame, 1);
	s.stack = stack;
	s.series = batch__intern_series(b, n, v, 1);
	assert_int_equal(batch__add_sample(b, &s), 0);
	out = _roundtrip(t, e, b, WIRE_ZSTD);
	assert_int_equal(out->nsamples, 1);
	assert_int_equal(out->nmetrics, 6);
	assert_string_equal(batch__series_label(out, out->samples[0].series, "pid"), "7");
	batch__free(out);
	batch__free(b);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

typedef void (*mutate_fn)(Flamewatch__Wire__Batch *m);
static void _m_nan(Flamewatch__Wire__Batch *m) { m->metric_value[2] = NAN; }
static void _m_inf(Flamewatch__Wire__Batch *m) { m->metric_value[0] = -INFINITY; }
static void _m_name(Flamewatch__Wire__Batch *m) { m->metric_name[1] = 100000; }
static void _m_series(Flamewatch__Wire__Batch *m) { m->metric_series[3] = 9999; }
static void _m_columns(Flamewatch__Wire__Batch *m) { m->n_metric_value--; }
static void _m_ts(Flamewatch__Wire__Batch *m) { m->metric_ts_delta[0] = 5; }
static void _m_future(Flamewatch__Wire__Batch *m) { m->metric_ts_delta[1] = INT64_MAX / 2; }
static void _m_empty_name(Flamewatch__Wire__Batch *m)
{
	for (size_t i = 0; i < m->n_strings; i++)
		if (!m->strings[i][0])
			m->metric_name[0] = i;
}

static void test_metrics_invalid(void **state)
{
	static const struct {
		mutate_fn fn;
		const char *needle;
	} cases[] = {
		{ _m_nan, "finite" }, { _m_inf, "finite" }, { _m_name, "string id" },
		{ _m_series, "series id" }, { _m_columns, "differ in length" },
		{ _m_ts, "timestamp" }, { _m_future, "timestamp" }, { _m_empty_name, "empty name" },
	};

	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct wire_session_table *t = wire_sessions__new(4, 1 << 20);
		struct wire_encoder *e = wire_encoder__new(5);
		struct batch *b = _sample_batch(), *out = NULL;
		Flamewatch__Wire__Batch *m;
		struct body body, bad;
		char node[64], err[256];
		uint64_t seq;
		int rc;

		/* An empty string for _m_empty_name to point at. */
		{
			const char *nn[] = { "x" }, *vv[] = { "" };

			batch__intern_series(b, nn, vv, 1);
			_add(b, batch__intern_series(b, nn, vv, 1), "flamewatch_gpu_mig_mode", T0, 0);
		}
		assert_int_equal(wire_encoder__encode(e, NODE, b, WIRE_NONE, &body.data, &body.len), 0);
		m = flamewatch__wire__batch__unpack(NULL, body.len, body.data);
		assert_non_null(m);
		cases[k].fn(m);
		bad.len = flamewatch__wire__batch__get_packed_size(m);
		bad.data = malloc(bad.len);
		flamewatch__wire__batch__pack(m, bad.data);
		rc = wire__decode(t, bad.data, bad.len, WIRE_NONE, NULL, &out, node, sizeof(node),
				  &seq, err, sizeof(err));
		assert_int_equal(rc, -EINVAL);
		assert_null(out);
		if (!strstr(err, cases[k].needle))
			fail_msg("case %zu: \"%s\" lacks \"%s\"", k, err, cases[k].needle);
		/* Nothing kept: the good body still decodes as the session's first. */
		assert_int_equal(wire_sessions__count(t), 0);
		rc = wire__decode(t, body.data, body.len, WIRE_NONE, NULL, &out, node,
				  sizeof(node), &seq, err, sizeof(err));
		assert_int_equal(rc, 0);
		assert_int_equal(out->nmetrics, 7);
		batch__free(out);
		flamewatch__wire__batch__free_unpacked(m, NULL);
		free(bad.data);
		free(body.data);
		batch__free(b);
		wire_encoder__free(e);
		wire_sessions__free(t);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metrics_roundtrip),
		cmocka_unit_test(test_metrics_with_samples),
		cmocka_unit_test(test_metrics_invalid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
