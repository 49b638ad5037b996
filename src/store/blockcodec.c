// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <zstd.h>

#include "common/intern.h"
#include "blockcodec.h"

#define BLOCK_MAGIC	0xfb
#define ROLLUP_MAGIC	0xfc
#define CODEC_VERSION	1
/* Rollups: 1 wrote the type with every entry; 2 writes it once per run of a type. */
#define ROLLUP_VERSION	2

enum { METHOD_RAW = 0, METHOD_ZSTD = 1 };

/*
 * Below this many payload bytes zstd's frame and table overhead outweighs
 * what it saves; such blocks are stored raw with our own checksum.
 */
#define MIN_COMPRESS	64
/*
 * Below this many payload bytes (a batch's block of one series, which
 * compaction soon replaces) the columns share one Huffman table: building
 * seven costs more CPU than their better fit saves bytes (2 % here).
 */
#define SPLIT_MIN	4096

/* Worst case bytes of one sample in the raw payload: see _encode_raw(). */
#define MAX_SAMPLE_BYTES	(10 + 5 + 5 + 5 + 5 + 10 + 5 + 5)
#define MIN_SAMPLE_BYTES	6
#define NCOLUMNS		7	/* dictionaries, ts, stack, tid, cpu, type, value */

struct buf {
	uint8_t *p;
	size_t len, cap;
};

struct blockcodec {
	ZSTD_CCtx *cctx;
	ZSTD_DCtx *dctx;
	int level;
	struct buf raw, out, dec;
	struct block_sample *samples;
	uint32_t cap_samples;
	struct rollup_entry *rollup;
	uint32_t cap_rollup;
	/* Block-local dictionaries: open addressing over (key, count, index). */
	struct dict_slot { uint32_t key, count, index, used; } *slots;
	uint32_t nslots;	/* allocated */
	uint32_t mask;		/* of the table in use: a power of two minus one */
	uint32_t *order;
	uint64_t *sortbuf;	/* cap_order: (UINT32_MAX - count) << 32 | key */
	uint32_t cap_order;
	uint32_t *idx;		/* 2 * cap_idx: stack then tid indexes */
	size_t column_end[NCOLUMNS];	/* of the dictionaries, then of each column */
	uint32_t cap_idx;
};

static int _reserve(struct buf *b, size_t extra)
{
	size_t need = b->len + extra, cap;
	uint8_t *p;

	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 4096;
	while (cap < need)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* Callers reserve room first: 10 bytes per varint at most. */
static inline void _put_varint(struct buf *b, uint64_t v)
{
	while (v >= 0x80) {
		b->p[b->len++] = (uint8_t)v | 0x80;
		v >>= 7;
	}
	b->p[b->len++] = (uint8_t)v;
}

static inline uint64_t _zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static inline int64_t _unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static inline void _put_le32(struct buf *b, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		b->p[b->len++] = (uint8_t)(v >> (8 * i));
}

struct reader {
	const uint8_t *p, *end;
	bool bad;
};

static inline uint64_t _get_varint(struct reader *r)
{
	uint64_t v = 0;

	/* Most values of a rollup or block take one byte: no loop for them. */
	if (r->p < r->end && *r->p < 0x80)
		return *r->p++;

	for (int shift = 0; shift < 64; shift += 7) {
		uint8_t byte;

		if (r->p >= r->end)
			break;
		byte = *r->p++;
		/* The tenth byte may only carry the top bit of a 64-bit value. */
		if (shift == 63 && byte > 1)
			break;
		v |= (uint64_t)(byte & 0x7f) << shift;
		if (!(byte & 0x80))
			return v;
	}
	r->bad = true;
	return 0;
}

static inline uint32_t _get_u32(struct reader *r)
{
	uint64_t v = _get_varint(r);

	if (v > UINT32_MAX)
		r->bad = true;
	return (uint32_t)v;
}

static uint32_t _get_le32(struct reader *r)
{
	uint32_t v = 0;

	if (r->end - r->p < 4) {
		r->bad = true;
		return 0;
	}
	for (int i = 0; i < 4; i++)
		v |= (uint32_t)r->p[i] << (8 * i);
	r->p += 4;
	return v;
}

static uint32_t _checksum(const void *p, size_t len)
{
	return (uint32_t)hash__bytes(p, len);
}

/*
 * Version 2 rollups: 8 bytes a step rather than hash__bytes()'s one, as a
 * query over a day checks tens of MB of rollups. Each step is a bijection
 * of the state, so any one changed word changes the result before the
 * final mix.
 */
static inline uint64_t _le64(const uint8_t *p, size_t n)
{
	uint64_t w = 0;

	/* Little-endian whatever the host, so that files move between machines. */
	for (size_t k = 0; k < n; k++)
		w |= (uint64_t)p[k] << (8 * k);
	return w;
}

static uint32_t _checksum_words(const uint8_t *p, size_t len)
{
	uint64_t h = 0xcbf29ce484222325ULL ^ len;
	size_t i = 0;

	for (; i + 8 <= len; i += 8) {
		h = (h ^ _le64(p + i, 8)) * 0x9e3779b97f4a7c15ULL;
		h ^= h >> 29;
	}
	h = (h ^ _le64(p + i, len - i)) * 0x9e3779b97f4a7c15ULL;
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	return (uint32_t)h;
}

struct blockcodec *blockcodec__new(int level)
{
	struct blockcodec *c = calloc(1, sizeof(*c));
	int err = ENOMEM;

	if (!c)
		goto err;
	c->level = level;
	c->cctx = ZSTD_createCCtx();
	c->dctx = ZSTD_createDCtx();
	if (!c->cctx || !c->dctx)
		goto err;
	/*
	 * zstd's checksum catches corruption inside the compressed payload,
	 * which would otherwise decode into plausible garbage.
	 */
	if (ZSTD_isError(ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_compressionLevel, level)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_checksumFlag, 1)) ||
	    ZSTD_isError(ZSTD_CCtx_setParameter(c->cctx, ZSTD_c_contentSizeFlag, 1))) {
		err = EINVAL;
		goto err;
	}
	return c;
err:
	blockcodec__free(c);
	errno = err;
	return NULL;
}

void blockcodec__free(struct blockcodec *c)
{
	if (!c)
		return;
	ZSTD_freeCCtx(c->cctx);
	ZSTD_freeDCtx(c->dctx);
	free(c->raw.p);
	free(c->out.p);
	free(c->dec.p);
	free(c->samples);
	free(c->rollup);
	free(c->slots);
	free(c->order);
	free(c->sortbuf);
	free(c->idx);
	free(c);
}

static int _by_u64(const void *pa, const void *pb)
{
	uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;

	return (a > b) - (a < b);
}

/* The slot of a key that is in the table. */
static inline uint32_t _dict_slot(const struct blockcodec *c, uint32_t key)
{
	uint32_t j = (key * 0x9e3779b1u) & c->mask;

	while (c->slots[j].key != key)
		j = (j + 1) & c->mask;
	return j;
}

/*
 * Builds a dictionary of the distinct values of one column, most frequent
 * first, so that the frequent values get the one-byte indexes. Afterwards
 * _dict_index() maps a value to its index.
 */
static int _dict_build(struct blockcodec *c, const struct block_sample *s, uint32_t n,
		       size_t field, uint32_t *ndistinct)
{
	uint32_t nslots = 16, mask, count = 0;

	while (nslots < 2 * (uint64_t)n)
		nslots *= 2;
	if (nslots > c->nslots) {
		struct dict_slot *slots = realloc(c->slots, nslots * sizeof(*slots));

		if (!slots)
			return -ENOMEM;
		c->slots = slots;
		c->nslots = nslots;
	}
	if (n > c->cap_order) {
		uint32_t *order = realloc(c->order, n * sizeof(*order));
		uint64_t *sb;

		if (!order)
			return -ENOMEM;
		c->order = order;
		sb = realloc(c->sortbuf, n * sizeof(*sb));
		if (!sb)
			return -ENOMEM;
		c->sortbuf = sb;
		c->cap_order = n;
	}
	mask = c->mask = nslots - 1;
	memset(c->slots, 0, nslots * sizeof(*c->slots));
	for (uint32_t i = 0; i < n; i++) {
		uint32_t key = *(const uint32_t *)((const uint8_t *)&s[i] + field);
		uint32_t j = (key * 0x9e3779b1u) & mask;

		while (c->slots[j].used && c->slots[j].key != key)
			j = (j + 1) & mask;
		if (!c->slots[j].used) {
			c->slots[j] = (struct dict_slot){ .key = key, .used = 1 };
			c->order[count++] = j;
		}
		c->slots[j].count++;
	}
	/*
	 * Most frequent first, ties by key. A compacted block of a busy
	 * series holds over a thousand distinct stacks: an insertion sort
	 * here was quadratic in them.
	 */
	for (uint32_t i = 0; i < count; i++) {
		const struct dict_slot *d = &c->slots[c->order[i]];

		c->sortbuf[i] = (uint64_t)(UINT32_MAX - d->count) << 32 | d->key;
	}
	if (count > 1)	/* an empty block has no buffer to sort */
		qsort(c->sortbuf, count, sizeof(*c->sortbuf), _by_u64);
	for (uint32_t i = 0; i < count; i++) {
		uint32_t key = (uint32_t)c->sortbuf[i];

		c->order[i] = _dict_slot(c, key);
		c->slots[c->order[i]].index = i;
	}
	*ndistinct = count;
	return 0;
}

static inline uint32_t _dict_index(const struct blockcodec *c, uint32_t key)
{
	uint32_t mask = c->mask;
	uint32_t j = (key * 0x9e3779b1u) & mask;

	while (c->slots[j].key != key)
		j = (j + 1) & mask;
	return c->slots[j].index;
}

/* Writes the dictionary of one column and each sample's index in it into idx. */
static int _put_dict(struct blockcodec *c, const struct block_sample *s, uint32_t n,
		     size_t field, uint32_t *idx)
{
	struct buf *b = &c->raw;
	uint32_t nd;
	int err;

	err = _dict_build(c, s, n, field, &nd);
	if (err)
		return err;
	_put_varint(b, nd);
	for (uint32_t i = 0; i < nd; i++)
		_put_varint(b, c->slots[c->order[i]].key);
	for (uint32_t i = 0; i < n; i++)
		idx[i] = _dict_index(c, *(const uint32_t *)((const uint8_t *)&s[i] + field));
	return 0;
}

/*
 * Raw payload:
 *	nstacks, stacks[nstacks], ntids, tids[ntids]	dictionaries, varints
 *	ts[n]		zigzag varints: the first absolute, then deltas
 *	stack[n]	varint dictionary indexes
 *	tid[n]		varint dictionary indexes
 *	cpu[n], type[n]	varints
 *	value[n]	zigzag varints
 * Columns rather than rows so that zstd sees runs of similar bytes.
 */
static int _encode_raw(struct blockcodec *c, const struct block_sample *s, uint32_t n)
{
	struct buf *b = &c->raw;
	uint64_t prev = 0;
	int err;

	b->len = 0;
	if (_reserve(b, 20 + (size_t)n * MAX_SAMPLE_BYTES))
		return -ENOMEM;
	if (n > c->cap_idx) {
		uint32_t *idx = realloc(c->idx, (size_t)n * 2 * sizeof(*idx));

		if (!idx)
			return -ENOMEM;
		c->idx = idx;
		c->cap_idx = n;
	}
	err = _put_dict(c, s, n, offsetof(struct block_sample, stack), c->idx);
	if (err)
		return err;
	err = _put_dict(c, s, n, offsetof(struct block_sample, tid), c->idx + n);
	if (err)
		return err;
	c->column_end[0] = b->len;
	for (uint32_t i = 0; i < n; i++) {
		_put_varint(b, _zigzag((int64_t)((uint64_t)s[i].ts_ns - prev)));
		prev = (uint64_t)s[i].ts_ns;
	}
	c->column_end[1] = b->len;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, c->idx[i]);
	c->column_end[2] = b->len;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, c->idx[n + i]);
	c->column_end[3] = b->len;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, s[i].cpu);
	c->column_end[4] = b->len;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, s[i].type);
	c->column_end[5] = b->len;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, _zigzag(s[i].value));
	c->column_end[6] = b->len;
	return 0;
}

/*
 * One zstd frame, but a flush after each column so that each gets a zstd
 * block of its own and with it its own Huffman table: timestamps, stack
 * indexes and CPUs have very different byte statistics, and one shared table
 * compresses them noticeably worse (except in small blocks: SPLIT_MIN).
 * Returns the frame size, or 0 on failure.
 */
static size_t _compress_columns(struct blockcodec *c, uint8_t *dst, size_t cap)
{
	ZSTD_outBuffer out = { dst, cap, 0 };
	size_t start = 0;

	if (ZSTD_isError(ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_only)) ||
	    ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(c->cctx, c->raw.len)))
		return 0;
	for (int i = 0; i < NCOLUMNS; i++) {
		size_t end = i == NCOLUMNS - 1 ? c->raw.len : c->column_end[i];
		ZSTD_inBuffer in;
		ZSTD_EndDirective op = i == NCOLUMNS - 1 ? ZSTD_e_end : ZSTD_e_flush;
		size_t left;

		if (c->raw.len < SPLIT_MIN && i < NCOLUMNS - 1)
			continue;
		in = (ZSTD_inBuffer){ c->raw.p + start, end - start, 0 };
		do {
			left = ZSTD_compressStream2(c->cctx, &out, &in, op);
			if (ZSTD_isError(left) || (left && out.pos == out.size))
				return 0;
		} while (left);
		start = end;
	}
	return out.pos;
}

int blockcodec__encode(struct blockcodec *c, const struct block_sample *s, uint32_t n,
		       const uint8_t **out, size_t *out_len)
{
	struct buf *o = &c->out;
	size_t bound;
	int err;

	if (n > BLOCKCODEC_MAX_SAMPLES)
		return -E2BIG;
	err = _encode_raw(c, s, n);
	if (err)
		return err;
	bound = ZSTD_compressBound(c->raw.len);
	o->len = 0;
	if (_reserve(o, 3 + 20 + 4 + (bound > c->raw.len ? bound : c->raw.len)))
		return -ENOMEM;
	o->p[o->len++] = BLOCK_MAGIC;
	o->p[o->len++] = CODEC_VERSION;
	o->p[o->len++] = METHOD_ZSTD;
	_put_varint(o, n);
	_put_varint(o, c->raw.len);
	if (c->raw.len >= MIN_COMPRESS) {
		size_t z = _compress_columns(c, o->p + o->len, o->cap - o->len);

		if (z && z < c->raw.len + 4) {
			o->len += z;
			goto done;
		}
	}
	o->p[2] = METHOD_RAW;
	_put_le32(o, _checksum(c->raw.p, c->raw.len));
	memcpy(o->p + o->len, c->raw.p, c->raw.len);
	o->len += c->raw.len;
done:
	*out = o->p;
	*out_len = o->len;
	return 0;
}

/* Reads a dictionary of at most max entries into a fresh array. */
static int _read_dict(struct reader *r, uint32_t max, uint32_t **dict, uint32_t *n)
{
	uint32_t cnt = _get_u32(r);

	if (r->bad || cnt > max || cnt > (uint64_t)(r->end - r->p))
		return -EINVAL;
	*dict = malloc((cnt ? cnt : 1) * sizeof(**dict));
	if (!*dict)
		return -ENOMEM;
	for (uint32_t i = 0; i < cnt; i++)
		(*dict)[i] = _get_u32(r);
	*n = cnt;
	return r->bad ? -EINVAL : 0;
}

static int _decode_raw(struct blockcodec *c, const uint8_t *p, size_t len, uint32_t n)
{
	struct reader r = { p, p + len, false };
	uint32_t *stacks = NULL, *tids = NULL, nstacks = 0, ntids = 0;
	struct block_sample *s;
	uint64_t ts = 0;
	int err;

	if (n > c->cap_samples) {
		s = realloc(c->samples, (size_t)n * sizeof(*s));
		if (!s)
			return -ENOMEM;
		c->samples = s;
		c->cap_samples = n;
	}
	s = c->samples;
	err = _read_dict(&r, n, &stacks, &nstacks);
	if (err)
		goto out;
	err = _read_dict(&r, n, &tids, &ntids);
	if (err)
		goto out;
	err = -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		ts += (uint64_t)_unzigzag(_get_varint(&r));
		s[i].ts_ns = (int64_t)ts;
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k = _get_u32(&r);

		if (k >= nstacks)
			goto out;
		s[i].stack = stacks[k];
	}
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k = _get_u32(&r);

		if (k >= ntids)
			goto out;
		s[i].tid = tids[k];
	}
	for (uint32_t i = 0; i < n; i++)
		s[i].cpu = _get_u32(&r);
	for (uint32_t i = 0; i < n; i++)
		s[i].type = _get_u32(&r);
	for (uint32_t i = 0; i < n; i++)
		s[i].value = _unzigzag(_get_varint(&r));
	if (r.bad || r.p != r.end)
		goto out;
	err = 0;
out:
	free(stacks);
	free(tids);
	return err;
}

int blockcodec__decode(struct blockcodec *c, const void *data, size_t len,
		       const struct block_sample **out, uint32_t *nout)
{
	struct reader r;
	const uint8_t *payload;
	uint64_t n, raw_len;
	size_t plen;
	uint8_t method;
	int err;

	/* SQLite gives NULL for an empty blob: no pointer arithmetic on it. */
	if (!data || len < 5)
		return -EINVAL;
	r = (struct reader){ data, (const uint8_t *)data + len, false };
	if (r.p[0] != BLOCK_MAGIC || r.p[1] != CODEC_VERSION)
		return -EINVAL;
	method = r.p[2];
	r.p += 3;
	n = _get_varint(&r);
	raw_len = _get_varint(&r);
	if (r.bad || n > BLOCKCODEC_MAX_SAMPLES ||
	    raw_len < 2 + n * MIN_SAMPLE_BYTES || raw_len > 20 + n * MAX_SAMPLE_BYTES)
		return -EINVAL;
	c->dec.len = 0;
	if (method == METHOD_RAW) {
		uint32_t sum = _get_le32(&r);

		if (r.bad || (size_t)(r.end - r.p) != raw_len || _checksum(r.p, raw_len) != sum)
			return -EINVAL;
		payload = r.p;
		plen = raw_len;
	} else if (method == METHOD_ZSTD) {
		size_t z;

		/*
		 * A flipped bit in the frame header could turn the checksum
		 * off: insist on it (bit 2 of the descriptor after the
		 * 4-byte magic, RFC 8878 3.1.1.1.1).
		 */
		plen = r.end - r.p;
		if (plen < 5 || !(r.p[4] & 0x04) ||
		    ZSTD_getFrameContentSize(r.p, plen) != raw_len)
			return -EINVAL;
		if (_reserve(&c->dec, raw_len))
			return -ENOMEM;
		z = ZSTD_decompressDCtx(c->dctx, c->dec.p, raw_len, r.p, plen);
		if (ZSTD_isError(z) || z != raw_len)
			return -EINVAL;
		payload = c->dec.p;
		plen = raw_len;
	} else {
		return -EINVAL;
	}
	err = _decode_raw(c, payload, plen, (uint32_t)n);
	if (err)
		return err;
	*out = c->samples;
	*nout = (uint32_t)n;
	return 0;
}

/*
 * Rollup, version 2: magic, version, varint n, le32 checksum of the body
 * (_checksum_words), then per run of one type: varint type, varint count,
 * and count entries of varint stack (a delta from the run's previous
 * stack, the first absolute) and zigzag sum. Version 1 (still read) had
 * no runs: varint type with every entry, and hash__bytes() as checksum.
 * Small enough not to compress.
 */
int blockcodec__encode_rollup(struct blockcodec *c, const struct rollup_entry *e, uint32_t n,
			      const uint8_t **out, size_t *out_len)
{
	struct buf *o = &c->out;
	size_t body;

	if (n > BLOCKCODEC_MAX_ROLLUP)
		return -E2BIG;
	for (uint32_t i = 1; i < n; i++)
		if (e[i].type < e[i - 1].type ||
		    (e[i].type == e[i - 1].type && e[i].stack <= e[i - 1].stack))
			return -EINVAL;
	o->len = 0;
	if (_reserve(o, 2 + 10 + 4 + (size_t)n * 30))
		return -ENOMEM;
	o->p[o->len++] = ROLLUP_MAGIC;
	o->p[o->len++] = ROLLUP_VERSION;
	_put_varint(o, n);
	o->len += 4;
	body = o->len;
	for (uint32_t i = 0, j; i < n; i = j) {
		for (j = i + 1; j < n && e[j].type == e[i].type; j++)
			;
		_put_varint(o, e[i].type);
		_put_varint(o, j - i);
		for (uint32_t k = i; k < j; k++) {
			_put_varint(o, k > i ? e[k].stack - e[k - 1].stack : e[k].stack);
			_put_varint(o, _zigzag(e[k].sum));
		}
	}
	{
		uint32_t sum = _checksum_words(o->p + body, o->len - body);

		for (int i = 0; i < 4; i++)
			o->p[body - 4 + i] = (uint8_t)(sum >> (8 * i));
	}
	*out = o->p;
	*out_len = o->len;
	return 0;
}

/* Version 1 body: varint type, varint stack delta, zigzag sum per entry. */
static int _decode_rollup_v1(struct reader *r, struct rollup_entry *out, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++) {
		struct rollup_entry *e = &out[i];
		uint32_t delta;

		e->type = _get_u32(r);
		delta = _get_u32(r);
		e->sum = _unzigzag(_get_varint(r));
		if (i && e->type == e[-1].type) {
			if (!delta || e[-1].stack > UINT32_MAX - delta)
				return -EINVAL;
			e->stack = e[-1].stack + delta;
		} else {
			if (i && e->type < e[-1].type)
				return -EINVAL;
			e->stack = delta;
		}
	}
	return 0;
}

static int _decode_rollup_v2(struct reader *r, struct rollup_entry *out, uint32_t n)
{
	uint32_t i = 0;

	while (i < n && !r->bad) {
		uint32_t type = _get_u32(r), count = _get_u32(r);

		if (!count || count > n - i || (i && type <= out[i - 1].type))
			return -EINVAL;
		for (uint32_t k = 0; k < count; k++, i++) {
			uint32_t v = _get_u32(r);

			if (k && (!v || out[i - 1].stack > UINT32_MAX - v))
				return -EINVAL;
			out[i] = (struct rollup_entry){ k ? out[i - 1].stack + v : v, type,
							_unzigzag(_get_varint(r)) };
		}
	}
	return 0;
}

int blockcodec__decode_rollup(struct blockcodec *c, const void *data, size_t len,
			      const struct rollup_entry **out, uint32_t *nout)
{
	struct reader r;
	uint64_t n;
	uint32_t sum;
	uint8_t version;
	int err;

	/* SQLite gives NULL for an empty blob: no pointer arithmetic on it. */
	if (!data || len < 7)
		return -EINVAL;
	r = (struct reader){ data, (const uint8_t *)data + len, false };
	version = r.p[1];
	if (r.p[0] != ROLLUP_MAGIC || (version != 1 && version != ROLLUP_VERSION))
		return -EINVAL;
	r.p += 2;
	n = _get_varint(&r);
	sum = _get_le32(&r);
	/* An entry takes at least three bytes (v1) or two (v2): this bounds the allocation. */
	if (r.bad || n > BLOCKCODEC_MAX_ROLLUP || n * (version == 1 ? 3 : 2) > (uint64_t)(r.end - r.p) ||
	    (version == 1 ? _checksum(r.p, r.end - r.p) : _checksum_words(r.p, r.end - r.p)) != sum)
		return -EINVAL;
	if (n > c->cap_rollup) {
		struct rollup_entry *e = realloc(c->rollup, n * sizeof(*e));

		if (!e)
			return -ENOMEM;
		c->rollup = e;
		c->cap_rollup = (uint32_t)n;
	}
	err = version == 1 ? _decode_rollup_v1(&r, c->rollup, (uint32_t)n) :
			     _decode_rollup_v2(&r, c->rollup, (uint32_t)n);
	if (err || r.bad || r.p != r.end)
		return -EINVAL;
	*out = c->rollup;
	*nout = (uint32_t)n;
	return 0;
}
