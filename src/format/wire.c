// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <math.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zlib.h>
#include <zstd.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "common/decompress.h"
#include "format/pb_alloc.h"
#include "format/wire.h"
#include "wire.pb-c.h"

/*
 * The five dictionary kinds, in the order a batch lists them: each may only
 * refer to kinds before it.
 */
enum { K_STRING, K_MAPPING, K_FRAME, K_STACK, K_SERIES, K_MAX };

static const char *const kind_names[K_MAX] = {
	"string", "mapping", "frame", "stack", "series",
};

/*
 * A frame as both ends key and keep it. The name is part of the key: a JIT
 * can put another function at the same address later, and that must become
 * another global frame rather than rename the old one under the server.
 */
struct wire_frame {
	uint32_t kind;
	uint32_t mapping;	/* mapping id + 1; 0: none */
	uint64_t addr;
	uint32_t function, file, line, pad;
};

/* Keys come out of byte arenas that do not keep them aligned. */
static uint32_t _u32_at(const void *p, size_t i)
{
	uint32_t v;

	memcpy(&v, (const uint8_t *)p + i * sizeof(v), sizeof(v));
	return v;
}

/* ======================================================================== */
/* Encoder                                                                   */
/* ======================================================================== */

#define PENDING_MAX 1024

/* The dictionary sizes right after batch seq was encoded. */
struct pending {
	uint64_t seq;
	uint32_t count[K_MAX];
};

struct wire_encoder {
	uint64_t session;
	uint64_t seq;			/* last encoded */
	struct intern *tab[K_MAX];	/* NULL after a reset until the next encode */
	uint32_t acked[K_MAX];		/* entries the server holds */
	struct pending *pending;	/* unacked batches, oldest first */
	size_t npending, cap_pending;
	size_t max_bytes;
};

/* splitmix64's finaliser: a new session id that no other agent's collides with. */
static uint64_t _next_session(uint64_t id)
{
	uint64_t z = id + 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static void _tables_free(struct wire_encoder *e)
{
	for (int k = 0; k < K_MAX; k++) {
		intern__free(e->tab[k]);
		e->tab[k] = NULL;
	}
}

static int _tables_new(struct wire_encoder *e)
{
	for (int k = 0; k < K_MAX; k++) {
		e->tab[k] = intern__new();
		if (!e->tab[k]) {
			_tables_free(e);
			return -ENOMEM;
		}
	}
	return 0;
}

struct wire_encoder *wire_encoder__new(uint64_t session_id)
{
	struct wire_encoder *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->session = session_id;
	e->max_bytes = WIRE_ENCODER_MAX_BYTES;
	if (_tables_new(e)) {
		free(e);
		errno = ENOMEM;
		return NULL;
	}
	return e;
}

void wire_encoder__free(struct wire_encoder *e)
{
	if (!e)
		return;
	_tables_free(e);
	free(e->pending);
	free(e);
}

/*
 * Tables are freed now, so memory drops at once, and created again by the
 * next encode, which can report failing to.
 */
void wire_encoder__reset(struct wire_encoder *e)
{
	_tables_free(e);
	e->session = _next_session(e->session);
	memset(e->acked, 0, sizeof(e->acked));
	e->npending = 0;
}

void wire_encoder__set_max_bytes(struct wire_encoder *e, size_t max_bytes)
{
	e->max_bytes = max_bytes;
}

uint64_t wire_encoder__session(const struct wire_encoder *e)
{
	return e->session;
}

uint64_t wire_encoder__seq(const struct wire_encoder *e)
{
	return e->seq;
}

size_t wire_encoder__memory(const struct wire_encoder *e)
{
	size_t bytes = sizeof(*e) + e->cap_pending * sizeof(*e->pending);

	for (int k = 0; k < K_MAX; k++)
		if (e->tab[k])
			bytes += intern__memory(e->tab[k]);
	return bytes;
}

/*
 * Counts only grow within a session and seq only grows, so the newest
 * record at or before seq is the most the server is known to hold. Older
 * records are subsumed by it and dropped.
 */
void wire_encoder__ack(struct wire_encoder *e, uint64_t seq)
{
	size_t n = 0;

	while (n < e->npending && e->pending[n].seq <= seq)
		n++;
	if (!n)
		return;
	for (int k = 0; k < K_MAX; k++)
		if (e->pending[n - 1].count[k] > e->acked[k])
			e->acked[k] = e->pending[n - 1].count[k];
	memmove(e->pending, e->pending + n, (e->npending - n) * sizeof(*e->pending));
	e->npending -= n;
}

/* Forgetting the oldest record only means a later ack advances less. */
static int _remember(struct wire_encoder *e, uint64_t seq)
{
	struct pending *p;

	if (e->npending == PENDING_MAX) {
		memmove(e->pending, e->pending + 1, (e->npending - 1) * sizeof(*e->pending));
		e->npending--;
	}
	if (e->npending == e->cap_pending) {
		size_t cap = e->cap_pending ? e->cap_pending * 2 : 16;

		p = realloc(e->pending, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		e->pending = p;
		e->cap_pending = cap;
	}
	p = &e->pending[e->npending++];
	p->seq = seq;
	for (int k = 0; k < K_MAX; k++)
		p->count[k] = intern__count(e->tab[k]);
	return 0;
}

/* Translation of one batch's local ids into global ones, memoised. */
struct xlate {
	struct wire_encoder *e;
	const struct batch *b;
	uint32_t n[K_MAX];		/* local counts */
	uint32_t *map[K_MAX];		/* local id -> global id, UINT32_MAX: not yet */
	uint32_t *scratch;
	size_t cap_scratch;
};

static int64_t _global_add(struct xlate *x, int k, const void *key, size_t len)
{
	int64_t id;

	if (intern__count(x->e->tab[k]) == UINT32_MAX)
		return -E2BIG;
	id = intern__add(x->e->tab[k], key, len, NULL);
	return id;
}

static int _scratch(struct xlate *x, size_t n)
{
	uint32_t *s;

	if (n <= x->cap_scratch)
		return 0;
	s = realloc(x->scratch, n * sizeof(*s));
	if (!s)
		return -ENOMEM;
	x->scratch = s;
	x->cap_scratch = n;
	return 0;
}

static int64_t _x_string(struct xlate *x, uint32_t l)
{
	const char *s;
	int64_t id;

	if (l >= x->n[K_STRING])
		return -EINVAL;
	if (x->map[K_STRING][l] != UINT32_MAX)
		return x->map[K_STRING][l];
	s = profile__string(x->b->dict, l);
	id = _global_add(x, K_STRING, s, strlen(s) + 1);
	if (id >= 0)
		x->map[K_STRING][l] = id;
	return id;
}

static int64_t _x_mapping(struct xlate *x, uint32_t l)
{
	const struct profile_mapping *m;
	int64_t path, bid, id;
	uint32_t key[2];

	if (l >= x->n[K_MAPPING])
		return -EINVAL;
	if (x->map[K_MAPPING][l] != UINT32_MAX)
		return x->map[K_MAPPING][l];
	m = &x->b->dict->mappings[l];
	path = _x_string(x, m->path);
	if (path < 0)
		return path;
	bid = _x_string(x, m->build_id);
	if (bid < 0)
		return bid;
	key[0] = path;
	key[1] = bid;
	id = _global_add(x, K_MAPPING, key, sizeof(key));
	if (id >= 0)
		x->map[K_MAPPING][l] = id;
	return id;
}

static int64_t _x_frame(struct xlate *x, uint32_t l)
{
	const struct profile_frame *f;
	struct wire_frame key = { 0 };
	int64_t id;

	if (l >= x->n[K_FRAME])
		return -EINVAL;
	if (x->map[K_FRAME][l] != UINT32_MAX)
		return x->map[K_FRAME][l];
	f = &x->b->dict->frames[l];
	key.kind = f->kind;
	key.addr = f->addr;
	key.line = f->line;
	if (f->mapping != PROFILE_NO_MAPPING) {
		id = _x_mapping(x, f->mapping);
		if (id < 0)
			return id;
		key.mapping = id + 1;
	}
	id = _x_string(x, f->function);
	if (id < 0)
		return id;
	key.function = id;
	id = _x_string(x, f->file);
	if (id < 0)
		return id;
	key.file = id;
	id = _global_add(x, K_FRAME, &key, sizeof(key));
	if (id >= 0)
		x->map[K_FRAME][l] = id;
	return id;
}

static int64_t _x_stack(struct xlate *x, uint32_t l)
{
	const uint32_t *frames;
	uint32_t n;
	int64_t id;

	if (l >= x->n[K_STACK])
		return -EINVAL;
	if (x->map[K_STACK][l] != UINT32_MAX)
		return x->map[K_STACK][l];
	frames = profile__stack(x->b->dict, l, &n);
	/* At least one element: an empty stack's key must not be NULL either. */
	if (_scratch(x, n ? n : 1))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		id = _x_frame(x, _u32_at(frames, i));
		if (id < 0)
			return id;
		x->scratch[i] = id;
	}
	id = _global_add(x, K_STACK, x->scratch, (size_t)n * sizeof(uint32_t));
	if (id >= 0)
		x->map[K_STACK][l] = id;
	return id;
}

static int64_t _x_series(struct xlate *x, uint32_t l)
{
	const struct batch_label *labels;
	size_t n;
	int64_t id;

	if (l >= x->n[K_SERIES])
		return -EINVAL;
	if (x->map[K_SERIES][l] != UINT32_MAX)
		return x->map[K_SERIES][l];
	labels = batch__series(x->b, l, &n);
	if (_scratch(x, n ? 2 * n : 1))
		return -ENOMEM;
	/* Label pairs are uint32_t name, value: read them as a flat array. */
	for (size_t i = 0; i < 2 * n; i++) {
		id = _x_string(x, _u32_at(labels, i));
		if (id < 0)
			return id;
		x->scratch[i] = id;
	}
	id = _global_add(x, K_SERIES, x->scratch, 2 * n * sizeof(uint32_t));
	if (id >= 0)
		x->map[K_SERIES][l] = id;
	return id;
}

struct ts_index {
	int64_t ts;
	uint32_t i;
};

static int _by_ts(const void *a, const void *b)
{
	const struct ts_index *x = a, *y = b;

	if (x->ts != y->ts)
		return x->ts < y->ts ? -1 : 1;
	return x->i < y->i ? -1 : x->i > y->i;
}

/* Everything the message points to that is not in the encoder's tables. */
struct enc_msg {
	Flamewatch__Wire__Batch m;
	Flamewatch__Wire__Mapping *mappings, **mapping_ptrs;
	Flamewatch__Wire__Frame *frames, **frame_ptrs;
	Flamewatch__Wire__Stack *stacks, **stack_ptrs;
	Flamewatch__Wire__Series *series, **series_ptrs;
	uint32_t *ids;			/* frame ids of stacks, then label ids of series */
	struct ts_index *order;
	struct ts_index *gpu_order;
};

static void _enc_msg_free(struct enc_msg *em)
{
	free(em->m.strings);
	free(em->mappings);
	free(em->mapping_ptrs);
	free(em->frames);
	free(em->frame_ptrs);
	free(em->stacks);
	free(em->stack_ptrs);
	free(em->series);
	free(em->series_ptrs);
	free(em->ids);
	free(em->order);
	free(em->m.ts_delta);
	free(em->m.sample_stack);
	free(em->m.sample_series);
	free(em->m.sample_tid);
	free(em->m.sample_cpu);
	free(em->m.sample_type);
	free(em->m.sample_value);
	free(em->gpu_order);
	free(em->m.gpu_start_delta);
	free(em->m.gpu_duration);
	free(em->m.gpu_series);
	free(em->m.gpu_device);
	free(em->m.gpu_stream);
	free(em->m.gpu_kind);
	free(em->m.gpu_name);
	free(em->m.gpu_stack);
	free(em->m.gpu_bytes);
	free(em->m.gpu_weight);
}

/* n elements of size each, at least one so that NULL always means failure. */
static void *_alloc_n(size_t n, size_t size)
{
	return calloc(n ? n : 1, size);
}

/* The unacknowledged part of every table. */
static int _enc_dict(struct wire_encoder *e, struct enc_msg *em)
{
	Flamewatch__Wire__Batch *m = &em->m;
	uint32_t base[K_MAX], n[K_MAX];
	size_t nids = 0, len, at = 0;

	for (int k = 0; k < K_MAX; k++) {
		base[k] = e->acked[k];
		n[k] = intern__count(e->tab[k]) - base[k];
	}
	m->dict_base_strings = base[K_STRING];
	m->dict_base_mappings = base[K_MAPPING];
	m->dict_base_frames = base[K_FRAME];
	m->dict_base_stacks = base[K_STACK];
	m->dict_base_series = base[K_SERIES];
	for (uint32_t i = 0; i < n[K_STACK]; i++) {
		intern__key(e->tab[K_STACK], base[K_STACK] + i, &len);
		nids += len / sizeof(uint32_t);
	}
	for (uint32_t i = 0; i < n[K_SERIES]; i++) {
		intern__key(e->tab[K_SERIES], base[K_SERIES] + i, &len);
		nids += len / sizeof(uint32_t);
	}

	m->strings = _alloc_n(n[K_STRING], sizeof(*m->strings));
	em->mappings = _alloc_n(n[K_MAPPING], sizeof(*em->mappings));
	em->mapping_ptrs = _alloc_n(n[K_MAPPING], sizeof(*em->mapping_ptrs));
	em->frames = _alloc_n(n[K_FRAME], sizeof(*em->frames));
	em->frame_ptrs = _alloc_n(n[K_FRAME], sizeof(*em->frame_ptrs));
	em->stacks = _alloc_n(n[K_STACK], sizeof(*em->stacks));
	em->stack_ptrs = _alloc_n(n[K_STACK], sizeof(*em->stack_ptrs));
	em->series = _alloc_n(n[K_SERIES], sizeof(*em->series));
	em->series_ptrs = _alloc_n(n[K_SERIES], sizeof(*em->series_ptrs));
	em->ids = _alloc_n(nids, sizeof(*em->ids));
	if (!m->strings || !em->mappings || !em->mapping_ptrs || !em->frames ||
	    !em->frame_ptrs || !em->stacks || !em->stack_ptrs || !em->series ||
	    !em->series_ptrs || !em->ids)
		return -ENOMEM;

	/* Strings are kept NUL-terminated in the table: no copies needed. */
	for (uint32_t i = 0; i < n[K_STRING]; i++)
		m->strings[i] = (char *)intern__key(e->tab[K_STRING], base[K_STRING] + i, NULL);
	m->n_strings = n[K_STRING];

	for (uint32_t i = 0; i < n[K_MAPPING]; i++) {
		const void *key = intern__key(e->tab[K_MAPPING], base[K_MAPPING] + i, NULL);

		flamewatch__wire__mapping__init(&em->mappings[i]);
		em->mappings[i].path = _u32_at(key, 0);
		em->mappings[i].build_id = _u32_at(key, 1);
		em->mapping_ptrs[i] = &em->mappings[i];
	}
	m->mappings = em->mapping_ptrs;
	m->n_mappings = n[K_MAPPING];

	for (uint32_t i = 0; i < n[K_FRAME]; i++) {
		Flamewatch__Wire__Frame *f = &em->frames[i];
		struct wire_frame key;

		memcpy(&key, intern__key(e->tab[K_FRAME], base[K_FRAME] + i, NULL), sizeof(key));
		flamewatch__wire__frame__init(f);
		f->kind = key.kind;
		f->mapping = key.mapping;
		f->addr = key.addr;
		f->function = key.function;
		f->file = key.file;
		f->line = key.line;
		em->frame_ptrs[i] = f;
	}
	m->frames = em->frame_ptrs;
	m->n_frames = n[K_FRAME];

	for (uint32_t i = 0; i < n[K_STACK]; i++) {
		const void *key = intern__key(e->tab[K_STACK], base[K_STACK] + i, &len);

		flamewatch__wire__stack__init(&em->stacks[i]);
		memcpy(em->ids + at, key, len);
		em->stacks[i].frames = em->ids + at;
		em->stacks[i].n_frames = len / sizeof(uint32_t);
		at += len / sizeof(uint32_t);
		em->stack_ptrs[i] = &em->stacks[i];
	}
	m->stacks = em->stack_ptrs;
	m->n_stacks = n[K_STACK];

	for (uint32_t i = 0; i < n[K_SERIES]; i++) {
		const void *key = intern__key(e->tab[K_SERIES], base[K_SERIES] + i, &len);

		flamewatch__wire__series__init(&em->series[i]);
		memcpy(em->ids + at, key, len);
		em->series[i].labels = em->ids + at;
		em->series[i].n_labels = len / sizeof(uint32_t);
		at += len / sizeof(uint32_t);
		em->series_ptrs[i] = &em->series[i];
	}
	m->series = em->series_ptrs;
	m->n_series = n[K_SERIES];
	return 0;
}

/* Translates and orders the samples into columns, interning as it goes. */
static int _enc_samples(struct xlate *x, struct enc_msg *em)
{
	const struct batch *b = x->b;
	Flamewatch__Wire__Batch *m = &em->m;
	size_t n = b->nsamples;
	bool all_cpu = true, all_one = true;
	int64_t prev = 0;

	em->order = _alloc_n(n, sizeof(*em->order));
	m->ts_delta = _alloc_n(n, sizeof(*m->ts_delta));
	m->sample_stack = _alloc_n(n, sizeof(*m->sample_stack));
	m->sample_series = _alloc_n(n, sizeof(*m->sample_series));
	m->sample_tid = _alloc_n(n, sizeof(*m->sample_tid));
	m->sample_cpu = _alloc_n(n, sizeof(*m->sample_cpu));
	m->sample_type = _alloc_n(n, sizeof(*m->sample_type));
	m->sample_value = _alloc_n(n, sizeof(*m->sample_value));
	if (!em->order || !m->ts_delta || !m->sample_stack || !m->sample_series ||
	    !m->sample_tid || !m->sample_cpu || !m->sample_type || !m->sample_value)
		return -ENOMEM;

	for (size_t i = 0; i < n; i++)
		em->order[i] = (struct ts_index){ b->samples[i].ts_ns, i };
	qsort(em->order, n, sizeof(*em->order), _by_ts);

	for (size_t i = 0; i < n; i++) {
		const struct batch_sample *s = &b->samples[em->order[i].i];
		int64_t stack = _x_stack(x, s->stack);
		int64_t series = _x_series(x, s->series);

		if (stack < 0)
			return stack;
		if (series < 0)
			return series;
		/* Wraps only for absurd timestamps; the receiver rejects those. */
		m->ts_delta[i] = (int64_t)((uint64_t)s->ts_ns - (uint64_t)prev);
		prev = s->ts_ns;
		m->sample_stack[i] = stack;
		m->sample_series[i] = series;
		m->sample_tid[i] = s->tid;
		m->sample_cpu[i] = s->cpu;
		m->sample_type[i] = s->type;
		m->sample_value[i] = s->value;
		all_cpu &= s->type == SAMPLE_CPU;
		all_one &= s->value == 1;
	}
	m->n_ts_delta = m->n_sample_stack = m->n_sample_series = n;
	m->n_sample_tid = m->n_sample_cpu = n;
	m->n_sample_type = all_cpu ? 0 : n;
	m->n_sample_value = all_one ? 0 : n;
	return 0;
}

/* ---- CPU busy intervals (fields 40-45) ------------------------------------ */

static int _by_cpu_start(const void *a, const void *b)
{
	const struct batch_cpu_interval *x = *(const struct batch_cpu_interval *const *)a;
	const struct batch_cpu_interval *y = *(const struct batch_cpu_interval *const *)b;

	if (x->cpu != y->cpu)
		return x->cpu < y->cpu ? -1 : 1;
	if (x->start_ns != y->start_ns)
		return x->start_ns < y->start_ns ? -1 : 1;
	return (x->end_ns > y->end_ns) - (x->end_ns < y->end_ns);
}

static void _enc_cpu_intervals_free(struct enc_msg *em)
{
	free(em->m.cpu_iv_cpu);
	free(em->m.cpu_iv_start_delta);
	free(em->m.cpu_iv_duration);
	free(em->m.cpu_iv_series);
	free(em->m.cpu_iv_tid);
	free(em->m.cpu_iv_comm);
}

/* Orders the intervals by (cpu, start) into columns, interning as it goes. */
static int _enc_cpu_intervals(struct xlate *x, struct enc_msg *em)
{
	const struct batch *b = x->b;
	Flamewatch__Wire__Batch *m = &em->m;
	size_t n = b->ncpu_intervals;
	const struct batch_cpu_interval **order;
	int64_t prev = 0;
	int err = 0;

	if (!n)
		return 0;
	order = _alloc_n(n, sizeof(*order));
	m->cpu_iv_cpu = _alloc_n(n, sizeof(*m->cpu_iv_cpu));
	m->cpu_iv_start_delta = _alloc_n(n, sizeof(*m->cpu_iv_start_delta));
	m->cpu_iv_duration = _alloc_n(n, sizeof(*m->cpu_iv_duration));
	m->cpu_iv_series = _alloc_n(n, sizeof(*m->cpu_iv_series));
	m->cpu_iv_tid = _alloc_n(n, sizeof(*m->cpu_iv_tid));
	m->cpu_iv_comm = _alloc_n(n, sizeof(*m->cpu_iv_comm));
	if (!order || !m->cpu_iv_cpu || !m->cpu_iv_start_delta || !m->cpu_iv_duration ||
	    !m->cpu_iv_series || !m->cpu_iv_tid || !m->cpu_iv_comm) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		order[i] = &b->cpu_intervals[i];
	qsort(order, n, sizeof(*order), _by_cpu_start);
	for (size_t i = 0; i < n; i++) {
		const struct batch_cpu_interval *iv = order[i];
		int64_t series = _x_series(x, iv->series);
		int64_t comm = series < 0 ? series : _x_string(x, iv->comm);

		if (comm < 0) {
			err = (int)comm;
			goto out;
		}
		if (iv->end_ns < iv->start_ns) {
			err = -EINVAL;
			goto out;
		}
		m->cpu_iv_cpu[i] = iv->cpu;
		m->cpu_iv_start_delta[i] = (int64_t)((uint64_t)iv->start_ns - (uint64_t)prev);
		m->cpu_iv_duration[i] = (uint64_t)iv->end_ns - (uint64_t)iv->start_ns;
		m->cpu_iv_series[i] = series;
		m->cpu_iv_tid[i] = iv->tid;
		m->cpu_iv_comm[i] = comm;
		prev = iv->end_ns;
	}
	m->n_cpu_iv_cpu = m->n_cpu_iv_start_delta = m->n_cpu_iv_duration = n;
	m->n_cpu_iv_series = m->n_cpu_iv_tid = m->n_cpu_iv_comm = n;
out:
	free(order);
	return err;
}

/* GPU intervals into columns, ordered by start, interning what they name. */
static int _enc_gpu_intervals(struct xlate *x, struct enc_msg *em)
{
	const struct batch *b = x->b;
	Flamewatch__Wire__Batch *m = &em->m;
	size_t n = b->ngpu_intervals;
	bool all_one = true;
	int64_t prev = 0;

	if (!n)
		return 0;
	em->gpu_order = _alloc_n(n, sizeof(*em->gpu_order));
	m->gpu_start_delta = _alloc_n(n, sizeof(*m->gpu_start_delta));
	m->gpu_duration = _alloc_n(n, sizeof(*m->gpu_duration));
	m->gpu_series = _alloc_n(n, sizeof(*m->gpu_series));
	m->gpu_device = _alloc_n(n, sizeof(*m->gpu_device));
	m->gpu_stream = _alloc_n(n, sizeof(*m->gpu_stream));
	m->gpu_kind = _alloc_n(n, sizeof(*m->gpu_kind));
	m->gpu_name = _alloc_n(n, sizeof(*m->gpu_name));
	m->gpu_stack = _alloc_n(n, sizeof(*m->gpu_stack));
	m->gpu_bytes = _alloc_n(n, sizeof(*m->gpu_bytes));
	m->gpu_weight = _alloc_n(n, sizeof(*m->gpu_weight));
	if (!em->gpu_order || !m->gpu_start_delta || !m->gpu_duration || !m->gpu_series ||
	    !m->gpu_device || !m->gpu_stream || !m->gpu_kind || !m->gpu_name || !m->gpu_stack ||
	    !m->gpu_bytes || !m->gpu_weight)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		em->gpu_order[i] = (struct ts_index){ b->gpu_intervals[i].start_ns, i };
	qsort(em->gpu_order, n, sizeof(*em->gpu_order), _by_ts);

	for (size_t i = 0; i < n; i++) {
		const struct batch_gpu_interval *g = &b->gpu_intervals[em->gpu_order[i].i];
		int64_t series = _x_series(x, g->series);
		int64_t name = _x_string(x, g->name);
		int64_t stack = g->stack == BATCH_NO_STACK ? -1 : _x_stack(x, g->stack);

		if (series < 0)
			return series;
		if (name < 0)
			return name;
		if (g->stack != BATCH_NO_STACK && stack < 0)
			return stack;
		if (g->end_ns < g->start_ns)
			return -EINVAL;
		m->gpu_start_delta[i] = (int64_t)((uint64_t)g->start_ns - (uint64_t)prev);
		prev = g->start_ns;
		m->gpu_duration[i] = (uint64_t)(g->end_ns - g->start_ns);
		m->gpu_series[i] = series;
		m->gpu_device[i] = g->device;
		m->gpu_stream[i] = g->stream;
		m->gpu_kind[i] = g->kind;
		m->gpu_name[i] = name;
		m->gpu_stack[i] = g->stack == BATCH_NO_STACK ? 0 : (uint32_t)stack + 1;
		m->gpu_bytes[i] = g->bytes;
		m->gpu_weight[i] = g->weight ? g->weight : 1;
		all_one &= m->gpu_weight[i] == 1;
	}
	m->n_gpu_start_delta = m->n_gpu_duration = m->n_gpu_series = n;
	m->n_gpu_device = m->n_gpu_stream = m->n_gpu_kind = m->n_gpu_name = n;
	m->n_gpu_stack = m->n_gpu_bytes = n;
	m->n_gpu_weight = all_one ? 0 : n;
	return 0;
}

/* Consumes in; on success *out is in itself (WIRE_NONE) or a new buffer. */
static int _compress(enum wire_compression c, uint8_t *in, size_t len, void **out, size_t *out_len)
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
		 * Level 3: higher levels gain under 2 % on batches and cost CPU
		 * on every node. Its match tables, though, capped at 2^14
		 * entries each: level 3 sizes them for the input (2^16 each
		 * for a 19-KB batch), and zstd clears them before use, so they
		 * were the agent's largest allocation at every flush (475 KB
		 * for that batch, 128 KB now); batches of 3-165 KB captured
		 * from an agent come out at most 0.8 % larger.
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

/* ---- metric points (fields 30-33) ---------------------------------------- */

static void _enc_metrics_free(struct enc_msg *em)
{
	free(em->m.metric_ts_delta);
	free(em->m.metric_series);
	free(em->m.metric_name);
	free(em->m.metric_value);
}

/* Translates and orders the metric points into columns, as for samples. */
static int _enc_metrics(struct xlate *x, struct enc_msg *em)
{
	const struct batch *b = x->b;
	Flamewatch__Wire__Batch *m = &em->m;
	size_t n = b->nmetrics;
	struct ts_index *order;
	int64_t prev = 0;
	int err = 0;

	if (!n)
		return 0;
	order = _alloc_n(n, sizeof(*order));
	m->metric_ts_delta = _alloc_n(n, sizeof(*m->metric_ts_delta));
	m->metric_series = _alloc_n(n, sizeof(*m->metric_series));
	m->metric_name = _alloc_n(n, sizeof(*m->metric_name));
	m->metric_value = _alloc_n(n, sizeof(*m->metric_value));
	if (!order || !m->metric_ts_delta || !m->metric_series || !m->metric_name ||
	    !m->metric_value) {
		err = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < n; i++)
		order[i] = (struct ts_index){ b->metrics[i].ts_ns, i };
	qsort(order, n, sizeof(*order), _by_ts);
	for (size_t i = 0; i < n; i++) {
		const struct batch_metric *bm = &b->metrics[order[i].i];
		int64_t series = _x_series(x, bm->series);
		int64_t name = series < 0 ? series : _x_string(x, bm->name);

		if (series < 0 || name < 0) {
			err = (int)(series < 0 ? series : name);
			goto out;
		}
		m->metric_ts_delta[i] = (int64_t)((uint64_t)bm->ts_ns - (uint64_t)prev);
		prev = bm->ts_ns;
		m->metric_series[i] = series;
		m->metric_name[i] = name;
		m->metric_value[i] = bm->value;
	}
	m->n_metric_ts_delta = m->n_metric_series = m->n_metric_name = m->n_metric_value = n;
out:
	free(order);
	return err;
}

int wire_encoder__encode(struct wire_encoder *e, const char *node, const struct batch *b,
			 enum wire_compression c, void **out, size_t *out_len)
{
	struct enc_msg em = { .m = FLAMEWATCH__WIRE__BATCH__INIT };
	struct xlate x = { .e = e, .b = b };
	uint8_t *packed = NULL;
	size_t len;
	int err;

	*out = NULL;
	*out_len = 0;
	if (c != WIRE_NONE && c != WIRE_GZIP && c != WIRE_ZSTD)
		return -EINVAL;
	if (wire_encoder__memory(e) > e->max_bytes)
		wire_encoder__reset(e);
	if (!e->tab[0]) {
		err = _tables_new(e);
		if (err)
			goto out;
	}

	x.n[K_STRING] = intern__count(b->dict->strings);
	x.n[K_MAPPING] = b->dict->nmappings;
	x.n[K_FRAME] = b->dict->nframes;
	x.n[K_STACK] = profile__nstacks(b->dict);
	x.n[K_SERIES] = batch__nseries(b);
	for (int k = 0; k < K_MAX; k++) {
		x.map[k] = _alloc_n(x.n[k], sizeof(uint32_t));
		if (!x.map[k]) {
			err = -ENOMEM;
			goto out;
		}
		memset(x.map[k], 0xff, (size_t)x.n[k] * sizeof(uint32_t));
	}

	/*
	 * Samples first: they add to the tables what the dictionary part sends.
	 * Should anything fail from here on, what was added stays in the
	 * tables unacknowledged, and the next batch simply carries it.
	 */
	err = _enc_samples(&x, &em);
	if (!err)
		err = _enc_gpu_intervals(&x, &em);
	if (err)
		goto out;
	err = _enc_metrics(&x, &em);
	if (err)
		goto out;
	err = _enc_cpu_intervals(&x, &em);
	if (err)
		goto out;
	err = _enc_dict(e, &em);
	if (err)
		goto out;
	em.m.version = WIRE_VERSION;
	em.m.session = e->session;
	em.m.seq = e->seq + 1;
	em.m.node = (char *)(node ? node : "");
	em.m.period_ns = b->period_ns;

	len = flamewatch__wire__batch__get_packed_size(&em.m);
	packed = malloc(len ? len : 1);
	if (!packed) {
		err = -ENOMEM;
		goto out;
	}
	flamewatch__wire__batch__pack(&em.m, packed);
	/* Remembered before compressing: a failed _remember() leaves nothing to undo. */
	err = _remember(e, e->seq + 1);
	if (err)
		goto out;
	err = _compress(c, packed, len, out, out_len);
	packed = NULL;
	if (err) {
		e->npending--;
		goto out;
	}
	e->seq++;
out:
	free(packed);
	_enc_cpu_intervals_free(&em);
	_enc_msg_free(&em);
	_enc_metrics_free(&em);
	for (int k = 0; k < K_MAX; k++)
		free(x.map[k]);
	free(x.scratch);
	return err;
}

/* ======================================================================== */
/* Session table                                                             */
/* ======================================================================== */

/*
 * A session's tables on the server: append-only byte entries that can be
 * cut back to an earlier length, which is how a batch that fails
 * validation half way leaves no trace. Nothing is deduplicated here; the
 * encoder never sends an entry twice, and the batches handed out are
 * deduplicated by the profile they are built in.
 */
struct dtab {
	uint8_t *data;
	size_t len, cap;
	size_t *end;		/* end[i]: offset just past entry i */
	uint32_t n;
	size_t cap_end;
};

static void _dtab_free(struct dtab *t)
{
	free(t->data);
	free(t->end);
}

static int _dtab_append(struct dtab *t, const void *p, size_t len)
{
	if (t->n == UINT32_MAX)
		return -E2BIG;
	if (!t->data || len > t->cap - t->len) {
		size_t cap = t->cap ? t->cap : 4096;
		uint8_t *d;

		while (cap - t->len < len)
			cap *= 2;
		d = realloc(t->data, cap);
		if (!d)
			return -ENOMEM;
		t->data = d;
		t->cap = cap;
	}
	if (t->n == t->cap_end) {
		size_t cap = t->cap_end ? t->cap_end * 2 : 64;
		size_t *end = realloc(t->end, cap * sizeof(*end));

		if (!end)
			return -ENOMEM;
		t->end = end;
		t->cap_end = cap;
	}
	if (len)
		memcpy(t->data + t->len, p, len);
	t->len += len;
	t->end[t->n++] = t->len;
	return 0;
}

static const void *_dtab_get(const struct dtab *t, uint32_t i, size_t *len)
{
	size_t start = i ? t->end[i - 1] : 0;

	*len = t->end[i] - start;
	return t->data + start;
}

static void _dtab_truncate(struct dtab *t, uint32_t n)
{
	t->n = n;
	t->len = n ? t->end[n - 1] : 0;
}

/*
 * Session global id -> id in the session's shared dictionary, for one
 * kind; OM_UNSET until the first batch that refers to the entry.
 */
#define OM_UNSET UINT32_MAX
struct outmap {
	uint32_t *local;
	uint32_t n, cap;
};

/*
 * The session's dictionary as a struct profile and series table, which the
 * batches handed out share (struct batch's dict_id): translating an entry
 * costs once per session instead of once per batch, and a store can keep
 * its own translation by dict_id. Reference counted, because a batch may
 * outlive its session's eviction.
 */
struct wire_sdict {
	unsigned refs;
	uint64_t id;
	struct batch *b;	/* owns dict and series; holds no records */
};

static void _sdict_unref(void *owner)
{
	struct wire_sdict *sd = owner;

	if (!sd || __atomic_sub_fetch(&sd->refs, 1, __ATOMIC_ACQ_REL))
		return;
	batch__free(sd->b);
	free(sd);
}

static struct wire_sdict *_sdict_new(void)
{
	struct wire_sdict *sd = calloc(1, sizeof(*sd));

	if (!sd)
		return NULL;
	sd->refs = 1;
	sd->id = batch__new_dict_id();
	sd->b = batch__new(0);
	if (!sd->b) {
		free(sd);
		return NULL;
	}
	return sd;
}

struct wire_session {
	uint64_t id;
	char *node;
	struct dtab tab[K_MAX];
	struct wire_sdict *sd;
	struct outmap om[K_MAX];
	size_t bytes;			/* as counted in the table's total */
	struct wire_session *newer, *older;
	struct wire_session *hnext;
};

struct wire_session_table {
	struct wire_session **buckets;
	size_t nbuckets;		/* power of two */
	struct wire_session *newest, *oldest;
	size_t count, max_sessions;
	size_t bytes, max_bytes;
};

static size_t _session_memory(const struct wire_session *s)
{
	size_t bytes = sizeof(*s) + strlen(s->node) + 1;

	for (int k = 0; k < K_MAX; k++)
		bytes += s->tab[k].cap + s->tab[k].cap_end * sizeof(size_t) +
			 (size_t)s->om[k].cap * sizeof(uint32_t);
	if (s->sd)
		bytes += sizeof(*s->sd) + batch__memory(s->sd->b);
	return bytes;
}

static void _session_free(struct wire_session *s)
{
	if (!s)
		return;
	for (int k = 0; k < K_MAX; k++) {
		_dtab_free(&s->tab[k]);
		free(s->om[k].local);
	}
	_sdict_unref(s->sd);
	free(s->node);
	free(s);
}

struct wire_session_table *wire_sessions__new(size_t max_sessions, size_t max_bytes)
{
	struct wire_session_table *t;

	if (!max_sessions || max_sessions > (1u << 24)) {
		errno = EINVAL;
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->max_sessions = max_sessions;
	t->max_bytes = max_bytes;
	for (t->nbuckets = 16; t->nbuckets < max_sessions; t->nbuckets *= 2)
		;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	if (!t->buckets) {
		free(t);
		errno = ENOMEM;
		return NULL;
	}
	return t;
}

void wire_sessions__free(struct wire_session_table *t)
{
	struct wire_session *s, *next;

	if (!t)
		return;
	for (s = t->newest; s; s = next) {
		next = s->older;
		_session_free(s);
	}
	free(t->buckets);
	free(t);
}

size_t wire_sessions__count(const struct wire_session_table *t)
{
	return t->count;
}

size_t wire_sessions__memory(const struct wire_session_table *t)
{
	return t->bytes;
}

static struct wire_session **_bucket(struct wire_session_table *t, uint64_t id)
{
	return &t->buckets[hash__bytes(&id, sizeof(id)) & (t->nbuckets - 1)];
}

static struct wire_session *_session_find(struct wire_session_table *t, uint64_t id)
{
	struct wire_session *s;

	for (s = *_bucket(t, id); s; s = s->hnext)
		if (s->id == id)
			return s;
	return NULL;
}

static void _lru_unlink(struct wire_session_table *t, struct wire_session *s)
{
	if (s->newer)
		s->newer->older = s->older;
	else
		t->newest = s->older;
	if (s->older)
		s->older->newer = s->newer;
	else
		t->oldest = s->newer;
	s->newer = s->older = NULL;
}

static void _lru_push(struct wire_session_table *t, struct wire_session *s)
{
	s->newer = NULL;
	s->older = t->newest;
	if (t->newest)
		t->newest->newer = s;
	else
		t->oldest = s;
	t->newest = s;
}

static void _session_remove(struct wire_session_table *t, struct wire_session *s)
{
	struct wire_session **p;

	for (p = _bucket(t, s->id); *p != s; p = &(*p)->hnext)
		;
	*p = s->hnext;
	_lru_unlink(t, s);
	t->count--;
	t->bytes -= s->bytes;
	_session_free(s);
}

/*
 * Called once a batch is accepted. The session just used goes last: it is
 * only evicted when it alone is over max_bytes, and then its agent starts a
 * smaller session after the next -ESTALE.
 */
static void _session_commit(struct wire_session_table *t, struct wire_session *s, bool is_new)
{
	if (is_new) {
		struct wire_session **b = _bucket(t, s->id);

		s->hnext = *b;
		*b = s;
		t->count++;
	} else {
		_lru_unlink(t, s);
		t->bytes -= s->bytes;
	}
	_lru_push(t, s);
	s->bytes = _session_memory(s);
	t->bytes += s->bytes;
	while ((t->count > t->max_sessions || t->bytes > t->max_bytes) && t->oldest != s)
		_session_remove(t, t->oldest);
	if (t->bytes > t->max_bytes)
		_session_remove(t, s);
}

/* ======================================================================== */
/* Decoder                                                                   */
/* ======================================================================== */

/* 2000-01-01T00:00:00Z: anything earlier is a clock that was never set. */
#define MIN_TS_NS 946684800000000000LL

struct wire_limits wire_limits__default(void)
{
	return (struct wire_limits){
		.max_body = 8u << 20,
		.max_decompressed = 32u << 20,
		.max_unpacked = 128u << 20,
		.max_samples = 1000000,
		.max_stack_depth = 1024,
		.max_labels = 64,
		.max_string = 16 << 10,
		.max_future_ns = 86400LL * 1000000000LL,
	};
}

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

struct dec {
	const struct wire_limits *lim;
	char *err;
	size_t err_len;
	const Flamewatch__Wire__Batch *m;
	struct wire_session *s;
	struct batch *out;
	struct outmap *om;	/* the session's */
	uint32_t *scratch;
	const char **names, **values;
	size_t cap_scratch, cap_labels;
};

/*
 * Sized per use rather than from the limits: entries the session accepted
 * earlier were checked against the limits of their own call.
 */
static int _d_reserve(struct dec *d, size_t frames, size_t labels)
{
	if (frames > d->cap_scratch) {
		uint32_t *s = realloc(d->scratch, frames * sizeof(*s));

		if (!s)
			return -ENOMEM;
		d->scratch = s;
		d->cap_scratch = frames;
	}
	if (labels > d->cap_labels) {
		const char **n = realloc(d->names, labels * sizeof(*n));

		if (!n)
			return -ENOMEM;
		d->names = n;
		n = realloc(d->values, labels * sizeof(*n));
		if (!n)
			return -ENOMEM;
		d->values = n;
		d->cap_labels = labels;
	}
	return 0;
}

/* Makes gids below n addressable, new ones untranslated. */
static int _om_grow(struct outmap *m, uint32_t n)
{
	if (n > m->cap) {
		uint32_t cap = m->cap ? m->cap : 64;
		uint32_t *l;

		while (cap < n)
			cap = cap > UINT32_MAX / 2 ? UINT32_MAX : cap * 2;
		l = realloc(m->local, (size_t)cap * sizeof(*l));
		if (!l)
			return -ENOMEM;
		m->local = l;
		m->cap = cap;
	}
	for (; m->n < n; m->n++)
		m->local[m->n] = OM_UNSET;
	return 0;
}

/* 1: gid is not translated yet (m->local[*ord] is to be set), 0: it is. */
static int _om_find(struct outmap *m, uint32_t gid, int64_t *ord)
{
	*ord = gid;
	if (gid >= m->n) {
		int rc = _om_grow(m, gid + 1);

		if (rc)
			return rc;
	}
	*ord = gid;
	return m->local[gid] == OM_UNSET;
}

static const char *_d_string(struct dec *d, uint32_t gid)
{
	size_t len;

	return _dtab_get(&d->s->tab[K_STRING], gid, &len);
}

static int64_t _out_mapping(struct dec *d, uint32_t gid)
{
	struct outmap *m = &d->om[K_MAPPING];
	const void *key;
	int64_t ord, id;
	size_t len;
	int rc = _om_find(m, gid, &ord);

	if (rc <= 0)
		return rc < 0 ? (int64_t)rc : (int64_t)m->local[ord];
	key = _dtab_get(&d->s->tab[K_MAPPING], gid, &len);
	id = profile__intern_mapping(d->out->dict, _d_string(d, _u32_at(key, 0)),
				     _d_string(d, _u32_at(key, 1)));
	if (id < 0)
		return id;
	m->local[ord] = id;
	return id;
}

static int64_t _out_frame(struct dec *d, uint32_t gid)
{
	struct outmap *m = &d->om[K_FRAME];
	struct wire_frame f;
	uint32_t mapping = PROFILE_NO_MAPPING;
	int64_t ord, id;
	size_t len;
	int rc = _om_find(m, gid, &ord);

	if (rc <= 0)
		return rc < 0 ? (int64_t)rc : (int64_t)m->local[ord];
	memcpy(&f, _dtab_get(&d->s->tab[K_FRAME], gid, &len), sizeof(f));
	if (f.mapping) {
		id = _out_mapping(d, f.mapping - 1);
		if (id < 0)
			return id;
		mapping = id;
	}
	id = profile__intern_named_frame(d->out->dict, f.kind, mapping, f.addr,
					 _d_string(d, f.function), _d_string(d, f.file), f.line);
	if (id < 0)
		return id;
	m->local[ord] = id;
	return id;
}

static int64_t _out_stack(struct dec *d, uint32_t gid)
{
	struct outmap *m = &d->om[K_STACK];
	const void *key;
	int64_t ord, id;
	size_t len;
	int rc = _om_find(m, gid, &ord);

	if (rc <= 0)
		return rc < 0 ? (int64_t)rc : (int64_t)m->local[ord];
	key = _dtab_get(&d->s->tab[K_STACK], gid, &len);
	len /= sizeof(uint32_t);
	/* At least one element: an empty stack's key must not be NULL either. */
	if (_d_reserve(d, len ? len : 1, 0))
		return -ENOMEM;
	/*
	 * Deeper than the limit (runaway recursion, a bad unwind): the frames
	 * nearest the root are kept and a "[truncated]" frame marks where the
	 * rest was cut, so the flame graph shows it.
	 */
	if (len > d->lim->max_stack_depth) {
		size_t keep = d->lim->max_stack_depth ? d->lim->max_stack_depth - 1 : 0;

		for (size_t i = 0; i < keep; i++) {
			id = _out_frame(d, _u32_at(key, i));
			if (id < 0)
				return id;
			d->scratch[i] = id;
		}
		id = profile__intern_named_frame(d->out->dict, FRAME_NATIVE, PROFILE_NO_MAPPING, 0,
						 "[truncated]", "", 0);
		if (id < 0)
			return id;
		d->scratch[keep] = id;
		len = keep + 1;
	} else {
		/* _out_frame() does not touch scratch, so it can be filled in place. */
		for (size_t i = 0; i < len; i++) {
			id = _out_frame(d, _u32_at(key, i));
			if (id < 0)
				return id;
			d->scratch[i] = id;
		}
	}
	id = profile__intern_stack(d->out->dict, d->scratch, len);
	if (id < 0)
		return id;
	m->local[ord] = id;
	return id;
}

static int64_t _out_series(struct dec *d, uint32_t gid)
{
	struct outmap *m = &d->om[K_SERIES];
	const void *key;
	int64_t ord, id;
	size_t len;
	int rc = _om_find(m, gid, &ord);

	if (rc <= 0)
		return rc < 0 ? (int64_t)rc : (int64_t)m->local[ord];
	key = _dtab_get(&d->s->tab[K_SERIES], gid, &len);
	len /= 2 * sizeof(uint32_t);
	if (_d_reserve(d, 0, len))
		return -ENOMEM;
	for (size_t i = 0; i < len; i++) {
		d->names[i] = _d_string(d, _u32_at(key, 2 * i));
		d->values[i] = _d_string(d, _u32_at(key, 2 * i + 1));
	}
	id = batch__intern_series(d->out, d->names, d->values, len);
	if (id < 0)
		return id;
	m->local[ord] = id;
	return id;
}

/*
 * Entries below what the session holds are repeats of ones the receiver
 * already accepted (an old batch sent again): they must be byte-equal.
 * Every other entry is appended. Either way *gid ends up as its global id.
 */
static int _d_put(struct dec *d, int k, uint32_t gid, const void *key, size_t len)
{
	struct dtab *t = &d->s->tab[k];
	const void *have;
	size_t hlen;
	int rc;

	if (gid < t->n) {
		have = _dtab_get(t, gid, &hlen);
		if (hlen != len || (len && memcmp(have, key, len)))
			return _fail(d->err, d->err_len, -EINVAL,
				     "%s %u differs from the one the session holds",
				     kind_names[k], gid);
		return 0;
	}
	rc = _dtab_append(t, key, len);
	if (rc)
		return _fail(d->err, d->err_len, rc, "cannot grow the %s table", kind_names[k]);
	return 0;
}

static int _d_strings(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_strings; i++) {
		const char *s = d->m->strings[i] ? d->m->strings[i] : "";
		size_t len = strlen(s);
		int rc;

		if (len > d->lim->max_string)
			return _fail(d->err, d->err_len, -EINVAL,
				     "string %zu is %zu bytes long, more than %zu",
				     base + i, len, d->lim->max_string);
		rc = _d_put(d, K_STRING, base + i, s, len + 1);
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_string_id(struct dec *d, const char *kind, size_t gid, const char *field, uint32_t id)
{
	if (id < d->s->tab[K_STRING].n)
		return 0;
	return _fail(d->err, d->err_len, -EINVAL, "%s %zu: %s string id %u out of range (%u strings)",
		     kind, gid, field, id, d->s->tab[K_STRING].n);
}

static int _d_mappings(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_mappings; i++) {
		const Flamewatch__Wire__Mapping *wm = d->m->mappings[i];
		uint32_t key[2] = { wm->path, wm->build_id };
		int rc;

		rc = _d_string_id(d, "mapping", base + i, "path", wm->path);
		if (!rc)
			rc = _d_string_id(d, "mapping", base + i, "build_id", wm->build_id);
		if (!rc)
			rc = _d_put(d, K_MAPPING, base + i, key, sizeof(key));
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_frames(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_frames; i++) {
		const Flamewatch__Wire__Frame *wf = d->m->frames[i];
		struct wire_frame key = {
			.kind = wf->kind, .mapping = wf->mapping, .addr = wf->addr,
			.function = wf->function, .file = wf->file, .line = wf->line,
		};
		int rc;

		if (wf->kind >= FRAME_KIND_MAX)
			return _fail(d->err, d->err_len, -EINVAL, "frame %zu: unknown kind %u",
				     base + i, wf->kind);
		if (wf->mapping > d->s->tab[K_MAPPING].n)
			return _fail(d->err, d->err_len, -EINVAL,
				     "frame %zu: mapping id %u out of range (%u mappings)",
				     base + i, wf->mapping - 1, d->s->tab[K_MAPPING].n);
		rc = _d_string_id(d, "frame", base + i, "function", wf->function);
		if (!rc)
			rc = _d_string_id(d, "frame", base + i, "file", wf->file);
		if (!rc)
			rc = _d_put(d, K_FRAME, base + i, &key, sizeof(key));
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_stacks(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_stacks; i++) {
		const Flamewatch__Wire__Stack *ws = d->m->stacks[i];
		int rc;

		for (size_t j = 0; j < ws->n_frames; j++)
			if (ws->frames[j] >= d->s->tab[K_FRAME].n)
				return _fail(d->err, d->err_len, -EINVAL,
					     "stack %zu: frame id %u out of range (%u frames)",
					     base + i, ws->frames[j], d->s->tab[K_FRAME].n);
		rc = _d_put(d, K_STACK, base + i, ws->frames, ws->n_frames * sizeof(uint32_t));
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_series(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_series; i++) {
		const Flamewatch__Wire__Series *ws = d->m->series[i];
		size_t n = ws->n_labels / 2;
		int rc;

		if (ws->n_labels % 2)
			return _fail(d->err, d->err_len, -EINVAL,
				     "series %zu: odd number of label ids", base + i);
		if (n > d->lim->max_labels)
			return _fail(d->err, d->err_len, -EINVAL,
				     "series %zu has %zu labels, more than %zu",
				     base + i, n, d->lim->max_labels);
		for (size_t j = 0; j < ws->n_labels; j++) {
			rc = _d_string_id(d, "series", base + i, j % 2 ? "value" : "name",
					  ws->labels[j]);
			if (rc)
				return rc;
		}
		for (size_t j = 0; j < n; j++) {
			const char *name = _d_string(d, ws->labels[2 * j]);

			if (!name[0])
				return _fail(d->err, d->err_len, -EINVAL,
					     "series %zu: empty label name", base + i);
			for (size_t l = 0; l < j; l++)
				if (!strcmp(name, _d_string(d, ws->labels[2 * l])))
					return _fail(d->err, d->err_len, -EINVAL,
						     "series %zu: label %s appears twice",
						     base + i, name);
		}
		rc = _d_put(d, K_SERIES, base + i, ws->labels, ws->n_labels * sizeof(uint32_t));
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_samples(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	const struct wire_limits *lim = d->lim;
	size_t n = m->n_ts_delta;
	struct timespec now;
	int64_t ts = 0, max_ts;

	if (n > lim->max_samples)
		return _fail(d->err, d->err_len, -E2BIG, "%zu samples, more than %zu",
			     n, lim->max_samples);
	if (m->n_sample_stack != n || m->n_sample_series != n || m->n_sample_tid != n ||
	    m->n_sample_cpu != n || (m->n_sample_type && m->n_sample_type != n) ||
	    (m->n_sample_value && m->n_sample_value != n))
		return _fail(d->err, d->err_len, -EINVAL,
			     "sample columns differ in length (%zu timestamps)", n);
	clock_gettime(CLOCK_REALTIME, &now);
	max_ts = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	max_ts = lim->max_future_ns > INT64_MAX - max_ts ? INT64_MAX : max_ts + lim->max_future_ns;

	for (size_t i = 0; i < n; i++) {
		uint32_t type = m->n_sample_type ? m->sample_type[i] : SAMPLE_CPU;
		int64_t value = m->n_sample_value ? m->sample_value[i] : 1;

		if (__builtin_add_overflow(ts, m->ts_delta[i], &ts) || ts < MIN_TS_NS ||
		    ts > max_ts)
			return _fail(d->err, d->err_len, -EINVAL,
				     "sample %zu: timestamp out of range", i);
		if (m->sample_stack[i] >= d->s->tab[K_STACK].n)
			return _fail(d->err, d->err_len, -EINVAL,
				     "sample %zu: stack id %u out of range (%u stacks)",
				     i, m->sample_stack[i], d->s->tab[K_STACK].n);
		if (m->sample_series[i] >= d->s->tab[K_SERIES].n)
			return _fail(d->err, d->err_len, -EINVAL,
				     "sample %zu: series id %u out of range (%u series)",
				     i, m->sample_series[i], d->s->tab[K_SERIES].n);
		if (type >= SAMPLE_TYPE_MAX)
			return _fail(d->err, d->err_len, -EINVAL, "sample %zu: unknown type %u",
				     i, type);
		if (value < 0)
			return _fail(d->err, d->err_len, -EINVAL, "sample %zu: negative value", i);
	}
	return 0;
}

/* Checks the GPU interval columns against the limits and the session's tables. */
static int _d_gpu_check(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	size_t n = m->n_gpu_start_delta;
	struct timespec now;
	int64_t ts = 0, max_ts;

	if (n > d->lim->max_samples)
		return _fail(d->err, d->err_len, -E2BIG, "%zu GPU intervals, more than %zu",
			     n, d->lim->max_samples);
	if (m->n_gpu_duration != n || m->n_gpu_series != n || m->n_gpu_device != n ||
	    m->n_gpu_stream != n || m->n_gpu_kind != n || m->n_gpu_name != n ||
	    m->n_gpu_stack != n || m->n_gpu_bytes != n || (m->n_gpu_weight && m->n_gpu_weight != n))
		return _fail(d->err, d->err_len, -EINVAL,
			     "GPU interval columns differ in length (%zu starts)", n);
	clock_gettime(CLOCK_REALTIME, &now);
	max_ts = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	max_ts = d->lim->max_future_ns > INT64_MAX - max_ts ? INT64_MAX :
		 max_ts + d->lim->max_future_ns;
	for (size_t i = 0; i < n; i++) {
		int64_t end;

		if (__builtin_add_overflow(ts, m->gpu_start_delta[i], &ts) || ts < MIN_TS_NS ||
		    ts > max_ts || m->gpu_duration[i] > (uint64_t)INT64_MAX ||
		    __builtin_add_overflow(ts, (int64_t)m->gpu_duration[i], &end))
			return _fail(d->err, d->err_len, -EINVAL,
				     "GPU interval %zu: start or duration out of range", i);
		if (m->gpu_series[i] >= d->s->tab[K_SERIES].n)
			return _fail(d->err, d->err_len, -EINVAL,
				     "GPU interval %zu: series id %u out of range (%u series)",
				     i, m->gpu_series[i], d->s->tab[K_SERIES].n);
		if (m->gpu_name[i] >= d->s->tab[K_STRING].n)
			return _fail(d->err, d->err_len, -EINVAL,
				     "GPU interval %zu: name string id %u out of range (%u strings)",
				     i, m->gpu_name[i], d->s->tab[K_STRING].n);
		if (m->gpu_stack[i] > d->s->tab[K_STACK].n)
			return _fail(d->err, d->err_len, -EINVAL,
				     "GPU interval %zu: stack id %u out of range (%u stacks)",
				     i, m->gpu_stack[i] - 1, d->s->tab[K_STACK].n);
		if (m->gpu_kind[i] >= GPU_ACTIVITY_KIND_MAX)
			return _fail(d->err, d->err_len, -EINVAL, "GPU interval %zu: unknown kind %u",
				     i, m->gpu_kind[i]);
		if (m->n_gpu_weight && !m->gpu_weight[i])
			return _fail(d->err, d->err_len, -EINVAL, "GPU interval %zu: weight 0", i);
	}
	return 0;
}

/* Adds the checked GPU intervals to the batch being built. */
static int _d_gpu_build(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	int64_t ts = 0;

	for (size_t i = 0; i < m->n_gpu_start_delta; i++) {
		struct batch_gpu_interval g = { 0 };
		int64_t series = _out_series(d, m->gpu_series[i]);
		int64_t name, stack = BATCH_NO_STACK;
		int rc;

		if (series < 0)
			return series;
		name = profile__intern_string(d->out->dict, _d_string(d, m->gpu_name[i]));
		if (name < 0)
			return name;
		if (m->gpu_stack[i]) {
			stack = _out_stack(d, m->gpu_stack[i] - 1);
			if (stack < 0)
				return stack;
		}
		ts += m->gpu_start_delta[i];
		g.start_ns = ts;
		g.end_ns = ts + (int64_t)m->gpu_duration[i];
		g.series = series;
		g.device = m->gpu_device[i];
		g.stream = m->gpu_stream[i];
		g.kind = m->gpu_kind[i];
		g.name = name;
		g.stack = stack;
		g.bytes = m->gpu_bytes[i];
		g.weight = m->n_gpu_weight ? m->gpu_weight[i] : 1;
		rc = batch__add_gpu_interval(d->out, &g);
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * Builds the batch from the now-validated message: its samples, and the
 * entries they refer to that the session's shared dictionary lacks.
 */
static int _d_build(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	int64_t ts = 0;
	int rc = -ENOMEM;

	if (!d->s->sd && !(d->s->sd = _sdict_new()))
		goto out;
	d->om = d->s->om;
	for (int k = 0; k < K_MAX; k++) {
		if (_om_grow(&d->om[k], d->s->tab[k].n))
			goto out;
	}
	d->out = batch__new_shared(m->period_ns, d->s->sd->b->dict, d->s->sd->b->series,
				   d->s->sd->id, _sdict_unref, d->s->sd);
	if (!d->out)
		goto out;
	__atomic_add_fetch(&d->s->sd->refs, 1, __ATOMIC_ACQ_REL);
	if (m->n_ts_delta > d->out->cap_samples) {
		struct batch_sample *bs = malloc(m->n_ts_delta * sizeof(*bs));

		if (!bs)
			goto out;
		d->out->samples = bs;
		d->out->cap_samples = (uint32_t)m->n_ts_delta;
	}
	for (size_t i = 0; i < m->n_ts_delta; i++) {
		struct batch_sample s = { 0 };
		int64_t stack, series;

		stack = _out_stack(d, m->sample_stack[i]);
		if (stack < 0) {
			rc = stack;
			goto out;
		}
		series = _out_series(d, m->sample_series[i]);
		if (series < 0) {
			rc = series;
			goto out;
		}
		ts += m->ts_delta[i];
		s.ts_ns = ts;
		s.stack = stack;
		s.series = series;
		s.tid = m->sample_tid[i];
		s.cpu = m->sample_cpu[i];
		s.type = m->n_sample_type ? m->sample_type[i] : SAMPLE_CPU;
		s.value = m->n_sample_value ? m->sample_value[i] : 1;
		rc = batch__add_sample(d->out, &s);
		if (rc)
			goto out;
	}
	rc = _d_gpu_build(d);
out:
	if (rc)
		_fail(d->err, d->err_len, rc, rc == -ENOMEM ? "out of memory" :
		      "cannot build the batch: %s", strerror(-rc));
	return rc;
}

/* ---- metric points (fields 30-33) ---------------------------------------- */

static int _d_metrics(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	size_t n = m->n_metric_ts_delta;
	struct timespec now;
	int64_t ts = 0, max_ts;

	if (n > d->lim->max_samples)
		return _fail(d->err, d->err_len, -E2BIG, "%zu metric points, more than %zu",
			     n, d->lim->max_samples);
	if (m->n_metric_series != n || m->n_metric_name != n || m->n_metric_value != n)
		return _fail(d->err, d->err_len, -EINVAL,
			     "metric columns differ in length (%zu timestamps)", n);
	clock_gettime(CLOCK_REALTIME, &now);
	max_ts = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	max_ts = d->lim->max_future_ns > INT64_MAX - max_ts ? INT64_MAX :
		 max_ts + d->lim->max_future_ns;
	for (size_t i = 0; i < n; i++) {
		int rc;

		if (__builtin_add_overflow(ts, m->metric_ts_delta[i], &ts) || ts < MIN_TS_NS ||
		    ts > max_ts)
			return _fail(d->err, d->err_len, -EINVAL,
				     "metric point %zu: timestamp out of range", i);
		if (m->metric_series[i] >= d->s->tab[K_SERIES].n)
			return _fail(d->err, d->err_len, -EINVAL,
				     "metric point %zu: series id %u out of range (%u series)",
				     i, m->metric_series[i], d->s->tab[K_SERIES].n);
		rc = _d_string_id(d, "metric point", i, "name", m->metric_name[i]);
		if (rc)
			return rc;
		if (!_d_string(d, m->metric_name[i])[0])
			return _fail(d->err, d->err_len, -EINVAL, "metric point %zu: empty name", i);
		if (!isfinite(m->metric_value[i]))
			return _fail(d->err, d->err_len, -EINVAL,
				     "metric point %zu: value is not a finite number", i);
	}
	return 0;
}

/* Appends the validated points to the batch _d_build() made. */
static int _d_build_metrics(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	int64_t ts = 0;
	int rc = 0;

	for (size_t i = 0; i < m->n_metric_ts_delta && !rc; i++) {
		int64_t series = _out_series(d, m->metric_series[i]);
		int64_t name = series < 0 ? series :
			       profile__intern_string(d->out->dict, _d_string(d, m->metric_name[i]));
		struct batch_metric bm;

		if (series < 0 || name < 0) {
			rc = (int)(series < 0 ? series : name);
			break;
		}
		ts += m->metric_ts_delta[i];
		bm = (struct batch_metric){ .ts_ns = ts, .series = (uint32_t)series,
					    .name = (uint32_t)name, .value = m->metric_value[i] };
		rc = batch__add_metric(d->out, &bm);
	}
	if (rc)
		_fail(d->err, d->err_len, rc, rc == -ENOMEM ? "out of memory" :
		      "cannot build the batch's metric points: %s", strerror(-rc));
	return rc;
}

/* Checks the CPU interval columns (fields 40-45) against the session. */
static int _d_cpu_intervals(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	size_t n = m->n_cpu_iv_cpu;
	struct timespec now;
	int64_t t = 0, end, max_ts;

	if (n > d->lim->max_samples)
		return _fail(d->err, d->err_len, -E2BIG, "%zu CPU intervals, more than %zu",
			     n, d->lim->max_samples);
	if (m->n_cpu_iv_start_delta != n || m->n_cpu_iv_duration != n ||
	    m->n_cpu_iv_series != n || m->n_cpu_iv_tid != n || m->n_cpu_iv_comm != n)
		return _fail(d->err, d->err_len, -EINVAL,
			     "CPU interval columns differ in length (%zu CPUs)", n);
	clock_gettime(CLOCK_REALTIME, &now);
	max_ts = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	max_ts = d->lim->max_future_ns > INT64_MAX - max_ts ? INT64_MAX :
		 max_ts + d->lim->max_future_ns;
	for (size_t i = 0; i < n; i++) {
		if (__builtin_add_overflow(t, m->cpu_iv_start_delta[i], &t) || t < MIN_TS_NS ||
		    m->cpu_iv_duration[i] > (uint64_t)(max_ts - MIN_TS_NS) ||
		    __builtin_add_overflow(t, (int64_t)m->cpu_iv_duration[i], &end) || end > max_ts)
			return _fail(d->err, d->err_len, -EINVAL,
				     "CPU interval %zu: time out of range", i);
		if (m->cpu_iv_series[i] >= d->s->tab[K_SERIES].n)
			return _fail(d->err, d->err_len, -EINVAL,
				     "CPU interval %zu: series id %u out of range (%u series)",
				     i, m->cpu_iv_series[i], d->s->tab[K_SERIES].n);
		if (m->cpu_iv_comm[i] >= d->s->tab[K_STRING].n)
			return _fail(d->err, d->err_len, -EINVAL,
				     "CPU interval %zu: comm string id %u out of range (%u strings)",
				     i, m->cpu_iv_comm[i], d->s->tab[K_STRING].n);
		t = end;
	}
	return 0;
}

/* Adds the validated CPU intervals to the batch being built. */
static int _d_build_cpu_intervals(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	int64_t t = 0;
	int rc = 0;

	for (size_t i = 0; i < m->n_cpu_iv_cpu; i++) {
		struct batch_cpu_interval iv = { 0 };
		int64_t series = _out_series(d, m->cpu_iv_series[i]);
		int64_t comm = series < 0 ? series :
			       profile__intern_string(d->out->dict, _d_string(d, m->cpu_iv_comm[i]));

		if (comm < 0) {
			rc = (int)comm;
			break;
		}
		t += m->cpu_iv_start_delta[i];
		iv.start_ns = t;
		iv.end_ns = t + (int64_t)m->cpu_iv_duration[i];
		iv.series = series;
		iv.cpu = m->cpu_iv_cpu[i];
		iv.tid = m->cpu_iv_tid[i];
		iv.comm = comm;
		t = iv.end_ns;
		rc = batch__add_cpu_interval(d->out, &iv);
		if (rc)
			break;
	}
	if (rc)
		_fail(d->err, d->err_len, rc, rc == -ENOMEM ? "out of memory" :
		      "cannot build the CPU intervals: %s", strerror(-rc));
	return rc;
}

/*
 * Before unpacking: the columns hold at most max_samples rows each, and
 * the whole message fits in max_unpacked once unpacked. protobuf-c sizes
 * its arrays by what the message declares, so a few MB of one-byte varints
 * would otherwise take hundreds of MB before any count is seen.
 */
static int _precheck(const struct wire_limits *lim, size_t max_unpacked, const uint8_t *msg,
		     size_t len, char *err, size_t err_len)
{
	static const struct {
		unsigned first, last;
		const char *what;
	} cols[] = {
		{ 16, 22, "samples" },
		{ 30, 33, "metric points" },
		{ 40, 45, "CPU intervals" },
		{ 50, 59, "GPU intervals" },
	};
	struct pb_cap caps[40];
	size_t n = 0;
	char why[192];
	int rc;

	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
		for (unsigned f = cols[i].first; f <= cols[i].last && n < 40; f++)
			caps[n++] = (struct pb_cap){ &flamewatch__wire__batch__descriptor, f,
						     lim->max_samples, cols[i].what };
	rc = pb_capped_alloc__check(&flamewatch__wire__batch__descriptor, msg, len, max_unpacked,
				    caps, n, why, sizeof(why));
	if (rc == -E2BIG)
		return _fail(err, err_len, -E2BIG, "batch: %s", why);
	if (rc)
		return _fail(err, err_len, -EBADMSG, "not a valid protobuf batch (%s)", why);
	return 0;
}

int wire__decode(struct wire_session_table *t, const void *body, size_t len,
		 enum wire_compression c, const struct wire_limits *lim,
		 struct batch **out, char *node, size_t node_len, uint64_t *seq,
		 char *err, size_t err_len)
{
	struct wire_limits deflim = wire_limits__default();
	struct pb_capped_alloc ca = { 0 };
	ProtobufCAllocator pa = pb_capped_alloc__allocator(&ca);
	Flamewatch__Wire__Batch *m = NULL;
	struct dec d = { .err = err, .err_len = err_len };
	uint32_t base[K_MAX], saved[K_MAX] = { 0 };
	uint8_t *plain = NULL;
	const uint8_t *msg_bytes = body;
	size_t msg_len = len, node_strlen, max_decompressed;
	bool is_new = false;
	int rc;

	*out = NULL;
	if (err && err_len)
		err[0] = '\0';
	if (!lim)
		lim = &deflim;
	d.lim = lim;

	if (len > lim->max_body) {
		rc = _fail(err, err_len, -E2BIG, "body of %zu bytes exceeds %zu", len, lim->max_body);
		goto out;
	}
	/* The decompressors keep cap + 1 bytes; keep that from wrapping. */
	max_decompressed = lim->max_decompressed > SIZE_MAX / 4 ? SIZE_MAX / 4 :
			   lim->max_decompressed;
	switch (c) {
	case WIRE_NONE:
		if (len > lim->max_decompressed) {
			rc = _fail(err, err_len, -E2BIG, "body of %zu bytes exceeds %zu",
				   len, lim->max_decompressed);
			goto out;
		}
		break;
	case WIRE_GZIP:
		rc = decompress__gzip(body, len, max_decompressed, &plain, &msg_len, err, err_len);
		if (rc)
			goto out;
		msg_bytes = plain;
		break;
	case WIRE_ZSTD:
		rc = decompress__zstd(body, len, max_decompressed, &plain, &msg_len, err, err_len);
		if (rc)
			goto out;
		msg_bytes = plain;
		break;
	default:
		rc = _fail(err, err_len, -EINVAL, "unknown compression %d", (int)c);
		goto out;
	}

	ca.max = lim->max_unpacked > SIZE_MAX / 2 ? SIZE_MAX / 2 : lim->max_unpacked;
	rc = _precheck(lim, ca.max, msg_bytes, msg_len, err, err_len);
	if (rc)
		goto out;
	m = flamewatch__wire__batch__unpack(&pa, msg_len, msg_bytes);
	if (!m) {
		if (ca.over)
			rc = _fail(err, err_len, -E2BIG, "unpacked batch exceeds %zu bytes",
				   lim->max_unpacked);
		else
			rc = _fail(err, err_len, -EBADMSG, "not a valid protobuf batch");
		goto out;
	}
	d.m = m;
	if (m->version != WIRE_VERSION) {
		rc = _fail(err, err_len, -EPROTONOSUPPORT, "batch version %u, expected %u",
			   m->version, WIRE_VERSION);
		goto out;
	}
	node_strlen = strlen(m->node);
	if (!node_strlen || node_strlen > lim->max_string || (node && node_strlen >= node_len)) {
		rc = _fail(err, err_len, -EINVAL, "node name empty or too long (%zu bytes)",
			   node_strlen);
		goto out;
	}

	base[K_STRING] = m->dict_base_strings;
	base[K_MAPPING] = m->dict_base_mappings;
	base[K_FRAME] = m->dict_base_frames;
	base[K_STACK] = m->dict_base_stacks;
	base[K_SERIES] = m->dict_base_series;
	d.s = _session_find(t, m->session);
	if (d.s && strcmp(d.s->node, m->node)) {
		rc = _fail(err, err_len, -ESTALE, "session %016llx belongs to another node",
			   (unsigned long long)m->session);
		d.s = NULL;
		goto out;
	}
	if (!d.s) {
		for (int k = 0; k < K_MAX; k++) {
			if (base[k]) {
				rc = _fail(err, err_len, -ESTALE,
					   "unknown session %016llx with a dictionary base",
					   (unsigned long long)m->session);
				goto out;
			}
		}
		d.s = calloc(1, sizeof(*d.s));
		if (d.s) {
			is_new = true;
			d.s->id = m->session;
			d.s->node = strdup(m->node);
		}
		if (!d.s || !d.s->node) {
			rc = _fail(err, err_len, -ENOMEM, "out of memory");
			goto out;
		}
	}
	for (int k = 0; k < K_MAX; k++)
		saved[k] = d.s->tab[k].n;

	{
		size_t nk[K_MAX] = { m->n_strings, m->n_mappings, m->n_frames, m->n_stacks,
				     m->n_series };

		for (int k = 0; k < K_MAX; k++) {
			if (base[k] > d.s->tab[k].n) {
				rc = _fail(err, err_len, -ESTALE,
					   "session %016llx holds %u %s entries, batch builds on %u",
					   (unsigned long long)m->session, d.s->tab[k].n,
					   kind_names[k], base[k]);
				goto out;
			}
			if (nk[k] > UINT32_MAX - base[k]) {
				rc = _fail(err, err_len, -EINVAL, "too many %s entries",
					   kind_names[k]);
				goto out;
			}
		}
	}

	rc = _d_strings(&d, base[K_STRING]);
	if (!rc)
		rc = _d_mappings(&d, base[K_MAPPING]);
	if (!rc)
		rc = _d_frames(&d, base[K_FRAME]);
	if (!rc)
		rc = _d_stacks(&d, base[K_STACK]);
	if (!rc)
		rc = _d_series(&d, base[K_SERIES]);
	if (!rc)
		rc = _d_samples(&d);
	if (!rc)
		rc = _d_gpu_check(&d);
	if (!rc)
		rc = _d_metrics(&d);
	if (!rc)
		rc = _d_cpu_intervals(&d);
	if (!rc)
		rc = _d_build(&d);
	if (!rc)
		rc = _d_build_metrics(&d);
	if (!rc)
		rc = _d_build_cpu_intervals(&d);
	if (rc)
		goto out;

	if (node)
		memcpy(node, m->node, node_strlen + 1);
	if (seq)
		*seq = m->seq;
	*out = d.out;
	d.out = NULL;
	_session_commit(t, d.s, is_new);
	d.s = NULL;
	is_new = false;
out:
	if (rc && d.s) {
		for (int k = 0; k < K_MAX; k++) {
			_dtab_truncate(&d.s->tab[k], saved[k]);
			/*
			 * Entries translated for this batch may be replaced by
			 * others at the same ids; the shared dictionary may keep
			 * what they added, unreferenced.
			 */
			if (d.s->om[k].n > saved[k])
				d.s->om[k].n = saved[k];
		}
	}
	if (is_new)
		_session_free(d.s);
	batch__free(d.out);
	free(d.scratch);
	free(d.names);
	free(d.values);
	if (m)
		flamewatch__wire__batch__free_unpacked(m, &pa);
	free(plain);
	return rc;
}
