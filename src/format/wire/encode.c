// SPDX-License-Identifier: Apache-2.0
/*
 * The agent's side of the wire format: the session dictionary an encoder
 * keeps, what the server acknowledged of it, and one batch's translation
 * into the protobuf message (dictionary additions, then columns).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/dict_xlate.h"
#include "common/profile.h"
#include "format/wire.h"
#include "format/wire/wire_int.h"
#include "wire.pb-c.h"

#define PENDING_MAX 1024

/* The dictionary sizes right after batch seq was encoded. */
struct pending {
	uint64_t seq;
	uint32_t count[K_MAX];
};

struct wire_encoder {
	uint64_t session;
	uint64_t ended;			/* the session this one replaced, until an ack; or 0 */
	uint64_t seq;			/* last encoded */
	struct wire_keys tab[K_MAX];	/* keys.c */
	bool live;			/* tab made; false after a reset until the next encode */
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
	for (int k = 0; k < K_MAX; k++)
		wire_keys__release(&e->tab[k]);
	e->live = false;
}

static int _tables_new(struct wire_encoder *e)
{
	for (int k = 0; k < K_MAX; k++) {
		if (wire_keys__init(&e->tab[k], NULL)) {
			_tables_free(e);
			return -ENOMEM;
		}
	}
	e->live = true;
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

static bool _acked_any(const struct wire_encoder *e)
{
	for (int k = 0; k < K_MAX; k++)
		if (e->acked[k])
			return true;
	return false;
}

bool wire_encoder__has_base(const struct wire_encoder *e)
{
	return _acked_any(e);
}

/*
 * Tables are freed now, so memory drops at once, and created again by the
 * next encode, which can report failing to.
 */
void wire_encoder__reset(struct wire_encoder *e)
{
	_tables_free(e);
	/*
	 * The session left is named in the new one's batches until the
	 * server acknowledges one. A session that never encoded a batch
	 * cannot be on the server: reset again, keep naming the one before.
	 */
	if (!e->ended || e->npending || _acked_any(e))
		e->ended = e->session;
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
		bytes += wire_keys__memory(&e->tab[k]);
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
	/* The server read ends_session along with the batch. */
	e->ended = 0;
	for (int k = 0; k < K_MAX; k++) {
		if (e->pending[n - 1].count[k] > e->acked[k])
			e->acked[k] = e->pending[n - 1].count[k];
		/* Never sent again: only their hashes are needed from now on. */
		wire_keys__forget(&e->tab[k], e->acked[k]);
	}
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
		p->count[k] = wire_keys__count(&e->tab[k]);
	return 0;
}

/*
 * Translation of one batch's local ids into global ones, each once
 * (common/dict_xlate.h): the functions below add an entry to the session's
 * table of its kind, keyed by the global ids of what it refers to.
 */
struct xlate {
	struct wire_encoder *e;
	const struct batch *b;
	struct dict_xlate dx;
	struct dict_ids map[K_MAX];	/* local id -> global id */
	uint32_t *scratch;
	size_t cap_scratch;
};

static int64_t _global_add(struct xlate *x, int k, const void *key, size_t len)
{
	return wire_keys__add(&x->e->tab[k], key, len);
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

static int64_t _x_string(struct dict_xlate *dx, uint32_t l)
{
	struct xlate *x = dx->ctx;
	const char *s = profile__string(x->b->dict, l);

	return _global_add(x, K_STRING, s, strlen(s) + 1);
}

static int64_t _x_mapping(struct dict_xlate *dx, uint32_t l)
{
	struct xlate *x = dx->ctx;
	const struct profile_mapping *m = &x->b->dict->mappings[l];
	int64_t path, bid;
	uint32_t key[2];

	path = dict_xlate__id(dx, K_STRING, m->path);
	if (path < 0)
		return path;
	bid = dict_xlate__id(dx, K_STRING, m->build_id);
	if (bid < 0)
		return bid;
	key[0] = path;
	key[1] = bid;
	return _global_add(x, K_MAPPING, key, sizeof(key));
}

static int64_t _x_frame(struct dict_xlate *dx, uint32_t l)
{
	struct xlate *x = dx->ctx;
	const struct profile_frame *f = &x->b->dict->frames[l];
	struct wire_frame key = { 0 };
	int64_t id;

	key.kind = f->kind;
	key.addr = f->addr;
	key.line = f->line;
	if (f->mapping != PROFILE_NO_MAPPING) {
		id = dict_xlate__id(dx, K_MAPPING, f->mapping);
		if (id < 0)
			return id;
		key.mapping = id + 1;
	}
	id = dict_xlate__id(dx, K_STRING, f->function);
	if (id < 0)
		return id;
	key.function = id;
	id = dict_xlate__id(dx, K_STRING, f->file);
	if (id < 0)
		return id;
	key.file = id;
	return _global_add(x, K_FRAME, &key, sizeof(key));
}

static int64_t _x_stack(struct dict_xlate *dx, uint32_t l)
{
	struct xlate *x = dx->ctx;
	const uint32_t *frames;
	uint32_t n;
	int err;

	frames = profile__stack(x->b->dict, l, &n);
	/* At least one element: an empty stack's key must not be NULL either. */
	if (_scratch(x, n ? n : 1))
		return -ENOMEM;
	/* Translating a frame does not touch scratch, so it can be filled in place. */
	err = dict_xlate__ids(dx, K_FRAME, frames, n, x->scratch);
	if (err)
		return err;
	return _global_add(x, K_STACK, x->scratch, (size_t)n * sizeof(uint32_t));
}

static int64_t _x_series(struct dict_xlate *dx, uint32_t l)
{
	struct xlate *x = dx->ctx;
	const struct batch_label *labels;
	size_t n;
	int err;

	labels = batch__series(x->b, l, &n);
	if (_scratch(x, n ? 2 * n : 1))
		return -ENOMEM;
	/* Label pairs are uint32_t name, value: read them as a flat array. */
	err = dict_xlate__ids(dx, K_STRING, labels, 2 * n, x->scratch);
	if (err)
		return err;
	return _global_add(x, K_SERIES, x->scratch, 2 * n * sizeof(uint32_t));
}

static const dict_xlate_fn _x_fns[K_MAX] = {
	[K_STRING] = _x_string, [K_MAPPING] = _x_mapping, [K_FRAME] = _x_frame,
	[K_STACK] = _x_stack, [K_SERIES] = _x_series,
};

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
	free(em->m.gpu_busy_idle);
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
		n[k] = wire_keys__count(&e->tab[k]) - base[k];
	}
	m->dict_base_strings = base[K_STRING];
	m->dict_base_mappings = base[K_MAPPING];
	m->dict_base_frames = base[K_FRAME];
	m->dict_base_stacks = base[K_STACK];
	m->dict_base_series = base[K_SERIES];
	for (uint32_t i = 0; i < n[K_STACK]; i++) {
		wire_keys__key(&e->tab[K_STACK], base[K_STACK] + i, &len);
		nids += len / sizeof(uint32_t);
	}
	for (uint32_t i = 0; i < n[K_SERIES]; i++) {
		wire_keys__key(&e->tab[K_SERIES], base[K_SERIES] + i, &len);
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
		m->strings[i] = (char *)wire_keys__key(&e->tab[K_STRING], base[K_STRING] + i, &len);
	m->n_strings = n[K_STRING];

	for (uint32_t i = 0; i < n[K_MAPPING]; i++) {
		const void *key = wire_keys__key(&e->tab[K_MAPPING], base[K_MAPPING] + i, &len);

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

		memcpy(&key, wire_keys__key(&e->tab[K_FRAME], base[K_FRAME] + i, &len), sizeof(key));
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
		const void *key = wire_keys__key(&e->tab[K_STACK], base[K_STACK] + i, &len);

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
		const void *key = wire_keys__key(&e->tab[K_SERIES], base[K_SERIES] + i, &len);

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
		int64_t stack = dict_xlate__id(&x->dx, K_STACK, s->stack);
		int64_t series = dict_xlate__id(&x->dx, K_SERIES, s->series);

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
		int64_t series = dict_xlate__id(&x->dx, K_SERIES, iv->series);
		int64_t comm = series < 0 ? series : dict_xlate__id(&x->dx, K_STRING, iv->comm);

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
	bool all_one = true, any_idle = false;
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
	m->gpu_busy_idle = _alloc_n(n, sizeof(*m->gpu_busy_idle));
	if (!em->gpu_order || !m->gpu_start_delta || !m->gpu_duration || !m->gpu_series ||
	    !m->gpu_device || !m->gpu_stream || !m->gpu_kind || !m->gpu_name || !m->gpu_stack ||
	    !m->gpu_bytes || !m->gpu_weight || !m->gpu_busy_idle)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		em->gpu_order[i] = (struct ts_index){ b->gpu_intervals[i].start_ns, i };
	qsort(em->gpu_order, n, sizeof(*em->gpu_order), _by_ts);

	for (size_t i = 0; i < n; i++) {
		const struct batch_gpu_interval *g = &b->gpu_intervals[em->gpu_order[i].i];
		int64_t series = dict_xlate__id(&x->dx, K_SERIES, g->series);
		int64_t name = dict_xlate__id(&x->dx, K_STRING, g->name);
		int64_t stack = g->stack == BATCH_NO_STACK ? -1 :
				dict_xlate__id(&x->dx, K_STACK, g->stack);

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
		m->gpu_busy_idle[i] = g->kind == GPU_BUSY ? g->correlation : 0;
		if (m->gpu_busy_idle[i] > m->gpu_duration[i])
			m->gpu_busy_idle[i] = m->gpu_duration[i];
		any_idle |= m->gpu_busy_idle[i] != 0;
	}
	m->n_gpu_start_delta = m->n_gpu_duration = m->n_gpu_series = n;
	m->n_gpu_device = m->n_gpu_stream = m->n_gpu_kind = m->n_gpu_name = n;
	m->n_gpu_stack = m->n_gpu_bytes = n;
	m->n_gpu_weight = all_one ? 0 : n;
	m->n_gpu_busy_idle = any_idle ? n : 0;
	return 0;
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
		int64_t series = dict_xlate__id(&x->dx, K_SERIES, bm->series);
		int64_t name = series < 0 ? series : dict_xlate__id(&x->dx, K_STRING, bm->name);

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
	struct xlate x = { .e = e, .b = b, .dx = { .fn = _x_fns } };
	uint8_t *packed = NULL;
	size_t len;
	int err;

	*out = NULL;
	*out_len = 0;
	if (c != WIRE_NONE && c != WIRE_GZIP && c != WIRE_ZSTD)
		return -EINVAL;
	if (wire_encoder__memory(e) > e->max_bytes)
		wire_encoder__reset(e);
	if (!e->live) {
		err = _tables_new(e);
		if (err)
			goto out;
	}

	x.dx.ids = x.map;
	x.dx.ctx = &x;
	dict_xlate__batch_counts(&x.dx, b);
	for (int k = 0; k < K_MAX; k++) {
		err = dict_ids__alloc(&x.map[k], x.dx.n[k]);
		if (err)
			goto out;
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
	em.m.ends_session = e->ended;
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
	err = wire__compress(c, packed, len, out, out_len);
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
		dict_ids__release(&x.map[k]);
	free(x.scratch);
	return err;
}
