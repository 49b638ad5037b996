// SPDX-License-Identifier: Apache-2.0
/*
 * Sample block and rollup encodings: exact round trips (including values at
 * the edges of their ranges and unsorted timestamps), and hostile input:
 * every truncation and every single-byte corruption of a block must give
 * -EINVAL or a successful decode, never a crash (ASan/UBSan builds check the
 * "never"), and a corruption the checksum catches must not decode.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/intern.h"
#include "store/blockcodec.h"
#include "testutil.h"

static uint64_t _rng = 0x9e3779b97f4a7c15ULL;

static struct block_sample *_make_samples(uint32_t n)
{
	struct block_sample *s = calloc(n ? n : 1, sizeof(*s));
	int64_t ts = 1700000000000000000LL;

	assert_non_null(s);
	for (uint32_t i = 0; i < n; i++) {
		ts += xorshift(&_rng) % 100000000;
		s[i] = (struct block_sample){
			.ts_ns = ts,
			.value = 1,
			.stack = 1000 + (uint32_t)(xorshift(&_rng) % 50) *
					(uint32_t)(xorshift(&_rng) % 3),
			.tid = 4000 + (uint32_t)(xorshift(&_rng) % 4),
			.cpu = (uint32_t)(xorshift(&_rng) % 8),
			.type = 0,
		};
	}
	return s;
}

static void _round_trip(struct blockcodec *c, const struct block_sample *s, uint32_t n)
{
	const struct block_sample *d;
	const uint8_t *enc;
	uint8_t *copy;
	size_t len;
	uint32_t m = 12345;

	assert_int_equal(blockcodec__encode(c, s, n, &enc, &len), 0);
	copy = malloc(len);
	assert_non_null(copy);
	memcpy(copy, enc, len);
	assert_int_equal(blockcodec__decode(c, copy, len, &d, &m), 0);
	assert_int_equal(m, n);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(d[i].ts_ns, s[i].ts_ns);
		assert_int_equal(d[i].value, s[i].value);
		assert_int_equal(d[i].stack, s[i].stack);
		assert_int_equal(d[i].tid, s[i].tid);
		assert_int_equal(d[i].cpu, s[i].cpu);
		assert_int_equal(d[i].type, s[i].type);
	}
	free(copy);
}

static void test_round_trip(void **state)
{
	struct blockcodec *c = blockcodec__new(1);
	struct block_sample *s;

	assert_non_null(c);
	/*
	 * Small (stored raw) and large (compressed) blocks, growing then
	 * shrinking: the codec's scratch tables must not leak from one block
	 * into the next.
	 */
	for (uint32_t n = 1; n <= 9000; n = n * 3 + 1) {
		s = _make_samples(n);
		_round_trip(c, s, n);
		free(s);
	}
	for (uint32_t n = 9000; n > 0; n /= 3) {
		s = _make_samples(n);
		for (uint32_t i = 0; i < n; i++)
			s[i].stack = (uint32_t)xorshift(&_rng) % (n + 1);
		_round_trip(c, s, n);
		free(s);
	}
	blockcodec__free(c);
	blockcodec__free(NULL);
}

static void test_empty_block(void **state)
{
	struct blockcodec *c = blockcodec__new(1);
	const struct block_sample *d;
	const uint8_t *enc;
	size_t len;
	uint32_t m = 7;

	assert_non_null(c);
	assert_int_equal(blockcodec__encode(c, NULL, 0, &enc, &len), 0);
	assert_true(len > 0);
	assert_int_equal(blockcodec__decode(c, enc, len, &d, &m), 0);
	assert_int_equal(m, 0);
	assert_int_equal(blockcodec__decode(c, enc, 0, &d, &m), -EINVAL);
	assert_int_equal(blockcodec__decode(c, NULL, 0, &d, &m), -EINVAL);
	blockcodec__free(c);
}

static void test_extremes_and_disorder(void **state)
{
	struct block_sample s[] = {
		{ INT64_MAX, INT64_MIN, UINT32_MAX, UINT32_MAX, UINT32_MAX, UINT32_MAX },
		{ INT64_MIN, INT64_MAX, 0, 0, 0, 0 },
		{ 0, -1, 7, 1, 2, 1 },
		{ -5, 0, UINT32_MAX, 1, 3, 0 },
		{ 1700000000000000000LL, 123456789012LL, 7, 2, 4, 1 },
		{ 1600000000000000000LL, 1, 7, 2, 4, 1 },
	};
	struct blockcodec *c = blockcodec__new(3);

	assert_non_null(c);
	_round_trip(c, s, sizeof(s) / sizeof(s[0]));
	blockcodec__free(c);
}

/*
 * Every truncation and every corruption of each byte (for small blocks)
 * or of a sample of bytes (for large ones): no crash, and a decode that
 * succeeds returns the right number of samples.
 */
static void _abuse(struct blockcodec *c, const uint8_t *enc, size_t len, uint32_t n)
{
	uint8_t *buf = malloc(len);
	const struct block_sample *d;
	uint32_t m;
	size_t step = len > 600 ? len / 300 : 1;

	assert_non_null(buf);
	for (size_t cut = 0; cut < len; cut++) {
		memcpy(buf, enc, cut);
		assert_int_equal(blockcodec__decode(c, buf, cut, &d, &m), -EINVAL);
	}
	for (size_t i = 0; i < len; i += step) {
		for (int flip = 1; flip < 256; flip <<= 1) {
			int err;

			memcpy(buf, enc, len);
			buf[i] ^= (uint8_t)flip;
			err = blockcodec__decode(c, buf, len, &d, &m);
			assert_true(err == 0 || err == -EINVAL);
			if (!err)
				assert_int_equal(m, n);
		}
	}
	free(buf);
}

static void test_hostile_blocks(void **state)
{
	struct blockcodec *c = blockcodec__new(1);
	const struct block_sample *d;
	const uint8_t *enc;
	uint8_t *copy, junk[64];
	size_t len;
	uint32_t m;

	assert_non_null(c);
	for (uint32_t n = 0; n <= 4000; n = n ? n * 20 : 10) {
		struct block_sample *s = _make_samples(n);

		assert_int_equal(blockcodec__encode(c, s, n, &enc, &len), 0);
		copy = malloc(len);
		assert_non_null(copy);
		memcpy(copy, enc, len);
		_abuse(c, copy, len, n);
		/* A trailing byte is an error too. */
		copy = realloc(copy, len + 1);
		copy[len] = 0;
		assert_int_equal(blockcodec__decode(c, copy, len + 1, &d, &m), -EINVAL);
		free(copy);
		free(s);
	}
	/* Random junk with a valid magic and version, claiming huge counts. */
	for (int i = 0; i < 2000; i++) {
		for (size_t j = 0; j < sizeof(junk); j++)
			junk[j] = (uint8_t)xorshift(&_rng);
		junk[0] = 0xfb;
		junk[1] = (uint8_t)(1 + (i & 2) / 2);	/* both versions */
		junk[2] = (uint8_t)(i & 1);
		assert_int_equal(blockcodec__decode(c, junk, sizeof(junk), &d, &m), -EINVAL);
	}
	blockcodec__free(c);
}

/*
 * Version 1 blocks, as the version 1 encoder wrote them (level 3) for
 * _v1_samples(3), (20) and (700): one stored raw, one compressed whole and
 * one compressed column by column. Stores written before version 2 must
 * still read.
 */
static const uint8_t _v1_raw[] = {
	0xfb, 0x01, 0x00, 0x03, 0x2b, 0x55, 0xdf, 0x3f, 0xed, 0x03, 0x64, 0x65,
	0x68, 0x03, 0xa0, 0x1f, 0xa1, 0x1f, 0xa2, 0x1f, 0x80, 0x80, 0xd0, 0xe2,
	0xc6, 0xbf, 0xce, 0x97, 0x2f, 0x88, 0xf0, 0x98, 0x32, 0x88, 0xf0, 0x98,
	0x32, 0x00, 0x01, 0x02, 0x00, 0x01, 0x02, 0x00, 0x01, 0x02, 0x01, 0x00,
	0x00, 0x02, 0x02, 0x02,
};
static const uint8_t _v1_zstd[] = {
	0xfb, 0x01, 0x01, 0x14, 0xd9, 0x01, 0x28, 0xb5, 0x2f, 0xfd, 0x24, 0xd9,
	0x1d, 0x04, 0x00, 0xd4, 0x05, 0x13, 0x80, 0x01, 0x64, 0x65, 0x67, 0x68,
	0x6b, 0x6d, 0x6e, 0x6f, 0x70, 0x74, 0x79, 0x7d, 0x7e, 0x7f, 0x82, 0x01,
	0x85, 0x01, 0x86, 0x01, 0x88, 0x01, 0x03, 0xa0, 0x1f, 0xa1, 0x1f, 0xa2,
	0x1f, 0x80, 0x80, 0xd0, 0xe2, 0xc6, 0xbf, 0xce, 0x97, 0x2f, 0x88, 0xf0,
	0x98, 0x32, 0x82, 0xf8, 0xa1, 0xf2, 0xa1, 0x01, 0x02, 0x04, 0x06, 0x0a,
	0x0c, 0x12, 0x09, 0x0e, 0x05, 0x0d, 0x07, 0x10, 0x0b, 0x08, 0x03, 0x11,
	0x0f, 0x00, 0x00, 0x00, 0x01, 0x02, 0x00, 0x01, 0x02, 0x03, 0x04, 0x05,
	0x06, 0x07, 0x01, 0x00, 0x02, 0x02, 0x02, 0x05, 0x02, 0x13, 0x02, 0x21,
	0x02, 0x02, 0x10, 0x00, 0x40, 0x30, 0xee, 0xaa, 0x4b, 0x09, 0xb8, 0x02,
	0xaf, 0x70, 0xbc, 0x6e, 0xf6, 0x54, 0x0f, 0x00, 0x40, 0xc0, 0x01, 0x16,
	0xbc, 0x3c, 0xdc, 0x5c, 0xb0, 0xf3, 0x81, 0x17, 0x88, 0x2b, 0xce, 0xfa,
	0xea, 0xf4, 0xd3, 0x11, 0x91, 0x14,
};
static const uint8_t _v1_split[] = {
	0xfb, 0x01, 0x01, 0xbc, 0x05, 0x9c, 0x32, 0x28, 0xb5, 0x2f, 0xfd, 0x64,
	0x1c, 0x18, 0x00, 0x01, 0x00, 0x13, 0x67, 0x6b, 0x6e, 0x6f, 0x70, 0x74,
	0x79, 0x7d, 0x7e, 0x7f, 0x80, 0x01, 0x82, 0x01, 0x85, 0x01, 0x86, 0x01,
	0x88, 0x01, 0x65, 0x68, 0x6d, 0x64, 0x03, 0xa0, 0x1f, 0xa1, 0x1f, 0xa2,
	0x1f, 0x74, 0x01, 0x00, 0x90, 0x80, 0x80, 0xd0, 0xe2, 0xc6, 0xbf, 0xce,
	0x97, 0x2f, 0x88, 0xf0, 0x98, 0x32, 0x82, 0xf8, 0xa1, 0xf2, 0xa1, 0x0b,
	0x00, 0x9d, 0xfa, 0xca, 0xc3, 0x54, 0x0f, 0x00, 0x40, 0xc0, 0x01, 0x16,
	0xbc, 0x3c, 0xdc, 0x5c, 0xb0, 0xf3, 0x81, 0x17, 0x88, 0x2b, 0xce, 0xbe,
	0xba, 0x2f, 0x74, 0x01, 0x00, 0x54, 0x02, 0x12, 0x0f, 0x10, 0x11, 0x05,
	0x07, 0x0e, 0x04, 0x09, 0x01, 0x08, 0x02, 0x0c, 0x06, 0x03, 0x00, 0x0d,
	0x0b, 0x0a, 0x0a, 0x0b, 0x0d, 0x00, 0x03, 0x06, 0x0c, 0x02, 0x08, 0x01,
	0x09, 0x04, 0x0e, 0x07, 0x05, 0x11, 0x10, 0x0f, 0x01, 0x00, 0xa5, 0x84,
	0x2a, 0xf5, 0x04, 0x54, 0x00, 0x00, 0x18, 0x00, 0x01, 0x02, 0x01, 0x00,
	0xb6, 0xac, 0xdc, 0x10, 0x7c, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0x03,
	0x04, 0x05, 0x06, 0x07, 0x01, 0x00, 0xb1, 0x56, 0x15, 0x2e, 0x5c, 0x00,
	0x00, 0x10, 0x01, 0x00, 0x02, 0x00, 0xae, 0x5c, 0x2a, 0xa0, 0x70, 0x58,
	0x4d, 0x05, 0x00, 0xf4, 0x07, 0x02, 0x02, 0x02, 0x05, 0x02, 0x13, 0x02,
	0x21, 0x02, 0x2f, 0x02, 0x3d, 0x02, 0x4b, 0x02, 0x59, 0x02, 0x67, 0x02,
	0x75, 0x02, 0x83, 0x01, 0x02, 0x91, 0x9f, 0xad, 0xbb, 0xc9, 0xd7, 0xe5,
	0xf3, 0x81, 0x02, 0x8f, 0x9d, 0xab, 0xb9, 0xc7, 0xd5, 0xe3, 0xf1, 0xff,
	0x8d, 0x03, 0x9b, 0xa9, 0xb7, 0xc5, 0xd3, 0xe1, 0xef, 0xfd, 0x8b, 0x04,
	0x99, 0xa7, 0xb5, 0xc3, 0xd1, 0xdf, 0xed, 0xfb, 0x89, 0x05, 0x97, 0xa5,
	0xb3, 0xc1, 0xcf, 0xdd, 0xeb, 0xf9, 0x87, 0x06, 0x95, 0xa3, 0xb1, 0xbf,
	0xcd, 0xdb, 0xe9, 0xf7, 0x85, 0x07, 0x93, 0xa1, 0xaf, 0xbd, 0xcb, 0xd9,
	0xe7, 0xf5, 0x83, 0x08, 0x91, 0x9f, 0xad, 0xbb, 0xc9, 0xd7, 0xe5, 0xf3,
	0x81, 0x09, 0x8f, 0x9d, 0xab, 0xb9, 0xc7, 0xd5, 0xe3, 0xf1, 0xff, 0x8d,
	0x0a, 0x9b, 0xa9, 0xb7, 0xc5, 0xd3, 0xe1, 0xef, 0x0a, 0x02, 0x02, 0x02,
	0x63, 0xa8, 0x10, 0xd0, 0x36, 0x06, 0xf0, 0x85, 0x03, 0x10, 0x22, 0xe4,
	0x03, 0xc1, 0x2a, 0x27, 0x93, 0xf2, 0x32, 0x92, 0xe6, 0xb2, 0x24, 0xe5,
	0x65, 0xb4, 0x9b, 0xfa, 0x24, 0x42, 0xee, 0x81, 0xdb, 0xaf, 0xc0, 0x2f,
	0x67, 0x01, 0x32, 0x05, 0xec, 0xc1, 0x01, 0x13,
};

static void _v1_samples(struct block_sample *s, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		s[i] = (struct block_sample){
			.ts_ns = 1700000000000000000LL + (int64_t)i * 52631579 + (i % 5) * 1000 + i % 3,
			.value = i % 7 == 3 ? -(int64_t)i : 1,
			.stack = 100 + (i * i) % 37,
			.tid = 4000 + i % 3,
			.cpu = i % 8,
			.type = i % 11 == 0,
		};
	}
}

static void test_v1_blocks(void **state)
{
	static const struct { const uint8_t *p; size_t len; uint32_t n; uint8_t method; } v1[] = {
		{ _v1_raw, sizeof(_v1_raw), 3, 0 },
		{ _v1_zstd, sizeof(_v1_zstd), 20, 1 },
		{ _v1_split, sizeof(_v1_split), 700, 1 },
	};
	struct blockcodec *c = blockcodec__new(3);
	struct block_sample want[700];

	assert_non_null(c);
	_v1_samples(want, 700);
	for (size_t b = 0; b < sizeof(v1) / sizeof(v1[0]); b++) {
		const struct block_sample *d;
		uint32_t m;

		assert_int_equal(v1[b].p[1], 1);
		assert_int_equal(v1[b].p[2], v1[b].method);
		assert_int_equal(blockcodec__decode(c, v1[b].p, v1[b].len, &d, &m), 0);
		assert_int_equal(m, v1[b].n);
		for (uint32_t i = 0; i < m; i++) {
			assert_int_equal(d[i].ts_ns, want[i].ts_ns);
			assert_int_equal(d[i].value, want[i].value);
			assert_int_equal(d[i].stack, want[i].stack);
			assert_int_equal(d[i].tid, want[i].tid);
			assert_int_equal(d[i].cpu, want[i].cpu);
			assert_int_equal(d[i].type, want[i].type);
		}
		_abuse(c, v1[b].p, v1[b].len, v1[b].n);
	}
	/* The same samples written now are version 2, and round-trip. */
	_round_trip(c, want, 700);
	blockcodec__free(c);
}

/*
 * A series' samples as the agent takes them: each of 8 CPUs ticks at 19 Hz
 * with its own phase and up to 50 us of jitter, and the series is on the
 * CPU for one tick in three. Timestamps rounded to 1 us when us is set.
 */
static uint32_t _ticks(struct block_sample *s, uint32_t max, bool us)
{
	const int64_t period = 1000000000LL / 19, t0 = 1765000000000000000LL;
	uint32_t n = 0;

	for (int64_t t = 0; n < max; t += period) {
		for (uint32_t cpu = 0; cpu < 8 && n < max; cpu++) {
			int64_t ts = t0 + t + cpu * 5000011 + (int64_t)(xorshift(&_rng) % 50001);

			if (xorshift(&_rng) % 3)
				continue;
			s[n++] = (struct block_sample){
				.ts_ns = us ? (ts + 500) / 1000 * 1000 : ts,
				.value = 1,
				.stack = 7,
				.tid = 4000,
				.cpu = cpu,
			};
		}
	}
	return n;
}

/*
 * Periodic samples at 1 us cost a fraction of what they cost at 1 ns,
 * where below a microsecond there is only noise; both round-trip.
 */
static void test_v2_period_model(void **state)
{
	struct blockcodec *c = blockcodec__new(3);
	uint32_t n = 3000;
	struct block_sample *s = calloc(n, sizeof(*s));
	const uint8_t *enc;
	size_t len_ns, len_us;

	assert_non_null(c);
	assert_non_null(s);
	_ticks(s, n, false);
	assert_int_equal(blockcodec__encode(c, s, n, &enc, &len_ns), 0);
	assert_int_equal(enc[1], 2);
	_round_trip(c, s, n);
	_ticks(s, n, true);
	assert_int_equal(blockcodec__encode(c, s, n, &enc, &len_us), 0);
	assert_int_equal(enc[1], 2);
	_round_trip(c, s, n);
	print_message("periodic samples: %.2f bytes/sample at 1 ns, %.2f at 1 us\n",
		      (double)len_ns / n, (double)len_us / n);
	assert_true(len_us < n * 2);
	assert_true(len_us * 3 < len_ns * 2);
	/* One timestamp off the microsecond puts the block back in ns. */
	s[n / 2].ts_ns++;
	_round_trip(c, s, n);
	free(s);
	blockcodec__free(c);
}

/*
 * Out of order, negative deltas, one CPU or many, timestamps near the ends
 * of their range: exact round trips, in version 2 wherever every delta
 * fits in an int64 (in the block's unit), in version 1 where one does not.
 */
static void test_v2_edges(void **state)
{
	static const struct {
		int64_t ts[5];
		uint32_t cpu[5];
		uint8_t version;
	} cases[] = {
		{ { 5000, 1000, 3000, -2000, 4000 }, { 0, 0, 0, 0, 0 }, 2 },
		{ { 5001, 1000, 3000, -2000, 4000 }, { 0, 1, 0, 1, 0 }, 2 },
		{ { INT64_MAX, 0, INT64_MAX - 1, 1, INT64_MAX / 2 }, { 3, 3, 9, 3, 9 }, 2 },
		{ { INT64_MIN + 1, -1, INT64_MIN + 2, 0, -2 }, { 0, 1, 1, 0, 1 }, 2 },
		{ { INT64_MIN, -1, INT64_MIN + 2, 0, -2 }, { 0, 1, 1, 0, 1 }, 1 },
		{ { INT64_MAX / 1000 * 1000, INT64_MIN / 1000 * 1000, 0, 1000, -1000 },
		  { 0, 0, 0, 1, 1 }, 2 },
		{ { INT64_MAX, INT64_MIN, 0, 1, 2 }, { 0, 0, 0, 0, 0 }, 1 },
		{ { 0, 1, INT64_MIN, INT64_MAX, 5 }, { 4, 5, 4, 5, 4 }, 1 },
	};
	struct blockcodec *c = blockcodec__new(1);
	struct block_sample s[40];

	assert_non_null(c);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		const uint8_t *enc;
		size_t len;

		for (int i = 0; i < 5; i++)
			s[i] = (struct block_sample){ cases[k].ts[i], i - 2, 7, 1, cases[k].cpu[i], 0 };
		assert_int_equal(blockcodec__encode(c, s, 5, &enc, &len), 0);
		assert_int_equal(enc[1], cases[k].version);
		_round_trip(c, s, 5);
	}
	/* A period chosen from a few samples must still fit the outliers. */
	for (int i = 0; i < 40; i++)
		s[i] = (struct block_sample){ 1000000 + (int64_t)(i % 20) * 52632000 +
					      (i == 17 ? INT64_MAX / 4 : 0) - (i == 30 ? 777 : 0),
					      1, 7, 1, (uint32_t)(i % 2), 0 };
	_round_trip(c, s, 40);
	blockcodec__free(c);
}

static void _put(uint8_t *b, size_t *len, uint64_t v)
{
	while (v >= 0x80) {
		b[(*len)++] = (uint8_t)v | 0x80;
		v >>= 7;
	}
	b[(*len)++] = (uint8_t)v;
}

static uint64_t _zz(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

/*
 * Decodes a version 2 block of one sample on CPU 9 built by hand, stored
 * raw with its checksum so that the fields reach the decoder as given.
 */
static int _decode_v2_one(struct blockcodec *c, uint64_t flags, int64_t base, uint64_t period,
			  uint64_t cpu_index, int64_t k, int64_t r, int64_t *ts)
{
	uint8_t payload[128], block[160];
	size_t plen = 0, len = 0;
	const struct block_sample *d;
	uint32_t sum, m;
	int err;

	_put(payload, &plen, 1);	/* stacks */
	_put(payload, &plen, 7);
	_put(payload, &plen, 1);	/* tids */
	_put(payload, &plen, 4000);
	_put(payload, &plen, 1);	/* cpus */
	_put(payload, &plen, 9);
	_put(payload, &plen, flags);
	_put(payload, &plen, _zz(base));
	_put(payload, &plen, period);
	_put(payload, &plen, cpu_index);
	_put(payload, &plen, _zz(k));
	_put(payload, &plen, _zz(r));
	_put(payload, &plen, 0);	/* stack index */
	_put(payload, &plen, 0);	/* tid index */
	_put(payload, &plen, 0);	/* type */
	_put(payload, &plen, _zz(1));	/* value */
	block[len++] = 0xfb;
	block[len++] = 2;
	block[len++] = 0;		/* raw */
	_put(block, &len, 1);
	_put(block, &len, plen);
	sum = (uint32_t)hash__bytes(payload, plen);
	for (int i = 0; i < 4; i++)
		block[len++] = (uint8_t)(sum >> (8 * i));
	memcpy(block + len, payload, plen);
	len += plen;
	err = blockcodec__decode(c, block, len, &d, &m);
	if (!err) {
		assert_int_equal(m, 1);
		assert_int_equal(d[0].cpu, 9);
		assert_int_equal(d[0].stack, 7);
		*ts = d[0].ts_ns;
	}
	return err;
}

/* Fields that are well formed but whose arithmetic overflows, or that are out of range. */
static void test_v2_hostile_fields(void **state)
{
	struct blockcodec *c = blockcodec__new(1);
	int64_t ts = 0;

	assert_non_null(c);
	assert_int_equal(_decode_v2_one(c, 0, 1000, 100, 0, 3, -7, &ts), 0);
	assert_int_equal(ts, 1293);
	assert_int_equal(_decode_v2_one(c, 1, 1000, 100, 0, 3, -7, &ts), 0);
	assert_int_equal(ts, 1293000);
	assert_int_equal(_decode_v2_one(c, 0, 1000, 0, 0, 0, -7, &ts), 0);
	assert_int_equal(ts, 993);
	assert_int_equal(_decode_v2_one(c, 0, INT64_MIN, 1, 0, -1, 0, &ts), -EINVAL);
	assert_int_equal(_decode_v2_one(c, 0, INT64_MAX, 0, 0, 0, 1, &ts), -EINVAL);
	/* k * P */
	assert_int_equal(_decode_v2_one(c, 0, 0, 1ull << 62, 0, 2, 0, &ts), -EINVAL);
	assert_int_equal(_decode_v2_one(c, 0, 0, 1ull << 62, 0, -3, 0, &ts), -EINVAL);
	assert_int_equal(_decode_v2_one(c, 0, 0, INT64_MAX, 0, INT64_MIN, 0, &ts), -EINVAL);
	/* k * P + r, then the sum with the previous timestamp */
	assert_int_equal(_decode_v2_one(c, 0, 0, 1ull << 62, 0, 1, INT64_MAX, &ts), -EINVAL);
	assert_int_equal(_decode_v2_one(c, 0, 1, 1ull << 62, 0, 1, (1ll << 62) - 1, &ts), -EINVAL);
	assert_int_equal(_decode_v2_one(c, 0, 0, 1ull << 62, 0, 1, (1ll << 62) - 1, &ts), 0);
	assert_int_equal(ts, INT64_MAX);
	/* microseconds to ns */
	assert_int_equal(_decode_v2_one(c, 1, INT64_MAX / 1000, 0, 0, 0, 0, &ts), 0);
	assert_int_equal(_decode_v2_one(c, 1, INT64_MAX / 1000 + 1, 0, 0, 0, 0, &ts), -EINVAL);
	assert_int_equal(_decode_v2_one(c, 1, INT64_MIN / 1000 - 1, 0, 0, 0, 0, &ts), -EINVAL);
	/* A period past INT64_MAX, k without a period, an unknown flag, a CPU index out of range. */
	assert_int_equal(_decode_v2_one(c, 0, 0, 1ull << 63, 0, 0, 0, &ts), -EINVAL);
	assert_int_equal(_decode_v2_one(c, 0, 0, 0, 0, 1, 0, &ts), -EINVAL);
	assert_int_equal(_decode_v2_one(c, 2, 0, 100, 0, 1, 0, &ts), -EINVAL);
	assert_int_equal(_decode_v2_one(c, 0, 0, 100, 1, 1, 0, &ts), -EINVAL);
	blockcodec__free(c);
}

static void test_rollup(void **state)
{
	struct rollup_entry e[] = {
		{ 0, 0, 5 }, { 1, 0, -3 }, { 900, 0, INT64_MAX }, { UINT32_MAX, 0, 1 },
		{ 2, 1, INT64_MIN }, { 3, 1, 0 }, { 0, 7, 42 },
	};
	struct rollup_entry bad[] = { { 5, 0, 1 }, { 5, 0, 2 } };
	uint32_t n = sizeof(e) / sizeof(e[0]), m;
	struct blockcodec *c = blockcodec__new(1);
	const struct rollup_entry *d;
	const uint8_t *enc;
	uint8_t *copy;
	size_t len;

	assert_non_null(c);
	assert_int_equal(blockcodec__encode_rollup(c, bad, 2, &enc, &len), -EINVAL);
	assert_int_equal(blockcodec__encode_rollup(c, e, n, &enc, &len), 0);
	copy = malloc(len);
	assert_non_null(copy);
	memcpy(copy, enc, len);
	assert_int_equal(blockcodec__decode_rollup(c, copy, len, &d, &m), 0);
	assert_int_equal(m, n);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(d[i].stack, e[i].stack);
		assert_int_equal(d[i].type, e[i].type);
		assert_int_equal(d[i].sum, e[i].sum);
	}
	for (size_t cut = 0; cut < len; cut++)
		assert_int_equal(blockcodec__decode_rollup(c, copy, cut, &d, &m), -EINVAL);
	/* The checksum covers the body; the header is checked field by field. */
	for (size_t i = 0; i < len; i++) {
		for (int flip = 1; flip < 256; flip <<= 1) {
			int err;

			copy[i] ^= (uint8_t)flip;
			err = blockcodec__decode_rollup(c, copy, len, &d, &m);
			assert_int_equal(err, -EINVAL);
			copy[i] ^= (uint8_t)flip;
		}
	}
	/* Empty rollup. */
	assert_int_equal(blockcodec__encode_rollup(c, NULL, 0, &enc, &len), 0);
	assert_int_equal(blockcodec__decode_rollup(c, enc, len, &d, &m), 0);
	assert_int_equal(m, 0);
	/* A block is not a rollup and a rollup is not a block. */
	{
		const struct block_sample *bs;

		assert_int_equal(blockcodec__decode(c, copy, len, &bs, &m), -EINVAL);
	}
	free(copy);
	blockcodec__free(c);
}

static void _v1_varint(uint8_t *b, size_t *len, uint64_t v)
{
	while (v >= 0x80) {
		b[(*len)++] = (uint8_t)v | 0x80;
		v >>= 7;
	}
	b[(*len)++] = (uint8_t)v;
}

/*
 * Rollups written by version 1 (the type with every entry, hash__bytes()
 * as checksum) stay readable, and a version 2 row of the same entries,
 * which names each type once, is smaller.
 */
static void test_rollup_v1(void **state)
{
	struct rollup_entry e[300];
	uint8_t v1[4096];
	uint32_t n = 0, m, sum;
	size_t len = 0, body;
	struct blockcodec *c = blockcodec__new(1);
	const struct rollup_entry *d;
	const uint8_t *enc;
	size_t len2;

	assert_non_null(c);
	for (uint32_t i = 0; i < 250; i++)
		e[n++] = (struct rollup_entry){ 7 + i * 13, 0, 1 + (int64_t)(i % 5) };
	for (uint32_t i = 0; i < 50; i++)
		e[n++] = (struct rollup_entry){ 3 + i * 100000, 1, 100000 - (int64_t)i * 4000 };
	v1[len++] = 0xfc;
	v1[len++] = 1;
	_v1_varint(v1, &len, n);
	len += 4;
	body = len;
	for (uint32_t i = 0; i < n; i++) {
		bool same = i && e[i].type == e[i - 1].type;
		int64_t s = e[i].sum;

		_v1_varint(v1, &len, e[i].type);
		_v1_varint(v1, &len, same ? e[i].stack - e[i - 1].stack : e[i].stack);
		_v1_varint(v1, &len, ((uint64_t)s << 1) ^ (uint64_t)(s >> 63));
	}
	sum = (uint32_t)hash__bytes(v1 + body, len - body);
	for (int i = 0; i < 4; i++)
		v1[body - 4 + i] = (uint8_t)(sum >> (8 * i));

	assert_int_equal(blockcodec__decode_rollup(c, v1, len, &d, &m), 0);
	assert_int_equal(m, n);
	for (uint32_t i = 0; i < n; i++) {
		assert_int_equal(d[i].stack, e[i].stack);
		assert_int_equal(d[i].type, e[i].type);
		assert_int_equal(d[i].sum, e[i].sum);
	}
	v1[body + 5] ^= 4;
	assert_int_equal(blockcodec__decode_rollup(c, v1, len, &d, &m), -EINVAL);
	v1[body + 5] ^= 4;

	assert_int_equal(blockcodec__encode_rollup(c, e, n, &enc, &len2), 0);
	assert_int_equal(enc[1], 2);
	/* One byte of type less per entry, less the two runs' headers. */
	assert_true(len2 + n - 8 <= len);
	blockcodec__free(c);
}

/*
 * The version 2 rollup format, byte for byte: runs of a type, deltas,
 * zigzag sums and the checksum, which must not depend on the host's byte
 * order (stores move between machines).
 */
static void test_rollup_golden(void **state)
{
	static const struct rollup_entry e[] = {
		{ 5, 0, 1 }, { 9, 0, 2 }, { 300, 1, -7 }, { 70000, 1, 1000000 },
	};
	static const uint8_t want[] = {
		0xfc, 0x02, 0x04, 0x7d, 0xb8, 0x36, 0x4e,	/* magic, version, n, checksum */
		0x00, 0x02, 0x05, 0x02, 0x04, 0x04,		/* type 0: 2 entries */
		0x01, 0x02, 0xac, 0x02, 0x0d, 0xc4, 0xa0, 0x04, 0x80, 0x89, 0x7a,
	};
	struct blockcodec *c = blockcodec__new(1);
	const uint8_t *enc;
	size_t len;

	assert_non_null(c);
	assert_int_equal(blockcodec__encode_rollup(c, e, 4, &enc, &len), 0);
	assert_int_equal(len, sizeof(want));
	assert_memory_equal(enc, want, sizeof(want));
	blockcodec__free(c);
}

/* What realistic 19 Hz samples cost, as a guard against regressions. */
static void test_size(void **state)
{
	struct blockcodec *c = blockcodec__new(1);
	uint32_t n = 4500;
	struct block_sample *s = _make_samples(n);
	const uint8_t *enc;
	size_t len;

	assert_non_null(c);
	assert_int_equal(blockcodec__encode(c, s, n, &enc, &len), 0);
	print_message("4500 samples: %zu bytes, %.2f bytes/sample\n", len, (double)len / n);
	assert_true(len < n * 8);
	free(s);
	blockcodec__free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_empty_block),
		cmocka_unit_test(test_extremes_and_disorder),
		cmocka_unit_test(test_hostile_blocks),
		cmocka_unit_test(test_v1_blocks),
		cmocka_unit_test(test_v2_period_model),
		cmocka_unit_test(test_v2_edges),
		cmocka_unit_test(test_v2_hostile_fields),
		cmocka_unit_test(test_rollup),
		cmocka_unit_test(test_rollup_v1),
		cmocka_unit_test(test_rollup_golden),
		cmocka_unit_test(test_size),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
