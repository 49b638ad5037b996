// SPDX-License-Identifier: Apache-2.0
/*
 * ClickHouse backend: writing a batch, dictionaries first (see clickhouse.c
 * for the order of the INSERTs and why).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/dict_xlate.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "clickhouse_impl.h"

#define SEEN_MAX	(1u << 20)	/* ids per dictionary remembered as inserted */

/* ---- writing ------------------------------------------------------------------ */

/*
 * What a dictionary's ids hash to. ClickHouse keys frames, stacks and
 * series by 64-bit hashes of their content rather than by ids it hands
 * out, so an entry's translated id is where its hash is kept, in h of its
 * kind. Frames hash their strings and mapping as text: only frames, stacks
 * and series are translated.
 */
struct ch_dhash {
	uint64_t dict_id;		/* 0: a batch's own dictionary */
	char *node;			/* series hash with the node label */
	uint64_t period_ns;		/* and the batch's period */
	uint64_t used;			/* write counter at last use, for eviction */
	struct dict_ids ids[DICT_NKINDS];
	uint64_t *h[DICT_NKINDS];
	uint32_t nh[DICT_NKINDS], cap_h[DICT_NKINDS];
};

/*
 * A session's dictionary (b->dict_id) keeps its hashes across its batches:
 * hashing every frame's text byte by byte on every batch was most of a
 * write's CPU. Least recently used ones go past DHASH_MAX or
 * DHASH_BYTES; forgetting one costs its session one hash per entry.
 */
#define DHASH_MAX 4096
#define DHASH_BYTES (256u << 20)

/* Per batch. */
struct xlate {
	struct ch_store *st;
	const struct batch *b;
	const struct profile *d;
	const char *node;
	uint32_t nstrings;
	struct dict_xlate dx;
	struct ch_dhash own, *c;	/* c: the session's kept one, or own */
	/* Rows for the dictionary tables, and the ids they hold. */
	struct strbuf frames, stacks, series;
	uint64_t *new_ids[3];
	uint32_t nnew[3], cap_new[3];
};

static size_t _dh_bytes(const struct ch_dhash *c)
{
	size_t n = sizeof(*c);

	for (int k = 0; k < DICT_NKINDS; k++)
		n += (size_t)c->ids[k].cap * sizeof(uint32_t) + (size_t)c->cap_h[k] * sizeof(uint64_t);
	return n;
}

static void _dh_release(struct ch_dhash *c)
{
	for (int k = 0; k < DICT_NKINDS; k++) {
		dict_ids__release(&c->ids[k]);
		free(c->h[k]);
	}
	free(c->node);
}

static void _dh_remove(struct ch_store *st, uint32_t i)
{
	struct ch_dhash *c = st->dh[i];

	st->dh_bytes -= _dh_bytes(c);
	_dh_release(c);
	free(c);
	st->dh[i] = st->dh[--st->ndh];
}

void ch__dhash_free_all(struct ch_store *st)
{
	while (st->ndh)
		_dh_remove(st, st->ndh - 1);
	free(st->dh);
	st->dh = NULL;
}

/* The kept hashes of b's session dictionary, added if new; NULL for ENOMEM. */
static struct ch_dhash *_dh_get(struct ch_store *st, const struct batch *b, const char *node)
{
	struct ch_dhash *c = NULL;

	for (uint32_t i = 0; i < st->ndh; i++) {
		if (st->dh[i]->dict_id == b->dict_id && st->dh[i]->period_ns == b->period_ns &&
		    !strcmp(st->dh[i]->node, node)) {
			c = st->dh[i];
			break;
		}
	}
	if (!c) {
		while (st->ndh && (st->ndh >= DHASH_MAX || st->dh_bytes > DHASH_BYTES)) {
			uint32_t old = 0;

			for (uint32_t i = 1; i < st->ndh; i++)
				if (st->dh[i]->used < st->dh[old]->used)
					old = i;
			_dh_remove(st, old);
		}
		if (!st->dh && !(st->dh = calloc(DHASH_MAX, sizeof(*st->dh))))
			return NULL;
		c = calloc(1, sizeof(*c));
		if (!c || !(c->node = strdup(node))) {
			free(c);
			return NULL;
		}
		c->dict_id = b->dict_id;
		c->period_ns = b->period_ns;
		st->dh[st->ndh++] = c;
		st->dh_bytes += _dh_bytes(c);
	}
	c->used = ++st->dh_clock;
	return c;
}

/*
 * After a write that failed: entries it hashed first may not be in
 * ClickHouse, and a kept hash would never insert them. The session's next
 * batch hashes them again.
 */
static void _dh_forget(struct ch_store *st, const struct xlate *x)
{
	for (uint32_t i = 0; i < st->ndh; i++) {
		if (st->dh[i] == x->c) {
			_dh_remove(st, i);
			return;
		}
	}
}

enum { NEW_FRAME, NEW_STACK, NEW_SERIES };

/* Is id new to this process? Then remember it as to be inserted by this batch. */
static int _x_new(struct ch_store *st, struct xlate *x, int k, uint64_t id)
{
	struct intern *seen = k == NEW_FRAME ? st->seen_frames :
			      k == NEW_STACK ? st->seen_stacks : st->seen_series;

	if (intern__find(seen, &id, sizeof(id)) >= 0)
		return 0;
	if (x->nnew[k] == x->cap_new[k]) {
		uint32_t cap = x->cap_new[k] ? x->cap_new[k] * 2 : 64;
		uint64_t *a = realloc(x->new_ids[k], cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		x->new_ids[k] = a;
		x->cap_new[k] = cap;
	}
	x->new_ids[k][x->nnew[k]++] = id;
	return 1;
}

/* After a successful INSERT: the ids it held need not be sent again. */
static void _x_seen(struct ch_store *st, struct xlate *x, int k)
{
	struct intern **seen = k == NEW_FRAME ? &st->seen_frames :
			       k == NEW_STACK ? &st->seen_stacks : &st->seen_series;

	if (intern__count(*seen) + x->nnew[k] > SEEN_MAX) {
		struct intern *t = intern__new();

		if (!t)
			return;
		intern__free(*seen);
		*seen = t;
	}
	for (uint32_t i = 0; i < x->nnew[k]; i++)
		if (intern__add(*seen, &x->new_ids[k][i], sizeof(uint64_t), NULL) < 0)
			return;
}

static void _key_str(struct strbuf *k, const char *s)
{
	strbuf__append(k, s, strlen(s) + 1);
}

/* The translated id of an entry that hashes to h. */
static int64_t _x_keep(struct xlate *x, enum dict_kind k, uint64_t h)
{
	struct ch_dhash *c = x->c;

	if (c->nh[k] == c->cap_h[k]) {
		uint32_t cap = c->cap_h[k] ? c->cap_h[k] * 2 : 64;
		uint64_t *a = realloc(c->h[k], (size_t)cap * sizeof(*a));

		if (!a)
			return -ENOMEM;
		if (c != &x->own)
			x->st->dh_bytes += (uint64_t)(cap - c->cap_h[k]) * sizeof(*a);
		c->h[k] = a;
		c->cap_h[k] = cap;
	}
	c->h[k][c->nh[k]] = h;
	return c->nh[k]++;
}

/* What entry id of kind k hashes to, computed on first use. */
static int _x_hash(struct xlate *x, enum dict_kind k, uint32_t id, uint64_t *out)
{
	int64_t i = dict_xlate__id(&x->dx, k, id);

	if (i < 0)
		return (int)i;
	*out = x->c->h[k][i];
	return 0;
}

static int64_t _x_frame(struct dict_xlate *dx, uint32_t f)
{
	struct xlate *x = dx->ctx;
	const struct profile *d = x->d;
	const struct profile_frame *fr = &d->frames[f];
	const char *path = "", *bid = "", *fn, *file;
	struct strbuf key = STRBUF_INIT;
	uint8_t has_map;
	uint64_t h;
	int err;

	has_map = fr->mapping != PROFILE_NO_MAPPING;
	if (has_map) {
		if (fr->mapping >= d->nmappings)
			return -EINVAL;
		if (d->mappings[fr->mapping].path >= x->nstrings ||
		    d->mappings[fr->mapping].build_id >= x->nstrings)
			return -EINVAL;
		path = profile__string(d, d->mappings[fr->mapping].path);
		bid = profile__string(d, d->mappings[fr->mapping].build_id);
	}
	if (fr->function >= x->nstrings || fr->file >= x->nstrings)
		return -EINVAL;
	fn = profile__string(d, fr->function);
	file = profile__string(d, fr->file);
	/* The identity profile__intern_named_frame() gives a frame, and its mapping. */
	strbuf__append(&key, &fr->kind, sizeof(fr->kind));
	strbuf__append(&key, &has_map, 1);
	_key_str(&key, path);
	_key_str(&key, bid);
	strbuf__append(&key, &fr->addr, sizeof(fr->addr));
	_key_str(&key, fn);
	_key_str(&key, file);
	strbuf__append(&key, &fr->line, sizeof(fr->line));
	if (key.oom) {
		strbuf__release(&key);
		return -ENOMEM;
	}
	h = hash__bytes(key.buf, key.len);
	strbuf__release(&key);
	err = _x_new(x->st, x, NEW_FRAME, h);
	if (err < 0)
		return err;
	if (err) {
		rb__u64(&x->frames, h);
		rb__u8(&x->frames, (uint8_t)fr->kind);
		rb__u8(&x->frames, has_map);
		rb__str(&x->frames, path);
		rb__str(&x->frames, bid);
		rb__u64(&x->frames, fr->addr);
		rb__str(&x->frames, fn);
		rb__str(&x->frames, file);
		rb__u32(&x->frames, fr->line);
	}
	return _x_keep(x, DICT_FRAME, h);
}

static int64_t _x_stack(struct dict_xlate *dx, uint32_t s)
{
	struct xlate *x = dx->ctx;
	const uint32_t *frames;
	uint64_t *hs, h;
	uint32_t n;
	int64_t err = 0;

	frames = profile__stack(x->d, s, &n);
	hs = malloc((n + 1) * sizeof(*hs));
	if (!hs)
		return -ENOMEM;
	for (uint32_t i = 0; !err && i < n; i++)
		err = _x_hash(x, DICT_FRAME, frames[i], &hs[i]);
	if (err)
		goto out;
	h = hash__bytes(hs, n * sizeof(*hs));
	err = _x_new(x->st, x, NEW_STACK, h);
	if (err < 0)
		goto out;
	if (err) {
		rb__u64(&x->stacks, h);
		rb__varint(&x->stacks, n);
		for (uint32_t i = 0; i < n; i++)
			rb__u64(&x->stacks, hs[i]);
	}
	err = _x_keep(x, DICT_STACK, h);
out:
	free(hs);
	return err;
}

/* A series' identity (store__series_labels()) hashed: names and values, then the period. */
static int64_t _x_series(struct dict_xlate *dx, uint32_t s)
{
	struct xlate *x = dx->ctx;
	struct strbuf key = STRBUF_INIT;
	struct store_label *l;
	size_t nl;
	uint64_t h, period = x->b->period_ns;
	int64_t err;

	err = store__series_labels(x->b, s, x->node, &l, &nl);
	if (err)
		return err;
	for (size_t i = 0; i < nl; i++) {
		_key_str(&key, l[i].name);
		_key_str(&key, l[i].value);
	}
	strbuf__append(&key, &period, sizeof(period));
	err = -ENOMEM;
	if (key.oom)
		goto out;
	h = hash__bytes(key.buf, key.len);
	err = _x_new(x->st, x, NEW_SERIES, h);
	if (err < 0)
		goto out;
	if (err) {
		rb__u64(&x->series, h);
		rb__u64(&x->series, period);
		rb__varint(&x->series, nl);
		for (size_t i = 0; i < nl; i++)
			rb__str(&x->series, l[i].name);
		rb__varint(&x->series, nl);
		for (size_t i = 0; i < nl; i++)
			rb__str(&x->series, l[i].value);
	}
	err = _x_keep(x, DICT_SERIES, h);
out:
	strbuf__release(&key);
	free(l);
	return err;
}

static const dict_xlate_fn _x_fns[DICT_NKINDS] = {
	[DICT_FRAME] = _x_frame, [DICT_STACK] = _x_stack, [DICT_SERIES] = _x_series,
};

static void _x_free(struct xlate *x)
{
	_dh_release(&x->own);
	strbuf__release(&x->frames);
	strbuf__release(&x->stacks);
	strbuf__release(&x->series);
	for (int i = 0; i < 3; i++)
		free(x->new_ids[i]);
}

static int _x_init(struct xlate *x, struct ch_store *st, const struct batch *b, const char *node)
{
	*x = (struct xlate){ .st = st, .b = b, .d = b->dict, .node = node };
	x->c = &x->own;
	x->dx = (struct dict_xlate){ .fn = _x_fns, .ctx = x };
	dict_xlate__batch_counts(&x->dx, b);
	x->nstrings = x->dx.n[DICT_STRING];
	x->dx.n[DICT_STRING] = x->dx.n[DICT_MAPPING] = 0;
	if (b->dict_id && !(x->c = _dh_get(st, b, node)))
		return -ENOMEM;
	for (int k = DICT_FRAME; k <= DICT_SERIES; k++) {
		uint32_t cap = x->c->ids[k].cap;

		if (dict_ids__grow(&x->c->ids[k], x->dx.n[k] + 1))
			return -ENOMEM;
		if (x->c != &x->own)
			st->dh_bytes += (uint64_t)(x->c->ids[k].cap - cap) * sizeof(uint32_t);
	}
	x->dx.ids = x->c->ids;
	return 0;
}

/* The end of a write: what it hashed stays kept only if it all went in. */
static void _x_done(struct xlate *x, int err)
{
	if (err && x->c != &x->own)
		_dh_forget(x->st, x);
	_x_free(x);
}

static int _x_flush(struct ch_store *st, struct xlate *x)
{
	int err = ch__insert(st, "frames", &x->frames);

	if (!err)
		_x_seen(st, x, NEW_FRAME);
	err = err ?: ch__insert(st, "stacks", &x->stacks);
	if (!err)
		_x_seen(st, x, NEW_STACK);
	err = err ?: ch__insert(st, "series", &x->series);
	if (!err)
		_x_seen(st, x, NEW_SERIES);
	return err;
}

static int _check_samples(const char *node, const struct batch *b)
{
	uint32_t nstacks = profile__nstacks(b->dict), nseries = batch__nseries(b);
	uint32_t nstrings = intern__count(b->dict->strings);

	for (uint32_t i = 0; i < b->nsamples; i++) {
		const struct batch_sample *bs = &b->samples[i];

		if (bs->stack >= nstacks || bs->series >= nseries || bs->ts_ns < 0 ||
		    bs->ts_ns >= STORE_TS_LIMIT || bs->type >= 256) {
			pr_warn("store: clickhouse: batch from %s: sample %u has stack %u/%u, "
				"series %u/%u, ts %lld\n", node, i, bs->stack, nstacks, bs->series,
				nseries, (long long)bs->ts_ns);
			return -EINVAL;
		}
	}
	for (uint32_t i = 0; i < b->ngpu_intervals; i++) {
		const struct batch_gpu_interval *g = &b->gpu_intervals[i];

		if ((g->stack != BATCH_NO_STACK && g->stack >= nstacks) || g->series >= nseries ||
		    g->name >= nstrings || g->start_ns < 0 || g->start_ns >= STORE_TS_LIMIT ||
		    g->end_ns < g->start_ns || g->kind >= 256) {
			pr_warn("store: clickhouse: batch from %s: GPU interval %u has stack %u/%u, "
				"series %u/%u, name %u, start %lld, end %lld\n", node, i, g->stack,
				nstacks, g->series, nseries, g->name, (long long)g->start_ns,
				(long long)g->end_ns);
			return -EINVAL;
		}
	}
	return 0;
}

static int _check_cpu_intervals(const char *node, const struct batch *b)
{
	uint32_t nseries = batch__nseries(b), nstrings = intern__count(b->dict->strings);

	for (uint32_t i = 0; i < b->ncpu_intervals; i++) {
		const struct batch_cpu_interval *iv = &b->cpu_intervals[i];

		if (iv->series >= nseries || iv->comm >= nstrings || iv->start_ns < 0 ||
		    iv->end_ns < iv->start_ns || iv->end_ns >= STORE_TS_LIMIT) {
			pr_warn("store: clickhouse: batch from %s: CPU interval %u has series %u/%u, "
				"comm %u/%u, [%lld, %lld)\n", node, i, iv->series, nseries,
				iv->comm, nstrings, (long long)iv->start_ns, (long long)iv->end_ns);
			return -EINVAL;
		}
	}
	return 0;
}

/*
 * CPU intervals go in pieces of at most STORE_CPU_INTERVAL_CHUNK_NS, as in
 * SQLite, so that a window's query can bound where pieces start; queries
 * join the pieces up again.
 */
static int _rows_cpu_intervals(struct xlate *x, struct strbuf *rows)
{
	const struct batch *b = x->b;

	for (uint32_t i = 0; i < b->ncpu_intervals; i++) {
		const struct batch_cpu_interval *iv = &b->cpu_intervals[i];
		uint64_t series;
		int err = _x_hash(x, DICT_SERIES, iv->series, &series);

		if (err)
			return err;
		for (int64_t a = iv->start_ns; a < iv->end_ns; a += STORE_CPU_INTERVAL_CHUNK_NS) {
			int64_t d = iv->end_ns - a;

			if (d > STORE_CPU_INTERVAL_CHUNK_NS)
				d = STORE_CPU_INTERVAL_CHUNK_NS;
			rb__i64(rows, a);
			rb__i64(rows, d);
			rb__str(rows, x->node);
			rb__u32(rows, iv->cpu);
			rb__u64(rows, series);
			rb__u32(rows, iv->tid);
			rb__str(rows, profile__string(x->d, iv->comm));
		}
	}
	return rows->oom ? -ENOMEM : 0;
}

static int _rows_gpu_intervals(struct xlate *x, struct strbuf *rows)
{
	const struct batch *b = x->b;

	for (uint32_t i = 0; i < b->ngpu_intervals; i++) {
		const struct batch_gpu_interval *g = &b->gpu_intervals[i];
		uint64_t series, stack = 0;
		int err = _x_hash(x, DICT_SERIES, g->series, &series);

		if (!err && g->stack != BATCH_NO_STACK)
			err = _x_hash(x, DICT_STACK, g->stack, &stack);
		if (err)
			return err;
		rb__i64(rows, g->start_ns);
		rb__i64(rows, g->end_ns);
		rb__u64(rows, series);
		rb__u32(rows, g->device);
		rb__u32(rows, g->stream);
		rb__u8(rows, (uint8_t)g->kind);
		rb__str(rows, profile__string(x->d, g->name));
		rb__u8(rows, g->stack != BATCH_NO_STACK);
		rb__u64(rows, stack);
		rb__u64(rows, g->correlation);
		rb__u64(rows, g->bytes);
		rb__u32(rows, g->weight);
	}
	return rows->oom ? -ENOMEM : 0;
}

int ch__write(void *impl, const char *node, const struct batch *b)
{
	struct ch_store *st = impl;
	struct strbuf samples = STRBUF_INIT, civ = STRBUF_INIT, gpu = STRBUF_INIT;
	struct xlate x;
	int err;

	err = _check_samples(node, b);
	err = err ?: _check_cpu_intervals(node, b);
	if (err)
		return err;
	if (!b->nsamples && !b->ncpu_intervals && !b->ngpu_intervals)
		return 0;
	err = _x_init(&x, st, b, node);
	for (uint32_t i = 0; !err && i < b->nsamples; i++) {
		const struct batch_sample *bs = &b->samples[i];
		uint64_t series, stack;

		err = _x_hash(&x, DICT_SERIES, bs->series, &series);
		err = err ?: _x_hash(&x, DICT_STACK, bs->stack, &stack);
		if (err)
			break;
		rb__i64(&samples, store__sample_ts(bs->ts_ns));
		rb__u8(&samples, (uint8_t)bs->type);
		rb__u64(&samples, series);
		rb__u64(&samples, stack);
		rb__u32(&samples, bs->tid);
		rb__u32(&samples, bs->cpu);
		rb__i64(&samples, bs->value);
	}
	err = err ?: _rows_cpu_intervals(&x, &civ);
	err = err ?: _rows_gpu_intervals(&x, &gpu);
	if (!err && samples.oom)
		err = -ENOMEM;
	if (err)
		goto out;
	err = _x_flush(st, &x);
	err = err ?: ch__insert(st, "cpu_intervals", &civ);
	err = err ?: ch__insert(st, "gpu_intervals", &gpu);
	err = err ?: ch__insert(st, "samples", &samples);
	if (!err)
		st->batches_written++;
out:
	_x_done(&x, err);
	strbuf__release(&samples);
	strbuf__release(&civ);
	strbuf__release(&gpu);
	return err;
}

int ch__write_cpu_intervals(void *impl, const char *node, const struct batch *b)
{
	struct ch_store *st = impl;
	struct strbuf civ = STRBUF_INIT;
	struct xlate x;
	int err = _check_cpu_intervals(node, b);

	if (err || !b->ncpu_intervals)
		return err;
	err = _x_init(&x, st, b, node);
	err = err ?: _rows_cpu_intervals(&x, &civ);
	err = err ?: _x_flush(st, &x);
	err = err ?: ch__insert(st, "cpu_intervals", &civ);
	_x_done(&x, err);
	strbuf__release(&civ);
	return err;
}

int ch__write_metrics(void *impl, const char *node, const struct batch *b)
{
	struct ch_store *st = impl;
	uint32_t nseries = batch__nseries(b), nstrings = intern__count(b->dict->strings);
	struct strbuf rows = STRBUF_INIT;
	struct xlate x;
	int err;

	for (uint32_t i = 0; i < b->nmetrics; i++) {
		const struct batch_metric *m = &b->metrics[i];

		if (m->series >= nseries || m->name >= nstrings || m->ts_ns < 0 ||
		    m->ts_ns >= STORE_TS_LIMIT || m->value != m->value ||
		    !profile__string(b->dict, m->name)[0]) {
			pr_warn("store: clickhouse: batch from %s: metric point %u has series %u/%u, "
				"name %u/%u, ts %lld\n", node, i, m->series, nseries, m->name,
				nstrings, (long long)m->ts_ns);
			return -EINVAL;
		}
	}
	if (!b->nmetrics)
		return 0;
	err = _x_init(&x, st, b, node);
	for (uint32_t i = 0; !err && i < b->nmetrics; i++) {
		const struct batch_metric *m = &b->metrics[i];
		uint64_t series;

		err = _x_hash(&x, DICT_SERIES, m->series, &series);
		if (err)
			break;
		rb__u64(&rows, series);
		rb__str(&rows, profile__string(b->dict, m->name));
		rb__i64(&rows, m->ts_ns);
		rb__f64(&rows, m->value);
	}
	err = err ?: _x_flush(st, &x);
	err = err ?: ch__insert(st, "metric_points", &rows);
	_x_done(&x, err);
	strbuf__release(&rows);
	return err;
}
