/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_STORE_ROWBINARY_H
#define FW_STORE_ROWBINARY_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "common/strbuf.h"

/*
 * ClickHouse's RowBinary format, both ways: integers and floats little
 * endian at their width, String as a LEB128 length and the bytes, Array as
 * a LEB128 count and the elements. Binary, so no escaping can go wrong.
 * (x86-64 and arm64 are little endian; the store does not build elsewhere.)
 */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "RowBinary needs little endian");

static inline void rb__varint(struct strbuf *b, uint64_t v)
{
	char tmp[10];
	size_t n = 0;

	do {
		tmp[n++] = (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	strbuf__append(b, tmp, n);
}

static inline void rb__u8(struct strbuf *b, uint8_t v) { strbuf__append(b, &v, 1); }
static inline void rb__u32(struct strbuf *b, uint32_t v) { strbuf__append(b, &v, 4); }
static inline void rb__u64(struct strbuf *b, uint64_t v) { strbuf__append(b, &v, 8); }
static inline void rb__i64(struct strbuf *b, int64_t v) { strbuf__append(b, &v, 8); }
static inline void rb__f64(struct strbuf *b, double v) { strbuf__append(b, &v, 8); }

static inline void rb__str(struct strbuf *b, const char *s)
{
	size_t n = strlen(s);

	rb__varint(b, n);
	strbuf__append(b, s, n);
}

/*
 * A reader over a response the caller owns and lets it modify: strings are
 * moved one or more bytes to the left over their length prefix and
 * NUL-terminated in place, so they stay valid, as C strings, for as long as
 * the buffer. A short or malformed input sets bad and reads zeros.
 */
struct rbr {
	uint8_t *p, *end;
	bool bad;
};

static inline bool rbr__more(const struct rbr *r) { return !r->bad && r->p < r->end; }

static inline void rbr__get(struct rbr *r, void *out, size_t n)
{
	if (r->bad || (size_t)(r->end - r->p) < n) {
		r->bad = true;
		memset(out, 0, n);
		return;
	}
	memcpy(out, r->p, n);
	r->p += n;
}

static inline uint64_t rbr__varint(struct rbr *r)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		uint8_t byte;

		rbr__get(r, &byte, 1);
		if (r->bad)
			return 0;
		v |= (uint64_t)(byte & 0x7f) << shift;
		if (!(byte & 0x80))
			return v;
	}
	r->bad = true;
	return 0;
}

static inline uint8_t rbr__u8(struct rbr *r) { uint8_t v; rbr__get(r, &v, 1); return v; }
static inline uint32_t rbr__u32(struct rbr *r) { uint32_t v; rbr__get(r, &v, 4); return v; }
static inline uint64_t rbr__u64(struct rbr *r) { uint64_t v; rbr__get(r, &v, 8); return v; }
static inline int64_t rbr__i64(struct rbr *r) { int64_t v; rbr__get(r, &v, 8); return v; }
static inline double rbr__f64(struct rbr *r) { double v; rbr__get(r, &v, 8); return v; }

static inline const char *rbr__str(struct rbr *r)
{
	uint8_t *start = r->p;
	uint64_t n = rbr__varint(r);

	if (r->bad || (uint64_t)(r->end - r->p) < n) {
		r->bad = true;
		return "";
	}
	memmove(start, r->p, n);
	start[n] = '\0';
	r->p += n;
	return (const char *)start;
}

#endif
