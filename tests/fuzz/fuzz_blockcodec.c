// SPDX-License-Identifier: Apache-2.0
/*
 * libFuzzer target for the sample block and rollup codecs. The first byte
 * picks what the rest is:
 *	bit 0 clear	a stored blob: a sample block, or a rollup if bit 1 is
 *			set. Whatever decodes must encode and decode again to
 *			the same samples or entries.
 *	bit 0 set	samples to encode, 12 bytes each: an le64 timestamp,
 *			then CPU, stack, thread and value bytes. Bit 2 makes
 *			every timestamp a whole microsecond, bit 3 makes the
 *			timestamps 19 Hz ticks with the le64 as jitter (the
 *			period model's case). They must come back exactly.
 * Build and run:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *	-std=gnu11 -D_GNU_SOURCE -Isrc tests/fuzz/fuzz_blockcodec.c \
 *	src/store/blockcodec.c src/common/intern.c -lzstd -o /tmp/fuzz_blockcodec
 *   /tmp/fuzz_blockcodec -max_total_time=180 tests/fuzz/corpus/blockcodec
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store/blockcodec.h"

static struct blockcodec *_codec;

static int64_t _le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return (int64_t)v;
}

/* Encodes n samples (borrowed), decodes them and aborts unless they came back exactly. */
static void _round_trip(const struct block_sample *s, uint32_t n)
{
	const struct block_sample *d;
	const uint8_t *enc;
	uint8_t *copy;
	size_t len;
	uint32_t m;

	if (blockcodec__encode(_codec, s, n, &enc, &len))
		abort();
	copy = malloc(len ? len : 1);
	if (!copy)
		abort();
	memcpy(copy, enc, len);
	if (blockcodec__decode(_codec, copy, len, &d, &m) || m != n)
		abort();
	for (uint32_t i = 0; i < n; i++)
		if (memcmp(&d[i], &s[i], sizeof(*d)))
			abort();
	free(copy);
}

static void _block(const uint8_t *data, size_t size)
{
	const struct block_sample *d;
	struct block_sample *s;
	uint32_t n;
	int err = blockcodec__decode(_codec, data, size, &d, &n);

	if (err) {
		if (err != -EINVAL)
			abort();
		return;
	}
	s = malloc((n ? n : 1) * sizeof(*s));
	if (!s)
		abort();
	if (n)
		memcpy(s, d, n * sizeof(*s));
	_round_trip(s, n);
	free(s);
}

static void _rollup(const uint8_t *data, size_t size)
{
	const struct rollup_entry *d, *again;
	struct rollup_entry *e;
	const uint8_t *enc;
	size_t len;
	uint32_t n, m;
	int err = blockcodec__decode_rollup(_codec, data, size, &d, &n);

	if (err) {
		if (err != -EINVAL)
			abort();
		return;
	}
	e = malloc((n ? n : 1) * sizeof(*e));
	if (!e)
		abort();
	if (n)
		memcpy(e, d, n * sizeof(*e));
	/* The encoder refuses unsorted entries: whatever decoded must be sorted. */
	if (blockcodec__encode_rollup(_codec, e, n, &enc, &len) ||
	    blockcodec__decode_rollup(_codec, enc, len, &again, &m) || m != n ||
	    (n && memcmp(again, e, n * sizeof(*e))))
		abort();
	free(e);
}

static void _samples(uint8_t mode, const uint8_t *data, size_t size)
{
	uint32_t n = (uint32_t)(size / 12);
	struct block_sample *s = malloc((n ? n : 1) * sizeof(*s));

	if (!s)
		abort();
	for (uint32_t i = 0; i < n; i++) {
		const uint8_t *p = data + 12 * (size_t)i;
		int64_t ts = _le64(p);

		if (mode & 8)
			ts = 1765000000000000000LL + (int64_t)i / 4 * 52631579 + (int8_t)p[0] * 1000 +
			     (p[1] & 3);
		if (mode & 4)
			ts = ts / 1000 * 1000;
		s[i] = (struct block_sample){
			.ts_ns = ts,
			.cpu = p[8] & 15,
			.stack = p[9],
			.tid = 1000 + (p[10] & 7),
			.value = (int8_t)p[11],
			.type = p[11] >> 7,
		};
	}
	_round_trip(s, n);
	free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t mode;

	if (!_codec && !(_codec = blockcodec__new(1)))
		abort();
	if (!size)
		return 0;
	mode = data[0];
	if (mode & 1)
		_samples(mode, data + 1, size - 1);
	else if (mode & 2)
		_rollup(data + 1, size - 1);
	else
		_block(data + 1, size - 1);
	return 0;
}
