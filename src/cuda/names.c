// SPDX-License-Identifier: Apache-2.0
/* Interned kernel names (see fwc.h). */
#include <stdlib.h>
#include <string.h>

#include "cuda/fwc.h"

const char fwc_name_full[] = "[flamewatch: kernel name table full]";
const char fwc_name_unknown[] = "[unknown kernel]";

#define CHUNK (64u << 10)

static uint64_t _hash(const char *s, size_t len)
{
	uint64_t h = 1469598103934665603ULL;	/* FNV-1a */

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h;
}

/* Each copy is preceded by its header, 8-byte aligned. */
#define HDR sizeof(struct fwc_name_hdr)
#define ENTRY(len) ((HDR + (len) + 1 + 7) & ~(size_t)7)

static const char *_copy(struct fwc_names *n, const char *name, size_t len)
{
	char *p;

	if (ENTRY(len) > n->chunk_left) {
		size_t sz = ENTRY(len) > CHUNK ? ENTRY(len) : CHUNK;

		if (n->bytes + sz > FWC_NAME_BYTES_MAX)
			return NULL;
		n->chunk = aligned_alloc(8, (sz + 7) & ~(size_t)7);
		if (!n->chunk) {
			n->chunk_left = 0;
			return NULL;
		}
		n->chunk_left = sz;
		n->bytes += sz;
	}
	p = n->chunk;
	memset(p, 0, HDR);
	p += HDR;
	memcpy(p, name, len);
	p[len] = 0;
	n->chunk += ENTRY(len);
	n->chunk_left -= ENTRY(len);
	return p;
}

const char *fwc_names_intern(struct fwc_names *n, const char *name)
{
	uint32_t pi, ti;
	size_t len;
	const char *s;

	if (!name || !*name)
		return fwc_name_unknown;
	/* CUPTI hands the same pointer for every record of one kernel. */
	pi = (uint32_t)(((uintptr_t)name >> 3) * 0x9E3779B1u) & (FWC_NAME_SLOTS - 1);
	if (n->by_ptr_key[pi] == name)
		return n->by_ptr_val[pi];

	len = strnlen(name, 64u << 10);
	ti = (uint32_t)_hash(name, len) & (FWC_NAME_SLOTS - 1);
	for (uint32_t probe = 0; probe < FWC_NAME_SLOTS; probe++, ti = (ti + 1) & (FWC_NAME_SLOTS - 1)) {
		s = n->by_text[ti];
		if (!s)
			break;
		if (!strncmp(s, name, len) && s[len] == 0)
			goto found;
	}
	/* Keep the table at most 3/4 full so that probes stay short. */
	if (n->count >= FWC_NAME_SLOTS / 4 * 3 || n->by_text[ti])
		return fwc_name_full;
	s = _copy(n, name, len);
	if (!s)
		return fwc_name_full;
	n->by_text[ti] = s;
	n->count++;
found:
	n->by_ptr_key[pi] = name;
	n->by_ptr_val[pi] = s;
	return s;
}

static struct fwc_name_hdr *_hdr(struct fwc_names *n, const char *s)
{
	if (s == fwc_name_full)
		return &n->fixed_hdr[0];
	if (s == fwc_name_unknown)
		return &n->fixed_hdr[1];
	return (struct fwc_name_hdr *)(uintptr_t)(s - HDR);
}

struct fwc_carry *fwc_names_carry(struct fwc_names *n, const char *s)
{
	return &_hdr(n, s)->carry;
}

void fwc_names_announce(struct fwc_names *n, const char *s)
{
	struct fwc_name_hdr *h = _hdr(n, s);
	uint32_t cur = n->epoch + 1;

	if (!n->announce || h->epoch == cur || !n->announce(n->announce_ctx, s))
		return;
	h->epoch = cur;
}

void fwc_names_reannounce(struct fwc_names *n)
{
	/* cur = epoch + 1 must never be 0, the value of a name never announced. */
	n->epoch = n->epoch + 2 == 0 ? 0 : n->epoch + 1;
}
