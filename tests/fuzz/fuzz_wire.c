// SPDX-License-Identifier: Apache-2.0
/*
 * libFuzzer target for wire__decode(). Input: one mode byte, then one body,
 * or two bodies joined by SEP; both go to one fresh session table, so the
 * second can build on the dictionary of the first (resends, overlaps, gaps).
 * Mode bits 0-1 pick the compression: 0 none, 1 gzip, 2 zstd, 3 none.
 *
 * Whatever is accepted must be a batch whose ids all resolve, and must come
 * back the same through a fresh encoder and decoder.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
 *     -std=gnu11 -D_GNU_SOURCE \
 *     -Isrc -Ibuild/gen tests/fuzz/fuzz_wire.c src/format/wire/encode.c \
 *     src/format/wire/compress.c src/format/wire/session.c \
 *     src/format/wire/decode.c src/format/wire/outmap.c src/format/pb_alloc.c \
 *     build/gen/wire.pb-c.c src/common/batch.c src/common/decompress.c \
 *     src/common/dict_xlate.c src/common/intern.c src/common/profile.c \
 *     -lprotobuf-c -lz -lzstd -o build/fuzz_wire
 *   mkdir -p build/fuzz-corpus
 *   build/fuzz_wire -max_total_time=180 build/fuzz-corpus tests/fuzz/corpus/wire
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "format/wire.h"

#define SEP "\0FW-NEXT\0"
#define SEP_LEN (sizeof(SEP) - 1)

static void _check(const struct batch *b)
{
	uint32_t nstacks = profile__nstacks(b->dict), nseries = batch__nseries(b);
	uint32_t nstrings = intern__count(b->dict->strings);

	for (uint32_t i = 0; i < b->nsamples; i++) {
		const struct batch_sample *s = &b->samples[i];

		if (s->stack >= nstacks || s->series >= nseries || s->type >= SAMPLE_TYPE_MAX ||
		    s->value < 0)
			abort();
	}
	for (uint32_t i = 0; i < nstacks; i++) {
		const uint8_t *frames;
		uint32_t n;

		frames = (const uint8_t *)profile__stack(b->dict, i, &n);
		for (uint32_t j = 0; j < n; j++) {
			uint32_t f;

			memcpy(&f, frames + 4 * j, 4);
			if (f >= b->dict->nframes)
				abort();
		}
	}
	for (uint32_t i = 0; i < b->dict->nframes; i++) {
		const struct profile_frame *f = &b->dict->frames[i];

		if ((f->mapping != PROFILE_NO_MAPPING && f->mapping >= b->dict->nmappings) ||
		    f->function >= nstrings || f->file >= nstrings)
			abort();
	}
}

/* Encodes b again and decodes it in a table of its own: same samples back. */
static void _roundtrip(const struct batch *b, const char *node)
{
	struct wire_session_table *t = wire_sessions__new(1, 1 << 30);
	struct wire_encoder *e = wire_encoder__new(1);
	struct batch *out = NULL;
	void *body = NULL;
	size_t len = 0;
	char err[128];

	if (!t || !e)
		abort();
	if (wire_encoder__encode(e, node, b, WIRE_NONE, &body, &len))
		abort();
	if (wire__decode(t, body, len, WIRE_NONE, NULL, &out, NULL, 0, NULL, err, sizeof(err)))
		abort();
	if (out->nsamples != b->nsamples || intern__count(out->series) > intern__count(b->series) ||
	    profile__nstacks(out->dict) > profile__nstacks(b->dict))
		abort();
	batch__free(out);
	free(body);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const enum wire_compression modes[4] = { WIRE_NONE, WIRE_GZIP, WIRE_ZSTD, WIRE_NONE };
	struct wire_limits lim = wire_limits__default();
	struct wire_session_table *t;
	const uint8_t *body[2], *sep;
	size_t len[2], nbodies = 1;
	enum wire_compression c;
	char node[64], err[256];

	if (size < 1)
		return 0;
	c = modes[data[0] & 3];
	body[0] = data + 1;
	len[0] = size - 1;
	sep = memmem(body[0], len[0], SEP, SEP_LEN);
	if (sep) {
		body[1] = sep + SEP_LEN;
		len[1] = body[0] + len[0] - body[1];
		len[0] = sep - body[0];
		nbodies = 2;
	}

	/* Small enough that every limit is reachable by the fuzzer. */
	lim.max_decompressed = 1 << 20;
	lim.max_unpacked = 16 << 20;
	lim.max_samples = 20000;
	lim.max_stack_depth = 64;
	lim.max_labels = 16;
	lim.max_string = 256;

	t = wire_sessions__new(4, 1 << 20);
	if (!t)
		abort();
	for (size_t i = 0; i < nbodies; i++) {
		struct batch *out = NULL;
		uint64_t seq;
		int rc = wire__decode(t, body[i], len[i], c, &lim, &out, node, sizeof(node), &seq,
				      err, sizeof(err));

		if (rc) {
			if (out || !err[0])
				abort();
			continue;
		}
		_check(out);
		_roundtrip(out, node);
		batch__free(out);
	}
	wire_sessions__free(t);
	return 0;
}
