// SPDX-License-Identifier: Apache-2.0
/* GPU intervals in the SQLite store: write, select, stacks, retention, reopen. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/batch.h"
#include "common/profile.h"
#include "store/selector.h"
#include "store/store.h"
#include "testutil.h"

#define T0 1700000000000000000LL	/* 2023-11-14 */
#define MIN 60000000000LL

static char _dir[64];

/* pid 7 launches kernel "k" (stack main;run) at T0 + i min for i < n; pid 8 one orphan copy. */
static struct batch *_make(int n)
{
	const char *names[] = { "pid", "comm" };
	const char *v7[] = { "7", "seven" }, *v8[] = { "8", "eight" };
	struct batch *b = batch__new(1);
	struct profile *p = b->dict;
	int64_t m = profile__intern_mapping(p, "/bin/app", "");
	uint32_t fr[2] = {
		(uint32_t)profile__intern_named_frame(p, FRAME_NATIVE, m, 0x10, "main", NULL, 0),
		(uint32_t)profile__intern_named_frame(p, FRAME_NATIVE, m, 0x20, "run", "run.c", 3),
	};
	int64_t st = profile__intern_stack(p, fr, 2);
	int64_t s7 = batch__intern_series(b, names, v7, 2), s8 = batch__intern_series(b, names, v8, 2);
	int64_t k = profile__intern_string(p, "k(int)"), c = profile__intern_string(p, "[memset]");

	for (int i = 0; i < n; i++) {
		struct batch_gpu_interval g = {
			.start_ns = T0 + i * MIN, .end_ns = T0 + i * MIN + 1000 * (i + 1), .series = s7,
			.device = 2, .stream = 3, .kind = GPU_KERNEL, .name = k, .stack = st,
			.correlation = 100 + i, .weight = 2,
		};
		assert_int_equal(batch__add_gpu_interval(b, &g), 0);
	}
	struct batch_gpu_interval o = {
		.start_ns = T0 + 30 * 1000000000LL, .end_ns = T0 + 30 * 1000000000LL + 50,
		.series = s8, .kind = GPU_MEMSET, .name = c, .stack = BATCH_NO_STACK, .bytes = 64,
		.weight = 1,
	};
	assert_int_equal(batch__add_gpu_interval(b, &o), 0);
	return b;
}

struct seen {
	struct store_gpu_interval iv[32];
	char names[32][32], comms[32][16];
	int n;
};

static int _cb(void *ctx, const struct store_gpu_interval *iv)
{
	struct seen *s = ctx;

	assert_true(s->n < 32);
	s->iv[s->n] = *iv;
	snprintf(s->names[s->n], sizeof(s->names[0]), "%s", iv->name);
	snprintf(s->comms[s->n], sizeof(s->comms[0]), "%s", iv->comm);
	s->n++;
	return 0;
}

static void test_write_query_retain(void **state)
{
	struct store *st;
	struct batch *b = _make(10);
	struct profile *dict = profile__new(1, 0);
	struct selector *sel;
	struct seen s = { 0 };
	char err[128];
	uint32_t n;

	assert_non_null(tmpdir_make(_dir, sizeof(_dir), "test-store-gpu"));
	st = store_open_or_fail(_dir);
	assert_int_equal(store__write(st, "node-a", b), 0);

	assert_int_equal(store__gpu_intervals(st, T0, T0 + 3600 * 1000000000LL, NULL, dict, 0, _cb,
					      &s), 0);
	assert_int_equal(s.n, 11);
	assert_int_equal(s.iv[0].start_ns, T0);
	assert_int_equal(s.iv[0].end_ns, T0 + 1000);
	assert_int_equal(s.iv[0].pid, 7);
	assert_string_equal(s.comms[0], "seven");
	assert_string_equal(s.names[0], "k(int)");
	assert_int_equal(s.iv[0].device, 2);
	assert_int_equal(s.iv[0].stream, 3);
	assert_int_equal(s.iv[0].weight, 2);
	assert_int_equal(s.iv[0].correlation, 100);
	/* The orphan memset, 30 s in, is second in start order. */
	assert_string_equal(s.names[1], "[memset]");
	assert_int_equal(s.iv[1].stack, STORE_NO_STACK);
	assert_int_equal(s.iv[1].bytes, 64);
	assert_int_equal(s.iv[1].kind, GPU_MEMSET);
	{
		const uint32_t *f = profile__stack(dict, s.iv[0].stack, &n);

		assert_int_equal(n, 2);
		assert_string_equal(profile__string(dict, dict->frames[f[0]].function), "main");
		assert_string_equal(profile__string(dict, dict->frames[f[1]].function), "run");
	}

	/* A selector and a window; the limit. */
	sel = selector__parse("{comm=\"eight\"}", err, sizeof(err));
	assert_non_null(sel);
	s.n = 0;
	assert_int_equal(store__gpu_intervals(st, T0, T0 + 3600 * 1000000000LL, sel, NULL, 0, _cb,
					      &s), 0);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.iv[0].pid, 8);
	s.n = 0;
	assert_int_equal(store__gpu_intervals(st, T0 + 2 * MIN, T0 + 4 * MIN, NULL, NULL, 0, _cb,
					      &s), 0);
	assert_int_equal(s.n, 2);
	assert_int_equal(store__gpu_intervals(st, T0, T0 + 3600 * 1000000000LL, NULL, NULL, 5, _cb,
					      &s), -E2BIG);

	/* Retention: blocks of 5 minutes; a cutoff at T0 + 7 min keeps those from T0 + 5 min. */
	assert_int_equal(store__retain(st, T0 + 7 * MIN), 0);
	store__close(st);
	st = store_open_or_fail(_dir);		/* and it all survived a reopen */
	s.n = 0;
	assert_int_equal(store__gpu_intervals(st, 0, T0 + 3600 * 1000000000LL, NULL, NULL, 0, _cb,
					      &s), 0);
	{
		/* The cutoff rounds down to a 5-minute block of Unix time: T0 + 400 s here. */
		int64_t cut = (T0 + 7 * MIN) - (T0 + 7 * MIN) % (5 * MIN);

		assert_int_equal(cut, T0 + 400 * 1000000000LL);
		assert_int_equal(s.n, 3);	/* kernels 7, 8 and 9 */
		for (int i = 0; i < s.n; i++)
			assert_int_equal(s.iv[i].start_ns, T0 + (7 + i) * MIN);
	}

	/* A bad stack id: refused whole. */
	b->gpu_intervals[0].stack = 999;
	assert_int_equal(store__write(st, "node-a", b), -EINVAL);
	s.n = 0;
	assert_int_equal(store__gpu_intervals(st, 0, T0 + 3600 * 1000000000LL, NULL, NULL, 0, _cb,
					      &s), 0);
	assert_int_equal(s.n, 3);

	selector__free(sel);
	profile__free(dict);
	batch__free(b);
	store__close(st);
	tmpdir_remove(_dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_query_retain),
	};

	return cmocka_run_group_tests_name("store_gpu", tests, NULL, NULL);
}
