// SPDX-License-Identifier: Apache-2.0
/* Compression of an encoded batch; common/decompress.c undoes it on the server. */
#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdlib.h>
#include <zlib.h>
#include <zstd.h>

#include "format/wire.h"
#include "format/wire/wire_int.h"

int wire__compress(enum wire_compression c, uint8_t *in, size_t len, void **out, size_t *out_len)
{
	uint8_t *buf = NULL;
	z_stream zs = { 0 };
	bool zinit = false;
	size_t cap;
	int err = 0;

	if (c == WIRE_NONE) {
		*out = in;
		*out_len = len;
		in = NULL;
		goto out;
	}
	if (c == WIRE_ZSTD) {
		ZSTD_CCtx *cc = ZSTD_createCCtx();

		cap = ZSTD_compressBound(len);
		buf = malloc(cap);
		if (!buf || !cc) {
			ZSTD_freeCCtx(cc);
			err = -ENOMEM;
			goto out;
		}
		/*
		 * Level 3: higher levels gain little on batches and cost CPU
		 * on every node. Its match tables, though, capped at 2^14
		 * entries each: level 3 sizes them for the input, and zstd
		 * clears them before use, so they were the agent's largest
		 * allocation at every flush; capped, batches come out barely
		 * larger.
		 */
		ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 3);
		ZSTD_CCtx_setParameter(cc, ZSTD_c_hashLog, 14);
		ZSTD_CCtx_setParameter(cc, ZSTD_c_chainLog, 14);
		cap = ZSTD_compress2(cc, buf, cap, in, len);
		ZSTD_freeCCtx(cc);
		if (ZSTD_isError(cap)) {
			err = -ENOMEM;
			goto out;
		}
		*out = buf;
		*out_len = cap;
		buf = NULL;
		goto out;
	}
	if (len > UINT_MAX) {
		err = -E2BIG;
		goto out;
	}
	/* windowBits 15 + 16: a gzip wrapper, as Content-Encoding: gzip means. */
	if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8,
			 Z_DEFAULT_STRATEGY) != Z_OK) {
		err = -ENOMEM;
		goto out;
	}
	zinit = true;
	cap = deflateBound(&zs, len);
	buf = cap <= UINT_MAX ? malloc(cap) : NULL;
	if (!buf) {
		err = -ENOMEM;
		goto out;
	}
	zs.next_in = in;
	zs.avail_in = len;
	zs.next_out = buf;
	zs.avail_out = cap;
	/* deflateBound() room: one call finishes the stream. */
	if (deflate(&zs, Z_FINISH) != Z_STREAM_END) {
		err = -ENOMEM;
		goto out;
	}
	*out = buf;
	*out_len = zs.total_out;
	buf = NULL;
out:
	if (zinit)
		deflateEnd(&zs);
	free(buf);
	free(in);
	return err;
}
