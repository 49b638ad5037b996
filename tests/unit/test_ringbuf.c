// SPDX-License-Identifier: Apache-2.0
/*
 * The ring reader on rings laid out in plain memory as the kernel writes
 * them (kernel/bpf/ringbuf.c): records that wrap past the end, discarded
 * and busy records, positions past 2^32. test_cpu_strips and the system
 * tests read real rings through the same code.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include <linux/bpf.h>

#include "agent/ringbuf.h"

#define SIZE 256u

struct ring {
	uint64_t consumer, producer;
	uint8_t data[SIZE];
	struct ringbuf_view v;
};

struct got {
	int n;
	size_t sizes[64];
	uint8_t first[64];	/* each body is filled with one byte value */
	int fail_at;		/* 1-based record that returns an error; 0: none */
};

static void ring_init(struct ring *r, uint64_t start)
{
	memset(r, 0, sizeof(*r));
	r->consumer = r->producer = start;
	r->v = (struct ringbuf_view){ .consumer_pos = &r->consumer, .producer_pos = &r->producer,
				      .data = r->data, .mask = SIZE - 1 };
}

/* Writes a record of size bytes of value fill at the producer's position, the body wrapping as it must. */
static void produce(struct ring *r, uint32_t size, uint8_t fill, uint32_t flags)
{
	uint64_t pos = r->producer;
	uint32_t hdr[2] = { size | flags, 0 };

	memcpy(r->data + (pos & (SIZE - 1)), hdr, sizeof(hdr));
	for (uint32_t i = 0; i < size; i++)
		r->data[(pos + BPF_RINGBUF_HDR_SZ + i) & (SIZE - 1)] = fill;
	r->producer = pos + ((BPF_RINGBUF_HDR_SZ + size + 7) & ~7u);
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct got *g = ctx;
	const uint8_t *p = data;

	for (size_t i = 1; i < size; i++)
		if (p[i] != p[0])
			return -99;	/* a torn body */
	g->sizes[g->n] = size;
	g->first[g->n] = size ? p[0] : 0;
	g->n++;
	return g->fail_at == g->n ? -5 : 0;
}

static void test_records_in_order(void **state)
{
	struct ring r;
	struct got g = { 0 };

	ring_init(&r, 0);
	produce(&r, 10, 1, 0);
	produce(&r, 1, 2, 0);
	produce(&r, 0, 0, 0);
	assert_int_equal(ringbuf_view__consume(&r.v, on_record, &g), 3);
	assert_int_equal(g.sizes[0], 10);
	assert_int_equal(g.first[0], 1);
	assert_int_equal(g.sizes[1], 1);
	assert_int_equal(g.sizes[2], 0);
	assert_int_equal(r.consumer, r.producer);
	/* Nothing new: nothing read, nothing moved. */
	assert_int_equal(ringbuf_view__consume(&r.v, on_record, &g), 0);
	free(r.v.bounce);
}

static void test_wrapped_bodies_arrive_whole(void **state)
{
	struct got g = { 0 };
	struct ring r;

	/* Every start offset, so that bodies of every split are read, past 2^32 too. */
	for (uint64_t start = (1ULL << 32) - SIZE; start < (1ULL << 32) + SIZE; start += 8) {
		memset(&g, 0, sizeof(g));
		ring_init(&r, start);
		produce(&r, 100, 7, 0);
		produce(&r, 120, 8, 0);
		assert_int_equal(ringbuf_view__consume(&r.v, on_record, &g), 2);
		assert_int_equal(g.sizes[0], 100);
		assert_int_equal(g.first[0], 7);
		assert_int_equal(g.sizes[1], 120);
		assert_int_equal(g.first[1], 8);
		assert_int_equal(r.consumer, start + 112 + 128);
		free(r.v.bounce);
	}
}

static void test_discarded_skipped_busy_stops(void **state)
{
	struct ring r;
	struct got g = { 0 };
	uint64_t busy_at;

	ring_init(&r, 40);
	produce(&r, 16, 1, 0);
	produce(&r, 16, 2, BPF_RINGBUF_DISCARD_BIT);
	produce(&r, 16, 3, 0);
	busy_at = r.producer;
	produce(&r, 16, 4, BPF_RINGBUF_BUSY_BIT);
	produce(&r, 16, 5, 0);	/* committed, but behind a busy one */
	assert_int_equal(ringbuf_view__consume(&r.v, on_record, &g), 2);
	assert_int_equal(g.first[0], 1);
	assert_int_equal(g.first[1], 3);
	assert_int_equal(r.consumer, busy_at);
	/* The producer commits it: both follow. */
	r.data[busy_at & (SIZE - 1)] = 16;
	memset(r.data + (busy_at & (SIZE - 1)) + 1, 0, 3);
	assert_int_equal(ringbuf_view__consume(&r.v, on_record, &g), 2);
	assert_int_equal(g.first[2], 4);
	assert_int_equal(g.first[3], 5);
	assert_int_equal(r.consumer, r.producer);
	free(r.v.bounce);
}

static void test_callback_error_consumes_its_record(void **state)
{
	struct ring r;
	struct got g = { .fail_at = 2 };

	ring_init(&r, 0);
	produce(&r, 8, 1, 0);
	produce(&r, 8, 2, 0);
	produce(&r, 8, 3, 0);
	assert_int_equal(ringbuf_view__consume(&r.v, on_record, &g), -5);
	assert_int_equal(r.consumer, 32);	/* past the failed one, not read twice */
	g.fail_at = 0;
	assert_int_equal(ringbuf_view__consume(&r.v, on_record, &g), 1);
	assert_int_equal(g.first[2], 3);
	free(r.v.bounce);
}

static void test_impossible_length_refused(void **state)
{
	struct ring r;
	struct got g = { 0 };
	uint32_t hdr[2] = { SIZE, 0 };

	ring_init(&r, 0);
	memcpy(r.data, hdr, sizeof(hdr));
	r.producer = 8;
	assert_int_equal(ringbuf_view__consume(&r.v, on_record, &g), -22);
	assert_int_equal(g.n, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_records_in_order),
		cmocka_unit_test(test_wrapped_bodies_arrive_whole),
		cmocka_unit_test(test_discarded_skipped_busy_stops),
		cmocka_unit_test(test_callback_error_consumes_its_record),
		cmocka_unit_test(test_impossible_length_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
