// SPDX-License-Identifier: Apache-2.0
/*
 * The agent -> server wire format: batches go through a wire_encoder and
 * come out of wire__decode(), and are compared as text (ids differ on the
 * two sides by design). Invalid bodies are made by unpacking a good one,
 * changing one field and packing it again; after each the session is probed
 * to show that nothing of the bad batch was kept.
 *
 * FW_WIRE_CORPUS=DIR also writes a few bodies there as fuzzing seeds.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <zlib.h>
#include <zstd.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/profile.h"
#include "agent/shipper.h"
#include "format/wire.h"
#include "format/wire/wire_int.h"
#include "wire.pb-c.h"

#define PERIOD_NS 52631579ULL	/* 19 Hz */
#define T0 1700000000000000000LL
#define NODE "node-a"

/* ---- building batches ---------------------------------------------------- */

struct gen {
	struct batch *b;
	uint32_t rng;
};

static uint32_t _rand(struct gen *g)
{
	g->rng = g->rng * 1103515245u + 12345u;
	return g->rng >> 8;
}

static uint32_t _series(struct batch *b, int pid, const char *comm)
{
	char pidbuf[16];
	const char *names[3] = { "pid", "comm", "exe" };
	const char *values[3] = { pidbuf, comm, "/usr/bin/app" };
	int64_t id;

	snprintf(pidbuf, sizeof(pidbuf), "%d", pid);
	id = batch__intern_series(b, names, values, 3);
	assert_true(id >= 0);
	return id;
}

static uint32_t _frame(struct profile *p, enum frame_kind kind, uint32_t mapping, uint64_t addr,
		       const char *name, const char *file, uint32_t line)
{
	int64_t id = profile__intern_frame(p, kind, mapping, addr);

	assert_true(id >= 0);
	if (name)
		assert_int_equal(profile__set_frame_name(p, id, name, file, line), 0);
	return id;
}

/*
 * nstacks stacks under main(), shared by npids processes: a common prefix, a
 * per-stack middle part, and every fourth one a kernel tail without a
 * mapping. One file name is Latin-1, not UTF-8, as old binaries have: it
 * must pass unchanged. variant changes the leaf names so that another batch
 * has new frames, strings and stacks beside the old ones.
 */
static struct batch *_make(int npids, int nstacks, int nsamples, int variant, uint32_t seed)
{
	struct gen g = { .b = batch__new(PERIOD_NS), .rng = seed };
	struct profile *p;
	uint32_t *stacks, *series, none = 0;
	int64_t app, libc, empty_stack, empty_series;
	char name[64];

	assert_non_null(g.b);
	p = g.b->dict;
	app = profile__intern_mapping(p, "/usr/bin/app", "0123456789abcdef");
	libc = profile__intern_mapping(p, "/usr/lib/x86_64-linux-gnu/libc.so.6", NULL);
	assert_true(app >= 0 && libc >= 0);
	/* An unreferenced mapping and frame: the encoder must not send them. */
	assert_true(profile__intern_mapping(p, "/unused", NULL) >= 0);
	_frame(p, FRAME_NATIVE, app, 0xdead, "unused_fn", NULL, 0);

	stacks = calloc(nstacks, sizeof(*stacks));
	series = calloc(npids, sizeof(*series));
	assert_non_null(stacks);
	assert_non_null(series);
	/*
	 * An empty stack (nothing could be unwound) and a series without
	 * labels are valid too. The empty stack goes first: it leaves the keys
	 * after it unaligned in the intern arena.
	 */
	empty_stack = profile__intern_stack(p, &none, 0);
	empty_series = batch__intern_series(g.b, NULL, NULL, 0);
	assert_true(empty_stack >= 0 && empty_series >= 0);
	for (int i = 0; i < nstacks; i++) {
		uint32_t f[8], n = 0;

		f[n++] = _frame(p, FRAME_NATIVE, libc, 0x29d90, "__libc_start_main", NULL, 0);
		f[n++] = _frame(p, FRAME_NATIVE, app, 0x1000, "main", "app\xe9.c", 10);
		snprintf(name, sizeof(name), "work_%d", i % 7);
		f[n++] = _frame(p, FRAME_NATIVE, app, 0x2000 + i % 7, name, "work.c", i % 7);
		snprintf(name, sizeof(name), "leaf_%d_v%d", i, variant);
		f[n++] = _frame(p, FRAME_NATIVE, app, 0x10000 + i * 16 + variant * 0x100000, name,
				NULL, 0);
		if (i % 4 == 0) {
			f[n++] = _frame(p, FRAME_KERNEL, PROFILE_NO_MAPPING, 0xffffffff81000000ULL,
					"entry_SYSCALL_64", NULL, 0);
			f[n++] = _frame(p, FRAME_KERNEL, PROFILE_NO_MAPPING,
					0xffffffff81001000ULL + i, "do_syscall_64", NULL, 0);
		}
		stacks[i] = profile__intern_stack(p, f, n);
	}
	for (int i = 0; i < npids; i++) {
		snprintf(name, sizeof(name), "comm-%d", i % 3);
		series[i] = _series(g.b, 1000 + i, name);
	}
	for (int i = 0; i < nsamples; i++) {
		struct batch_sample s = {
			/* Out of order on purpose: the encoder sorts. */
			.ts_ns = T0 + variant * 10000000000LL + (int64_t)(_rand(&g) % 10000) * 1000000,
			.stack = stacks[_rand(&g) % nstacks],
			.series = series[_rand(&g) % npids],
			.tid = 1000 + _rand(&g) % 50,
			.cpu = _rand(&g) % 8,
			.type = i % 10 == 9 ? SAMPLE_GPU_TIME : SAMPLE_CPU,
			.value = i % 10 == 9 ? 12345 : 1,
		};

		assert_int_equal(batch__add_sample(g.b, &s), 0);
	}
	{
		struct batch_sample s = {
			.ts_ns = T0 + variant * 10000000000LL + 5, .stack = empty_stack,
			.series = empty_series, .tid = 1, .value = 1,
		};

		assert_int_equal(batch__add_sample(g.b, &s), 0);
	}
	free(stacks);
	free(series);
	return g.b;
}

/* ---- comparing batches --------------------------------------------------- */

static int _strcmp_p(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static uint32_t _u32(const void *p, size_t i)
{
	uint32_t v;

	memcpy(&v, (const uint8_t *)p + i * 4, 4);
	return v;
}

/* One line per sample with every id replaced by what it stands for, sorted. */
static char *_text(const struct batch *b)
{
	char **lines = calloc(b->nsamples + 1, sizeof(*lines));
	char *all;
	size_t total = 1, at = 0;

	assert_non_null(lines);
	for (uint32_t i = 0; i < b->nsamples; i++) {
		const struct batch_sample *s = &b->samples[i];
		const void *labels, *frames;
		char *buf = NULL;
		size_t len = 0, n;
		uint32_t depth;
		FILE *f = open_memstream(&buf, &len);

		assert_non_null(f);
		fprintf(f, "%lld tid=%u cpu=%u type=%u value=%lld {", (long long)s->ts_ns, s->tid,
			s->cpu, s->type, (long long)s->value);
		labels = batch__series(b, s->series, &n);
		for (size_t j = 0; j < n; j++)
			fprintf(f, "%s=%s,", profile__string(b->dict, _u32(labels, 2 * j)),
				profile__string(b->dict, _u32(labels, 2 * j + 1)));
		fprintf(f, "}");
		frames = profile__stack(b->dict, s->stack, &depth);
		for (uint32_t j = 0; j < depth; j++) {
			const struct profile_frame *fr = &b->dict->frames[_u32(frames, j)];
			const struct profile_mapping *m = fr->mapping == PROFILE_NO_MAPPING ?
				NULL : &b->dict->mappings[fr->mapping];

			fprintf(f, ";%u:%s:%s:%llx:%s:%s:%u", fr->kind,
				m ? profile__string(b->dict, m->path) : "-",
				m ? profile__string(b->dict, m->build_id) : "-",
				(unsigned long long)fr->addr, profile__string(b->dict, fr->function),
				profile__string(b->dict, fr->file), fr->line);
		}
		fclose(f);
		lines[i] = buf;
		total += len + 1;
	}
	qsort(lines, b->nsamples, sizeof(*lines), _strcmp_p);
	all = malloc(total);
	assert_non_null(all);
	for (uint32_t i = 0; i < b->nsamples; i++) {
		size_t len = strlen(lines[i]);

		memcpy(all + at, lines[i], len);
		all[at + len] = '\n';
		at += len + 1;
		free(lines[i]);
	}
	all[at] = '\0';
	free(lines);
	return all;
}

static void _assert_same(const struct batch *a, const struct batch *b)
{
	char *ta = _text(a), *tb = _text(b);

	assert_int_equal(a->nsamples, b->nsamples);
	assert_int_equal(a->period_ns, b->period_ns);
	assert_string_equal(ta, tb);
	free(ta);
	free(tb);
}

/* ---- helpers around the codec -------------------------------------------- */

struct body {
	void *data;
	size_t len;
};

static struct body _encode(struct wire_encoder *e, const struct batch *b, enum wire_compression c)
{
	struct body body;

	assert_int_equal(wire_encoder__encode(e, NODE, b, c, &body.data, &body.len), 0);
	assert_non_null(body.data);
	return body;
}

static int _decode_lim(struct wire_session_table *t, struct body body, enum wire_compression c,
		       const struct wire_limits *lim, struct batch **out, char *err, size_t err_len)
{
	char node[64];
	uint64_t seq = 0;
	int rc = wire__decode(t, body.data, body.len, c, lim, out, node, sizeof(node), &seq,
			      err, err_len);

	if (!rc)
		assert_string_equal(node, NODE);
	else
		assert_null(*out);
	return rc;
}

/* Decodes a body that must be accepted; returns the batch. */
static struct batch *_decode_ok(struct wire_session_table *t, struct body body,
				enum wire_compression c)
{
	struct batch *out = NULL;
	char err[256];
	int rc = _decode_lim(t, body, c, NULL, &out, err, sizeof(err));

	if (rc)
		fail_msg("decode failed: %d %s", rc, err);
	return out;
}

/* Decodes a body that must be refused with rc; the message must say something. */
static void _decode_err(struct wire_session_table *t, struct body body, enum wire_compression c,
			const struct wire_limits *lim, int want, const char *needle)
{
	struct batch *out = (struct batch *)1;
	char err[256];
	int rc = _decode_lim(t, body, c, lim, &out, err, sizeof(err));

	if (rc != want)
		fail_msg("want %d, got %d (%s)", want, rc, err);
	assert_true(err[0]);
	if (needle && !strstr(err, needle))
		fail_msg("error \"%s\" lacks \"%s\"", err, needle);
}

static Flamewatch__Wire__Batch *_unpack(struct body body)
{
	Flamewatch__Wire__Batch *m = flamewatch__wire__batch__unpack(NULL, body.len, body.data);

	assert_non_null(m);
	return m;
}

static struct body _pack(const Flamewatch__Wire__Batch *m)
{
	struct body body;

	body.len = flamewatch__wire__batch__get_packed_size(m);
	body.data = malloc(body.len + 1);
	assert_non_null(body.data);
	flamewatch__wire__batch__pack(m, body.data);
	return body;
}

/*
 * Fuzzer input format (tests/fuzz/fuzz_wire.c): a mode byte naming the
 * compression, a body, and optionally a separator and a second body.
 */
#define FUZZ_SEP "\0FW-NEXT\0"

static void _write_seed(const char *name, enum wire_compression c, struct body a,
			const struct body *b)
{
	const char *dir = getenv("FW_WIRE_CORPUS");
	uint8_t mode = c;
	char path[512];
	FILE *f;

	if (!dir)
		return;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(&mode, 1, 1, f), 1);
	assert_int_equal(fwrite(a.data, 1, a.len, f), a.len);
	if (b) {
		assert_int_equal(fwrite(FUZZ_SEP, 1, sizeof(FUZZ_SEP) - 1, f), sizeof(FUZZ_SEP) - 1);
		assert_int_equal(fwrite(b->data, 1, b->len, f), b->len);
	}
	fclose(f);
}

/* ---- round trips --------------------------------------------------------- */

static void _roundtrip(enum wire_compression c)
{
	struct wire_session_table *t = wire_sessions__new(16, 64 << 20);
	struct wire_encoder *e = wire_encoder__new(0x1234);
	struct batch *b = _make(5, 40, 2000, 0, 1), *out;
	struct body body;

	assert_non_null(t);
	assert_non_null(e);
	body = _encode(e, b, c);
	assert_int_equal(wire_encoder__seq(e), 1);
	out = _decode_ok(t, body, c);
	_assert_same(b, out);
	/* Only what samples refer to travels. */
	assert_int_equal(out->dict->nmappings, 2);
	assert_int_equal(wire_sessions__count(t), 1);
	assert_true(wire_sessions__memory(t) > 0);
	batch__free(out);
	free(body.data);

	/* An empty batch is fine too. */
	batch__free(b);
	b = batch__new(PERIOD_NS);
	body = _encode(e, b, c);
	out = _decode_ok(t, body, c);
	assert_int_equal(out->nsamples, 0);
	batch__free(out);
	free(body.data);

	batch__free(b);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

static void test_roundtrip_none(void **state) { _roundtrip(WIRE_NONE); }
static void test_roundtrip_gzip(void **state) { _roundtrip(WIRE_GZIP); }
static void test_roundtrip_zstd(void **state) { _roundtrip(WIRE_ZSTD); }

/*
 * Once the server acknowledged batch 1, batch 2 with the same stacks sends
 * no dictionary at all, and a batch with some new stacks sends only those.
 */
static void test_acked_entries_not_resent(void **state)
{
	struct wire_session_table *t = wire_sessions__new(16, 64 << 20);
	struct wire_encoder *e = wire_encoder__new(42);
	struct batch *b1 = _make(5, 40, 2000, 0, 1), *b2 = _make(5, 40, 2000, 0, 2);
	struct batch *b3 = _make(5, 40, 2000, 1, 3), *out;
	struct body body1, body2, body3, body2z;
	Flamewatch__Wire__Batch *m;

	body1 = _encode(e, b1, WIRE_NONE);
	out = _decode_ok(t, body1, WIRE_NONE);
	batch__free(out);
	wire_encoder__ack(e, wire_encoder__seq(e));

	body2 = _encode(e, b2, WIRE_NONE);
	m = _unpack(body2);
	assert_int_equal(m->n_strings + m->n_mappings + m->n_frames + m->n_stacks + m->n_series, 0);
	assert_true(m->dict_base_stacks > 0);
	assert_int_equal(m->seq, 2);
	assert_int_equal(m->n_ts_delta, 2001);
	/* One sample in ten is GPU time, not 1, so the value column is there. */
	assert_int_equal(m->n_sample_value, 2001);
	flamewatch__wire__batch__free_unpacked(m, NULL);
	assert_true(body2.len < body1.len);
	out = _decode_ok(t, body2, WIRE_NONE);
	_assert_same(b2, out);
	batch__free(out);
	wire_encoder__ack(e, 2);
	body2z = _encode(e, b2, WIRE_ZSTD);
	print_message("batch of 2000 samples: %zu bytes with dictionary, %zu without, "
		      "%zu zstd\n", body1.len, body2.len, body2z.len);

	/* Variant 1 has new leaf frames (and names) but the old prefixes. */
	body3 = _encode(e, b3, WIRE_NONE);
	m = _unpack(body3);
	assert_int_equal(m->n_mappings, 0);
	assert_int_equal(m->n_series, 0);
	assert_int_equal(m->n_stacks, 40);
	assert_int_equal(m->n_frames, 40);
	assert_int_equal(m->n_strings, 40);
	flamewatch__wire__batch__free_unpacked(m, NULL);
	out = _decode_ok(t, body3, WIRE_NONE);
	_assert_same(b3, out);
	batch__free(out);

	free(body1.data);
	free(body2.data);
	free(body2z.data);
	free(body3.data);
	batch__free(b1);
	batch__free(b2);
	batch__free(b3);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

/*
 * The server was down: batches 1..3 were encoded without acks and arrive
 * late, out of order and twice. Each decodes on its own.
 */
static void test_unacked_resend(void **state)
{
	struct wire_session_table *t = wire_sessions__new(16, 64 << 20);
	struct wire_encoder *e = wire_encoder__new(7);
	struct batch *b[4];
	struct body body[4];
	struct batch *out;
	Flamewatch__Wire__Batch *m;

	for (int i = 0; i < 4; i++)
		b[i] = _make(3, 10, 300, i, 10 + i);
	for (int i = 0; i < 3; i++)
		body[i] = _encode(e, b[i], WIRE_GZIP);

	/* Batch 2 first: it carries batch 1's entries as well. */
	out = _decode_ok(t, body[1], WIRE_GZIP);
	_assert_same(b[1], out);
	batch__free(out);
	wire_encoder__ack(e, 2);
	/* Batch 1 late: its entries are all held already. */
	out = _decode_ok(t, body[0], WIRE_GZIP);
	_assert_same(b[0], out);
	batch__free(out);
	/* The ack of 1 after that of 2 changes nothing. */
	wire_encoder__ack(e, 1);

	body[3] = _encode(e, b[3], WIRE_NONE);
	m = _unpack(body[3]);
	/* Built on batch 2, carrying batch 3's and its own new entries. */
	assert_int_equal(m->dict_base_stacks, 21);
	assert_int_equal(m->n_stacks, 20);
	flamewatch__wire__batch__free_unpacked(m, NULL);
	out = _decode_ok(t, body[3], WIRE_NONE);
	_assert_same(b[3], out);
	batch__free(out);
	wire_encoder__ack(e, 4);
	/* Batch 3, and 1 again, after 4 was accepted. */
	out = _decode_ok(t, body[2], WIRE_GZIP);
	_assert_same(b[2], out);
	batch__free(out);
	out = _decode_ok(t, body[0], WIRE_GZIP);
	_assert_same(b[0], out);
	batch__free(out);

	for (int i = 0; i < 4; i++) {
		free(body[i].data);
		batch__free(b[i]);
	}
	wire_encoder__free(e);
	wire_sessions__free(t);
}

/* The server restarted: -ESTALE, the agent resets, the next batch is whole. */
static void test_stale_session_reset(void **state)
{
	struct wire_session_table *t = wire_sessions__new(16, 64 << 20);
	struct wire_encoder *e = wire_encoder__new(99);
	struct batch *b1 = _make(3, 10, 300, 0, 1), *b2 = _make(3, 10, 300, 0, 2), *out;
	struct body body;
	uint64_t old;

	body = _encode(e, b1, WIRE_ZSTD);
	batch__free(_decode_ok(t, body, WIRE_ZSTD));
	free(body.data);
	wire_encoder__ack(e, 1);

	wire_sessions__free(t);
	t = wire_sessions__new(16, 64 << 20);
	body = _encode(e, b2, WIRE_ZSTD);
	_decode_err(t, body, WIRE_ZSTD, NULL, -ESTALE, "unknown session");
	free(body.data);
	assert_int_equal(wire_sessions__count(t), 0);

	old = wire_encoder__session(e);
	wire_encoder__reset(e);
	assert_true(wire_encoder__session(e) != old);
	/* An ack of the old session's batch must not count for the new one. */
	wire_encoder__ack(e, 1);
	body = _encode(e, b2, WIRE_ZSTD);
	assert_int_equal(wire_encoder__seq(e), 3);
	out = _decode_ok(t, body, WIRE_ZSTD);
	_assert_same(b2, out);
	batch__free(out);
	free(body.data);

	batch__free(b1);
	batch__free(b2);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

/* The encoder's cap: over it, the next batch starts a new session. */
static void test_encoder_memory_cap(void **state)
{
	struct wire_session_table *t = wire_sessions__new(16, 64 << 20);
	struct wire_encoder *e = wire_encoder__new(5);
	struct batch *b1 = _make(3, 10, 300, 0, 1), *b2 = _make(3, 10, 300, 1, 2), *out;
	struct body body;
	Flamewatch__Wire__Batch *m;
	uint64_t first;

	body = _encode(e, b1, WIRE_GZIP);
	batch__free(_decode_ok(t, body, WIRE_GZIP));
	free(body.data);
	wire_encoder__ack(e, 1);
	first = wire_encoder__session(e);

	wire_encoder__set_max_bytes(e, wire_encoder__memory(e) - 1);
	body = _encode(e, b2, WIRE_NONE);
	assert_true(wire_encoder__session(e) != first);
	m = _unpack(body);
	assert_int_equal(m->dict_base_strings + m->dict_base_stacks, 0);
	assert_int_equal(m->session, wire_encoder__session(e));
	flamewatch__wire__batch__free_unpacked(m, NULL);
	out = _decode_ok(t, body, WIRE_NONE);
	_assert_same(b2, out);
	batch__free(out);
	free(body.data);
	/* The new session's batch ended the old one (ends_session). */
	assert_int_equal(wire_sessions__count(t), 1);

	batch__free(b1);
	batch__free(b2);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

/* Sessions past max_sessions or max_bytes go, least recently used first. */
static void test_session_eviction(void **state)
{
	struct wire_session_table *t = wire_sessions__new(2, 64 << 20);
	struct wire_encoder *e[3];
	struct batch *b = _make(3, 10, 300, 0, 1);
	struct body body;
	size_t one;

	for (int i = 0; i < 3; i++) {
		e[i] = wire_encoder__new(100 + i);
		body = _encode(e[i], b, WIRE_NONE);
		batch__free(_decode_ok(t, body, WIRE_NONE));
		free(body.data);
		wire_encoder__ack(e[i], 1);
		if (i == 1) {
			/* Session 0 used again: session 1 is now the oldest. */
			body = _encode(e[0], b, WIRE_NONE);
			batch__free(_decode_ok(t, body, WIRE_NONE));
			free(body.data);
		}
	}
	assert_int_equal(wire_sessions__count(t), 2);
	body = _encode(e[1], b, WIRE_NONE);
	_decode_err(t, body, WIRE_NONE, NULL, -ESTALE, NULL);
	free(body.data);
	for (int i = 0; i < 3; i += 2) {
		body = _encode(e[i], b, WIRE_NONE);
		batch__free(_decode_ok(t, body, WIRE_NONE));
		free(body.data);
	}
	one = wire_sessions__memory(t) / 2;
	wire_sessions__free(t);

	/* Room for about one and a half sessions. */
	t = wire_sessions__new(100, one + one / 2);
	for (int i = 0; i < 3; i++) {
		wire_encoder__reset(e[i]);
		body = _encode(e[i], b, WIRE_NONE);
		batch__free(_decode_ok(t, body, WIRE_NONE));
		free(body.data);
		assert_int_equal(wire_sessions__count(t), 1);
		assert_true(wire_sessions__memory(t) <= one + one / 2);
	}
	wire_sessions__free(t);

	/* A session alone over the cap is not kept at all. */
	t = wire_sessions__new(100, 1);
	body = _encode(e[0], b, WIRE_NONE);
	batch__free(_decode_ok(t, body, WIRE_NONE));
	free(body.data);
	assert_int_equal(wire_sessions__count(t), 0);
	assert_int_equal(wire_sessions__memory(t), 0);
	wire_sessions__free(t);

	for (int i = 0; i < 3; i++)
		wire_encoder__free(e[i]);
	batch__free(b);
}


/*
 * The table counts what it forgets, and why: the budget (least recently
 * used), the agent's word (ends_session), or an idle session.
 */
static void test_sessions_forgotten_counted(void **state)
{
	struct wire_session_table *t = wire_sessions__new(2, 64 << 20);
	struct wire_session_stats st;
	struct wire_encoder *e[3];
	struct batch *b = _make(3, 10, 300, 0, 1);
	struct body body;

	wire_sessions__stats(t, &st);
	assert_int_equal(st.sessions, 0);
	assert_int_equal(st.max_sessions, 2);
	assert_int_equal(st.max_bytes, 64 << 20);
	for (int i = 0; i < 3; i++) {
		e[i] = wire_encoder__new(200 + i);
		body = _encode(e[i], b, WIRE_NONE);
		batch__free(_decode_ok(t, body, WIRE_NONE));
		free(body.data);
		wire_encoder__ack(e[i], wire_encoder__seq(e[i]));
	}
	wire_sessions__stats(t, &st);
	assert_int_equal(st.sessions, 2);
	assert_int_equal(st.bytes, wire_sessions__memory(t));
	assert_int_equal(st.forgotten[WIRE_FORGOT_BUDGET], 1);
	assert_int_equal(st.forgotten[WIRE_FORGOT_ENDED], 0);

	/* Nothing has been idle for a minute; everything has for 0 ns. */
	assert_int_equal(wire_sessions__expire(t, 60ull * 1000000000ull), 0);
	assert_int_equal(wire_sessions__expire(t, 0), 2);
	wire_sessions__stats(t, &st);
	assert_int_equal(st.sessions, 0);
	assert_int_equal(st.bytes, 0);
	assert_int_equal(st.forgotten[WIRE_FORGOT_IDLE], 2);

	/* An expired session's agent gets -ESTALE, and gets through after a reset. */
	assert_true(wire_encoder__has_base(e[2]));
	body = _encode(e[2], b, WIRE_NONE);
	_decode_err(t, body, WIRE_NONE, NULL, -ESTALE, "unknown session");
	free(body.data);
	wire_encoder__reset(e[2]);
	assert_false(wire_encoder__has_base(e[2]));
	body = _encode(e[2], b, WIRE_NONE);
	batch__free(_decode_ok(t, body, WIRE_NONE));
	free(body.data);
	assert_int_equal(wire_sessions__count(t), 1);

	for (int i = 0; i < 3; i++)
		wire_encoder__free(e[i]);
	batch__free(b);
	wire_sessions__free(t);
}

/*
 * An encoder that starts a new session (its cap, or a 409) names the old
 * one in its batches until one is acknowledged, and the server forgets it
 * at once: an agent that resets every few batches holds one session on
 * the server, not one per reset until the budget pushes them out.
 */
static void test_ends_session(void **state)
{
	struct wire_session_table *t = wire_sessions__new(16, 64 << 20);
	struct wire_encoder *e = wire_encoder__new(7), *other = wire_encoder__new(8);
	struct batch *b1 = _make(3, 10, 300, 0, 1), *b2 = _make(3, 10, 300, 1, 2), *out;
	struct wire_session_stats st;
	Flamewatch__Wire__Batch *m;
	struct body body, body2;
	uint64_t first, second;
	char node[64], err[256];
	uint64_t seq;

	body = _encode(e, b1, WIRE_NONE);
	m = _unpack(body);
	assert_int_equal(m->ends_session, 0);
	flamewatch__wire__batch__free_unpacked(m, NULL);
	batch__free(_decode_ok(t, body, WIRE_NONE));
	free(body.data);
	wire_encoder__ack(e, wire_encoder__seq(e));
	first = wire_encoder__session(e);
	assert_true(wire_encoder__has_base(e));

	/* Over the cap: the next batch is a new session's and ends the first. */
	wire_encoder__set_max_bytes(e, 1);
	body = _encode(e, b2, WIRE_NONE);
	second = wire_encoder__session(e);
	assert_true(second != first);
	assert_false(wire_encoder__has_base(e));
	m = _unpack(body);
	assert_true(m->ends_session == first);
	flamewatch__wire__batch__free_unpacked(m, NULL);
	/* Not acknowledged yet (the answer was lost): sent again, it still says so. */
	wire_encoder__set_max_bytes(e, 64 << 20);
	body2 = _encode(e, b2, WIRE_NONE);
	assert_true(wire_encoder__session(e) == second);
	m = _unpack(body2);
	assert_true(m->ends_session == first);
	flamewatch__wire__batch__free_unpacked(m, NULL);
	free(body2.data);

	out = _decode_ok(t, body, WIRE_NONE);
	_assert_same(b2, out);
	batch__free(out);
	free(body.data);
	wire_sessions__stats(t, &st);
	assert_int_equal(st.sessions, 1);
	assert_int_equal(st.forgotten[WIRE_FORGOT_ENDED], 1);
	assert_int_equal(st.forgotten[WIRE_FORGOT_BUDGET], 0);

	/* Acknowledged: the next batch no longer names it. */
	wire_encoder__ack(e, wire_encoder__seq(e));
	body = _encode(e, b1, WIRE_NONE);
	m = _unpack(body);
	assert_int_equal(m->ends_session, 0);
	assert_true(m->session == second);
	flamewatch__wire__batch__free_unpacked(m, NULL);
	batch__free(_decode_ok(t, body, WIRE_NONE));
	free(body.data);

	/* Another node cannot end a session that is not its own. */
	assert_int_equal(wire_encoder__encode(other, "node-b", b1, WIRE_NONE, &body.data,
					      &body.len), 0);
	m = _unpack(body);
	m->ends_session = second;
	body2 = _pack(m);
	flamewatch__wire__batch__free_unpacked(m, NULL);
	free(body.data);
	assert_int_equal(wire__decode(t, body2.data, body2.len, WIRE_NONE, NULL, &out, node,
				      sizeof(node), &seq, err, sizeof(err)), 0);
	batch__free(out);
	free(body2.data);
	wire_sessions__stats(t, &st);
	assert_int_equal(st.sessions, 2);
	assert_int_equal(st.forgotten[WIRE_FORGOT_ENDED], 1);

	batch__free(b1);
	batch__free(b2);
	wire_encoder__free(e);
	wire_encoder__free(other);
	wire_sessions__free(t);
}

/*
 * A server whose budget holds no session at all forgets every session right
 * after its batch. An agent that follows the protocol (on -ESTALE for a
 * batch with a base: reset, encode the same batch again) still delivers
 * every batch whole, each new stack included, and never gets -ESTALE for
 * a batch without a base.
 */
static void test_evicted_sessions_lose_nothing(void **state)
{
	struct wire_session_table *t = wire_sessions__new(16, 1);
	struct wire_encoder *e = wire_encoder__new(11);
	struct wire_session_stats st;
	size_t sent = 0, got = 0, stale = 0;

	for (int i = 0; i < 12; i++) {
		struct batch *b = _make(2 + i % 3, 5 + i, 40 + i, i, 100 + i), *out = NULL;
		struct body body = _encode(e, b, i % 2 ? WIRE_ZSTD : WIRE_GZIP);
		char err[256];
		int rc = _decode_lim(t, body, i % 2 ? WIRE_ZSTD : WIRE_GZIP, NULL, &out, err,
				     sizeof(err));

		free(body.data);
		if (rc == -ESTALE) {
			assert_true(wire_encoder__has_base(e));
			stale++;
			wire_encoder__reset(e);
			assert_false(wire_encoder__has_base(e));
			body = _encode(e, b, WIRE_ZSTD);
			rc = _decode_lim(t, body, WIRE_ZSTD, NULL, &out, err, sizeof(err));
			free(body.data);
		}
		if (rc)
			fail_msg("batch %d: %d %s", i, rc, err);
		wire_encoder__ack(e, wire_encoder__seq(e));
		_assert_same(b, out);
		sent += b->nsamples;
		got += out->nsamples;
		batch__free(out);
		batch__free(b);
	}
	assert_int_equal(got, sent);
	assert_int_equal(stale, 11);
	wire_sessions__stats(t, &st);
	assert_int_equal(st.sessions, 0);
	assert_int_equal(st.forgotten[WIRE_FORGOT_BUDGET], 12);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

/*
 * The batches of one session share its dictionary (one dict_id, so a store
 * can keep its translation); another session's have their own. A batch
 * outlives its session, and a rejected batch leaves no translation behind:
 * the same session id then carries other entries at the same ids.
 */
static void test_shared_dictionary(void **state)
{
	struct wire_session_table *t = wire_sessions__new(16, 64 << 20);
	struct wire_encoder *e = wire_encoder__new(42), *f = wire_encoder__new(43);
	struct batch *b1 = _make(3, 20, 500, 0, 1), *b2 = _make(3, 20, 500, 1, 2);
	struct batch *o1, *o2, *o3;
	struct body body;
	Flamewatch__Wire__Batch *m;

	body = _encode(e, b1, WIRE_NONE);
	o1 = _decode_ok(t, body, WIRE_NONE);
	free(body.data);
	wire_encoder__ack(e, wire_encoder__seq(e));
	body = _encode(e, b2, WIRE_NONE);
	o2 = _decode_ok(t, body, WIRE_NONE);
	free(body.data);
	body = _encode(f, b1, WIRE_NONE);
	o3 = _decode_ok(t, body, WIRE_NONE);
	free(body.data);
	assert_true(o1->dict_id != 0);
	assert_true(o1->dict_id == o2->dict_id);
	assert_true(o1->dict == o2->dict);
	assert_true(o3->dict_id != o1->dict_id);
	/* Both still read right after the session grew and after it is gone. */
	_assert_same(b1, o1);
	wire_sessions__free(t);
	_assert_same(b1, o1);
	_assert_same(b2, o2);
	_assert_same(b1, o3);
	batch__free(o1);
	_assert_same(b2, o2);
	batch__free(o2);
	batch__free(o3);
	wire_encoder__free(e);
	wire_encoder__free(f);

	/* Session 44's first batch is refused after its dictionary was read. */
	t = wire_sessions__new(16, 64 << 20);
	e = wire_encoder__new(44);
	body = _encode(e, b1, WIRE_NONE);
	m = _unpack(body);
	free(body.data);
	m->sample_stack[m->n_sample_stack - 1] = 1000000;
	body = _pack(m);
	flamewatch__wire__batch__free_unpacked(m, NULL);
	_decode_err(t, body, WIRE_NONE, NULL, -EINVAL, "stack id");
	free(body.data);
	wire_encoder__free(e);
	/* A new agent with that id sends b2's entries at b1's ids. */
	e = wire_encoder__new(44);
	body = _encode(e, b2, WIRE_NONE);
	o2 = _decode_ok(t, body, WIRE_NONE);
	free(body.data);
	_assert_same(b2, o2);
	batch__free(o2);
	wire_encoder__free(e);
	wire_sessions__free(t);
	batch__free(b1);
	batch__free(b2);
}


/* A stack over max_stack_depth keeps its root-most frames and a "[truncated]" leaf. */
static void test_deep_stack_truncated(void **state)
{
	struct wire_session_table *t = wire_sessions__new(4, 64 << 20);
	struct wire_encoder *e = wire_encoder__new(77);
	struct wire_limits lim = wire_limits__default();
	struct batch *b = _make(2, 12, 200, 0, 9), *out = NULL;
	struct body body = _encode(e, b, WIRE_NONE);
	uint32_t cut = 0, whole = 0;
	char err[256];

	lim.max_stack_depth = 4;
	assert_int_equal(_decode_lim(t, body, WIRE_NONE, &lim, &out, err, sizeof(err)), 0);
	assert_int_equal(out->nsamples, b->nsamples);
	/* _make()'s stacks: libc, main, work_N, leaf, and for one in four two kernel frames. */
	for (uint32_t i = 0; i < out->nsamples; i++) {
		uint32_t n;
		const uint32_t *fo = profile__stack(out->dict, out->samples[i].stack, &n);
		const char *last;

		assert_true(n <= 4);
		if (n < 4)
			continue;
		assert_string_equal(profile__string(out->dict, out->dict->frames[fo[0]].function),
				    "__libc_start_main");
		assert_string_equal(profile__string(out->dict, out->dict->frames[fo[1]].function),
				    "main");
		last = profile__string(out->dict, out->dict->frames[fo[3]].function);
		if (!strcmp(last, "[truncated]"))
			cut++;
		else if (!strncmp(last, "leaf_", 5))
			whole++;
		else
			fail_msg("leaf frame %s", last);
	}
	assert_true(cut > 0 && whole > 0);
	batch__free(out);
	free(body.data);
	batch__free(b);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

/* ---- validation ---------------------------------------------------------- */

struct vfix {
	struct wire_session_table *t;
	struct wire_encoder *e;
	struct batch *b1, *b2;
	struct body good;	/* b2, building on b1, nothing acked since */
	uint64_t session;
	uint32_t held[5];	/* what the session holds after b1 */
	uint32_t empty_string;	/* global id of "" */
};

static void _vfix_init(struct vfix *f)
{
	struct body body;
	Flamewatch__Wire__Batch *m;

	f->t = wire_sessions__new(16, 64 << 20);
	f->e = wire_encoder__new(0xabcdef);
	f->b1 = _make(4, 12, 500, 0, 1);
	f->b2 = _make(5, 12, 500, 1, 2);
	body = _encode(f->e, f->b1, WIRE_NONE);
	m = _unpack(body);
	for (uint32_t i = 0; i < m->n_strings; i++)
		if (!m->strings[i][0])
			f->empty_string = i;
	f->held[0] = m->n_strings;
	f->held[1] = m->n_mappings;
	f->held[2] = m->n_frames;
	f->held[3] = m->n_stacks;
	f->held[4] = m->n_series;
	f->session = m->session;
	flamewatch__wire__batch__free_unpacked(m, NULL);
	batch__free(_decode_ok(f->t, body, WIRE_NONE));
	free(body.data);
	wire_encoder__ack(f->e, 1);
	f->good = _encode(f->e, f->b2, WIRE_NONE);
	m = _unpack(f->good);
	/* b2 adds entries of every kind, so every table could be changed. */
	assert_true(m->n_strings && m->n_mappings == 0 && m->n_frames && m->n_stacks &&
		    m->n_series);
	flamewatch__wire__batch__free_unpacked(m, NULL);
}

static void _vfix_free(struct vfix *f)
{
	free(f->good.data);
	batch__free(f->b1);
	batch__free(f->b2);
	wire_encoder__free(f->e);
	wire_sessions__free(f->t);
}

/*
 * The session still holds exactly what it held after b1: a batch building on
 * one entry more of any kind is stale, one building on exactly that is fine.
 */
static void _assert_session_unchanged(struct vfix *f)
{
	Flamewatch__Wire__Batch m = FLAMEWATCH__WIRE__BATCH__INIT;
	uint32_t *bases[5] = { &m.dict_base_strings, &m.dict_base_mappings, &m.dict_base_frames,
			       &m.dict_base_stacks, &m.dict_base_series };
	struct batch *out;
	struct body body;

	m.version = 1;
	m.session = f->session;
	m.node = NODE;
	for (int k = 0; k < 5; k++)
		*bases[k] = f->held[k];
	body = _pack(&m);
	out = _decode_ok(f->t, body, WIRE_NONE);
	assert_int_equal(out->nsamples, 0);
	batch__free(out);
	free(body.data);
	for (int k = 0; k < 5; k++) {
		*bases[k] = f->held[k] + 1;
		body = _pack(&m);
		_decode_err(f->t, body, WIRE_NONE, NULL, -ESTALE, "holds");
		free(body.data);
		*bases[k] = f->held[k];
	}
	assert_int_equal(wire_sessions__count(f->t), 1);
}

typedef void (*mutate_fn)(Flamewatch__Wire__Batch *m, const struct vfix *f);

static void _m_version(Flamewatch__Wire__Batch *m, const struct vfix *f) { m->version = 2; }
static void _m_sample_stack(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->sample_stack[m->n_sample_stack - 1] = f->held[3] + m->n_stacks;
}
static void _m_sample_series(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->sample_series[7] = 1u << 31;
}
static void _m_stack_frame(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->stacks[m->n_stacks - 1]->frames[0] = f->held[2] + m->n_frames;
}
static void _m_frame_mapping(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->frames[0]->mapping = 3;
}
static void _m_frame_kind(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->frames[0]->kind = FRAME_KIND_MAX;
}
static void _m_frame_string(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->frames[m->n_frames - 1]->function = f->held[0] + m->n_strings;
}
static void _m_series_string(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->series[0]->labels[1] = UINT32_MAX;
}
static void _m_series_odd(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->series[0]->n_labels--;
}
static void _m_series_dup(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->series[0]->labels[2] = m->series[0]->labels[0];
}
static void _m_series_empty_name(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->series[0]->labels[0] = f->empty_string;
}
static void _m_ts_zero(Flamewatch__Wire__Batch *m, const struct vfix *f) { m->ts_delta[0] = 0; }
static void _m_ts_future(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->ts_delta[m->n_ts_delta - 1] = 4000000000000000000LL;
}
static void _m_ts_overflow(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->ts_delta[1] = INT64_MAX;
}
static void _m_value(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->sample_value[3] = -1;
}
static void _m_type(Flamewatch__Wire__Batch *m, const struct vfix *f)
{
	m->sample_type[10] = SAMPLE_TYPE_MAX;
}
static void _m_columns(Flamewatch__Wire__Batch *m, const struct vfix *f) { m->n_sample_cpu--; }
static void _m_empty_node(Flamewatch__Wire__Batch *m, const struct vfix *f) { m->node = ""; }
static void _m_other_node(Flamewatch__Wire__Batch *m, const struct vfix *f) { m->node = "other"; }
static void _m_gap(Flamewatch__Wire__Batch *m, const struct vfix *f) { m->dict_base_frames++; }

static void _mutated(struct vfix *f, mutate_fn fn, const struct wire_limits *lim, int want,
		     const char *needle)
{
	Flamewatch__Wire__Batch *m = _unpack(f->good);
	char *node = m->node;
	struct body body;

	if (fn)
		fn(m, f);
	body = _pack(m);
	/* Undo what free_unpacked would trip over. */
	m->node = node;
	flamewatch__wire__batch__free_unpacked(m, NULL);
	_decode_err(f->t, body, WIRE_NONE, lim, want, needle);
	free(body.data);
	_assert_session_unchanged(f);
}

static void test_invalid_content(void **state)
{
	struct wire_limits lim = wire_limits__default();
	struct vfix f = { 0 };

	_vfix_init(&f);
	_mutated(&f, _m_version, NULL, -EPROTONOSUPPORT, "version");
	_mutated(&f, _m_sample_stack, NULL, -EINVAL, "stack id");
	_mutated(&f, _m_sample_series, NULL, -EINVAL, "series id");
	_mutated(&f, _m_stack_frame, NULL, -EINVAL, "frame id");
	_mutated(&f, _m_frame_mapping, NULL, -EINVAL, "mapping id");
	_mutated(&f, _m_frame_kind, NULL, -EINVAL, "kind");
	_mutated(&f, _m_frame_string, NULL, -EINVAL, "function string id");
	_mutated(&f, _m_series_string, NULL, -EINVAL, "value string id");
	_mutated(&f, _m_series_odd, NULL, -EINVAL, "odd");
	_mutated(&f, _m_series_dup, NULL, -EINVAL, "twice");
	_mutated(&f, _m_series_empty_name, NULL, -EINVAL, "empty label name");
	_mutated(&f, _m_ts_zero, NULL, -EINVAL, "timestamp");
	_mutated(&f, _m_ts_future, NULL, -EINVAL, "timestamp");
	_mutated(&f, _m_ts_overflow, NULL, -EINVAL, "timestamp");
	_mutated(&f, _m_value, NULL, -EINVAL, "negative");
	_mutated(&f, _m_type, NULL, -EINVAL, "type");
	_mutated(&f, _m_columns, NULL, -EINVAL, "columns");
	_mutated(&f, _m_empty_node, NULL, -EINVAL, "node");
	_mutated(&f, _m_other_node, NULL, -ESTALE, "another node");
	_mutated(&f, _m_gap, NULL, -ESTALE, "holds");

	lim.max_samples = 499;
	_mutated(&f, NULL, &lim, -E2BIG, "samples");
	lim = wire_limits__default();
	lim.max_string = 8;
	_mutated(&f, NULL, &lim, -EINVAL, "bytes long");
	lim = wire_limits__default();
	lim.max_labels = 2;
	_mutated(&f, NULL, &lim, -EINVAL, "labels, more than 2");
	lim = wire_limits__default();
	lim.max_unpacked = 4096;
	_mutated(&f, NULL, &lim, -E2BIG, "unpacked");
	lim = wire_limits__default();
	lim.max_body = 100;
	_mutated(&f, NULL, &lim, -E2BIG, "body");

	/* And the untouched batch is still accepted afterwards. */
	{
		struct batch *out = _decode_ok(f.t, f.good, WIRE_NONE);

		_assert_same(f.b2, out);
		batch__free(out);
	}
	/* Now held: a resent entry that differs from the held one is refused. */
	{
		Flamewatch__Wire__Batch *m = _unpack(f.good);
		char *s0 = m->strings[0];
		struct body body;

		m->strings[0] = "changed";
		body = _pack(m);
		m->strings[0] = s0;
		flamewatch__wire__batch__free_unpacked(m, NULL);
		_decode_err(f.t, body, WIRE_NONE, NULL, -EINVAL, "differs");
		free(body.data);
	}
	_vfix_free(&f);
}

static void test_malformed(void **state)
{
	static const uint8_t garbage[] = "this is not a batch \xff\xff\xff\xff\xff\xff\xff\xff\xff\xff";
	struct vfix f = { 0 };
	struct body body;

	_vfix_init(&f);
	/* Cut in the middle of the sample columns. */
	body = f.good;
	body.len = f.good.len - 10;
	_decode_err(f.t, body, WIRE_NONE, NULL, -EBADMSG, "protobuf");
	_assert_session_unchanged(&f);
	body = (struct body){ (void *)garbage, sizeof(garbage) - 1 };
	_decode_err(f.t, body, WIRE_NONE, NULL, -EBADMSG, "protobuf");
	_decode_err(f.t, body, WIRE_GZIP, NULL, -EBADMSG, "gzip");
	_decode_err(f.t, body, WIRE_ZSTD, NULL, -EBADMSG, "zstd");
	body = (struct body){ (void *)garbage, 0 };
	_decode_err(f.t, body, WIRE_GZIP, NULL, -EBADMSG, "truncated");
	_decode_err(f.t, body, WIRE_ZSTD, NULL, -EBADMSG, NULL);
	_decode_err(f.t, body, 7, NULL, -EINVAL, "compression");
	/* An empty protobuf is a batch of version 0. */
	_decode_err(f.t, body, WIRE_NONE, NULL, -EPROTONOSUPPORT, "version");
	_assert_session_unchanged(&f);

	/* Compressed bodies cut short, or followed by junk. */
	for (int c = WIRE_GZIP; c <= WIRE_ZSTD; c++) {
		struct wire_encoder *e = wire_encoder__new(1);
		struct body whole = _encode(e, f.b1, c);
		uint8_t *junk = malloc(whole.len + 4);

		body = whole;
		body.len = whole.len / 2;
		_decode_err(f.t, body, c, NULL, -EBADMSG, NULL);
		body.len = whole.len - 1;
		_decode_err(f.t, body, c, NULL, -EBADMSG, NULL);
		memcpy(junk, whole.data, whole.len);
		memcpy(junk + whole.len, "junk", 4);
		body = (struct body){ junk, whole.len + 4 };
		_decode_err(f.t, body, c, NULL, -EBADMSG, NULL);
		free(junk);
		free(whole.data);
		wire_encoder__free(e);
	}
	_assert_session_unchanged(&f);
	_vfix_free(&f);
}

#define BOMB_BYTES (1ULL << 30)

/* 1 GiB of zeros, compressed a MiB at a time. */
static struct body _gzip_bomb(void)
{
	static uint8_t zeros[1 << 20];
	z_stream zs = { 0 };
	size_t cap = 4 << 20;
	uint8_t *out = malloc(cap);

	assert_non_null(out);
	assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
	zs.next_out = out;
	zs.avail_out = cap;
	for (size_t done = 0; done < BOMB_BYTES; done += sizeof(zeros)) {
		zs.next_in = zeros;
		zs.avail_in = sizeof(zeros);
		assert_int_equal(deflate(&zs, done + sizeof(zeros) < BOMB_BYTES ? Z_NO_FLUSH :
					 Z_FINISH) >= 0, 1);
		assert_true(zs.avail_out > 0);
	}
	assert_int_equal(deflateEnd(&zs), Z_OK);
	return (struct body){ out, zs.total_out };
}

static struct body _zstd_bomb(void)
{
	static uint8_t zeros[1 << 20];
	ZSTD_CCtx *cctx = ZSTD_createCCtx();
	size_t cap = 1 << 20;
	ZSTD_outBuffer ob = { malloc(cap), cap, 0 };

	assert_non_null(cctx);
	assert_non_null(ob.dst);
	for (size_t done = 0; done < BOMB_BYTES; done += sizeof(zeros)) {
		ZSTD_inBuffer ib = { zeros, sizeof(zeros), 0 };
		int last = done + sizeof(zeros) >= BOMB_BYTES;
		size_t ret;

		do {
			ret = ZSTD_compressStream2(cctx, &ob, &ib, last ? ZSTD_e_end : ZSTD_e_continue);
			assert_false(ZSTD_isError(ret));
		} while (ib.pos < ib.size || (last && ret));
	}
	ZSTD_freeCCtx(cctx);
	return (struct body){ ob.dst, ob.pos };
}

static void test_bombs(void **state)
{
	struct vfix f = { 0 };
	struct body body;
	static uint8_t zeros[64 << 20];
	size_t cap;

	_vfix_init(&f);
	body = _gzip_bomb();
	print_message("gzip bomb: %zu bytes\n", body.len);
	_decode_err(f.t, body, WIRE_GZIP, NULL, -E2BIG, "decompressed body exceeds");
	free(body.data);

	body = _zstd_bomb();
	print_message("zstd bomb (size unknown): %zu bytes\n", body.len);
	_decode_err(f.t, body, WIRE_ZSTD, NULL, -E2BIG, "decompressed body exceeds");
	free(body.data);

	/* With the size in the frame header it is refused up front. */
	cap = ZSTD_compressBound(sizeof(zeros));
	body.data = malloc(cap);
	assert_non_null(body.data);
	body.len = ZSTD_compress(body.data, cap, zeros, sizeof(zeros), 1);
	assert_false(ZSTD_isError(body.len));
	_decode_err(f.t, body, WIRE_ZSTD, NULL, -E2BIG, "decompressed body exceeds");
	free(body.data);

	/* A good batch exactly at the cap passes; one byte less does not. */
	{
		struct wire_limits lim = wire_limits__default();
		struct batch *out = NULL;
		char err[128];

		lim.max_decompressed = f.good.len;
		assert_int_equal(wire__decode(f.t, f.good.data, f.good.len, WIRE_NONE, &lim, &out,
					      NULL, 0, NULL, err, sizeof(err)), 0);
		batch__free(out);
		lim.max_decompressed = f.good.len - 1;
		_decode_err(f.t, f.good, WIRE_NONE, &lim, -E2BIG, "exceeds");
	}
	_vfix_free(&f);
}

/* Both compressions agree to the byte at the cap. */
static void test_decompressed_cap_exact(void **state)
{
	struct wire_session_table *t = wire_sessions__new(4, 64 << 20);
	struct wire_encoder *e = wire_encoder__new(3);
	struct batch *b = _make(3, 10, 300, 0, 1);

	for (int c = WIRE_GZIP; c <= WIRE_ZSTD; c++) {
		struct wire_encoder *plain = wire_encoder__new(3);
		struct body raw = _encode(plain, b, WIRE_NONE);
		struct body body = _encode(e, b, c);
		struct wire_limits lim = wire_limits__default();
		struct batch *out = NULL;

		lim.max_decompressed = raw.len - 1;
		_decode_err(t, body, c, &lim, -E2BIG, "exceeds");
		lim.max_decompressed = raw.len;
		assert_int_equal(_decode_lim(t, body, c, &lim, &out, NULL, 0), 0);
		_assert_same(b, out);
		batch__free(out);
		free(raw.data);
		free(body.data);
		wire_encoder__free(plain);
		wire_encoder__free(e);
		/* The next compression starts its own session. */
		e = wire_encoder__new(4);
	}
	wire_encoder__free(e);
	batch__free(b);
	wire_sessions__free(t);
}

/* ---- size of a typical batch ---------------------------------------------- */

/*
 * 10 s of 8 CPUs at 19 Hz (1520 samples) from 10 processes with 100 stacks
 * each, 15-40 frames deep over a handful of shared libraries, C++-length
 * names. Prints bytes per sample of the first batch of a session (with its
 * dictionary) and of a later one (stacks already acknowledged).
 */
static struct batch *_typical(uint32_t seed)
{
	struct gen g = { .b = batch__new(PERIOD_NS), .rng = 12345 };
	struct profile *p = g.b->dict;
	static const char *const libs[] = {
		"/usr/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
		"/usr/lib/python3.11/lib-dynload/_ssl.so", "/opt/app/libtorch_cpu.so",
		"/opt/app/libcuda.so.1",
	};
	uint32_t stacks[10][100], series[10], fn[400];
	char name[160];

	for (int i = 0; i < 400; i++) {
		int64_t m = profile__intern_mapping(p, libs[i % 5], "4d2a1b0c9f8e7d6c5b4a39281706f5e4d3c2b1a0");

		snprintf(name, sizeof(name),
			 "at::native::(anonymous namespace)::kernel_impl_%d<float, at::TensorIterator>(at::TensorIteratorBase&)", i);
		fn[i] = _frame(p, FRAME_NATIVE, m, 0x100000 + i * 0x40, name, "aten/src/ATen/native/cpu/Kernel.cpp", i);
	}
	for (int pid = 0; pid < 10; pid++) {
		char comm[24];

		snprintf(comm, sizeof(comm), "python%d", pid);
		series[pid] = _series(g.b, 40000 + pid, comm);
		for (int s = 0; s < 100; s++) {
			uint32_t f[40], n = 15 + _rand(&g) % 26;

			for (uint32_t j = 0; j < n; j++)
				f[j] = j < 8 ? fn[j + pid % 3] : fn[_rand(&g) % 400];
			stacks[pid][s] = profile__intern_stack(p, f, n);
		}
	}
	g.rng = seed;
	for (int tick = 0; tick < 190; tick++) {
		for (int cpu = 0; cpu < 8; cpu++) {
			int pid = _rand(&g) % 10;
			/* Skewed: a few hot stacks per process. */
			uint32_t r = _rand(&g) % 100, s = r < 70 ? r % 10 : r;
			struct batch_sample smp = {
				.ts_ns = T0 + tick * (int64_t)PERIOD_NS + cpu * 1000 + _rand(&g) % 5000,
				.stack = stacks[pid][s], .series = series[pid],
				.tid = 40000 + pid * 10 + _rand(&g) % 4, .cpu = cpu,
				.type = SAMPLE_CPU, .value = 1,
			};

			assert_int_equal(batch__add_sample(g.b, &smp), 0);
		}
	}
	return g.b;
}

static void test_typical_size(void **state)
{
	static const char *const cname[] = { "none", "gzip", "zstd" };

	for (int c = WIRE_NONE; c <= WIRE_ZSTD; c++) {
		struct wire_session_table *t = wire_sessions__new(4, 64 << 20);
		struct wire_encoder *e = wire_encoder__new(77);
		struct batch *b1 = _typical(1), *b2 = _typical(2), *out;
		struct body first = _encode(e, b1, c), later;

		batch__free(_decode_ok(t, first, c));
		wire_encoder__ack(e, 1);
		later = _encode(e, b2, c);
		if (c == WIRE_GZIP)
			_write_seed("typical.gz", c, first, &later);
		out = _decode_ok(t, later, c);
		_assert_same(b2, out);
		print_message("typical %s: first batch %zu B (%.1f B/sample), later %zu B "
			      "(%.2f B/sample), %u samples\n", cname[c], first.len,
			      (double)first.len / b1->nsamples, later.len,
			      (double)later.len / b2->nsamples, b2->nsamples);
		batch__free(out);
		free(first.data);
		free(later.data);
		batch__free(b1);
		batch__free(b2);
		wire_encoder__free(e);
		wire_sessions__free(t);
	}
}

/* Seeds for the fuzzer: small valid bodies, alone and as a pair. */
static void test_corpus_seeds(void **state)
{
	static const char *const names[3][2] = {
		{ "small", "pair" }, { "small.gz", "pair.gz" }, { "small.zst", "pair.zst" },
	};

	for (int c = WIRE_NONE; c <= WIRE_ZSTD; c++) {
		struct wire_encoder *e = wire_encoder__new(9);
		struct batch *b1 = _make(2, 3, 20, 0, 1), *b2 = _make(3, 3, 20, 1, 2);
		struct body first = _encode(e, b1, c), next;

		wire_encoder__ack(e, 1);
		next = _encode(e, b2, c);
		_write_seed(names[c][0], c, first, NULL);
		_write_seed(names[c][1], c, first, &next);
		free(first.data);
		free(next.data);
		batch__free(b1);
		batch__free(b2);
		wire_encoder__free(e);
	}
}

/* SipHash-2-4, 128-bit output: its authors' vectors (key 00..0f, message 00..len-1). */
static void test_siphash128_vectors(void **state)
{
	static const struct { size_t len; uint8_t want[16]; } v[] = {
		{ 0, { 0xa3, 0x81, 0x7f, 0x04, 0xba, 0x25, 0xa8, 0xe6,
		       0x6d, 0xf6, 0x72, 0x14, 0xc7, 0x55, 0x02, 0x93 } },
		{ 1, { 0xda, 0x87, 0xc1, 0xd8, 0x6b, 0x99, 0xaf, 0x44,
		       0x34, 0x76, 0x59, 0x11, 0x9b, 0x22, 0xfc, 0x45 } },
		{ 7, { 0xa1, 0xf1, 0xeb, 0xbe, 0xd8, 0xdb, 0xc1, 0x53,
		       0xc0, 0xb8, 0x4a, 0xa6, 0x1f, 0xf0, 0x82, 0x39 } },
		{ 8, { 0x3b, 0x62, 0xa9, 0xba, 0x62, 0x58, 0xf5, 0x61,
		       0x0f, 0x83, 0xe2, 0x64, 0xf3, 0x14, 0x97, 0xb4 } },
		{ 15, { 0x54, 0x93, 0xe9, 0x99, 0x33, 0xb0, 0xa8, 0x11,
			0x7e, 0x08, 0xec, 0x0f, 0x97, 0xcf, 0xc3, 0xd9 } },
		{ 63, { 0x51, 0x50, 0xd1, 0x77, 0x2f, 0x50, 0x83, 0x4a,
			0x50, 0x3e, 0x06, 0x9a, 0x97, 0x3f, 0xbd, 0x7c } },
	};
	const uint64_t key[2] = { 0x0706050403020100ULL, 0x0f0e0d0c0b0a0908ULL };
	uint8_t msg[64];

	for (int i = 0; i < 64; i++)
		msg[i] = (uint8_t)i;
	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		uint64_t h[2];
		uint8_t got[16];

		wire__siphash128(key, msg, v[i].len, h);
		for (int b = 0; b < 8; b++) {
			got[b] = (uint8_t)(h[0] >> (8 * b));
			got[8 + b] = (uint8_t)(h[1] >> (8 * b));
		}
		assert_memory_equal(got, v[i].want, 16);
	}
}

/*
 * One node of a fleet with many distinct stacks: nstacks stacks of 10 to
 * 30 frames down a call tree (prefixes shared), names of about 80 bytes,
 * four return addresses per function. Batch k refers to want stacks drawn
 * from them, so the session's working set is every stack, while one batch
 * sees a part.
 */
static struct batch *_fleet_batch(uint32_t nstacks, uint32_t want, uint32_t k)
{
	struct gen g = { .b = batch__new(PERIOD_NS), .rng = 977 * k + 1 };
	struct profile *p = g.b->dict;
	uint32_t series = _series(g.b, 4242, "trainer");
	int64_t exe = profile__intern_mapping(p, "/opt/svc/bin/trainer", "5eed");

	assert_true(exe >= 0);
	for (uint32_t i = 0; i < want; i++) {
		uint32_t s = _rand(&g) % nstacks, depth = 10 + s % 21, f[32], node = 0;
		struct batch_sample bs = {
			.ts_ns = T0 + (int64_t)k * 10000000000LL + i, .series = series,
			.tid = 4242, .type = SAMPLE_CPU, .value = 1,
		};
		int64_t stack;

		for (uint32_t j = 0; j < depth; j++) {
			char name[128];

			/* The callee at depth j is one of 4 under its caller, picked by s. */
			node = node * 4 + (s >> (j % 11)) % 4 % (j < 4 ? 1 : 4) + 1;
			node %= 9973;
			snprintf(name, sizeof(name),
				 "ml::io::ThreadPoolExecutor%u<std::shared_ptr<Buffer>>::step(int, void*)",
				 node);
			f[j] = _frame(p, FRAME_NATIVE, exe, 0x400000 + node * 64 + s % 4 * 4, name,
				      "executor.cc", node % 500);
		}
		stack = profile__intern_stack(p, f, depth);
		assert_true(stack >= 0);
		bs.stack = (uint32_t)stack;
		assert_int_equal(batch__add_sample(g.b, &bs), 0);
	}
	return g.b;
}

/*
 * At the agent's own cap, a session holds a node's working set of many
 * distinct stacks: batch after batch builds on it, none starts a new
 * session, and what is acknowledged costs a hash and an index slot an
 * entry, not its key.
 */
static void test_session_survives_many_stacks(void **state)
{
	struct wire_session_table *t = wire_sessions__new(16, 256 << 20);
	struct wire_encoder *e = wire_encoder__new(77);
	size_t first_len = 0, later = 0, entries = 0;
	uint64_t session = wire_encoder__session(e);
	const int nbatches = 30;

	wire_encoder__set_max_bytes(e, SHIPPER_DICT_MAX_BYTES);
	for (int k = 0; k < nbatches; k++) {
		struct batch *b = _fleet_batch(1500, 800, (uint32_t)k), *out;
		struct body body = _encode(e, b, WIRE_ZSTD);

		assert_int_equal(wire_encoder__session(e), session);
		out = _decode_ok(t, body, WIRE_ZSTD);
		_assert_same(b, out);
		wire_encoder__ack(e, wire_encoder__seq(e));
		if (k == 0)
			first_len = body.len;
		else if (k >= nbatches / 2)
			later += body.len;
		batch__free(out);
		batch__free(b);
		free(body.data);
	}
	{
		/* What the server holds of the session is what the encoder acked. */
		struct batch *b = _fleet_batch(1500, 1, 999), *out;
		struct body body = _encode(e, b, WIRE_NONE);
		Flamewatch__Wire__Batch *m = _unpack(body);

		entries = (size_t)m->dict_base_strings + m->dict_base_mappings +
			  m->dict_base_frames + m->dict_base_stacks + m->dict_base_series;
		flamewatch__wire__batch__free_unpacked(m, NULL);
		out = _decode_ok(t, body, WIRE_NONE);
		_assert_same(b, out);
		batch__free(out);
		batch__free(b);
		free(body.data);
	}
	print_message("%zu entries in %zu bytes (%.1f a entry); first batch %zu bytes, "
		      "later ones %zu on average\n", entries, wire_encoder__memory(e),
		      (double)wire_encoder__memory(e) / (double)entries, first_len,
		      later / (nbatches - nbatches / 2));
	/* A working set the encoder held at 130 bytes an entry would be over the cap. */
	assert_true(entries * 130 > SHIPPER_DICT_MAX_BYTES);
	assert_true(wire_encoder__memory(e) < entries * 48);
	assert_true(later / (nbatches - nbatches / 2) * 4 < first_len);
	wire_encoder__free(e);
	wire_sessions__free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_none),
		cmocka_unit_test(test_shared_dictionary),
		cmocka_unit_test(test_deep_stack_truncated),
		cmocka_unit_test(test_roundtrip_gzip),
		cmocka_unit_test(test_roundtrip_zstd),
		cmocka_unit_test(test_acked_entries_not_resent),
		cmocka_unit_test(test_unacked_resend),
		cmocka_unit_test(test_stale_session_reset),
		cmocka_unit_test(test_encoder_memory_cap),
		cmocka_unit_test(test_session_eviction),
		cmocka_unit_test(test_sessions_forgotten_counted),
		cmocka_unit_test(test_ends_session),
		cmocka_unit_test(test_evicted_sessions_lose_nothing),
		cmocka_unit_test(test_invalid_content),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_bombs),
		cmocka_unit_test(test_decompressed_cap_exact),
		cmocka_unit_test(test_typical_size),
		cmocka_unit_test(test_corpus_seeds),
		cmocka_unit_test(test_siphash128_vectors),
		cmocka_unit_test(test_session_survives_many_stacks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
