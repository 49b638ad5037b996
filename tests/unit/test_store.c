// SPDX-License-Identifier: Apache-2.0
/*
 * The SQLite store against a brute-force reference: a generator makes 19 Hz
 * samples for a few nodes and processes, keeps every sample in memory, and
 * each query is checked against a scan of that list. Windows are chosen to
 * cross minute and hour boundaries at odd offsets, so that rollups and raw
 * blocks are both exercised and must agree exactly.
 *
 * test_bytes_per_sample writes two hours of one busy node (8 CPUs at 19 Hz,
 * 10 processes, 10 s batches) and reports the bytes per sample on disk;
 * FW_STORE_DAY=1 makes it a whole day (about 10 M samples, a few minutes).
 * FW_TEST_FILTER=test_name runs one test.
 */
#include <errno.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <sqlite3.h>

#include "common/batch.h"
#include "common/intern.h"
#include "common/log.h"
#include "common/profile.h"
#include "store/selector.h"
#include "store/sqlite.h"
#include "store/store.h"
#include "testutil.h"

#define SEC		1000000000LL
#define MIN		(60 * SEC)
#define HOUR		(60 * MIN)
#define PERIOD		(SEC / 19)
/* An odd start, not aligned to a minute or an hour. */
#define T0		(1700000000LL * SEC + 1234 * SEC + 567890123LL)
#define NFUNCS		400
#define NPROC		4
#define NSTACKS		40

/* ---- generator and reference --------------------------------------------- */

struct ref_sample {
	int64_t ts, value;
	uint16_t node, proc, stack;
	uint32_t tid, cpu, type;
};

struct ref {
	struct ref_sample *s;
	size_t n, cap;
};

static uint64_t _rng;

/* A Zipf-like pick in [0, n): small values are much more likely. */
static uint32_t _zipf(uint32_t n)
{
	double u = (double)(xorshift(&_rng) >> 11) / 9007199254740992.0;

	return (uint32_t)(u * u * u * n) % n;
}

static void _func_name(char *buf, size_t len, uint32_t f)
{
	snprintf(buf, len, "func_%u", f);
}

static uint32_t _stack_frame(uint32_t proc, uint32_t stack, uint32_t j)
{
	return j ? (proc * 31 + stack * 7 + j * 13) % NFUNCS : proc;
}

static uint32_t _stack_depth(uint32_t proc, uint32_t stack)
{
	return 2 + (proc * 7 + stack) % 10;
}

static void _comm(char *buf, size_t len, uint32_t proc)
{
	snprintf(buf, len, "app%u", proc);
}

/* "comm;f_root;...;f_leaf" */
static void _folded_ref(char *buf, size_t len, uint32_t proc, uint32_t stack)
{
	size_t at;

	_comm(buf, len, proc);
	at = strlen(buf);
	for (uint32_t j = 0; j < _stack_depth(proc, stack); j++) {
		char f[32];

		_func_name(f, sizeof(f), _stack_frame(proc, stack, j));
		at += snprintf(buf + at, len - at, ";%s", f);
	}
}

static int64_t _intern_stack(struct batch *b, uint32_t proc, uint32_t stack)
{
	uint32_t frames[16], n = _stack_depth(proc, stack);

	for (uint32_t j = 0; j < n; j++) {
		uint32_t f = _stack_frame(proc, stack, j);
		char name[32], path[64], bid[64], file[64];
		int64_t m = PROFILE_NO_MAPPING, id;
		bool kernel = f % 17 == 5;

		_func_name(name, sizeof(name), f);
		snprintf(path, sizeof(path), "/usr/lib/lib%u.so", f % 4);
		snprintf(bid, sizeof(bid), "%08x", 0xb1d0000 + f % 4);
		snprintf(file, sizeof(file), "src/f%u.c", f);
		if (!kernel) {
			m = profile__intern_mapping(b->dict, path, bid);
			assert_true(m >= 0);
		}
		id = profile__intern_frame(b->dict, kernel ? FRAME_KERNEL : FRAME_NATIVE,
					   (uint32_t)m, 0x1000 + f * 16);
		assert_true(id >= 0);
		assert_int_equal(profile__set_frame_name(b->dict, (uint32_t)id, name, file, f + 1), 0);
		frames[j] = (uint32_t)id;
	}
	return profile__intern_stack(b->dict, frames, n);
}

static int64_t _intern_series(struct batch *b, uint32_t node, uint32_t proc)
{
	char comm[16], pid[16], exe[32], nodebuf[16];
	const char *names[] = { "comm", "pid", "exe", "node" };
	const char *values[] = { comm, pid, exe, nodebuf };

	_comm(comm, sizeof(comm), proc);
	snprintf(pid, sizeof(pid), "%u", 1000 + node * 100 + proc);
	snprintf(exe, sizeof(exe), "/usr/bin/app%u", proc);
	/* The store must replace this with its node argument. */
	snprintf(nodebuf, sizeof(nodebuf), "bogus");
	return batch__intern_series(b, names, values, 4);
}

/*
 * One batch for node over [t, t + len): ncpus CPUs ticking at 19 Hz, each
 * tick busy with probability 3/4 running one of nproc processes. Every 25th
 * sample is followed by a GPU-time sample. Appends to ref when it is given.
 */
static struct batch *_fill_batch(struct batch *b, struct ref *ref, uint32_t node, uint32_t ncpus,
				 uint32_t nproc, uint32_t nstacks, int64_t t, int64_t len);

static struct batch *_make_batch(struct ref *ref, uint32_t node, uint32_t ncpus, uint32_t nproc,
				 uint32_t nstacks, int64_t t, int64_t len)
{
	return _fill_batch(batch__new(PERIOD), ref, node, ncpus, nproc, nstacks, t, len);
}

/* The same into b, whose dictionary may already hold entries. */
static struct batch *_fill_batch(struct batch *b, struct ref *ref, uint32_t node, uint32_t ncpus,
				 uint32_t nproc, uint32_t nstacks, int64_t t, int64_t len)
{
	int64_t series[16], stacks[16][128];

	assert_non_null(b);
	assert_true(nproc <= 16 && nstacks <= 128);
	for (uint32_t p = 0; p < nproc; p++) {
		series[p] = -1;
		for (uint32_t s = 0; s < nstacks; s++)
			stacks[p][s] = -1;
	}
	for (int64_t tick = (t - T0 + PERIOD - 1) / PERIOD;; tick++) {
		int64_t base = T0 + tick * PERIOD;

		if (base >= t + len)
			break;
		for (uint32_t cpu = 0; cpu < ncpus; cpu++) {
			int64_t ts = base + cpu * 3000017LL + (int64_t)(xorshift(&_rng) % 20000);
			uint32_t p = _zipf(nproc), s = _zipf(nstacks);
			struct batch_sample bs;

			if (ts < t || ts >= t + len || xorshift(&_rng) % 4 == 0)
				continue;
			if (series[p] < 0)
				series[p] = _intern_series(b, node, p);
			if (stacks[p][s] < 0)
				stacks[p][s] = _intern_stack(b, p, s);
			assert_true(series[p] >= 0 && stacks[p][s] >= 0);
			bs = (struct batch_sample){
				.ts_ns = ts, .stack = (uint32_t)stacks[p][s], .series = (uint32_t)series[p],
				.tid = (1000 + node * 100 + p) * 10 +
				       (uint32_t)(xorshift(&_rng) % 3),
				.cpu = cpu, .type = SAMPLE_CPU, .value = 1,
			};
			for (int k = 0; k < 2; k++) {
				assert_int_equal(batch__add_sample(b, &bs), 0);
				if (ref) {
					if (ref->n == ref->cap) {
						ref->cap = ref->cap ? ref->cap * 2 : 4096;
						ref->s = realloc(ref->s, ref->cap * sizeof(*ref->s));
						assert_non_null(ref->s);
					}
					/* The store keeps samples to the microsecond. */
					ref->s[ref->n++] = (struct ref_sample){
						.ts = store__sample_ts(bs.ts_ns), .value = bs.value,
						.node = (uint16_t)node,
						.proc = (uint16_t)p, .stack = (uint16_t)s, .tid = bs.tid,
						.cpu = cpu, .type = bs.type,
					};
				}
				if (xorshift(&_rng) % 25)
					break;
				bs.type = SAMPLE_GPU_TIME;
				bs.value = 1000 + (int64_t)(xorshift(&_rng) % 4000);
			}
		}
	}
	return b;
}

/* ---- helpers --------------------------------------------------------------- */

static char _dir[64];

static struct store *_open_fresh(void)
{
	tmpdir_remove(_dir);
	assert_non_null(tmpdir_make(_dir, sizeof(_dir), "test-store"));
	return store_open_or_fail(_dir);
}

static struct store *_reopen(struct store *s)
{
	char uri[96];

	store__close(s);
	snprintf(uri, sizeof(uri), "sqlite:%s", _dir);
	return store_open_or_fail(uri);
}

static void _cleanup(void)
{
	tmpdir_remove(_dir);
	_dir[0] = '\0';
}

/* Folded stack text -> summed value, built from either side. */
struct folded {
	struct intern *keys;
	int64_t *sums;
	uint32_t cap;
};

static void _folded_add(struct folded *f, const char *key, int64_t v)
{
	int64_t id;

	if (!f->keys)
		f->keys = intern__new();
	id = intern__add(f->keys, key, strlen(key), NULL);
	assert_true(id >= 0);
	if ((uint32_t)id >= f->cap) {
		uint32_t cap = f->cap ? f->cap * 2 : 256;

		f->sums = realloc(f->sums, cap * sizeof(*f->sums));
		assert_non_null(f->sums);
		memset(f->sums + f->cap, 0, (cap - f->cap) * sizeof(*f->sums));
		f->cap = cap;
	}
	f->sums[id] += v;
}

static void _folded_free(struct folded *f)
{
	intern__free(f->keys);
	free(f->sums);
	memset(f, 0, sizeof(*f));
}

static void _folded_profile(struct folded *f, const struct profile *p)
{
	char buf[4096];

	for (uint32_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		uint32_t n;
		const uint32_t *frames = profile__stack(p, s->stack, &n);
		size_t at = (size_t)snprintf(buf, sizeof(buf), "%s", profile__string(p, s->comm));

		assert_int_equal(s->pid, 0);
		assert_int_equal(s->tid, 0);
		for (uint32_t j = 0; j < n; j++) {
			const struct profile_frame *fr = &p->frames[frames[j]];

			at += (size_t)snprintf(buf + at, sizeof(buf) - at, ";%s",
					       profile__string(p, fr->function));
		}
		_folded_add(f, buf, (int64_t)s->count);
	}
}

/* Every key of a with its sum in b, and the same number of keys. */
static void _folded_equal(const struct folded *a, const struct folded *b)
{
	uint32_t na = a->keys ? intern__count(a->keys) : 0, nb = b->keys ? intern__count(b->keys) : 0;
	uint32_t nonzero_a = 0, nonzero_b = 0;

	for (uint32_t i = 0; i < na; i++) {
		size_t len;
		const void *k = intern__key(a->keys, i, &len);
		int64_t j = intern__find(b->keys, k, len);

		if (!a->sums[i])
			continue;
		nonzero_a++;
		if (j < 0)
			fail_msg("missing stack %.*s", (int)len, (const char *)k);
		if (a->sums[i] != b->sums[j])
			fail_msg("stack %.*s: %lld != %lld", (int)len, (const char *)k,
				 (long long)a->sums[i], (long long)b->sums[j]);
	}
	for (uint32_t i = 0; i < nb; i++)
		nonzero_b += b->sums[i] != 0;
	assert_int_equal(nonzero_a, nonzero_b);
}

typedef bool (*ref_filter)(const struct ref_sample *s);

static void _check_profile(struct store *st, const struct ref *ref, int64_t from, int64_t to,
			   const char *sel_text, ref_filter filter, uint32_t type)
{
	struct selector *sel = NULL;
	struct profile *p = profile__new(PERIOD, 0);
	struct folded want = { 0 }, got = { 0 };
	char buf[4096], err[128];

	assert_non_null(p);
	if (sel_text) {
		sel = selector__parse(sel_text, err, sizeof(err));
		if (!sel)
			fail_msg("selector %s: %s", sel_text, err);
	}
	{
		/* Summed by (proc, stack) first: folding every sample is slow. */
		int64_t *sums = calloc(16 * 128, sizeof(*sums));

		assert_non_null(sums);
		for (size_t i = 0; i < ref->n; i++) {
			const struct ref_sample *s = &ref->s[i];

			if (s->ts < from || s->ts >= to || s->type != type || (filter && !filter(s)))
				continue;
			sums[s->proc * 128 + s->stack] += s->value;
		}
		for (uint32_t i = 0; i < 16 * 128; i++) {
			if (!sums[i])
				continue;
			_folded_ref(buf, sizeof(buf), i / 128, i % 128);
			_folded_add(&want, buf, sums[i]);
		}
		free(sums);
	}
	assert_int_equal(store__profile(st, from, to, sel, type, p), 0);
	_folded_profile(&got, p);
	_folded_equal(&want, &got);
	profile__free(p);
	selector__free(sel);
	_folded_free(&want);
	_folded_free(&got);
}

static struct ref _ref;

static bool _is_app1(const struct ref_sample *s)
{
	return s->proc == 1;
}

static bool _is_node1_not_app0(const struct ref_sample *s)
{
	return s->node == 1 && s->proc != 0;
}

/* Two nodes, 4 CPUs, NPROC processes, hours_x10 / 10 hours in 1-minute batches. */
static struct store *_fill(struct ref *ref, int64_t hours_x10)
{
	struct store *st = _open_fresh();
	int64_t end = T0 + hours_x10 * HOUR / 10;

	_rng = 0x243f6a8885a308d3ULL;
	ref->n = 0;
	for (int64_t t = T0; t < end; t += 60 * SEC) {
		for (uint32_t node = 0; node < 2; node++) {
			struct batch *b = _make_batch(ref, node, 4, NPROC, NSTACKS, t, 60 * SEC);
			char name[16];

			snprintf(name, sizeof(name), "node%u", node);
			assert_int_equal(store__write(st, name, b), 0);
			batch__free(b);
		}
	}
	return st;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_open_errors(void **state)
{
	char err[256];

	assert_null(store__open("mysql://localhost:3306/db", err, sizeof(err)));
	assert_int_equal(errno, EPROTONOSUPPORT);
	assert_true(strlen(err) > 0);
	/* ClickHouse where nothing listens (port 1): the connection's error. */
	assert_null(store__open("clickhouse://127.0.0.1:1/db", err, sizeof(err)));
	assert_int_equal(errno, ECONNREFUSED);
	assert_non_null(strstr(err, "cannot connect"));
	assert_null(store__open("", err, sizeof(err)));
	assert_int_equal(errno, EINVAL);
	assert_null(store__open("/proc/no/such/dir", err, sizeof(err)));
	assert_true(strlen(err) > 0);
	store__close(NULL);
}

static void test_profile_windows(void **state)
{
	struct store *st = _fill(&_ref, 25);
	int64_t end = T0 + 25 * HOUR / 10;
	/* Edges at odd offsets, on minute and hour boundaries, and beyond the data. */
	int64_t h = (T0 / HOUR + 1) * HOUR, m = (T0 / MIN + 3) * MIN;
	int64_t windows[][2] = {
		{ 0, INT64_MAX },
		{ T0, end },
		{ T0 + 7 * SEC, T0 + 41 * SEC },		/* raw only */
		{ m - 13 * SEC, m + 5 * MIN + 17 * SEC },	/* minutes and raw */
		{ m, m + 9 * MIN },				/* whole minutes */
		{ h - 7 * MIN - 3 * SEC, h + HOUR + 11 * MIN + 1 },	/* hour, minutes, raw */
		{ h, h + HOUR },				/* one whole hour */
		{ h - 1, h + HOUR + 1 },
		{ T0 - HOUR, T0 + 1 },
		{ end - 1, end + HOUR },
	};

	for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++) {
		_check_profile(st, &_ref, windows[i][0], windows[i][1], NULL, NULL, SAMPLE_CPU);
		_check_profile(st, &_ref, windows[i][0], windows[i][1], NULL, NULL, SAMPLE_GPU_TIME);
	}
	/* Random windows. */
	for (int i = 0; i < 30; i++) {
		int64_t a = T0 - 5 * MIN +
			    (int64_t)(xorshift(&_rng) % (uint64_t)(end - T0 + 10 * MIN));
		int64_t b = a + (int64_t)(xorshift(&_rng) % (uint64_t)(2 * HOUR));

		_check_profile(st, &_ref, a, b, NULL, NULL, SAMPLE_CPU);
	}
	/* Selectors. */
	_check_profile(st, &_ref, T0, end, "{comm=\"app1\"}", _is_app1, SAMPLE_CPU);
	_check_profile(st, &_ref, h - 90 * SEC, end, "{node=\"node1\",comm!=\"app0\"}",
		       _is_node1_not_app0, SAMPLE_CPU);
	_check_profile(st, &_ref, T0, end, "{pid=~\"11.*\",comm=~\"app1|app2|app3\"}",
		       _is_node1_not_app0, SAMPLE_CPU);
	/* The node label of the batch was replaced: nothing matches it. */
	{
		struct selector *sel = selector__parse("{node=\"bogus\"}", NULL, 0);
		struct profile *p = profile__new(PERIOD, 0);

		assert_int_equal(store__profile(st, T0, end, sel, SAMPLE_CPU, p), 0);
		assert_int_equal(p->nsamples, 0);
		profile__free(p);
		selector__free(sel);
	}
	/* Frames carry their names, files, lines, kinds and mappings. */
	{
		struct profile *p = profile__new(PERIOD, 0);
		bool seen_kernel = false, seen_native = false;

		assert_int_equal(store__profile(st, T0, end, NULL, SAMPLE_CPU, p), 0);
		for (uint32_t i = 0; i < p->nframes; i++) {
			const struct profile_frame *f = &p->frames[i];
			unsigned fn;

			assert_int_equal(sscanf(profile__string(p, f->function), "func_%u", &fn), 1);
			assert_int_equal(f->line, fn + 1);
			assert_int_equal(f->addr, 0x1000 + fn * 16);
			if (f->kind == FRAME_KERNEL) {
				seen_kernel = true;
				assert_int_equal(f->mapping, PROFILE_NO_MAPPING);
			} else {
				char path[64], bid[64];

				seen_native = true;
				assert_true(f->mapping < p->nmappings);
				snprintf(path, sizeof(path), "/usr/lib/lib%u.so", fn % 4);
				snprintf(bid, sizeof(bid), "%08x", 0xb1d0000 + fn % 4);
				assert_string_equal(profile__string(p, p->mappings[f->mapping].path), path);
				assert_string_equal(profile__string(p, p->mappings[f->mapping].build_id), bid);
			}
		}
		assert_true(seen_kernel && seen_native);
		profile__free(p);
	}
	store__close(st);
	_cleanup();
}

struct samples_ctx {
	const struct profile *dict;
	int64_t last_ts;
	uint64_t n, hash;
	int64_t sum;
	int stop_after;
};

static uint64_t _mix(uint64_t h, uint64_t v)
{
	return hash__bytes(&v, sizeof(v)) ^ (h * 0x9e3779b97f4a7c15ULL);
}

static uint64_t _sample_hash(int64_t ts, uint32_t tid, uint32_t cpu, int64_t value, const char *folded)
{
	uint64_t h = hash__bytes(folded, strlen(folded));

	h = _mix(h, (uint64_t)ts);
	h = _mix(h, tid);
	h = _mix(h, cpu);
	return _mix(h, (uint64_t)value);
}

static int _samples_cb(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
		       int64_t value, const char *comm, uint32_t pid)
{
	struct samples_ctx *c = ctx;
	char buf[4096];
	size_t at = (size_t)snprintf(buf, sizeof(buf), "%s", comm);
	uint32_t n;
	const uint32_t *frames = profile__stack(c->dict, stack, &n);

	assert_true(ts >= c->last_ts);
	assert_int_equal(tid / 10, pid);
	c->last_ts = ts;
	for (uint32_t j = 0; j < n; j++)
		at += (size_t)snprintf(buf + at, sizeof(buf) - at, ";%s",
				       profile__string(c->dict, c->dict->frames[frames[j]].function));
	c->hash += _sample_hash(ts, tid, cpu, value, buf);
	c->n++;
	c->sum += value;
	if (c->stop_after && c->n == (uint64_t)c->stop_after)
		return 42;
	return 0;
}

static void test_samples(void **state)
{
	struct store *st = _fill(&_ref, 8);
	int64_t from = T0 + 3 * MIN + 7 * SEC, to = T0 + 37 * MIN;
	struct samples_ctx c = { 0 };
	uint64_t want_n = 0, want_hash = 0;
	int64_t want_sum = 0;
	uint32_t stride = 0;
	struct profile *dict = profile__new(PERIOD, 0);
	char buf[4096];

	assert_non_null(dict);
	for (size_t i = 0; i < _ref.n; i++) {
		const struct ref_sample *s = &_ref.s[i];

		if (s->ts < from || s->ts >= to || s->type != SAMPLE_CPU)
			continue;
		_folded_ref(buf, sizeof(buf), s->proc, s->stack);
		want_hash += _sample_hash(s->ts, s->tid, s->cpu, s->value, buf);
		want_n++;
		want_sum += s->value;
	}
	assert_true(want_n > 10000);
	c.dict = dict;
	assert_int_equal(store__samples(st, from, to, NULL, SAMPLE_CPU, 0, dict, _samples_cb, &c,
					&stride), 0);
	assert_int_equal(stride, 1);
	assert_int_equal(c.n, want_n);
	assert_int_equal(c.sum, want_sum);
	assert_int_equal(c.hash, want_hash);

	/* Downsampled: every k-th, never more than asked for. */
	for (uint32_t max = 1; max < want_n * 2; max = max * 7 + 3) {
		memset(&c, 0, sizeof(c));
		c.dict = dict;
		assert_int_equal(store__samples(st, from, to, NULL, SAMPLE_CPU, max, dict,
						_samples_cb, &c, &stride), 0);
		assert_true(c.n <= max);
		assert_int_equal(stride, want_n > max ? (want_n + max - 1) / max : 1);
		assert_int_equal(c.n, (want_n + stride - 1) / stride);
	}

	/* A callback's non-zero return stops the walk and is returned. */
	memset(&c, 0, sizeof(c));
	c.dict = dict;
	c.stop_after = 5;
	assert_int_equal(store__samples(st, from, to, NULL, SAMPLE_CPU, 0, dict, _samples_cb, &c,
					NULL), 42);
	assert_int_equal(c.n, 5);

	/* A selector, and an empty window. */
	{
		struct selector *sel = selector__parse("comm=\"app2\",node=\"node0\"", NULL, 0);

		want_n = 0;
		for (size_t i = 0; i < _ref.n; i++) {
			const struct ref_sample *s = &_ref.s[i];

			want_n += s->ts >= from && s->ts < to && s->type == SAMPLE_CPU &&
				  s->proc == 2 && s->node == 0;
		}
		memset(&c, 0, sizeof(c));
		c.dict = dict;
		assert_int_equal(store__samples(st, from, to, sel, SAMPLE_CPU, 0, dict,
						_samples_cb, &c, &stride), 0);
		assert_int_equal(c.n, want_n);
		selector__free(sel);
		/* Before the first sample, which rounding to the microsecond may move below T0. */
		memset(&c, 0, sizeof(c));
		c.dict = dict;
		assert_int_equal(store__samples(st, T0 - HOUR, T0 - STORE_SAMPLE_TS_NS, NULL,
						SAMPLE_CPU, 0, dict, _samples_cb, &c, &stride), 0);
		assert_int_equal(c.n, 0);
	}
	profile__free(dict);
	store__close(st);
	_cleanup();
}

struct series_ctx {
	char group[8][32];
	int64_t sums[8][512];
	int64_t from, step;
	uint32_t calls;
	char last_group[32];
	int64_t last_bucket;
};

static int _series_cb(void *ctx, const char *group, int64_t bucket_start, int64_t sum)
{
	struct series_ctx *c = ctx;
	int64_t i = (bucket_start - c->from) / c->step;
	int g;

	assert_int_not_equal(sum, 0);
	assert_int_equal((bucket_start - c->from) % c->step, 0);
	assert_true(i >= 0 && i < 512);
	/* Ordered by group, then bucket. */
	if (c->calls) {
		int cmp = strcmp(c->last_group, group);

		assert_true(cmp < 0 || (cmp == 0 && bucket_start > c->last_bucket));
	}
	snprintf(c->last_group, sizeof(c->last_group), "%s", group);
	c->last_bucket = bucket_start;
	c->calls++;
	for (g = 0; g < 8 && c->group[g][0] && strcmp(c->group[g], group); g++)
		;
	assert_true(g < 8);
	if (!c->group[g][0])
		snprintf(c->group[g], sizeof(c->group[g]), "%s", group);
	c->sums[g][i] += sum;
	return 0;
}

static void _check_series(struct store *st, int64_t from, int64_t to, int64_t step, uint32_t type,
			  const char *by)
{
	struct series_ctx *got = calloc(1, sizeof(*got)), *want = calloc(1, sizeof(*want));
	char g[32];

	assert_non_null(got);
	assert_non_null(want);
	got->from = want->from = from;
	got->step = want->step = step;
	assert_int_equal(store__series(st, from, to, step, NULL, type, by, _series_cb, got), 0);
	for (size_t i = 0; i < _ref.n; i++) {
		const struct ref_sample *s = &_ref.s[i];
		int k;

		if (s->ts < from || s->ts >= to || s->type != type)
			continue;
		if (!by)
			g[0] = '\0';
		else if (!strcmp(by, "comm"))
			_comm(g, sizeof(g), s->proc);
		else if (!strcmp(by, "node"))
			snprintf(g, sizeof(g), "node%u", s->node);
		else
			g[0] = '\0';
		for (k = 0; k < 8 && want->group[k][0] && strcmp(want->group[k], g); k++)
			;
		if (!want->group[k][0])
			snprintf(want->group[k], sizeof(want->group[k]), "%s", g);
		want->sums[k][(s->ts - from) / step] += s->value;
	}
	for (int k = 0; k < 8 && want->group[k][0]; k++) {
		int j;

		for (j = 0; j < 8 && strcmp(got->group[j], want->group[k]); j++)
			;
		assert_true(j < 8);
		for (int i = 0; i < 512; i++)
			if (want->sums[k][i] != got->sums[j][i])
				fail_msg("group %s bucket %d: want %lld got %lld", want->group[k], i,
					 (long long)want->sums[k][i], (long long)got->sums[j][i]);
	}
	free(got);
	free(want);
}

static void test_series(void **state)
{
	struct store *st = _fill(&_ref, 25);
	int64_t h = (T0 / HOUR + 1) * HOUR;

	_check_series(st, T0, T0 + 25 * HOUR / 10, 10 * MIN, SAMPLE_CPU, "comm");
	_check_series(st, T0 - 3 * SEC, T0 + 25 * HOUR / 10, HOUR, SAMPLE_CPU, NULL);
	_check_series(st, h, h + HOUR, 90 * SEC, SAMPLE_CPU, "node");
	_check_series(st, h - 17 * SEC, h + HOUR, 61 * SEC, SAMPLE_GPU_TIME, "comm");
	_check_series(st, h - 30 * MIN, h + 30 * MIN, 8 * SEC, SAMPLE_CPU, "nolabel");
	_check_series(st, h - 47 * MIN, h + 70 * MIN, 30 * MIN, SAMPLE_CPU, "comm");
	assert_int_equal(store__series(st, T0, T0 + HOUR, 0, NULL, 0, NULL, _series_cb, NULL), -EINVAL);
	assert_int_equal(store__series(st, 0, INT64_MAX, 1, NULL, 0, NULL, _series_cb, NULL), -E2BIG);
	store__close(st);
	_cleanup();
}

struct list_ctx {
	char items[32][32];
	int n;
};

static int _list_cb(void *ctx, const char *s)
{
	struct list_ctx *c = ctx;

	assert_true(c->n < 32);
	snprintf(c->items[c->n++], sizeof(c->items[0]), "%s", s);
	return 0;
}

static void test_labels(void **state)
{
	struct store *st = _open_fresh();
	struct list_ctx c = { 0 };
	struct batch *b;

	_rng = 1;
	/* node0 runs app0..app3 in the first hour, node1 app0 only in the second. */
	b = _make_batch(NULL, 0, 4, 4, 10, T0, 10 * MIN);
	assert_int_equal(store__write(st, "node0", b), 0);
	batch__free(b);
	b = _make_batch(NULL, 1, 4, 1, 10, T0 + HOUR, 10 * MIN);
	assert_int_equal(store__write(st, "node1", b), 0);
	batch__free(b);

	assert_int_equal(store__label_names(st, T0, T0 + 2 * HOUR, _list_cb, &c), 0);
	assert_int_equal(c.n, 4);
	assert_string_equal(c.items[0], "comm");
	assert_string_equal(c.items[1], "exe");
	assert_string_equal(c.items[2], "node");
	assert_string_equal(c.items[3], "pid");

	memset(&c, 0, sizeof(c));
	assert_int_equal(store__label_values(st, "node", T0, T0 + 2 * HOUR, _list_cb, &c), 0);
	assert_int_equal(c.n, 2);
	assert_string_equal(c.items[0], "node0");
	assert_string_equal(c.items[1], "node1");

	memset(&c, 0, sizeof(c));
	assert_int_equal(store__label_values(st, "comm", T0 + 30 * MIN, T0 + 2 * HOUR, _list_cb, &c), 0);
	assert_int_equal(c.n, 1);
	assert_string_equal(c.items[0], "app0");

	memset(&c, 0, sizeof(c));
	assert_int_equal(store__label_values(st, "comm", T0, T0 + 20 * MIN, _list_cb, &c), 0);
	assert_int_equal(c.n, 4);
	assert_string_equal(c.items[3], "app3");

	memset(&c, 0, sizeof(c));
	assert_int_equal(store__label_values(st, "nosuch", T0, T0 + 2 * HOUR, _list_cb, &c), 0);
	assert_int_equal(c.n, 0);
	assert_int_equal(store__label_names(st, T0 + 20 * MIN, T0 + 50 * MIN, _list_cb, &c), 0);
	assert_int_equal(c.n, 0);
	store__close(st);
	_cleanup();
}

static void test_retain_and_reopen(void **state)
{
	struct store *st = _fill(&_ref, 25);
	struct store_stats s1, s2;
	int64_t cutoff = (T0 / HOUR + 1) * HOUR + 5 * MIN, end = T0 + 25 * HOUR / 10;

	assert_int_equal(store__stats(st, &s1), 0);
	assert_int_equal(s1.samples_written, _ref.n);
	assert_int_equal(s1.batches_written, 2 * 150);
	assert_int_equal(s1.series, 2 * NPROC);
	assert_true(s1.stacks > 0 && s1.stacks <= NPROC * NSTACKS);
	assert_true(s1.frames > 0 && s1.frames <= NFUNCS);
	assert_true(s1.bytes_on_disk > 0);

	st = _reopen(st);
	assert_int_equal(store__stats(st, &s2), 0);
	assert_int_equal(s2.samples_written, s1.samples_written);
	_check_profile(st, &_ref, 0, INT64_MAX, NULL, NULL, SAMPLE_CPU);

	/* Writing after a reopen neither duplicates dictionaries nor double counts. */
	{
		struct batch *b = _make_batch(&_ref, 0, 4, NPROC, NSTACKS, end, 30 * SEC);

		assert_int_equal(store__write(st, "node0", b), 0);
		batch__free(b);
		end += 30 * SEC;
		assert_int_equal(store__stats(st, &s2), 0);
		assert_int_equal(s2.series, s1.series);
		assert_int_equal(s2.frames, s1.frames);
		_check_profile(st, &_ref, T0, end, NULL, NULL, SAMPLE_CPU);
	}

	/* Retention on a block (5 minute) boundary drops exactly what is older. */
	assert_int_equal(store__retain(st, cutoff), 0);
	{
		struct ref kept = { 0 };

		for (size_t i = 0; i < _ref.n; i++) {
			if (_ref.s[i].ts < cutoff)
				continue;
			if (kept.n == kept.cap) {
				kept.cap = kept.cap ? kept.cap * 2 : 4096;
				kept.s = realloc(kept.s, kept.cap * sizeof(*kept.s));
				assert_non_null(kept.s);
			}
			kept.s[kept.n++] = _ref.s[i];
		}
		_check_profile(st, &kept, 0, INT64_MAX, NULL, NULL, SAMPLE_CPU);
		_check_profile(st, &kept, 0, INT64_MAX, NULL, NULL, SAMPLE_GPU_TIME);
		_check_profile(st, &kept, cutoff - 7 * SEC, cutoff + HOUR + 3 * SEC, NULL, NULL,
			       SAMPLE_CPU);
		st = _reopen(st);
		_check_profile(st, &kept, 0, INT64_MAX, NULL, NULL, SAMPLE_CPU);
		free(kept.s);
	}
	store__close(st);
	_cleanup();
}

static uint64_t _count_type(const struct batch *b, uint32_t type)
{
	uint64_t n = 0;

	for (uint32_t i = 0; i < b->nsamples; i++)
		n += b->samples[i].type == type;
	return n;
}


/*
 * Batches sharing one append-only dictionary (dict_id, as the server's
 * wire sessions hand them out) give the same answers as batches with their
 * own, also after a write that failed: the ids it made are rolled back and
 * handed out to others, and the kept translation must not point at them.
 */
static struct batch *_shared(struct batch *owner, uint64_t dict_id)
{
	struct batch *b = batch__new_shared(PERIOD, owner->dict, owner->series, dict_id, NULL, NULL);

	assert_non_null(b);
	return b;
}

static void test_shared_dictionary(void **state)
{
	struct store *st = _open_fresh();
	struct batch *owner = batch__new(PERIOD), *b;
	uint64_t id = batch__new_dict_id();
	uint32_t bad_frames[] = { 0, 99999 };
	int64_t t = T0;

	assert_non_null(owner);
	_rng = 99;
	_ref.n = 0;
	/* node0 shares one dictionary for all its batches; node1 does not. */
	for (int i = 0; i < 5; i++, t += MIN) {
		b = _fill_batch(_shared(owner, id), &_ref, 0, 4, 3, 10, t, MIN);
		assert_int_equal(store__write(st, "node0", b), 0);
		batch__free(b);
		b = _make_batch(&_ref, 1, 4, 3, 10, t, MIN);
		assert_int_equal(store__write(st, "node1", b), 0);
		batch__free(b);
	}
	/* New processes and stacks, and one stack that cannot be written. */
	b = _fill_batch(_shared(owner, id), NULL, 0, 4, NPROC, NSTACKS, t, MIN);
	{
		struct batch_sample bs = { .ts_ns = t + SEC, .series = 0, .value = 1 };
		int64_t bad = profile__intern_stack(owner->dict, bad_frames, 2);

		assert_true(bad >= 0);
		bs.stack = (uint32_t)bad;
		assert_int_equal(batch__add_sample(b, &bs), 0);
	}
	assert_int_equal(store__write(st, "node0", b), -EINVAL);
	batch__free(b);
	/* Other content takes the ids the failed write had. */
	b = _make_batch(&_ref, 1, 4, NPROC, NSTACKS, t + 10 * SEC, 20 * SEC);
	assert_int_equal(store__write(st, "node1", b), 0);
	batch__free(b);
	/* node0's new entries, written now. */
	for (int i = 0; i < 3; i++, t += MIN) {
		b = _fill_batch(_shared(owner, id), &_ref, 0, 4, NPROC, NSTACKS, t + 30 * SEC, 30 * SEC);
		assert_int_equal(store__write(st, "node0", b), 0);
		batch__free(b);
	}
	_check_profile(st, &_ref, 0, INT64_MAX, NULL, NULL, SAMPLE_CPU);
	_check_profile(st, &_ref, 0, INT64_MAX, NULL, NULL, SAMPLE_GPU_TIME);
	_check_profile(st, &_ref, 0, INT64_MAX, "{node=\"node1\",comm!=\"app0\"}",
		       _is_node1_not_app0, SAMPLE_CPU);
	batch__free(owner);
	store__close(st);
	_cleanup();
}


/*
 * A frame is (kind, mapping, address) and its names: the same address
 * under another function (JIT code, kernel text on another host) or
 * another file is another frame, through a shared dictionary and through
 * a batch's own, and the same content is one frame whichever brought it.
 */
static void test_frames_keyed_by_their_names(void **state)
{
	static const char *const fn[] = { "jit_a", "jit_b", "jit_a" };
	static const char *const file[] = { "a.js", "a.js", "b.js" };
	struct store *st = _open_fresh();
	struct batch *owner = batch__new(PERIOD);
	uint64_t id = batch__new_dict_id();
	const char *names[] = { "comm" }, *values[] = { "node" };
	uint64_t want[3] = { 0 }, got[3] = { 0 };
	struct profile *p = profile__new(PERIOD, 0);

	assert_non_null(owner);
	assert_non_null(p);
	for (int round = 0; round < 4; round++) {
		/* Rounds 0 and 2 share one dictionary; 1 and 3 bring their own. */
		struct batch *b = round % 2 ? batch__new(PERIOD) : _shared(owner, id);

		assert_non_null(b);
		for (int k = 0; k < 3; k++) {
			int64_t m = profile__intern_mapping(b->dict, "/tmp/jit-1.map", "");
			int64_t f = m < 0 ? m : profile__intern_named_frame(b->dict, FRAME_NATIVE,
									    (uint32_t)m, 0x7000,
									    fn[k], file[k], 1);
			uint32_t frames[1] = { (uint32_t)f };
			int64_t stack = f < 0 ? f : profile__intern_stack(b->dict, frames, 1);
			int64_t series = batch__intern_series(b, names, values, 1);
			struct batch_sample bs = {
				.ts_ns = T0 + round * SEC + k, .type = SAMPLE_CPU,
				.value = (uint64_t)(1 + k + 3 * round),
			};

			assert_true(stack >= 0 && series >= 0);
			bs.stack = (uint32_t)stack;
			bs.series = (uint32_t)series;
			assert_int_equal(batch__add_sample(b, &bs), 0);
			want[k] += bs.value;
		}
		assert_int_equal(store__write(st, "node0", b), 0);
		batch__free(b);
	}
	assert_int_equal(store__profile(st, T0 - SEC, T0 + MIN, NULL, SAMPLE_CPU, p), 0);
	assert_int_equal(p->nframes, 3);
	for (uint32_t i = 0; i < p->nsamples; i++) {
		uint32_t n;
		const uint32_t *frames = profile__stack(p, p->samples[i].stack, &n);
		const struct profile_frame *f = &p->frames[frames[n - 1]];

		for (int k = 0; k < 3; k++)
			if (!strcmp(profile__string(p, f->function), fn[k]) &&
			    !strcmp(profile__string(p, f->file), file[k]))
				got[k] += p->samples[i].count;
	}
	for (int k = 0; k < 3; k++)
		assert_int_equal(got[k], want[k]);
	profile__free(p);
	batch__free(owner);
	store__close(st);
	_cleanup();
}


static int _sum_cb(void *ctx, const char *group, int64_t bucket, int64_t sum);

/* Sum of SAMPLE_CPU samples, and of their count x period, in a batch. */
static void _cpu_sums(const struct batch *b, uint64_t *count, uint64_t *ns)
{
	for (uint32_t i = 0; i < b->nsamples; i++) {
		if (b->samples[i].type != SAMPLE_CPU)
			continue;
		*count += b->samples[i].value;
		*ns += b->samples[i].value * b->period_ns;
	}
}

static uint64_t _profile_total(struct store *st, const char *sel_text, uint32_t type,
			       uint64_t period_in, uint64_t *period_out)
{
	struct selector *sel = NULL;
	struct profile *p = profile__new(period_in, 0);
	char err[128];
	uint64_t total;

	assert_non_null(p);
	if (sel_text) {
		sel = selector__parse(sel_text, err, sizeof(err));
		if (!sel)
			fail_msg("selector %s: %s", sel_text, err);
	}
	/* 17 s off a minute: raw samples at the edges, rollups inside. */
	assert_int_equal(store__profile(st, T0 - 17 * SEC, T0 + 3 * HOUR, sel, type, p), 0);
	total = profile__total(p);
	*period_out = p->period_ns;
	profile__free(p);
	selector__free(sel);
	return total;
}

/*
 * Agents with different -F write to one store: a window of one period
 * answers in samples with that period, a mixed one in nanoseconds.
 */
static void test_mixed_periods(void **state)
{
	struct store *st = _open_fresh();
	const uint64_t pa = SEC / 19, pb = SEC / 99;
	uint64_t ca = 0, na = 0, cb = 0, nb = 0, ca2 = 0, na2 = 0, period, gpu = 0;
	struct batch *b;

	_rng = 5;
	for (int i = 0; i < 4; i++) {
		b = _make_batch(NULL, 0, 2, 3, 6, T0 + i * MIN, MIN);
		b->period_ns = pa;
		_cpu_sums(b, &ca, &na);
		gpu += _count_type(b, SAMPLE_GPU_TIME);
		assert_int_equal(store__write(st, "a", b), 0);
		batch__free(b);
		b = _make_batch(NULL, 1, 2, 3, 6, T0 + i * MIN, MIN);
		b->period_ns = pb;
		_cpu_sums(b, &cb, &nb);
		assert_int_equal(store__write(st, "b", b), 0);
		batch__free(b);
	}
	assert_int_equal(_profile_total(st, "{node=\"a\"}", SAMPLE_CPU, 777, &period), ca);
	assert_int_equal(period, pa);
	assert_int_equal(_profile_total(st, "{node=\"b\"}", SAMPLE_CPU, 777, &period), cb);
	assert_int_equal(period, pb);
	assert_int_equal(_profile_total(st, NULL, SAMPLE_CPU, 777, &period), na + nb);
	assert_int_equal(period, 1);
	/* Node a's agent restarts with -F 99: its own window mixes too. */
	b = _make_batch(NULL, 0, 2, 3, 6, T0 + 4 * MIN, MIN);
	b->period_ns = pb;
	_cpu_sums(b, &ca2, &na2);
	assert_int_equal(store__write(st, "a", b), 0);
	batch__free(b);
	assert_int_equal(_profile_total(st, "{node=\"a\"}", SAMPLE_CPU, 777, &period), na + na2);
	assert_int_equal(period, 1);
	/* Series (sample counts) and labels do not see periods. */
	{
		int64_t sum = 0;

		assert_int_equal(store__series(st, T0 - T0 % MIN, T0 + HOUR, MIN, NULL, SAMPLE_CPU,
					       NULL, _sum_cb, &sum), 0);
		assert_int_equal(sum, ca + cb + ca2);
	}
	{
		struct store_stats stats;

		assert_int_equal(store__stats(st, &stats), 0);
		/* 3 processes x 2 nodes, and node a's again under its new period. */
		assert_int_equal(stats.series, 9);
	}
	/* GPU time has no period: values stay nanoseconds, the period untouched. */
	assert_true(_profile_total(st, NULL, SAMPLE_GPU_TIME, 1, &period) > gpu);
	assert_int_equal(period, 1);
	store__close(st);
	_cleanup();
}

/*
 * A version 1 file (no period column, and from before the rollups' totals
 * column) opens as version 2 with every answer unchanged; its samples have
 * no known period.
 */
static void test_upgrade_from_version_1(void **state)
{
	struct store *st = _open_fresh();
	uint64_t count = 0, ns = 0, period, c2 = 0, n2 = 0;
	int64_t sum_before = 0, sum_after = 0;
	struct batch *b;
	char path[128];
	sqlite3 *db;
	sqlite3_stmt *q;

	_rng = 11;
	for (int i = 0; i < 3; i++) {
		b = _make_batch(NULL, 0, 2, 3, 6, T0 + i * MIN, MIN);
		_cpu_sums(b, &count, &ns);
		assert_int_equal(store__write(st, "a", b), 0);
		batch__free(b);
	}
	assert_int_equal(store__series(st, T0 - T0 % MIN, T0 + HOUR, MIN, NULL, SAMPLE_CPU, NULL,
				       _sum_cb, &sum_before), 0);
	assert_int_equal(sum_before, count);
	store__close(st);

	snprintf(path, sizeof(path), "%s/flamewatch.db", _dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	if (sqlite3_exec(db, "ALTER TABLE rollup_1m DROP COLUMN totals;"
			 "ALTER TABLE rollup_1h DROP COLUMN totals;"
			 "ALTER TABLE series DROP COLUMN period_ns;"
			 "UPDATE series SET key = substr(key, 1, instr(key, '}@'));"
			 "PRAGMA user_version=1;", NULL, NULL, NULL) != SQLITE_OK)
		fail_msg("downgrade: %s", sqlite3_errmsg(db));
	sqlite3_close(db);

	st = store__open(_dir, NULL, 0);
	assert_non_null(st);
	assert_int_equal(store__series(st, T0 - T0 % MIN, T0 + HOUR, MIN, NULL, SAMPLE_CPU, NULL,
				       _sum_cb, &sum_after), 0);
	assert_int_equal(sum_after, sum_before);
	assert_int_equal(_profile_total(st, NULL, SAMPLE_CPU, 777, &period), count);
	assert_int_equal(period, 777);
	/* New data keeps its period; the old counts with the caller's. */
	b = _make_batch(NULL, 0, 2, 3, 6, T0 + 3 * MIN, MIN);
	b->period_ns = SEC / 99;
	_cpu_sums(b, &c2, &n2);
	assert_int_equal(store__write(st, "a", b), 0);
	batch__free(b);
	assert_int_equal(_profile_total(st, NULL, SAMPLE_CPU, SEC / 99, &period), count + c2);
	assert_int_equal(period, SEC / 99);
	assert_int_equal(_profile_total(st, NULL, SAMPLE_CPU, SEC / 19, &period),
			 count * (SEC / 19) + n2);
	assert_int_equal(period, 1);
	store__close(st);

	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &q, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(q), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(q, 0), 3);
	sqlite3_finalize(q);
	sqlite3_close(db);
	_cleanup();
}

static void _sql(const char *dir, const char *sql);

/* One integer from SQL on the store's file; -1 for no row or NULL. */
static int64_t _sql_int(const char *dir, const char *sql)
{
	char path[128];
	sqlite3 *db;
	sqlite3_stmt *q;
	int64_t v = -1;

	snprintf(path, sizeof(path), "%s/flamewatch.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	if (sqlite3_prepare_v2(db, sql, -1, &q, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(db));
	if (sqlite3_step(q) == SQLITE_ROW && sqlite3_column_type(q, 0) != SQLITE_NULL)
		v = sqlite3_column_int64(q, 0);
	sqlite3_finalize(q);
	sqlite3_close(db);
	return v;
}

static int64_t _newest(const struct ref *ref)
{
	int64_t t = 0;

	for (size_t i = 0; i < ref->n; i++)
		if (ref->s[i].ts > t)
			t = ref->s[i].ts;
	return t;
}

/* Every window closed before newest's holds one block per (series, type). */
static void _check_compacted(int64_t newest)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM (SELECT series, type, t_max - t_max %% %lld"
		 " AS w FROM sample_blocks WHERE t_max < %lld GROUP BY 1, 2, 3 HAVING count(*) > 1)",
		 (long long)STORE_SQLITE_BLOCK_SPAN_NS,
		 (long long)(newest - newest % STORE_SQLITE_BLOCK_SPAN_NS));
	assert_int_equal(_sql_int(_dir, sql), 0);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM sample_blocks WHERE t_max < %lld",
		 (long long)(newest - newest % STORE_SQLITE_BLOCK_SPAN_NS));
	assert_true(_sql_int(_dir, sql) > 10);
	/* And the newest window is still in its small blocks: compaction has not run early. */
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM sample_blocks WHERE t_max >= %lld",
		 (long long)(newest - newest % STORE_SQLITE_BLOCK_SPAN_NS));
	assert_true(_sql_int(_dir, sql) >= 1);
}

/* Every window kind over the data: whole hours, minutes only, odd edges. */
static void _check_hours(struct store *st, const struct ref *ref, int64_t ht)
{
	int64_t h1 = T0 - T0 % HOUR + HOUR, end = _newest(ref) + 1;

	_check_profile(st, ref, h1, h1 + HOUR, NULL, NULL, SAMPLE_CPU);
	_check_profile(st, ref, ht - HOUR, ht + HOUR, NULL, NULL, SAMPLE_CPU);
	_check_profile(st, ref, T0 - 17 * SEC, end, NULL, NULL, SAMPLE_CPU);
	_check_profile(st, ref, h1 - 7 * SEC, ht + 13 * SEC, NULL, NULL, SAMPLE_GPU_TIME);
	_check_profile(st, ref, ht, end, "{node=\"node0\"}", NULL, SAMPLE_CPU);
	/* Whole-hour buckets: hour rows where built, minutes after. */
	_check_series(st, T0 - T0 % HOUR, end, HOUR, SAMPLE_CPU, NULL);
}

/*
 * Hour rollups are built from the minutes once their hour has closed (plus
 * a grace), not merged into on every write; until then an hour is read
 * from its minutes. A late batch for a built hour still counts, and files
 * from before hours_through open with their hours as they were.
 */
static void test_hours_built_after_close(void **state)
{
	struct store *st = _open_fresh();
	int64_t ht, newest, h1 = T0 - T0 % HOUR + HOUR;
	struct batch *b;
	char sql[160];

	_rng = 5;
	_ref.n = 0;
	/* Up to just after an hour's end: that hour waits, whole, for its row. */
	for (int64_t t = T0; t < h1 + 2 * HOUR + MIN; t += MIN) {
		b = _make_batch(&_ref, 0, 4, NPROC, NSTACKS, t, MIN);
		assert_int_equal(store__write(st, "node0", b), 0);
		batch__free(b);
	}
	newest = _newest(&_ref);
	ht = _sql_int(_dir, "SELECT value FROM meta WHERE key = 'hours_through'");
	assert_int_equal(ht, (newest - 2 * MIN) - (newest - 2 * MIN) % HOUR);
	assert_true(ht >= h1 + HOUR);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM rollup_1h WHERE bucket >= %lld",
		 (long long)ht);
	assert_int_equal(_sql_int(_dir, sql), 0);
	snprintf(sql, sizeof(sql), "SELECT count(DISTINCT bucket) FROM rollup_1h WHERE bucket < %lld",
		 (long long)ht);
	assert_int_equal(_sql_int(_dir, sql), (ht - (T0 - T0 % HOUR)) / HOUR);
	_check_hours(st, &_ref, ht);
	_check_compacted(newest);

	/*
	 * Late: another node's minute in the first whole hour, which is built,
	 * and more of node0's own in a window compacted long ago: merged into
	 * its hour row, and its window compacted again.
	 */
	b = _make_batch(&_ref, 1, 4, NPROC, NSTACKS, h1 + 5 * MIN, MIN);
	assert_int_equal(store__write(st, "node1", b), 0);
	batch__free(b);
	b = _make_batch(&_ref, 0, 4, NPROC, NSTACKS, h1 + 7 * MIN + 30 * SEC, 20 * SEC);
	assert_int_equal(store__write(st, "node0", b), 0);
	batch__free(b);
	_check_hours(st, &_ref, ht);
	_check_compacted(newest);

	/* Into the next hour: the one that was read as minutes gets its row. */
	for (int64_t t = _newest(&_ref) - _newest(&_ref) % MIN + MIN; t < ht + HOUR + 5 * MIN;
	     t += MIN) {
		b = _make_batch(&_ref, 0, 4, NPROC, NSTACKS, t, MIN);
		assert_int_equal(store__write(st, "node0", b), 0);
		batch__free(b);
	}
	assert_int_equal(_sql_int(_dir, "SELECT value FROM meta WHERE key = 'hours_through'"),
			 ht + HOUR);
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM rollup_1h WHERE bucket = %lld",
		 (long long)ht);
	assert_int_equal(_sql_int(_dir, sql), NPROC);
	ht += HOUR;
	st = _reopen(st);
	_check_hours(st, &_ref, ht);
	store__close(st);

	/*
	 * A version 2 file: no hours_through, every hour row it has is whole,
	 * and its blocks indexed by time and by series.
	 */
	_sql(_dir, "DROP INDEX sample_blocks_t_max_series;"
		   "CREATE INDEX sample_blocks_t_max ON sample_blocks(t_max);"
		   "CREATE INDEX sample_blocks_series ON sample_blocks(series, t_min);"
		   "DELETE FROM meta WHERE key = 'hours_through'; PRAGMA user_version=2;");
	st = store_open_or_fail(_dir);
	assert_int_equal(_sql_int(_dir, "SELECT value FROM meta WHERE key = 'hours_through'"), ht);
	assert_int_equal(_sql_int(_dir, "PRAGMA user_version"), 3);
	assert_int_equal(_sql_int(_dir, "SELECT count(*) FROM sqlite_schema WHERE type = 'index'"
				  " AND tbl_name = 'sample_blocks'"), 1);
	assert_int_equal(_sql_int(_dir, "SELECT count(*) FROM sqlite_schema"
				  " WHERE name = 'sample_blocks_t_max_series'"), 1);
	_check_hours(st, &_ref, ht);
	/* Writes and compaction go on through the new index. */
	for (int64_t t = _newest(&_ref) - _newest(&_ref) % MIN + MIN; t < ht + 20 * MIN; t += MIN) {
		b = _make_batch(&_ref, 0, 4, NPROC, NSTACKS, t, MIN);
		assert_int_equal(store__write(st, "node0", b), 0);
		batch__free(b);
	}
	_check_hours(st, &_ref, ht);
	_check_compacted(_newest(&_ref));
	store__close(st);
	_cleanup();
}

static void test_failed_write_leaves_nothing(void **state)
{
	struct store *st = _open_fresh();
	struct store_stats before, after;
	struct profile *p;
	struct batch *b;
	uint32_t bad_frames[] = { 0, 9999 };
	int64_t bad_stack;
	uint64_t total;

	_rng = 7;
	b = _make_batch(NULL, 0, 2, 2, 5, T0, MIN);
	assert_int_equal(store__write(st, "n", b), 0);
	batch__free(b);
	assert_int_equal(store__stats(st, &before), 0);
	p = profile__new(PERIOD, 0);
	assert_int_equal(store__profile(st, 0, INT64_MAX, NULL, SAMPLE_CPU, p), 0);
	total = profile__total(p);
	profile__free(p);
	assert_true(total > 0);

	/* An out-of-range stack or series id: refused before anything is touched. */
	b = _make_batch(NULL, 0, 2, 3, 8, T0 + MIN, MIN);
	assert_true(b->nsamples > 10);
	b->samples[b->nsamples / 2].stack = 1000000;
	assert_int_equal(store__write(st, "n", b), -EINVAL);
	b->samples[b->nsamples / 2].stack = 0;
	b->samples[b->nsamples - 1].series = 77;
	assert_int_equal(store__write(st, "n", b), -EINVAL);
	batch__free(b);

	/*
	 * A stack naming a frame that does not exist: found only after new
	 * series, strings, frames and stacks went in, so they are rolled back.
	 */
	b = _make_batch(NULL, 0, 2, 3, 8, T0 + MIN, MIN);
	{
		const char *names[] = { "comm" }, *values[] = { "newproc" };
		int64_t series = batch__intern_series(b, names, values, 1);
		struct batch_sample bs = { .ts_ns = T0 + 90 * SEC, .series = (uint32_t)series,
					   .value = 1 };

		bad_stack = profile__intern_stack(b->dict, bad_frames, 2);
		bs.stack = (uint32_t)bad_stack;
		assert_int_equal(batch__add_sample(b, &bs), 0);
	}
	assert_int_equal(store__write(st, "n", b), -EINVAL);
	assert_int_equal(store__stats(st, &after), 0);
	assert_int_equal(after.samples_written, before.samples_written);
	assert_int_equal(after.batches_written, before.batches_written);
	assert_int_equal(after.series, before.series);
	assert_int_equal(after.stacks, before.stacks);
	assert_int_equal(after.frames, before.frames);
	p = profile__new(PERIOD, 0);
	assert_int_equal(store__profile(st, 0, INT64_MAX, NULL, SAMPLE_CPU, p), 0);
	assert_int_equal(profile__total(p), total);
	profile__free(p);

	/* The store still works, and its caches forgot the rolled-back ids. */
	b->nsamples--;
	assert_int_equal(store__write(st, "n", b), 0);
	p = profile__new(PERIOD, 0);
	assert_int_equal(store__profile(st, 0, INT64_MAX, NULL, SAMPLE_CPU, p), 0);
	assert_int_equal(profile__total(p), total + b->nsamples -
			 _count_type(b, SAMPLE_GPU_TIME));
	profile__free(p);
	assert_int_equal(store__stats(st, &after), 0);
	assert_true(after.series > before.series);
	assert_true(after.stacks > before.stacks);
	batch__free(b);
	store__close(st);
	_cleanup();
}

static void _sql(const char *dir, const char *sql)
{
	char path[128];
	sqlite3 *db;

	snprintf(path, sizeof(path), "%s/flamewatch.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(db));
	assert_true(sqlite3_changes(db) > 0);
	sqlite3_close(db);
}

static int _noop_cb(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
		    int64_t value, const char *comm, uint32_t pid)
{
	return 0;
}

/* Damaged blobs fail the queries that read them with -EIO, and only those. */
static void test_corrupt_blobs(void **state)
{
	struct store *st = _fill(&_ref, 15);
	int64_t h = (T0 / HOUR + 1) * HOUR;
	struct profile *p;

	store__close(st);
	/* One sample block in the first window, the hour rollup of h, one stack. */
	_sql(_dir, "UPDATE sample_blocks SET data = substr(data, 1, 20) || zeroblob(8) || "
		   "substr(data, 29) WHERE id = (SELECT min(id) FROM sample_blocks)");
	_sql(_dir, "UPDATE rollup_1h SET data = x'fc01ffffffff0f' WHERE rowid = "
		   "(SELECT rowid FROM rollup_1h WHERE bucket = "
		   "(SELECT min(bucket) FROM rollup_1h) + 3600000000000 LIMIT 1)");
	st = store__open(_dir, NULL, 0);
	assert_non_null(st);
	p = profile__new(PERIOD, 0);
	assert_int_equal(store__profile(st, T0, T0 + 30 * SEC, NULL, SAMPLE_CPU, p), -EIO);
	assert_int_equal(store__profile(st, h, h + HOUR, NULL, SAMPLE_CPU, p), -EIO);
	assert_int_equal(store__samples(st, T0, T0 + MIN, NULL, SAMPLE_CPU, 0, p, _noop_cb, NULL,
					NULL), -EIO);
	/* Windows that do not read them still work. */
	profile__free(p);
	p = profile__new(PERIOD, 0);
	assert_int_equal(store__profile(st, h - 5 * MIN, h, NULL, SAMPLE_CPU, p), 0);
	assert_true(profile__total(p) > 0);
	profile__free(p);
	store__close(st);

	_sql(_dir, "UPDATE stacks SET frames = x'ffffffffffffff' WHERE id = 1");
	st = store__open(_dir, NULL, 0);
	p = profile__new(PERIOD, 0);
	assert_int_equal(store__profile(st, h - 5 * MIN, h, NULL, SAMPLE_CPU, p), -EIO);
	profile__free(p);
	store__close(st);
	_cleanup();
}

static int _sum_cb(void *ctx, const char *group, int64_t bucket, int64_t sum)
{
	*(int64_t *)ctx += sum;
	return 0;
}

/*
 * A writer killed with SIGKILL in the middle of its writes: every batch it
 * saw acknowledged is there after a reopen (at most one more, written but
 * not yet acknowledged), and the rollups agree with the raw blocks.
 */
static void test_kill_9(void **state)
{
	struct store *st = _open_fresh();
	struct store_stats stats;
	int pipefd[2], acked = 0;
	char c, err[256];
	pid_t pid;

	/* SQLite connections must not cross a fork: the child opens its own. */
	store__close(st);
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pipefd[0]);
		st = store__open(_dir, err, sizeof(err));
		if (!st)
			_exit(1);
		_rng = 5;
		for (int i = 0;; i++) {
			struct batch *b = _make_batch(NULL, 0, 4, 3, 10, T0 + i * 10 * SEC, 10 * SEC);

			if (store__write(st, "n", b))
				_exit(1);
			batch__free(b);
			if (write(pipefd[1], "x", 1) != 1)
				_exit(1);
		}
	}
	close(pipefd[1]);
	while (acked < 40 && read(pipefd[0], &c, 1) == 1)
		acked++;
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	while (read(pipefd[0], &c, 1) == 1)
		acked++;
	close(pipefd[0]);
	assert_int_equal(acked >= 40, 1);

	st = store__open(_dir, err, sizeof(err));
	assert_non_null(st);
	assert_int_equal(store__stats(st, &stats), 0);
	assert_true(stats.batches_written == (uint64_t)acked ||
		    stats.batches_written == (uint64_t)acked + 1);
	{
		struct profile *p = profile__new(PERIOD, 0);
		int64_t end = T0 + (int64_t)stats.batches_written * 10 * SEC, raw = 0;

		/* Hours and minutes from rollups here; 10 s buckets read raw blocks. */
		assert_int_equal(store__profile(st, 0, INT64_MAX, NULL, SAMPLE_CPU, p), 0);
		assert_int_equal(store__series(st, T0, end, 10 * SEC, NULL, SAMPLE_CPU, NULL,
					       _sum_cb, &raw), 0);
		assert_true(raw > 0);
		assert_int_equal(profile__total(p), raw);
		profile__free(p);
	}
	store__close(st);
	_cleanup();
}

/*
 * One node for a day (FW_STORE_DAY=1; otherwise two hours): 8 CPUs at 19 Hz,
 * 10 processes, 100 stacks each, 10 s batches. Reports bytes per sample.
 */
static void test_bytes_per_sample(void **state)
{
	const char *env = getenv("FW_STORE_DAY");
	int64_t len = env && atoi(env) ? 24 * HOUR : 2 * HOUR;
	struct store *st = _open_fresh();
	struct store_stats s;
	struct timespec t0, t1;
	double secs;

	_rng = 99;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int64_t t = T0; t < T0 + len; t += 10 * SEC) {
		struct batch *b = _make_batch(NULL, 0, 8, 10, 100, t, 10 * SEC);

		assert_int_equal(store__write(st, "node0", b), 0);
		batch__free(b);
	}
	/* Merges the last windows too, as the server's periodic retention would. */
	assert_int_equal(store__retain(st, T0 - HOUR), 0);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	st = _reopen(st);	/* checkpoints the log into the database */
	assert_int_equal(store__stats(st, &s), 0);
	secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	print_message("%.0f h, %llu samples in %llu batches: %llu bytes on disk, "
		      "%.2f bytes/sample; %.0f samples/s written\n",
		      (double)len / HOUR, (unsigned long long)s.samples_written,
		      (unsigned long long)s.batches_written, (unsigned long long)s.bytes_on_disk,
		      (double)s.bytes_on_disk / (double)s.samples_written, s.samples_written / secs);
	assert_true(s.bytes_on_disk < 8 * s.samples_written);
	store__close(st);
	if (getenv("FW_STORE_KEEP"))
		print_message("kept %s\n", _dir), _dir[0] = '\0';
	_cleanup();
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_errors),
		cmocka_unit_test(test_profile_windows),
		cmocka_unit_test(test_samples),
		cmocka_unit_test(test_mixed_periods),
		cmocka_unit_test(test_upgrade_from_version_1),
		cmocka_unit_test(test_hours_built_after_close),
		cmocka_unit_test(test_shared_dictionary),
		cmocka_unit_test(test_frames_keyed_by_their_names),
		cmocka_unit_test(test_series),
		cmocka_unit_test(test_labels),
		cmocka_unit_test(test_retain_and_reopen),
		cmocka_unit_test(test_failed_write_leaves_nothing),
		cmocka_unit_test(test_kill_9),
		cmocka_unit_test(test_corrupt_blobs),
		cmocka_unit_test(test_bytes_per_sample),
	};
	int rc;

	log__set_level(LOG_WARN);
	if (getenv("FW_TEST_FILTER"))
		cmocka_set_test_filter(getenv("FW_TEST_FILTER"));
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	_cleanup();
	free(_ref.s);
	return rc;
}
