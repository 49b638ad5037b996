// SPDX-License-Identifier: Apache-2.0
/*
 * pb_capped_alloc__check(): the walk before an untrusted protobuf message
 * is unpacked. What it lets through must unpack within the bytes it was
 * given (checked against protobuf-c itself through the capped allocator,
 * for messages shaped the way bombs are: empty submessages, packed and
 * unpacked runs, strings, unknown fields), its per-field caps count
 * elements however they are encoded, and what protobuf-c would refuse it
 * refuses without walking further.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "format/pb_alloc.h"
#include "profile.pb-c.h"

struct buf {
	uint8_t *p;
	size_t len, cap;
};

static void _put(struct buf *b, const void *p, size_t n)
{
	if (b->len + n > b->cap) {
		b->cap = (b->len + n) * 2 + 64;
		b->p = realloc(b->p, b->cap);
		assert_non_null(b->p);
	}
	if (n)	/* an empty submessage has no bytes, and p may be NULL */
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

static void _varint(struct buf *b, uint64_t v)
{
	uint8_t x[10];
	size_t n = 0;

	do {
		x[n] = v & 0x7f;
		v >>= 7;
		x[n] |= v ? 0x80 : 0;
		n++;
	} while (v);
	_put(b, x, n);
}

static void _tag(struct buf *b, unsigned field, unsigned wt)
{
	_varint(b, (uint64_t)field << 3 | wt);
}

static void _bytes(struct buf *b, unsigned field, const void *p, size_t n)
{
	_tag(b, field, 2);
	_varint(b, n);
	_put(b, p, n);
}

static void _sub(struct buf *b, unsigned field, struct buf *sub)
{
	_bytes(b, field, sub->p, sub->len);
	free(sub->p);
	*sub = (struct buf){ 0 };
}

/* The least max_bytes the check lets through. */
static size_t _least(const struct buf *b)
{
	size_t lo = 0, hi = 1u << 30;

	assert_int_equal(pb_capped_alloc__check(&perftools__profiles__profile__descriptor, b->p,
						b->len, hi, NULL, 0, NULL, 0), 0);
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (pb_capped_alloc__check(&perftools__profiles__profile__descriptor, b->p, b->len,
					   mid, NULL, 0, NULL, 0) == 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return lo;
}

/* What the check lets through at its least, protobuf-c unpacks within it. */
static void _fits(struct buf *b, const char *what)
{
	size_t least = _least(b);
	struct pb_capped_alloc ca = { .max = least };
	ProtobufCAllocator pa = pb_capped_alloc__allocator(&ca);
	Perftools__Profiles__Profile *m;

	m = perftools__profiles__profile__unpack(&pa, b->len, b->p);
	if (!m)
		fail_msg("%s (%zu bytes): the check allows %zu bytes, the unpack needed more%s",
			 what, b->len, least, ca.over ? "" : " (or failed to parse)");
	perftools__profiles__profile__free_unpacked(m, &pa);
	assert_int_equal(ca.used, 0);
	free(b->p);
	*b = (struct buf){ 0 };
}

static void test_check_bounds_the_unpack(void **state)
{
	static const size_t counts[] = { 0, 1, 15, 16, 17, 48, 49, 497, 1000, 5000, 20000 };
	struct buf b = { 0 }, s = { 0 }, l = { 0 };
	char what[64];

	(void)state;
	for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
		size_t n = counts[i];

		/* Empty samples: two bytes each, a struct each. */
		for (size_t k = 0; k < n; k++)
			_bytes(&b, 2, "", 0);
		snprintf(what, sizeof(what), "%zu empty samples", n);
		_fits(&b, what);

		/* One sample, n location ids packed: one byte each. */
		for (size_t k = 0; k < n; k++)
			_varint(&s, 1);
		{
			struct buf packed = s;

			s = (struct buf){ 0 };
			_sub(&s, 1, &packed);
		}
		_sub(&b, 2, &s);
		snprintf(what, sizeof(what), "%zu packed location ids", n);
		_fits(&b, what);

		/* The same ids one field each. */
		for (size_t k = 0; k < n; k++) {
			_tag(&s, 1, 0);
			_varint(&s, 7);
		}
		_sub(&b, 2, &s);
		snprintf(what, sizeof(what), "%zu unpacked location ids", n);
		_fits(&b, what);

		/* Strings, empty and not. */
		for (size_t k = 0; k < n; k++)
			_bytes(&b, 6, "abcdefgh", k % 9);
		snprintf(what, sizeof(what), "%zu strings", n);
		_fits(&b, what);

		/* Unknown fields are kept: a copy and an entry each. */
		for (size_t k = 0; k < n; k++) {
			if (k % 2) {
				_tag(&b, 99, 0);
				_varint(&b, k);
			} else {
				_bytes(&b, 98, "xyz", 3);
			}
		}
		snprintf(what, sizeof(what), "%zu unknown fields", n);
		_fits(&b, what);

		/* Locations with lines, and labels on samples. */
		for (size_t k = 0; k < n / 4 + 1; k++) {
			for (int j = 0; j < 3; j++) {
				_tag(&l, 1, 0);
				_varint(&l, j + 1);
				_sub(&s, 4, &l);
			}
			_tag(&s, 1, 0);
			_varint(&s, k + 1);
			_sub(&b, 4, &s);
			_tag(&l, 1, 0);
			_varint(&l, 1);
			_sub(&s, 3, &l);
			_sub(&b, 2, &s);
		}
		snprintf(what, sizeof(what), "%zu nested", n);
		_fits(&b, what);
	}
}

static void test_caps_count_elements(void **state)
{
	const struct pb_cap caps[] = {
		{ &perftools__profiles__sample__descriptor, 1, 1024, "locations in one sample" },
		{ &perftools__profiles__profile__descriptor, 2, 3, "samples" },
	};
	struct buf b = { 0 }, s = { 0 }, ids = { 0 };
	char err[128];

	(void)state;
	/* 1024 ids in two packed runs and single fields: at the cap, not over. */
	for (int k = 0; k < 500; k++)
		_varint(&ids, 300);
	_bytes(&s, 1, ids.p, ids.len);
	_bytes(&s, 1, ids.p, ids.len);
	for (int k = 0; k < 24; k++) {
		_tag(&s, 1, 0);
		_varint(&s, 5);
	}
	{
		struct buf one = { 0 };

		_put(&one, s.p, s.len);
		_sub(&b, 2, &one);
	}
	assert_int_equal(pb_capped_alloc__check(&perftools__profiles__profile__descriptor, b.p,
						b.len, 1u << 30, caps, 2, err, sizeof(err)), 0);
	/* One more id in the same sample. */
	_tag(&s, 1, 0);
	_varint(&s, 5);
	_sub(&b, 2, &s);
	assert_int_equal(pb_capped_alloc__check(&perftools__profiles__profile__descriptor, b.p,
						b.len, 1u << 30, caps, 2, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "more than 1024 locations in one sample"));

	/* The cap is per sample: four samples of 1000 ids each are over "samples" only. */
	free(b.p);
	b = (struct buf){ 0 };
	for (int k = 0; k < 3; k++) {
		s = (struct buf){ 0 };
		_bytes(&s, 1, ids.p, ids.len);
		_bytes(&s, 1, ids.p, ids.len);
		_sub(&b, 2, &s);
	}
	assert_int_equal(pb_capped_alloc__check(&perftools__profiles__profile__descriptor, b.p,
						b.len, 1u << 30, caps, 2, err, sizeof(err)), 0);
	_bytes(&b, 2, "", 0);
	assert_int_equal(pb_capped_alloc__check(&perftools__profiles__profile__descriptor, b.p,
						b.len, 1u << 30, caps, 2, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "more than 3 samples"));
	free(b.p);
	free(ids.p);
}

static void test_bomb_refused_without_allocating(void **state)
{
	/* 10 MB of one-byte ids in one sample: 80 MB once unpacked. */
	size_t n = 10u << 20;
	struct buf b = { 0 };
	uint8_t *ids = malloc(n);
	char err[128];

	(void)state;
	assert_non_null(ids);
	memset(ids, 1, n);
	{
		struct buf s = { 0 };

		_bytes(&s, 1, ids, n);
		_sub(&b, 2, &s);
	}
	free(ids);
	assert_int_equal(pb_capped_alloc__check(&perftools__profiles__profile__descriptor, b.p,
						b.len, 32u << 20, NULL, 0, err, sizeof(err)), -E2BIG);
	assert_non_null(strstr(err, "more than 33554432 bytes unpacked (at location_id)"));
	assert_int_equal(pb_capped_alloc__check(&perftools__profiles__profile__descriptor, b.p,
						b.len, 128u << 20, NULL, 0, err, sizeof(err)), 0);
	free(b.p);
}

static void test_malformed_refused(void **state)
{
	static const struct {
		const char *bytes;
		size_t len;
		const char *why;
	} cases[] = {
		{ "\x12\x05\x08", 3, "truncated field" },		/* length past the end */
		{ "\x48\xff\xff", 3, "truncated varint" },		/* time_nanos */
		{ "\x4b\x00", 2, "unsupported wire type" },		/* start group */
		{ "\x00\x01", 2, "bad field tag" },			/* field 0 */
		{ "\x5a\x00\x5a\x00", 4, "bad field period_type" },	/* singular message twice */
		{ "\x48\x01\x12\x03\x0a\x01\x80", 7, "bad packed field location_id" },
		{ "\x12\x02\x22\x02", 4, "truncated field" },		/* inside a sample */
	};
	char err[128];

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int rc = pb_capped_alloc__check(&perftools__profiles__profile__descriptor,
						cases[i].bytes, cases[i].len, 1u << 20, NULL, 0,
						err, sizeof(err));

		if (rc != -EBADMSG || !strstr(err, cases[i].why))
			fail_msg("case %zu: rc %d, err '%s', expected -EBADMSG '%s'", i, rc,
				 rc ? err : "", cases[i].why);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_bounds_the_unpack),
		cmocka_unit_test(test_caps_count_elements),
		cmocka_unit_test(test_bomb_refused_without_allocating),
		cmocka_unit_test(test_malformed_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
