// SPDX-License-Identifier: Apache-2.0
/*
 * The cut flame tree against a brute-force one. A reference builds the
 * whole merged tree of a random profile node by node, then trims it as
 * flamegraph.h specifies (the heaviest max_nodes, ties at the cut all cut,
 * the cut counted); flametree__build_profile() must keep the same nodes
 * with the same totals and selves and count the same cut. Then the SQLite
 * store's store__flamegraph(), which cuts before it names any frame, must
 * give the tree that cutting store__profile()'s whole profile gives.
 *
 * Counts are small and names few, so that merges and ties at the cut are
 * common.
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

#include "common/batch.h"
#include "common/flametree.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "format/flamegraph.h"
#include "store/selector.h"
#include "store/store.h"
#include "store/sqlite/sqlite_int.h"
#include "testutil.h"

#define SEC		1000000000LL
#define MIN		(60 * SEC)
#define PERIOD		(SEC / 19)
#define T0		(1700000000LL * SEC + 1234 * SEC + 567890123LL)

static uint64_t _rng = 0x2545f4914f6cdd1dULL;

static uint32_t _rand(uint32_t n)
{
	return (uint32_t)(xorshift(&_rng) % n);
}

/*
 * A random stack: a walk down a small call tree (the callee depends on the
 * caller's slot and a random pick of few), so that stacks share prefixes.
 * Frames are (mapping, address); names repeat across addresses, so frames
 * of different addresses merge.
 */
static int64_t _random_stack(struct profile *p, uint32_t nnames)
{
	uint32_t frames[24], n = 1 + _rand(12), slot = _rand(3);

	for (uint32_t j = 0; j < n; j++) {
		char name[32], path[32];
		bool kernel = j == n - 1 && _rand(5) == 0;
		int64_t m = PROFILE_NO_MAPPING, f;

		slot = slot * 3 + _rand(j < 3 ? 2 : 4);
		snprintf(name, sizeof(name), "fn%u", slot % nnames);
		snprintf(path, sizeof(path), "/lib/l%u.so", slot % 3);
		if (!kernel) {
			m = profile__intern_mapping(p, path, slot % 2 ? "beef" : NULL);
			assert_true(m >= 0);
		}
		f = profile__intern_named_frame(p, kernel ? FRAME_KERNEL : FRAME_NATIVE, (uint32_t)m,
						0x1000 + (slot % 7) * 16 + _rand(2), name, "f.c",
						_rand(3));
		assert_true(f >= 0);
		frames[j] = (uint32_t)f;
	}
	return profile__intern_stack(p, frames, n);
}

static struct profile *_random_profile(uint32_t nsamples, uint32_t nnames)
{
	struct profile *p = profile__new(PERIOD, 0);
	int64_t comms[3];

	assert_non_null(p);
	comms[0] = profile__intern_string(p, "app");
	comms[1] = profile__intern_string(p, "db");
	comms[2] = profile__intern_string(p, "");
	for (uint32_t i = 0; i < nsamples; i++) {
		int64_t s = _random_stack(p, nnames);

		assert_true(s >= 0);
		assert_int_equal(profile__add_sample(p, (uint32_t)s, 0, 0, 0,
						     (uint32_t)comms[_rand(3)], 1 + _rand(4)), 0);
	}
	return p;
}

/* ---- canonical form: one line per node, its path of names, sorted --------- */

struct lines {
	char **l;
	uint32_t n;
};

static void _add_line(struct lines *ls, const char *path, uint64_t total, uint64_t self)
{
	ls->l = realloc(ls->l, (ls->n + 1) * sizeof(*ls->l));
	assert_non_null(ls->l);
	assert_true(asprintf(&ls->l[ls->n++], "%s %llu %llu", path, (unsigned long long)total,
			     (unsigned long long)self) > 0);
}

static int _cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void _lines_free(struct lines *ls)
{
	for (uint32_t i = 0; i < ls->n; i++)
		free(ls->l[i]);
	free(ls->l);
	memset(ls, 0, sizeof(*ls));
}

/* A frame's merge identity as text: name, binary, kind. */
static void _frame_text(const struct profile *p, uint32_t f, char *buf, size_t len)
{
	const struct profile_frame *fr = &p->frames[f];

	snprintf(buf, len, "%s@%s#%u", profile__string(p, fr->function),
		 fr->mapping == PROFILE_NO_MAPPING ? "" :
		 profile__string(p, p->mappings[fr->mapping].path), fr->kind);
}

static void _tree_lines(const struct profile *p, const struct flametree *t, struct lines *out)
{
	char **path = calloc(t->n, sizeof(*path));

	assert_non_null(path);
	/* Parents come before their children. */
	for (uint32_t i = 0; i < t->n; i++) {
		const struct flametree_node *nd = &t->nodes[i];
		char part[128];

		if (nd->depth == 0)
			snprintf(part, sizeof(part), "all");
		else if (nd->depth == 1)
			snprintf(part, sizeof(part), "[%s]", profile__string(p, nd->ref));
		else
			_frame_text(p, nd->ref, part, sizeof(part));
		assert_true(nd->depth == 0 || nd->parent < i);
		assert_true(asprintf(&path[i], "%s/%s", nd->depth ? path[nd->parent] : "",
				     part) > 0);
		_add_line(out, path[i], nd->total, nd->self);
	}
	for (uint32_t i = 0; i < t->n; i++)
		free(path[i]);
	free(path);
	qsort(out->l, out->n, sizeof(*out->l), _cmp_str);
}

static void _lines_equal(const struct lines *a, const struct lines *b)
{
	assert_int_equal(a->n, b->n);
	for (uint32_t i = 0; i < a->n; i++)
		assert_string_equal(a->l[i], b->l[i]);
}

/* ---- the reference: the whole tree, node by node, then trimmed ------------ */

struct rnode {
	char *key;
	uint32_t parent, first_child, next_sibling;
	uint64_t total, self;
};

struct rtree {
	struct rnode *n;
	uint32_t count;
};

static uint32_t _rchild(struct rtree *t, uint32_t parent, const char *key)
{
	uint32_t c;

	for (c = t->n[parent].first_child; c != UINT32_MAX; c = t->n[c].next_sibling)
		if (!strcmp(t->n[c].key, key))
			return c;
	t->n = realloc(t->n, (t->count + 1) * sizeof(*t->n));
	assert_non_null(t->n);
	c = t->count++;
	t->n[c] = (struct rnode){ .key = strdup(key), .parent = parent,
				  .first_child = UINT32_MAX,
				  .next_sibling = t->n[parent].first_child };
	t->n[parent].first_child = c;
	return c;
}

static int _cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x > y ? -1 : x < y;
}

static void _reference(const struct profile *p, size_t max, struct lines *out,
		       uint64_t *nodes_all, uint64_t *trimmed_value)
{
	struct rtree t = { 0 };
	uint64_t *totals, th = 0;
	char **path;

	t.n = calloc(1, sizeof(*t.n));
	t.n[0] = (struct rnode){ .key = strdup("all"), .parent = UINT32_MAX,
				 .first_child = UINT32_MAX, .next_sibling = UINT32_MAX };
	t.count = 1;
	for (uint32_t i = 0; i < p->nsamples; i++) {
		const struct profile_sample *s = &p->samples[i];
		uint32_t n, at;
		const uint32_t *fr = profile__stack(p, s->stack, &n);
		char key[128];

		snprintf(key, sizeof(key), "[%s]", profile__string(p, s->comm));
		at = _rchild(&t, 0, key);
		t.n[0].total += s->count;
		t.n[at].total += s->count;
		for (uint32_t j = 0; j < n; j++) {
			_frame_text(p, fr[j], key, sizeof(key));
			at = _rchild(&t, at, key);
			t.n[at].total += s->count;
		}
		t.n[at].self += s->count;
	}
	/* The cut, as flamegraph.h says it: at most max, ties at the cut all cut. */
	totals = malloc(t.count * sizeof(*totals));
	for (uint32_t i = 0; i < t.count; i++)
		totals[i] = t.n[i].total;
	qsort(totals, t.count, sizeof(*totals), _cmp_desc);
	if (t.count > max) {
		uint64_t v = totals[max - 1], above = 0;

		for (uint32_t i = 0; i < t.count; i++)
			above += totals[i] >= v;
		th = above > max ? v + 1 : v;
	}
	*nodes_all = t.count;
	*trimmed_value = 0;
	path = calloc(t.count, sizeof(*path));
	for (uint32_t i = 0; i < t.count; i++) {
		const struct rnode *nd = &t.n[i];

		assert_true(asprintf(&path[i], "%s/%s", i ? path[nd->parent] : "", nd->key) > 0);
		if (nd->total >= th)
			_add_line(out, path[i], nd->total, nd->self);
		else if (t.n[nd->parent].total >= th)
			*trimmed_value += nd->total;
	}
	qsort(out->l, out->n, sizeof(*out->l), _cmp_str);
	for (uint32_t i = 0; i < t.count; i++) {
		free(path[i]);
		free(t.n[i].key);
	}
	free(path);
	free(totals);
	free(t.n);
}

static void test_random_profiles_match_reference(void **state)
{
	static const size_t maxes[] = { 1, 2, 3, 5, 8, 13, 40, 100, 1000000 };

	for (int round = 0; round < 60; round++) {
		struct profile *p = _random_profile(1 + _rand(300), 2 + _rand(30));

		for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++) {
			struct lines want = { 0 }, got = { 0 };
			struct flametree t;
			uint64_t nodes_all, trimmed;

			_reference(p, maxes[m], &want, &nodes_all, &trimmed);
			assert_int_equal(flametree__build_profile(&t, p, maxes[m]), 0);
			assert_true(t.n <= maxes[m]);
			_tree_lines(p, &t, &got);
			_lines_equal(&want, &got);
			assert_int_equal(t.nodes_all, nodes_all);
			assert_int_equal(t.trimmed_value, trimmed);
			flametree__release(&t);
			_lines_free(&want);
			_lines_free(&got);
		}
		profile__free(p);
	}
}

/* The JSON of a tree, and the same tree through flamegraph__write_json(). */
static void test_write_tree_json_is_write_json(void **state)
{
	struct profile *p = _random_profile(200, 12);
	struct strbuf a = STRBUF_INIT, b = STRBUF_INIT;
	struct flametree t;

	assert_int_equal(flametree__build_profile(&t, p, 50), 0);
	assert_int_equal(flamegraph__write_tree_json(p, &t, "samples", &a), 0);
	assert_int_equal(flamegraph__write_json(p, "samples", 50, &b), 0);
	assert_string_equal(a.buf, b.buf);
	flametree__release(&t);
	strbuf__release(&a);
	strbuf__release(&b);
	profile__free(p);
}

/* ---- the store: cut before naming equals naming, then cutting ------------- */

static char _dir[64];

/* Every sample written, to know each window's totals without the store. */
struct written {
	int64_t ts, value;
	uint32_t node, comm;
};
static struct written *_written;
static size_t _nwritten;

/*
 * Batches of 10 s for two nodes over [t0, t0 + len), stacks from one
 * dictionary per batch as agents send them; node n1's batches are at
 * another sampling period, so windows over both mix periods.
 */
static void _fill_store(struct store *st, int64_t t0, int64_t len, uint32_t nnames)
{
	for (int64_t t = t0; t < t0 + len; t += 10 * SEC) {
		for (uint32_t node = 0; node < 2; node++) {
			struct batch *b = batch__new(node ? PERIOD / 2 : PERIOD);
			const char *names[] = { "comm", "pid" };
			const char *comms[] = { "app", "db", "" };
			int64_t series[3], stacks[64];
			char pid[3][16];

			assert_non_null(b);
			for (uint32_t k = 0; k < 3; k++) {
				const char *values[] = { comms[k], pid[k] };

				snprintf(pid[k], sizeof(pid[k]), "%u", 100 + k);
				series[k] = batch__intern_series(b, names, values, 2);
				assert_true(series[k] >= 0);
			}
			for (uint32_t k = 0; k < 64; k++) {
				stacks[k] = _random_stack(b->dict, nnames);
				assert_true(stacks[k] >= 0);
			}
			for (uint32_t i = 0; i < 60; i++) {
				struct batch_sample bs = {
					.ts_ns = t + (int64_t)(xorshift(&_rng) % (10 * SEC)),
					.stack = (uint32_t)stacks[_rand(64)],
					.series = (uint32_t)series[_rand(3)],
					.tid = 7, .cpu = _rand(4), .type = SAMPLE_CPU,
					.value = 1 + _rand(3),
				};

				assert_int_equal(batch__add_sample(b, &bs), 0);
				_written = realloc(_written, (_nwritten + 1) * sizeof(*_written));
				assert_non_null(_written);
				_written[_nwritten++] = (struct written){
					.ts = bs.ts_ns, .value = bs.value, .node = node,
					.comm = bs.series == (uint32_t)series[0] ? 0 :
						bs.series == (uint32_t)series[1] ? 1 : 2,
				};
			}
			assert_int_equal(store__write(st, node ? "n1" : "n0", b), 0);
			batch__free(b);
		}
	}
}

static void _check_store(struct store *st, int64_t from, int64_t to, const char *sel_text,
			 size_t max)
{
	struct profile *whole = profile__new(PERIOD, from), *cut = profile__new(PERIOD, from);
	struct flametree tw, tc;
	struct lines a = { 0 }, b = { 0 };
	struct selector *sel = NULL;
	char err[128];

	assert_non_null(whole);
	assert_non_null(cut);
	if (sel_text) {
		sel = selector__parse(sel_text, err, sizeof(err));
		assert_non_null(sel);
	}
	assert_int_equal(store__profile(st, from, to, sel, SAMPLE_CPU, whole), 0);
	assert_int_equal(flametree__build_profile(&tw, whole, max), 0);
	assert_int_equal(store__flamegraph(st, from, to, sel, SAMPLE_CPU, max, cut, &tc), 0);
	assert_int_equal(cut->period_ns, whole->period_ns);
	/* Only what kept nodes name was copied out. */
	assert_true(cut->nframes <= tc.n);
	assert_int_equal(cut->nsamples, 0);
	_tree_lines(whole, &tw, &a);
	_tree_lines(cut, &tc, &b);
	_lines_equal(&a, &b);
	assert_int_equal(tc.nodes_all, tw.nodes_all);
	assert_int_equal(tc.trimmed_value, tw.trimmed_value);
	{
		/* The totals from what was written: counts, or ns where periods mix. */
		static const char *const comms[] = { "app", "db", "" };
		uint64_t want[3] = { 0 }, sum = 0, periods = 0;

		for (size_t i = 0; i < _nwritten; i++) {
			const struct written *w = &_written[i];

			if (w->ts < from || w->ts >= to ||
			    (sel_text && strstr(sel_text, "node") && w->node) ||
			    (sel_text && strstr(sel_text, "comm") && w->comm != 1))
				continue;
			periods |= w->node ? 2 : 1;
		}
		for (size_t i = 0; i < _nwritten; i++) {
			const struct written *w = &_written[i];
			uint64_t v = (uint64_t)w->value;

			if (w->ts < from || w->ts >= to ||
			    (sel_text && strstr(sel_text, "node") && w->node) ||
			    (sel_text && strstr(sel_text, "comm") && w->comm != 1))
				continue;
			if (periods == 3)
				v *= w->node ? PERIOD / 2 : PERIOD;
			want[w->comm] += v;
			sum += v;
		}
		assert_int_equal(tc.nodes[0].total, sum);
		for (uint32_t i = 1; i < tc.n; i++) {
			const char *comm;

			if (tc.nodes[i].depth != 1)
				continue;
			comm = profile__string(cut, tc.nodes[i].ref);
			for (int k = 0; k < 3; k++)
				if (!strcmp(comm, comms[k]))
					assert_int_equal(tc.nodes[i].total, want[k]);
		}
	}
	assert_true(tc.n > 1 || from >= to || tw.n == 1);
	flametree__release(&tw);
	flametree__release(&tc);
	_lines_free(&a);
	_lines_free(&b);
	selector__free(sel);
	profile__free(whole);
	profile__free(cut);
}

static void test_store_cut_equals_whole(void **state)
{
	static const size_t maxes[] = { 1, 4, 30, 200, 1000000 };
	struct store *st;
	int64_t end = T0 + 3 * MIN + 17 * SEC;

	tmpdir_remove(_dir);
	assert_non_null(tmpdir_make(_dir, sizeof(_dir), "test-flametree"));
	st = store_open_or_fail(_dir);
	_fill_store(st, T0, 3 * MIN + 17 * SEC, 9);
	/*
	 * The sums by (stack, process) go to per-process arrays while they
	 * fit, else to a hash table; pass 1 has room for one array only, so
	 * it moves to the table half way.
	 */
	for (int pass = 0; pass < 3; pass++) {
		int64_t stacks = 0;
		sqlite3 *db;
		char path[128];

		snprintf(path, sizeof(path), "%s/flamewatch.db", _dir);
		assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
		{
			sqlite3_stmt *q;

			assert_int_equal(sqlite3_prepare_v2(db, "SELECT max(id) FROM stacks", -1, &q,
							    NULL), SQLITE_OK);
			assert_int_equal(sqlite3_step(q), SQLITE_ROW);
			stacks = sqlite3_column_int64(q, 0);
			sqlite3_finalize(q);
		}
		sqlite3_close(db);
		sqlite__profile_dense_bytes = pass == 1 ? (size_t)(stacks + 1) * 8 + 7 :
					      pass == 2 ? 0 : 64u << 20;
		/*
		 * The first query reads every frame's key in one scan of the
		 * table; the second pass finds them cached but for the few of
		 * a new batch, which it looks up one by one.
		 */
		for (size_t m = 0; m < sizeof(maxes) / sizeof(maxes[0]); m++) {
			_check_store(st, T0 - SEC, end + SEC, NULL, maxes[m]);
			_check_store(st, T0 + 61 * SEC + 3, end - 29 * SEC, NULL, maxes[m]);
			_check_store(st, T0, end, "{node=\"n0\"}", maxes[m]);
			_check_store(st, T0, end, "{comm=\"db\"}", maxes[m]);
			_check_store(st, end + MIN, end + 2 * MIN, NULL, maxes[m]);
		}
		if (pass < 2)
			_fill_store(st, end - 10 * SEC, 10 * SEC, 12);
	}
	sqlite__profile_dense_bytes = 64u << 20;
	/*
	 * With nothing cached, a narrow window needs few of a large table's
	 * frames and looks them up one by one; the wide one after it scans
	 * for the rest.
	 */
	_fill_store(st, end + 3 * MIN, 3 * MIN, 40);
	store__close(st);
	st = store_open_or_fail(_dir);
	_check_store(st, T0 + 20 * SEC, T0 + 30 * SEC, "{node=\"n0\"}", 30);
	_check_store(st, T0 - SEC, end + 7 * MIN, NULL, 200);
	store__close(st);
	tmpdir_remove(_dir);
	free(_written);
	_written = NULL;
	_nwritten = 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_random_profiles_match_reference),
		cmocka_unit_test(test_write_tree_json_is_write_json),
		cmocka_unit_test(test_store_cut_equals_whole),
	};

	return cmocka_run_group_tests_name("flametree", tests, NULL, NULL);
}
