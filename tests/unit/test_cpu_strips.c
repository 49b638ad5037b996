// SPDX-License-Identifier: Apache-2.0
/*
 * CPU busy intervals end to end below the agent: a batch's intervals through
 * the wire codec, into the SQLite store and back out by time window and
 * selector, and the bucketing of GET /api/v1/cpu/strips.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/batch.h"
#include "common/profile.h"
#include "format/wire.h"
#include "server/cpu_strips.h"
#include "store/selector.h"
#include "store/store.h"
#include "testutil.h"

#define SEC 1000000000LL
#define T0 (1700000000LL * SEC + 123456789LL)

static int64_t _series(struct batch *b, const char *pid, const char *comm)
{
	const char *names[] = { "pid", "comm" }, *values[] = { pid, comm };

	return batch__intern_series(b, names, values, 2);
}

static void _add(struct batch *b, uint32_t cpu, int64_t start, int64_t end, int64_t series,
		 uint32_t tid, const char *comm)
{
	struct batch_cpu_interval iv = {
		.start_ns = start, .end_ns = end, .series = (uint32_t)series, .cpu = cpu,
		.tid = tid, .comm = (uint32_t)profile__intern_string(b->dict, comm),
	};

	assert_int_equal(batch__add_cpu_interval(b, &iv), 0);
}

/* Two CPUs, two processes, out of order; one thread renamed itself. */
static struct batch *_sample_batch(void)
{
	struct batch *b = batch__new(SEC / 19);
	int64_t a, w;

	assert_non_null(b);
	a = _series(b, "100", "app");
	w = _series(b, "200", "worker");
	_add(b, 1, T0 + 5000, T0 + 9000, w, 201, "worker");
	_add(b, 0, T0, T0 + 1000, a, 100, "app");
	_add(b, 0, T0 + 1000, T0 + 4000, w, 200, "worker");
	_add(b, 0, T0 + 10000, T0 + 3 * SEC, a, 101, "app-io");
	_add(b, 1, T0 + 1, T0 + 2, a, 100, "app");
	return b;
}

static int _by_cpu_start(const void *x, const void *y)
{
	const struct batch_cpu_interval *a = x, *b = y;

	if (a->cpu != b->cpu)
		return a->cpu < b->cpu ? -1 : 1;
	return (a->start_ns > b->start_ns) - (a->start_ns < b->start_ns);
}

/* "cpu start end tid comm pid" lines, sorted: ids differ between batches. */
static char *_text(const struct batch *b)
{
	struct batch_cpu_interval *iv = malloc((b->ncpu_intervals + 1) * sizeof(*iv));
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	memcpy(iv, b->cpu_intervals, b->ncpu_intervals * sizeof(*iv));
	qsort(iv, b->ncpu_intervals, sizeof(*iv), _by_cpu_start);
	for (uint32_t i = 0; i < b->ncpu_intervals; i++)
		fprintf(f, "%u %lld %lld %u %s %s\n", iv[i].cpu, (long long)iv[i].start_ns,
			(long long)iv[i].end_ns, iv[i].tid, profile__string(b->dict, iv[i].comm),
			batch__series_label(b, iv[i].series, "pid"));
	fclose(f);
	free(iv);
	return out;
}

static struct batch *_roundtrip(struct wire_session_table *t, struct wire_encoder *e,
				const struct batch *b, enum wire_compression c, int *rc, char *err)
{
	struct batch *out = NULL;
	void *body;
	size_t len;
	char node[64];
	uint64_t seq;

	assert_int_equal(wire_encoder__encode(e, "n1", b, c, &body, &len), 0);
	*rc = wire__decode(t, body, len, c, NULL, &out, node, sizeof(node), &seq, err, 256);
	if (!*rc)
		wire_encoder__ack(e, seq);
	free(body);
	return out;
}

static void test_wire_roundtrip(void **state)
{
	struct wire_session_table *t = wire_sessions__new(4, 16 << 20);
	struct wire_encoder *e = wire_encoder__new(42);
	struct batch *b = _sample_batch(), *out;
	char err[256], *want, *got;
	int rc;

	(void)state;
	want = _text(b);
	for (int c = WIRE_NONE; c <= WIRE_ZSTD; c++) {
		out = _roundtrip(t, e, b, c, &rc, err);
		assert_int_equal(rc, 0);
		assert_int_equal(out->nsamples, 0);
		assert_int_equal(out->ncpu_intervals, 5);
		got = _text(out);
		assert_string_equal(got, want);
		free(got);
		batch__free(out);
	}
	free(want);
	batch__free(b);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

/* The columns the encoder writes: sorted by (cpu, start), starts relative to the previous end. */
static void test_wire_delta_encoding(void **state)
{
	struct wire_session_table *t = wire_sessions__new(4, 16 << 20);
	struct wire_encoder *e = wire_encoder__new(43);
	struct batch *b = batch__new(1), *out;
	int64_t s;
	void *body, *body2;
	size_t len, len2;
	char err[256];
	int rc;

	(void)state;
	s = _series(b, "1", "x");
	/* 1000 back-to-back intervals cost about 3 bytes each (cpu, delta 0, duration). */
	for (int i = 0; i < 1000; i++)
		_add(b, 0, T0 + i * 100000LL, T0 + (i + 1) * 100000LL, s, 1, "x");
	assert_int_equal(wire_encoder__encode(e, "n1", b, WIRE_NONE, &body, &len), 0);
	assert_true(len < 1000 * 10);
	free(body);
	out = _roundtrip(t, e, b, WIRE_NONE, &rc, err);
	assert_int_equal(rc, 0);
	assert_int_equal(out->ncpu_intervals, 1000);
	assert_int_equal(out->cpu_intervals[999].end_ns, T0 + 1000 * 100000LL);
	batch__free(out);
	/* With samples too: both kinds survive in one batch. */
	{
		struct batch_sample sm = { .ts_ns = T0, .stack = 0, .series = (uint32_t)s, .value = 1 };
		int64_t map = profile__intern_mapping(b->dict, "/bin/x", NULL);
		uint32_t frames[1] = { (uint32_t)profile__intern_frame(b->dict, FRAME_NATIVE,
								       (uint32_t)map, 0x10) };

		sm.stack = (uint32_t)profile__intern_stack(b->dict, frames, 1);
		assert_int_equal(batch__add_sample(b, &sm), 0);
		assert_int_equal(wire_encoder__encode(e, "n1", b, WIRE_GZIP, &body2, &len2), 0);
		free(body2);
		out = _roundtrip(t, e, b, WIRE_ZSTD, &rc, err);
		assert_int_equal(rc, 0);
		assert_int_equal(out->nsamples, 1);
		assert_int_equal(out->ncpu_intervals, 1000);
		batch__free(out);
	}
	batch__free(b);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

static void test_wire_rejects_bad_intervals(void **state)
{
	struct wire_session_table *t = wire_sessions__new(4, 16 << 20);
	struct wire_encoder *e = wire_encoder__new(44);
	struct batch *b = batch__new(1), *out;
	char err[256];
	int rc;
	int64_t s;

	(void)state;
	s = _series(b, "1", "x");
	/* Before 2000: rejected with a message, the session left as it was. */
	_add(b, 0, 1000, 2000, s, 1, "x");
	out = _roundtrip(t, e, b, WIRE_NONE, &rc, err);
	assert_int_equal(rc, -EINVAL);
	assert_null(out);
	assert_non_null(strstr(err, "CPU interval 0"));
	assert_int_equal(wire_sessions__count(t), 0);
	/* End before start: the encoder refuses it. */
	b->cpu_intervals[0].start_ns = T0 + 10;
	b->cpu_intervals[0].end_ns = T0;
	{
		void *body;
		size_t len;

		assert_int_equal(wire_encoder__encode(e, "n1", b, WIRE_NONE, &body, &len), -EINVAL);
	}
	/* An id out of range: -EINVAL from the encoder too. */
	b->cpu_intervals[0].end_ns = T0 + 20;
	b->cpu_intervals[0].series = 99;
	{
		void *body;
		size_t len;

		assert_int_equal(wire_encoder__encode(e, "n1", b, WIRE_NONE, &body, &len), -EINVAL);
	}
	batch__free(b);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

/* ---- store ------------------------------------------------------------------ */

struct collect {
	char buf[4096];
	size_t len;
	int n;
};

static int _collect(void *ctx, const struct store_cpu_interval *iv)
{
	struct collect *c = ctx;

	c->len += snprintf(c->buf + c->len, sizeof(c->buf) - c->len, "%s/%u %lld %lld %u %u %s\n",
			   iv->node, iv->cpu, (long long)(iv->start_ns - T0),
			   (long long)(iv->end_ns - T0), iv->pid, iv->tid, iv->comm);
	c->n++;
	return 0;
}

static struct collect _query(struct store *s, int64_t from, int64_t to, const char *q, int64_t cpu)
{
	struct collect c = { 0 };
	struct selector *sel = NULL;
	char err[128];

	if (q) {
		sel = selector__parse(q, err, sizeof(err));
		assert_non_null(sel);
	}
	assert_int_equal(store__cpu_intervals(s, from, to, sel, cpu, _collect, &c), 0);
	selector__free(sel);
	return c;
}

static void test_store_queries(void **state)
{
	char dir[64];
	struct store *s;
	struct batch *b = _sample_batch();
	struct collect c;

	(void)state;
	assert_non_null(tmpdir_make(dir, sizeof(dir), "test-strips"));
	s = store__open(dir, NULL, 0);
	assert_non_null(s);
	assert_int_equal(store__write(s, "n1", b), 0);
	assert_int_equal(store__write(s, "n2", b), 0);

	c = _query(s, T0, T0 + 10 * SEC, "{node=\"n1\"}", -1);
	assert_string_equal(c.buf,
		"n1/0 0 1000 100 100 app\n"
		"n1/0 1000 4000 200 200 worker\n"
		"n1/0 10000 3000000000 100 101 app-io\n"
		"n1/1 1 2 100 100 app\n"
		"n1/1 5000 9000 200 201 worker\n");
	/* Clipped to the window; overlap, not start, decides. */
	c = _query(s, T0 + 2000, T0 + 6000, "{node=\"n1\"}", -1);
	assert_string_equal(c.buf,
		"n1/0 2000 4000 200 200 worker\n"
		"n1/1 5000 6000 200 201 worker\n");
	/* One CPU; a selector on the process. */
	c = _query(s, T0, T0 + 10 * SEC, "{node=\"n2\",comm=\"worker\"}", 1);
	assert_string_equal(c.buf, "n2/1 5000 9000 200 201 worker\n");
	c = _query(s, T0, T0 + 10 * SEC, NULL, -1);
	assert_int_equal(c.n, 10);
	store__close(s);

	/* Survives a reopen; a 25 s interval is kept in pieces but read whole. */
	s = store__open(dir, NULL, 0);
	batch__reset(b);
	_add(b, 3, T0 + 100 * SEC, T0 + 125 * SEC, _series(b, "7", "long"), 7, "long");
	assert_int_equal(store__write(s, "n1", b), 0);
	c = _query(s, T0 + 110 * SEC, T0 + 200 * SEC, "{pid=\"7\"}", -1);
	assert_string_equal(c.buf, "n1/3 110000000000 125000000000 7 7 long\n");
	c = _query(s, T0 + 90 * SEC, T0 + 200 * SEC, "{pid=\"7\"}", 3);
	assert_string_equal(c.buf, "n1/3 100000000000 125000000000 7 7 long\n");
	/* Retention: everything before the cutoff (rounded down to 5 minutes) goes. */
	assert_int_equal(store__retain(s, T0 + 20 * 60 * SEC), 0);
	c = _query(s, T0 - SEC, T0 + 200 * SEC, NULL, -1);
	assert_int_equal(c.n, 0);
	/* Bad records: nothing written. */
	batch__reset(b);
	_add(b, 0, T0 + 5, T0 + 1, _series(b, "1", "x"), 1, "x");
	assert_int_equal(store__write(s, "n1", b), -EINVAL);
	b->cpu_intervals[0].end_ns = T0 + 10;
	b->cpu_intervals[0].comm = 1000;
	assert_int_equal(store__write_cpu_intervals(s, "n1", b), -EINVAL);
	store__close(s);
	batch__free(b);
	tmpdir_remove(dir);
}

/* ---- bucketing -------------------------------------------------------------- */

static void test_buckets(void **state)
{
	struct strip_buckets *bk;
	const char *dom;
	int64_t start;
	double f;

	(void)state;
	assert_null(strip_buckets__new(10, 10, 1));
	assert_null(strip_buckets__new(0, 10, 0));
	assert_null(strip_buckets__new(0, (int64_t)STRIP_MAX_BUCKETS + 1, 1));
	/* [100, 350) in buckets of 100: the last one is 50 long. */
	bk = strip_buckets__new(100, 350, 100);
	assert_non_null(bk);
	assert_int_equal(strip_buckets__count(bk), 3);
	assert_int_equal(strip_buckets__add(bk, 0, 130, "a"), 0);	/* clipped: 30 in bucket 0 */
	assert_int_equal(strip_buckets__add(bk, 150, 190, "b"), 0);	/* 40 in bucket 0 */
	assert_int_equal(strip_buckets__add(bk, 190, 260, "a"), 0);	/* 10 + 60 */
	assert_int_equal(strip_buckets__add(bk, 320, 400, "c"), 0);	/* 30 of 50 */
	strip_buckets__get(bk, 0, &start, &f, &dom);
	assert_int_equal(start, 100);
	assert_true(f > 0.7999 && f < 0.8001);
	assert_string_equal(dom, "a");	/* 30 + 10 beats 40 by name */
	strip_buckets__get(bk, 1, &start, &f, &dom);
	assert_int_equal(start, 200);
	assert_true(f > 0.5999 && f < 0.6001);
	assert_string_equal(dom, "a");
	strip_buckets__get(bk, 2, &start, &f, &dom);
	assert_true(f > 0.5999 && f < 0.6001);
	assert_string_equal(dom, "c");
	/* Overlapping input never makes a bucket more than busy. */
	assert_int_equal(strip_buckets__add(bk, 200, 300, "d"), 0);
	strip_buckets__get(bk, 1, &start, &f, &dom);
	assert_true(f == 1.0);
	assert_string_equal(dom, "d");
	strip_buckets__clear(bk);
	strip_buckets__get(bk, 1, &start, &f, &dom);
	assert_null(dom);
	assert_true(f == 0);
	strip_buckets__free(bk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_wire_roundtrip),
		cmocka_unit_test(test_wire_delta_encoding),
		cmocka_unit_test(test_wire_rejects_bad_intervals),
		cmocka_unit_test(test_store_queries),
		cmocka_unit_test(test_buckets),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
