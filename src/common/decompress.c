// SPDX-License-Identifier: Apache-2.0
/* Bounded gzip and zstd decompression for untrusted request bodies. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>
#include <zstd.h>
#include <zstd_errors.h>

#include "decompress.h"

__attribute__((format(printf, 4, 5)))
static int _fail(char *err, size_t err_len, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && err_len) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return code;
}

/*
 * Output is grown by doubling up to cap + 1 bytes: having one byte more
 * than allowed is how an over-long body is told from one exactly at the cap,
 * without ever inflating further than that.
 */
static int _grow(uint8_t **buf, size_t *size, size_t cap)
{
	size_t n = *size * 2;
	uint8_t *b;

	if (n > cap + 1 || n < *size)
		n = cap + 1;
	b = realloc(*buf, n);
	if (!b)
		return -ENOMEM;
	*buf = b;
	*size = n;
	return 0;
}

int decompress__gzip(const uint8_t *in, size_t len, size_t cap, uint8_t **out, size_t *out_len,
		   char *err, size_t err_len)
{
	z_stream zs = { 0 };
	bool zinit = false;
	uint8_t *buf = NULL;
	size_t size, have = 0;
	int ret, rc = 0;

	if (len > UINT_MAX) {
		rc = _fail(err, err_len, -E2BIG, "body too large");
		goto out;
	}
	size = len < (cap + 1) / 4 ? len * 4 : cap + 1;
	if (size < 4096)
		size = cap + 1 < 4096 ? cap + 1 : 4096;
	buf = malloc(size);
	/* 16 + MAX_WBITS: gzip wrapper only, as Content-Encoding: gzip says. */
	if (!buf || inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
		rc = _fail(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	zinit = true;
	zs.next_in = (Bytef *)in;
	zs.avail_in = len;
	for (;;) {
		size_t room;

		if (have == size) {
			if (size > cap) {
				rc = _fail(err, err_len, -E2BIG,
					   "decompressed body exceeds %zu bytes", cap);
				goto out;
			}
			rc = _grow(&buf, &size, cap);
			if (rc) {
				rc = _fail(err, err_len, rc, "out of memory");
				goto out;
			}
		}
		room = size - have;
		zs.next_out = buf + have;
		zs.avail_out = room > UINT_MAX ? UINT_MAX : room;
		room = zs.avail_out;
		ret = inflate(&zs, Z_NO_FLUSH);
		have += room - zs.avail_out;
		if (ret == Z_STREAM_END)
			break;
		if (ret == Z_MEM_ERROR) {
			rc = _fail(err, err_len, -ENOMEM, "out of memory");
			goto out;
		}
		if (ret != Z_OK && ret != Z_BUF_ERROR) {
			rc = _fail(err, err_len, -EBADMSG, "bad gzip data: %s",
				   zs.msg ? zs.msg : "corrupt stream");
			goto out;
		}
		/* Output left over and no input left: the stream was cut short. */
		if (zs.avail_out && !zs.avail_in) {
			rc = _fail(err, err_len, -EBADMSG, "truncated gzip data");
			goto out;
		}
	}
	if (have > cap) {
		rc = _fail(err, err_len, -E2BIG, "decompressed body exceeds %zu bytes", cap);
		goto out;
	}
	if (zs.avail_in) {
		rc = _fail(err, err_len, -EBADMSG, "%u bytes after the end of the gzip stream",
			   zs.avail_in);
		goto out;
	}
	*out = buf;
	*out_len = have;
	buf = NULL;
out:
	if (zinit)
		inflateEnd(&zs);
	free(buf);
	return rc;
}

int decompress__zstd(const uint8_t *in, size_t len, size_t cap, uint8_t **out, size_t *out_len,
		   char *err, size_t err_len)
{
	ZSTD_inBuffer ib = { in, len, 0 };
	ZSTD_DCtx *dctx = NULL;
	unsigned long long declared;
	uint8_t *buf = NULL;
	size_t size, have = 0, ret;
	int wlog, rc = 0;

	/* A frame that says how big it is can be refused before any work. */
	declared = ZSTD_getFrameContentSize(in, len);
	if (declared != ZSTD_CONTENTSIZE_ERROR && declared != ZSTD_CONTENTSIZE_UNKNOWN &&
	    declared > cap) {
		rc = _fail(err, err_len, -E2BIG, "decompressed body exceeds %zu bytes", cap);
		goto out;
	}

	size = len < (cap + 1) / 4 ? len * 4 : cap + 1;
	if (size < 4096)
		size = cap + 1 < 4096 ? cap + 1 : 4096;
	buf = malloc(size);
	dctx = ZSTD_createDCtx();
	if (!buf || !dctx) {
		rc = _fail(err, err_len, -ENOMEM, "out of memory");
		goto out;
	}
	/*
	 * The window is decoder memory the sender chooses. No window larger
	 * than the largest body we accept is needed, so refuse larger ones.
	 */
	for (wlog = 10; wlog < 27 && ((size_t)1 << wlog) < cap; wlog++)
		;
	ZSTD_DCtx_setParameter(dctx, ZSTD_d_windowLogMax, wlog);
	for (;;) {
		ZSTD_outBuffer ob;

		if (have == size) {
			if (size > cap) {
				rc = _fail(err, err_len, -E2BIG,
					   "decompressed body exceeds %zu bytes", cap);
				goto out;
			}
			rc = _grow(&buf, &size, cap);
			if (rc) {
				rc = _fail(err, err_len, rc, "out of memory");
				goto out;
			}
		}
		ob = (ZSTD_outBuffer){ buf, size, have };
		ret = ZSTD_decompressStream(dctx, &ob, &ib);
		have = ob.pos;
		if (ZSTD_isError(ret)) {
			if (ZSTD_getErrorCode(ret) == ZSTD_error_frameParameter_windowTooLarge)
				rc = _fail(err, err_len, -E2BIG, "zstd window too large");
			else
				rc = _fail(err, err_len, -EBADMSG, "bad zstd data: %s",
					   ZSTD_getErrorName(ret));
			goto out;
		}
		/* 0: a frame ended and everything it held is out. */
		if (ret == 0 && ib.pos == ib.size)
			break;
		if (ib.pos == ib.size && ob.pos < ob.size) {
			rc = _fail(err, err_len, -EBADMSG, "truncated zstd data");
			goto out;
		}
	}
	if (have > cap) {
		rc = _fail(err, err_len, -E2BIG, "decompressed body exceeds %zu bytes", cap);
		goto out;
	}
	*out = buf;
	*out_len = have;
	buf = NULL;
out:
	ZSTD_freeDCtx(dctx);
	free(buf);
	return rc;
}

