// SPDX-License-Identifier: Apache-2.0
/*
 * CRuby's succinct index tables (iseq.c, VM_INSN_INFO_TABLE_IMPL 2), built
 * here per the format's definition: 54 indexes ranked 9 to a 64-bit word
 * (7 bits each: the positions at or below the index), then blocks of 512
 * indexes (an unsigned rank, 9-bit ranks of 7 small blocks, 8 words of
 * bits). The real interpreter's tables are checked end to end, through the
 * lines they give, in test_ruby.py.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "agent/interp/ruby.h"

#define IMM 54
#define BLOCK 80

/* Writes the table of positions pos[0..n) for an iseq of size words; returns its length. */
static size_t build(uint8_t *t, size_t cap, uint32_t size, const uint32_t *pos, uint32_t n)
{
	size_t imm = (size < IMM ? size + 8 : IMM) / 9;
	size_t blocks = size < IMM ? 0 : (size - IMM + 511) / 512;
	size_t len = imm * 8 + blocks * BLOCK;
	uint32_t r = 0;

	assert_true(len <= cap);
	memset(t, 0, len);
	for (size_t j = 0; j < imm; j++) {
		uint64_t w = 0;

		for (int i = 0; i < 9; i++) {
			if (r < n && pos[r] == j * 9 + i)
				r++;
			w |= (uint64_t)r << (7 * i);
		}
		memcpy(t + 8 * j, &w, 8);
	}
	for (size_t k = 0; k < blocks; k++) {
		uint8_t *b = t + imm * 8 + k * BLOCK;
		uint64_t small = 0;
		uint32_t rank = r, in_block = 0;

		memcpy(b, &rank, 4);
		for (int j = 0; j < 8; j++) {
			uint64_t bits = 0;

			if (j)
				small |= (uint64_t)in_block << (9 * (j - 1));
			for (int i = 0; i < 64; i++) {
				if (r < n && pos[r] == IMM + k * 512 + j * 64 + i) {
					bits |= 1ull << i;
					r++;
					in_block++;
				}
			}
			memcpy(b + 16 + 8 * j, &bits, 8);
		}
		memcpy(b + 8, &small, 8);
	}
	return len;
}

static void check(uint32_t size, const uint32_t *pos, uint32_t n)
{
	static uint8_t t[8192];
	uint32_t out[64];
	size_t len = build(t, sizeof(t), size, pos, n);

	assert_int_equal(ruby__succ_positions(t, len, size, out, 64), n);
	assert_memory_equal(out, pos, n * sizeof(*pos));
	/* A table cut short is refused, not read past. */
	assert_int_equal(ruby__succ_positions(t, len - 1, size, out, 64), -EINVAL);
}

static void test_small_iseq(void **state)
{
	/* Under 54 words: only the immediate part, sized to the iseq. */
	const uint32_t pos[] = { 0, 2, 8, 9, 17 };

	(void)state;
	check(20, pos, 5);
}

static void test_large_iseq(void **state)
{
	/* Positions on both sides of the immediate part's end and of block boundaries. */
	const uint32_t pos[] = { 0, 3, 8, 52, 53, 54, 60, 117, 118, 565, 566, 600, 1077, 1100 };

	(void)state;
	check(1200, pos, sizeof(pos) / sizeof(pos[0]));
}

static void test_no_position_zero(void **state)
{
	/* A table without index 0 must not report one. */
	const uint32_t pos[] = { 4, 70 };

	(void)state;
	check(100, pos, 2);
}

static void test_max(void **state)
{
	const uint32_t pos[] = { 0, 1, 2, 3 };
	uint8_t t[64];
	uint32_t out[2];
	size_t len = build(t, sizeof(t), 10, pos, 4);

	(void)state;
	/* No more than max positions are written. */
	assert_int_equal(ruby__succ_positions(t, len, 10, out, 2), 2);
	assert_int_equal(out[0], 0);
	assert_int_equal(out[1], 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_small_iseq),
		cmocka_unit_test(test_large_iseq),
		cmocka_unit_test(test_no_position_zero),
		cmocka_unit_test(test_max),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
