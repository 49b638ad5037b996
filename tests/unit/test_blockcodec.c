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
		junk[1] = 1;
		junk[2] = (uint8_t)(i & 1);
		assert_int_equal(blockcodec__decode(c, junk, sizeof(junk), &d, &m), -EINVAL);
	}
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
		cmocka_unit_test(test_rollup),
		cmocka_unit_test(test_rollup_v1),
		cmocka_unit_test(test_rollup_golden),
		cmocka_unit_test(test_size),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
