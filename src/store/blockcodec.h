/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_STORE_BLOCKCODEC_H
#define FW_STORE_BLOCKCODEC_H

#include <stddef.h>
#include <stdint.h>

/*
 * Encodings of the two kinds of blob the stores keep.
 *
 * A sample block holds the samples of one series over a short time span,
 * column by column (CPUs, timestamps, stacks, threads, types, values), each
 * column varint-encoded and the whole zstd-compressed. Stacks, threads and
 * CPUs go through a block-local dictionary ordered by frequency, so the
 * common ones cost one byte before compression. A timestamp is a whole
 * number of the block's sampling period and a residual since the previous
 * sample on its CPU, in microseconds where every timestamp of the block is
 * a whole microsecond (the codec is lossless: rounding is the caller's
 * choice). Samples come back exactly as given, in the order given, sorted
 * or not. Blocks of the first version, one delta per timestamp, still read.
 *
 * A rollup holds (stack, type, sum) triples, sorted by type then stack.
 *
 * Both carry a magic byte, a version and a checksum of the uncompressed
 * payload. Decoders treat their input as hostile: any malformed, truncated
 * or corrupted blob gives -EINVAL, never a crash or an unbounded allocation.
 */

struct block_sample {
	int64_t ts_ns;
	int64_t value;
	uint32_t stack;
	uint32_t tid;
	uint32_t cpu;
	uint32_t type;
};

struct rollup_entry {
	uint32_t stack;
	uint32_t type;
	int64_t sum;
};

/* Larger blocks are refused by the encoder and by the decoder. */
#define BLOCKCODEC_MAX_SAMPLES	(1u << 22)
#define BLOCKCODEC_MAX_ROLLUP	(1u << 24)

struct blockcodec;

/*
 * Returns a codec (zstd contexts and scratch buffers; not thread-safe) that
 * compresses at zstd level `level`, or NULL with errno set.
 */
struct blockcodec *blockcodec__new(int level);
/* Accepts NULL. */
void blockcodec__free(struct blockcodec *c);

/*
 * Encodes n samples (borrowed). *out is borrowed from the codec and valid
 * until its next encode call. Returns 0, -E2BIG above BLOCKCODEC_MAX_SAMPLES,
 * or -ENOMEM.
 */
int blockcodec__encode(struct blockcodec *c, const struct block_sample *s, uint32_t n,
		       const uint8_t **out, size_t *out_len);

/*
 * Decodes a block. *out is borrowed from the codec and valid until its next
 * decode call. Returns 0, -EINVAL for a malformed block, or -ENOMEM.
 */
int blockcodec__decode(struct blockcodec *c, const void *data, size_t len,
		       const struct block_sample **out, uint32_t *n);

/*
 * Encodes n rollup entries (borrowed), which must be sorted by (type, stack)
 * with no duplicates (else -EINVAL). *out is borrowed as for blocks, and
 * shares the encode buffer with blockcodec__encode().
 */
int blockcodec__encode_rollup(struct blockcodec *c, const struct rollup_entry *e, uint32_t n,
			      const uint8_t **out, size_t *out_len);

/*
 * Decodes a rollup into *out, sorted by (type, stack). *out is borrowed from
 * the codec until its next rollup decode call. Returns 0, -EINVAL or -ENOMEM.
 */
int blockcodec__decode_rollup(struct blockcodec *c, const void *data, size_t len,
			      const struct rollup_entry **out, uint32_t *n);

#endif
