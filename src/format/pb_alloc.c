// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/types.h>

#include "format/pb_alloc.h"

#define ALLOC_HDR 16	/* keeps max_align_t alignment */
/*
 * protobuf-c notes every field occurrence in a 32-byte scan entry, in slabs
 * that double (each with its allocation header): under 72 bytes an
 * occurrence.
 */
#define SCAN_COST 72
#define MAX_DEPTH 16
#define MAX_FIELDS 64

static void *_alloc(void *data, size_t size)
{
	struct pb_capped_alloc *a = data;
	size_t *p;

	if (size > a->max || size + ALLOC_HDR > a->max - a->used) {
		a->over = true;
		return NULL;
	}
	p = malloc(size + ALLOC_HDR);
	if (!p)
		return NULL;
	p[0] = size;
	a->used += size + ALLOC_HDR;
	return (uint8_t *)p + ALLOC_HDR;
}

static void _free(void *data, void *ptr)
{
	struct pb_capped_alloc *a = data;
	size_t *p;

	if (!ptr)
		return;
	p = (size_t *)((uint8_t *)ptr - ALLOC_HDR);
	a->used -= p[0] + ALLOC_HDR;
	free(p);
}

ProtobufCAllocator pb_capped_alloc__allocator(struct pb_capped_alloc *a)
{
	return (ProtobufCAllocator){ _alloc, _free, a };
}

struct walk {
	size_t used, max;
	const struct pb_cap *caps;
	size_t ncaps;
	char *err;
	size_t err_len;
};

__attribute__((format(printf, 3, 4)))
static int _fail(struct walk *w, int code, const char *fmt, ...)
{
	va_list ap;

	if (w->err && w->err_len) {
		va_start(ap, fmt);
		vsnprintf(w->err, w->err_len, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* Counts n bytes against the cap; false once over it. */
static bool _charge(struct walk *w, size_t n)
{
	w->used = n > SIZE_MAX - w->used ? SIZE_MAX : w->used + n;
	return w->used <= w->max;
}

/* Bytes of the varint at p (at most 10), or 0 if it does not end in len. */
static size_t _varint(const uint8_t *p, size_t len, uint64_t *v)
{
	uint64_t x = 0;

	for (size_t i = 0; i < len && i < 10; i++) {
		x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
		if (!(p[i] & 0x80)) {
			*v = x;
			return i + 1;
		}
	}
	return 0;
}

/* Size of one element in a repeated field's array, as protobuf-c lays it out. */
static size_t _elt_size(ProtobufCType t)
{
	switch (t) {
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return 8;
	case PROTOBUF_C_TYPE_BOOL:
		return sizeof(protobuf_c_boolean);
	case PROTOBUF_C_TYPE_STRING:
	case PROTOBUF_C_TYPE_MESSAGE:
		return sizeof(void *);
	case PROTOBUF_C_TYPE_BYTES:
		return sizeof(ProtobufCBinaryData);
	default:
		return 4;
	}
}

/* Elements in a packed run of type t, or -1 if protobuf-c would refuse it. */
static ssize_t _packed_count(ProtobufCType t, const uint8_t *p, size_t len)
{
	size_t n = 0;

	switch (t) {
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_FIXED32:
	case PROTOBUF_C_TYPE_FLOAT:
		return len % 4 ? -1 : (ssize_t)(len / 4);
	case PROTOBUF_C_TYPE_SFIXED64:
	case PROTOBUF_C_TYPE_FIXED64:
	case PROTOBUF_C_TYPE_DOUBLE:
		return len % 8 ? -1 : (ssize_t)(len / 8);
	default:
		for (size_t i = 0; i < len; i++)
			n += !(p[i] & 0x80);
		return len && (p[len - 1] & 0x80) ? -1 : (ssize_t)n;
	}
}

static bool _packable(ProtobufCType t)
{
	return t != PROTOBUF_C_TYPE_STRING && t != PROTOBUF_C_TYPE_BYTES &&
	       t != PROTOBUF_C_TYPE_MESSAGE;
}

static const struct pb_cap *_cap(const struct walk *w, const ProtobufCMessageDescriptor *d,
				 unsigned id)
{
	for (size_t i = 0; i < w->ncaps; i++)
		if (w->caps[i].msg == d && w->caps[i].field == id)
			return &w->caps[i];
	return NULL;
}

static int _walk(struct walk *w, const ProtobufCMessageDescriptor *d, const uint8_t *p, size_t len,
		 int depth)
{
	size_t count[MAX_FIELDS] = { 0 }, n_unknown = 0;
	const char *at = d->short_name;

	if (depth > MAX_DEPTH || d->n_fields > MAX_FIELDS)
		return _fail(w, -EBADMSG, "%s nests too deep", d->short_name);
	if (!_charge(w, d->sizeof_message + ALLOC_HDR))
		goto big;
	while (len) {
		const ProtobufCFieldDescriptor *f;
		const uint8_t *payload = NULL;
		uint64_t tag, v;
		size_t k = _varint(p, len, &tag), flen, plen = 0;

		if (!k || k > 5 || (tag >> 3) == 0 || (tag >> 3) > 0x1fffffff)
			return _fail(w, -EBADMSG, "%s: bad field tag", d->short_name);
		p += k;
		len -= k;
		switch (tag & 7) {
		case PROTOBUF_C_WIRE_TYPE_VARINT:
			flen = _varint(p, len, &v);
			if (!flen)
				return _fail(w, -EBADMSG, "%s: truncated varint", d->short_name);
			break;
		case PROTOBUF_C_WIRE_TYPE_64BIT:
			flen = 8;
			break;
		case PROTOBUF_C_WIRE_TYPE_32BIT:
			flen = 4;
			break;
		case PROTOBUF_C_WIRE_TYPE_LENGTH_PREFIXED:
			k = _varint(p, len, &v);
			if (!k || v > len - k)
				return _fail(w, -EBADMSG, "%s: truncated field", d->short_name);
			payload = p + k;
			plen = v;
			flen = k + v;
			break;
		default:
			return _fail(w, -EBADMSG, "%s: unsupported wire type", d->short_name);
		}
		if (flen > len)
			return _fail(w, -EBADMSG, "%s: truncated field", d->short_name);
		f = protobuf_c_message_descriptor_get_field(d, tag >> 3);
		at = f ? f->name : "unknown fields";
		if (!_charge(w, SCAN_COST))
			goto big;
		if (!f) {
			/* Kept, copied, in an array of their own. */
			n_unknown++;
			if (!_charge(w, 2 * sizeof(ProtobufCMessageUnknownField) + flen + ALLOC_HDR))
				goto big;
		} else {
			size_t idx = f - d->fields, n = 1;
			bool repeated = f->label == PROTOBUF_C_LABEL_REPEATED;

			if (repeated && payload && _packable(f->type)) {
				ssize_t c = _packed_count(f->type, payload, plen);

				if (c < 0)
					return _fail(w, -EBADMSG, "%s: bad packed field %s",
						     d->short_name, f->name);
				n = c;
			} else if (f->type == PROTOBUF_C_TYPE_MESSAGE) {
				int rc;

				/*
				 * A singular message sent twice is merged, copying
				 * what both hold: no encoder does that.
				 */
				if (!payload || (!repeated && count[idx]++))
					return _fail(w, -EBADMSG, "%s: bad field %s",
						     d->short_name, f->name);
				rc = _walk(w, f->descriptor, payload, plen, depth + 1);
				if (rc)
					return rc;
			} else if (payload && (f->type == PROTOBUF_C_TYPE_STRING ||
					       f->type == PROTOBUF_C_TYPE_BYTES)) {
				if (!_charge(w, plen + 1 + ALLOC_HDR))
					goto big;
			}
			if (repeated) {
				const struct pb_cap *cap = _cap(w, d, f->id);

				if (!count[idx] && !_charge(w, ALLOC_HDR))
					goto big;
				count[idx] = n > SIZE_MAX - count[idx] ? SIZE_MAX : count[idx] + n;
				if (cap && count[idx] > cap->max)
					return _fail(w, -E2BIG, "more than %zu %s", cap->max,
						     cap->what);
				if (n > SIZE_MAX / 8 || !_charge(w, n * _elt_size(f->type)))
					goto big;
			}
		}
		p += flen;
		len -= flen;
	}
	if (n_unknown && !_charge(w, ALLOC_HDR))
		goto big;
	return 0;
big:
	return _fail(w, -E2BIG, "would take more than %zu bytes unpacked (at %s)", w->max, at);
}

int pb_capped_alloc__check(const ProtobufCMessageDescriptor *d, const void *data, size_t len,
			   size_t max_bytes, const struct pb_cap *caps, size_t ncaps,
			   char *err, size_t err_len)
{
	struct walk w = {
		.max = max_bytes, .caps = caps, .ncaps = ncaps, .err = err, .err_len = err_len,
	};

	return _walk(&w, d, data, len, 0);
}
