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
/*
 * Sample blocks: 1 wrote each timestamp as a delta from the previous
 * sample's; 2 models them per CPU as whole sampling periods and a residual,
 * in microseconds where they allow it (see _encode_v2()).
 */
#define CODEC_VERSION	2
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
 * one per column costs more CPU than their better fit saves bytes.
 */
#define SPLIT_MIN	4096

/*
 * Worst case bytes of one sample in the raw payload, and of the rest: see
 * _encode_v1() and _encode_v2(). The decoder bounds a block's claimed size
 * by them.
 */
#define V1_SAMPLE_BYTES		(10 + 5 + 5 + 5 + 5 + 10 + 5 + 5)
#define V1_HEADER_BYTES		20
#define V2_SAMPLE_BYTES		(5 + 5 + 10 + 10 + 5 + 5 + 5 + 5 + 5 + 10)
#define V2_HEADER_BYTES		40
#define MIN_SAMPLE_BYTES	6
#define V1_NCOLUMNS		7	/* dictionaries, ts, stack, tid, cpu, type, value */
#define V2_NCOLUMNS		8	/* header, cpu, k, r, stack, tid, type, value */
#define NCOLUMNS_MAX		8

/* Flags of a version 2 block. */
#define V2_MICROS		1u	/* timestamps are stored in microseconds */
#define V2_FLAGS		V2_MICROS

/*
 * How many of a block's per-CPU deltas the period is chosen from: enough
 * to see the common one, few enough that trying candidates stays cheap
 * beside zstd.
 */
#define PERIOD_PROBES		32

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
	uint32_t *idx;		/* 3 * cap_idx: stack, tid then CPU indexes */
	uint32_t cap_idx;
	int64_t *delta;		/* cap_idx: each sample's delta from its CPU's previous */
	struct cpu_state { int64_t last; uint32_t seen; } *cpus;	/* cap_idx */
	size_t column_end[NCOLUMNS_MAX];	/* of the header, then of each column */
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
	free(c->delta);
	free(c->cpus);
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
		     size_t field, uint32_t *idx, uint32_t *ndistinct)
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
	if (ndistinct)
		*ndistinct = nd;
	return 0;
}

/* Grows the per-sample scratch arrays to n samples. */
static int _reserve_idx(struct blockcodec *c, uint32_t n)
{
	uint32_t *idx;
	int64_t *delta;
	struct cpu_state *cpus;

	if (!n)
		n = 1;	/* no arithmetic on a NULL array, even of zero */
	if (n <= c->cap_idx)
		return 0;
	idx = realloc(c->idx, (size_t)n * 3 * sizeof(*idx));
	if (!idx)
		return -ENOMEM;
	c->idx = idx;
	delta = realloc(c->delta, (size_t)n * sizeof(*delta));
	if (!delta)
		return -ENOMEM;
	c->delta = delta;
	cpus = realloc(c->cpus, (size_t)n * sizeof(*cpus));
	if (!cpus)
		return -ENOMEM;
	c->cpus = cpus;
	c->cap_idx = n;
	return 0;
}

/* The columns that both versions write last, in this order. */
static void _put_tail(struct blockcodec *c, const struct block_sample *s, uint32_t n, int col,
		      bool with_cpu)
{
	struct buf *b = &c->raw;

	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, c->idx[i]);
	c->column_end[col++] = b->len;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, c->idx[n + i]);
	c->column_end[col++] = b->len;
	if (with_cpu) {		/* version 1's CPUs, not in a dictionary */
		for (uint32_t i = 0; i < n; i++)
			_put_varint(b, s[i].cpu);
		c->column_end[col++] = b->len;
	}
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, s[i].type);
	c->column_end[col++] = b->len;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, _zigzag(s[i].value));
	c->column_end[col] = b->len;
}

/*
 * Raw payload, version 1 (written now only for blocks whose timestamps
 * span more than an int64, which version 2 cannot subtract):
 *	nstacks, stacks[nstacks], ntids, tids[ntids]	dictionaries, varints
 *	ts[n]		zigzag varints: the first absolute, then deltas
 *	stack[n]	varint dictionary indexes
 *	tid[n]		varint dictionary indexes
 *	cpu[n], type[n]	varints
 *	value[n]	zigzag varints
 * Columns rather than rows so that zstd sees runs of similar bytes.
 */
static int _encode_v1(struct blockcodec *c, const struct block_sample *s, uint32_t n)
{
	struct buf *b = &c->raw;
	uint64_t prev = 0;
	int err;

	b->len = 0;
	if (_reserve(b, V1_HEADER_BYTES + (size_t)n * V1_SAMPLE_BYTES) || _reserve_idx(c, n))
		return -ENOMEM;
	err = _put_dict(c, s, n, offsetof(struct block_sample, stack), c->idx, NULL);
	if (err)
		return err;
	err = _put_dict(c, s, n, offsetof(struct block_sample, tid), c->idx + n, NULL);
	if (err)
		return err;
	c->column_end[0] = b->len;
	for (uint32_t i = 0; i < n; i++) {
		_put_varint(b, _zigzag((int64_t)((uint64_t)s[i].ts_ns - prev)));
		prev = (uint64_t)s[i].ts_ns;
	}
	c->column_end[1] = b->len;
	_put_tail(c, s, n, 2, true);
	return 0;
}

/* The bits of a zigzag varint before its byte framing: what the period's choice weighs. */
static inline uint32_t _bits(int64_t v)
{
	return 64 - (uint32_t)__builtin_clzll(_zigzag(v) | 1);
}

/*
 * d as k periods of p (p >= 2) and a residual r, |r| <= p / 2 unless the
 * nearest k times p would overflow. k * p always fits: the decoder's checked
 * arithmetic accepts whatever this writes.
 */
static inline int64_t _periods(int64_t d, int64_t p, int64_t *r)
{
	int64_t k = d / p, rem = d % p, kp;

	if (rem > p / 2 && !__builtin_mul_overflow(k + 1, p, &kp)) {
		k++;
		rem -= p;
	} else if (rem < -(p / 2) && !__builtin_mul_overflow(k - 1, p, &kp)) {
		k--;
		rem += p;
	}
	*r = rem;
	return k;
}

static uint64_t _period_cost(const int64_t *d, uint32_t n, int64_t p)
{
	uint64_t bits = 0;

	for (uint32_t i = 0; i < n; i++) {
		int64_t k, r;

		if (!p) {
			bits += _bits(d[i]);
			continue;
		}
		k = _periods(d[i], p, &r);
		bits += _bits(k) + _bits(r);
	}
	return bits;
}

static int _by_i64(const void *pa, const void *pb)
{
	int64_t a = *(const int64_t *)pa, b = *(const int64_t *)pb;

	return (a > b) - (a < b);
}

/*
 * The sampling period of a block, from its positive per-CPU deltas (probes
 * is a sample of them), or 0 where none pays. A series that is on a CPU
 * only now and then has deltas of many periods, so the candidates are the
 * smallest and the median delta and their fractions; the cheapest wins,
 * the longest among equals (a fraction of the period costs bits in k and
 * saves none in r). The winner is then fitted to all the deltas it
 * explains well: their sum over their sum of periods, where jitter cancels.
 */
static int64_t _pick_period(const struct blockcodec *c, uint32_t n, int64_t *probes, uint32_t m)
{
	int64_t best_p = 0, fit, cand[6];
	uint64_t best, sum_d = 0, sum_k = 0;

	if (!m)
		return 0;
	qsort(probes, m, sizeof(*probes), _by_i64);
	cand[0] = probes[0];
	cand[1] = probes[0] / 2;
	cand[2] = probes[0] / 3;
	cand[3] = probes[0] / 4;
	cand[4] = probes[m / 2];
	cand[5] = probes[m / 2] / 2;
	best = _period_cost(probes, m, 0);
	for (int i = 0; i < 6; i++) {
		uint64_t cost;

		if (cand[i] < 2 || cand[i] == best_p)
			continue;
		cost = _period_cost(probes, m, cand[i]);
		if (cost < best || (cost == best && best_p && cand[i] > best_p)) {
			best = cost;
			best_p = cand[i];
		}
	}
	if (!best_p)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		int64_t d = c->delta[i], k, r;

		if (d <= 0)
			continue;
		k = _periods(d, best_p, &r);
		/* Long gaps say little about the period and could overflow the sums. */
		if (k < 1 || k > 1024 || r > best_p / 4 || r < -(best_p / 4))
			continue;
		if (__builtin_add_overflow(sum_d, (uint64_t)d, &sum_d))
			return best_p;
		sum_k += (uint64_t)k;
	}
	if (!sum_k)
		return best_p;
	fit = (int64_t)((sum_d + sum_k / 2) / sum_k);
	return fit >= 2 ? fit : best_p;
}

/*
 * Raw payload, version 2:
 *	nstacks, stacks[nstacks], ntids, tids[ntids], ncpus, cpus[ncpus]
 *			dictionaries, varints
 *	flags		varint: V2_MICROS, timestamps in microseconds, else ns
 *	base		zigzag varint: the first sample's timestamp, in the unit
 *	period		varint P in the unit; 0: no model
 *	cpu[n]		varint dictionary indexes
 *	k[n], r[n]	zigzag varints: ts = prev + k * P + r, prev being the
 *			same CPU's previous sample in the block, or base
 *	stack[n], tid[n]	varint dictionary indexes
 *	type[n]		varints
 *	value[n]	zigzag varints
 * Each CPU samples on its own timer, so its samples are a whole number of
 * periods apart plus jitter: k is small and repetitive and r is about as
 * large as the jitter, where a delta from whichever sample came before
 * (version 1) is as large as the period. Below a microsecond timestamps
 * are noise, and the store rounds them; microseconds make r smaller still.
 *
 * Returns 0, 1 where a delta overflows an int64 (the caller writes version
 * 1), or -ENOMEM.
 */
static int _encode_v2(struct blockcodec *c, const struct block_sample *s, uint32_t n)
{
	struct buf *b = &c->raw;
	int64_t unit = 1000, base, period, probes[PERIOD_PROBES], lo = INT64_MAX, hi = INT64_MIN, span;
	uint32_t ncpus, *cpu, m = 0, step = n / PERIOD_PROBES + 1, eligible = 0;
	int err;

	for (uint32_t i = 0; i < n; i++) {
		if (s[i].ts_ns % 1000)
			unit = 1;
		if (s[i].ts_ns < lo)
			lo = s[i].ts_ns;
		if (s[i].ts_ns > hi)
			hi = s[i].ts_ns;
	}
	if (n && unit == 1 && __builtin_sub_overflow(hi, lo, &span))
		return 1;
	b->len = 0;
	if (_reserve(b, V2_HEADER_BYTES + (size_t)n * V2_SAMPLE_BYTES) || _reserve_idx(c, n))
		return -ENOMEM;
	cpu = c->idx + 2 * (size_t)n;
	err = _put_dict(c, s, n, offsetof(struct block_sample, stack), c->idx, NULL);
	if (!err)
		err = _put_dict(c, s, n, offsetof(struct block_sample, tid), c->idx + n, NULL);
	if (!err)
		err = _put_dict(c, s, n, offsetof(struct block_sample, cpu), cpu, &ncpus);
	if (err)
		return err;

	/* Every delta is one of two timestamps in [lo, hi]: it fits. */
	base = n ? s[0].ts_ns / unit : 0;
	for (uint32_t i = 0; i < ncpus; i++)
		c->cpus[i] = (struct cpu_state){ base, 0 };
	for (uint32_t i = 0; i < n; i++) {
		struct cpu_state *cs = &c->cpus[cpu[i]];
		int64_t t = s[i].ts_ns / unit;

		c->delta[i] = t - cs->last;
		cs->last = t;
		/* Probes: every step-th positive delta after a CPU's first sample. */
		if (cs->seen++ && c->delta[i] > 0 && eligible++ % step == 0 && m < PERIOD_PROBES)
			probes[m++] = c->delta[i];
	}
	period = _pick_period(c, n, probes, m);

	_put_varint(b, unit == 1000 ? V2_MICROS : 0);
	_put_varint(b, _zigzag(base));
	_put_varint(b, (uint64_t)period);
	c->column_end[0] = b->len;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, cpu[i]);
	c->column_end[1] = b->len;
	/* k goes out at once; r waits in the delta's place for its column. */
	for (uint32_t i = 0; i < n; i++) {
		int64_t k = period ? _periods(c->delta[i], period, &c->delta[i]) : 0;

		_put_varint(b, _zigzag(k));
	}
	c->column_end[2] = b->len;
	for (uint32_t i = 0; i < n; i++)
		_put_varint(b, _zigzag(c->delta[i]));
	c->column_end[3] = b->len;
	_put_tail(c, s, n, 4, false);
	return 0;
}

/*
 * One zstd frame, but a flush after each column so that each gets a zstd
 * block of its own and with it its own Huffman table: timestamps, stack
 * indexes and CPUs have very different byte statistics, and one shared table
 * compresses them noticeably worse (except in small blocks: SPLIT_MIN).
 * Returns the frame size, or 0 on failure.
 */
static size_t _compress_columns(struct blockcodec *c, int ncolumns, uint8_t *dst, size_t cap)
{
	ZSTD_outBuffer out = { dst, cap, 0 };
	size_t start = 0;

	if (ZSTD_isError(ZSTD_CCtx_reset(c->cctx, ZSTD_reset_session_only)) ||
	    ZSTD_isError(ZSTD_CCtx_setPledgedSrcSize(c->cctx, c->raw.len)))
		return 0;
	for (int i = 0; i < ncolumns; i++) {
		size_t end = i == ncolumns - 1 ? c->raw.len : c->column_end[i];
		ZSTD_inBuffer in;
		ZSTD_EndDirective op = i == ncolumns - 1 ? ZSTD_e_end : ZSTD_e_flush;
		size_t left;

		if (c->raw.len < SPLIT_MIN && i < ncolumns - 1)
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
	uint8_t version = CODEC_VERSION;
	int ncolumns = V2_NCOLUMNS;
	size_t bound;
	int err;

	if (n > BLOCKCODEC_MAX_SAMPLES)
		return -E2BIG;
	err = _encode_v2(c, s, n);
	if (err == 1) {
		version = 1;
		ncolumns = V1_NCOLUMNS;
		err = _encode_v1(c, s, n);
	}
	if (err)
		return err;
	bound = ZSTD_compressBound(c->raw.len);
	o->len = 0;
	if (_reserve(o, 3 + 20 + 4 + (bound > c->raw.len ? bound : c->raw.len)))
		return -ENOMEM;
	o->p[o->len++] = BLOCK_MAGIC;
	o->p[o->len++] = version;
	o->p[o->len++] = METHOD_ZSTD;
	_put_varint(o, n);
	_put_varint(o, c->raw.len);
	if (c->raw.len >= MIN_COMPRESS) {
		size_t z = _compress_columns(c, ncolumns, o->p + o->len, o->cap - o->len);

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

/* One column of dictionary indexes into the field of each sample. */
static int _get_indexed(struct reader *r, const uint32_t *dict, uint32_t nd,
			struct block_sample *s, uint32_t n, size_t field)
{
	for (uint32_t i = 0; i < n; i++) {
		uint32_t k = _get_u32(r);

		if (k >= nd)
			return -EINVAL;
		*(uint32_t *)((uint8_t *)&s[i] + field) = dict[k];
	}
	return 0;
}

/* The columns both versions end with: type and value. */
static void _get_tail(struct reader *r, struct block_sample *s, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		s[i].type = _get_u32(r);
	for (uint32_t i = 0; i < n; i++)
		s[i].value = _unzigzag(_get_varint(r));
}

/* A block's dictionaries (version 1 has none of CPUs). */
struct dicts {
	uint32_t *stacks, *tids, *cpus;
	uint32_t nstacks, ntids, ncpus;
};

static void _dicts_free(struct dicts *d)
{
	free(d->stacks);
	free(d->tids);
	free(d->cpus);
}

static int _decode_v1(struct reader *r, struct block_sample *s, uint32_t n)
{
	struct dicts d = { 0 };
	uint64_t ts = 0;
	int err;

	err = _read_dict(r, n, &d.stacks, &d.nstacks);
	if (!err)
		err = _read_dict(r, n, &d.tids, &d.ntids);
	if (err)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		ts += (uint64_t)_unzigzag(_get_varint(r));
		s[i].ts_ns = (int64_t)ts;
	}
	err = _get_indexed(r, d.stacks, d.nstacks, s, n, offsetof(struct block_sample, stack));
	if (!err)
		err = _get_indexed(r, d.tids, d.ntids, s, n, offsetof(struct block_sample, tid));
	if (err)
		goto out;
	for (uint32_t i = 0; i < n; i++)
		s[i].cpu = _get_u32(r);
	_get_tail(r, s, n);
out:
	_dicts_free(&d);
	return err;
}

/*
 * Timestamps of version 2: k then r columns (see _encode_v2()), each
 * sample's CPU index already in s[i].cpu. Every step is checked: a hostile
 * block must not overflow.
 */
static int _get_times(struct reader *r, struct block_sample *s, uint32_t n, int64_t *last,
		      uint32_t ncpus, uint64_t flags, int64_t base, int64_t period)
{
	for (uint32_t i = 0; i < ncpus; i++)
		last[i] = base;
	for (uint32_t i = 0; i < n; i++) {
		s[i].ts_ns = _unzigzag(_get_varint(r));
		if (!period && s[i].ts_ns)
			return -EINVAL;
	}
	for (uint32_t i = 0; i < n; i++) {
		int64_t rem = _unzigzag(_get_varint(r)), t;
		int64_t *prev = &last[s[i].cpu];

		if (__builtin_mul_overflow(s[i].ts_ns, period, &t) ||
		    __builtin_add_overflow(t, rem, &t) ||
		    __builtin_add_overflow(*prev, t, &t))
			return -EINVAL;
		*prev = t;
		if ((flags & V2_MICROS) && __builtin_mul_overflow(t, 1000, &t))
			return -EINVAL;
		s[i].ts_ns = t;
	}
	return 0;
}

static int _decode_v2(struct reader *r, struct block_sample *s, uint32_t n)
{
	struct dicts d = { 0 };
	int64_t *last = NULL, base;
	uint64_t flags, period;
	int err;

	err = _read_dict(r, n, &d.stacks, &d.nstacks);
	if (!err)
		err = _read_dict(r, n, &d.tids, &d.ntids);
	if (!err)
		err = _read_dict(r, n, &d.cpus, &d.ncpus);
	if (err)
		goto out;
	err = -EINVAL;
	flags = _get_varint(r);
	base = _unzigzag(_get_varint(r));
	period = _get_varint(r);
	if (r->bad || (flags & ~(uint64_t)V2_FLAGS) || period > INT64_MAX)
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		s[i].cpu = _get_u32(r);
		if (s[i].cpu >= d.ncpus)
			goto out;
	}
	last = malloc((d.ncpus ? d.ncpus : 1) * sizeof(*last));
	if (!last) {
		err = -ENOMEM;
		goto out;
	}
	err = _get_times(r, s, n, last, d.ncpus, flags, base, (int64_t)period);
	if (err)
		goto out;
	for (uint32_t i = 0; i < n; i++)
		s[i].cpu = d.cpus[s[i].cpu];
	err = _get_indexed(r, d.stacks, d.nstacks, s, n, offsetof(struct block_sample, stack));
	if (!err)
		err = _get_indexed(r, d.tids, d.ntids, s, n, offsetof(struct block_sample, tid));
	if (!err)
		_get_tail(r, s, n);
out:
	free(last);
	_dicts_free(&d);
	return err;
}

int blockcodec__decode(struct blockcodec *c, const void *data, size_t len,
		       const struct block_sample **out, uint32_t *nout)
{
	struct reader r;
	const uint8_t *payload;
	uint64_t n, raw_len, max_len;
	size_t plen;
	uint8_t method, version;
	int err;

	/* SQLite gives NULL for an empty blob: no pointer arithmetic on it. */
	if (!data || len < 5)
		return -EINVAL;
	r = (struct reader){ data, (const uint8_t *)data + len, false };
	version = r.p[1];
	if (r.p[0] != BLOCK_MAGIC || (version != 1 && version != CODEC_VERSION))
		return -EINVAL;
	method = r.p[2];
	r.p += 3;
	n = _get_varint(&r);
	raw_len = _get_varint(&r);
	if (r.bad || n > BLOCKCODEC_MAX_SAMPLES)
		return -EINVAL;
	max_len = version == 1 ? V1_HEADER_BYTES + n * V1_SAMPLE_BYTES :
				 V2_HEADER_BYTES + n * V2_SAMPLE_BYTES;
	if (raw_len < 2 + n * MIN_SAMPLE_BYTES || raw_len > max_len)
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
	if (n > c->cap_samples) {
		struct block_sample *s = realloc(c->samples, (size_t)n * sizeof(*s));

		if (!s)
			return -ENOMEM;
		c->samples = s;
		c->cap_samples = (uint32_t)n;
	}
	r = (struct reader){ payload, payload + plen, false };
	err = version == 1 ? _decode_v1(&r, c->samples, (uint32_t)n) :
			     _decode_v2(&r, c->samples, (uint32_t)n);
	if (err)
		return err;
	if (r.bad || r.p != r.end)
		return -EINVAL;
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
