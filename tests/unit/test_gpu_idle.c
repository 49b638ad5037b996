// SPDX-License-Identifier: Apache-2.0
/*
 * The busy set behind GET /api/v1/gpu/idle: overlapping, touching and
 * unordered intervals merge into one sorted set; covered time, membership
 * (in and out of time order) and the idle gaps agree with a brute-force
 * answer over every nanosecond of small random sets.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "common/profile.h"
#include "server/gpu_idle.h"

struct gaps {
	int64_t v[64][2];
	int n;
};

static int _collect(void *ctx, int64_t start, int64_t end)
{
	struct gaps *g = ctx;

	g->v[g->n][0] = start;
	g->v[g->n][1] = end;
	g->n++;
	return 0;
}

static void test_merge_and_gaps(void **state)
{
	struct busy_set *s = busy_set__new();
	struct gaps g = { 0 };
	size_t cur = 0;

	(void)state;
	assert_non_null(s);
	/* Out of order, overlapping, touching, empty and reversed. */
	assert_int_equal(busy_set__add(s, 50, 60), 0);
	assert_int_equal(busy_set__add(s, 10, 20), 0);
	assert_int_equal(busy_set__add(s, 15, 30), 0);
	assert_int_equal(busy_set__add(s, 30, 35), 0);
	assert_int_equal(busy_set__add(s, 40, 40), 0);
	assert_int_equal(busy_set__add(s, 45, 41), 0);
	assert_int_equal(busy_set__add(s, 55, 58), 0);
	busy_set__finish(s);
	assert_int_equal(busy_set__count(s), 2);	/* [10,35) [50,60) */
	assert_int_equal(busy_set__covered(s, 0, 100), 35);
	assert_int_equal(busy_set__covered(s, 20, 55), 20);
	assert_int_equal(busy_set__covered(s, 35, 50), 0);
	assert_false(busy_set__contains(s, 9, &cur));
	assert_true(busy_set__contains(s, 10, &cur));
	assert_true(busy_set__contains(s, 34, &cur));
	assert_false(busy_set__contains(s, 35, &cur));
	assert_true(busy_set__contains(s, 59, &cur));
	assert_false(busy_set__contains(s, 60, &cur));
	/* Back in time: the cursor starts over. */
	assert_true(busy_set__contains(s, 12, &cur));
	assert_int_equal(busy_set__gaps(s, 0, 100, _collect, &g), 0);
	assert_int_equal(g.n, 3);
	assert_int_equal(g.v[0][0], 0);
	assert_int_equal(g.v[0][1], 10);
	assert_int_equal(g.v[1][0], 35);
	assert_int_equal(g.v[1][1], 50);
	assert_int_equal(g.v[2][0], 60);
	assert_int_equal(g.v[2][1], 100);
	g.n = 0;
	assert_int_equal(busy_set__gaps(s, 12, 55, _collect, &g), 0);
	assert_int_equal(g.n, 1);
	assert_int_equal(g.v[0][0], 35);
	assert_int_equal(g.v[0][1], 50);
	busy_set__free(s);
	busy_set__free(NULL);
}

static void test_empty(void **state)
{
	struct busy_set *s = busy_set__new();
	struct gaps g = { 0 };
	size_t cur = 0;

	(void)state;
	busy_set__finish(s);
	assert_int_equal(busy_set__covered(s, 0, 10), 0);
	assert_false(busy_set__contains(s, 5, &cur));
	assert_int_equal(busy_set__gaps(s, 0, 10, _collect, &g), 0);
	assert_int_equal(g.n, 1);
	assert_int_equal(g.v[0][1] - g.v[0][0], 10);
	busy_set__free(s);
}

static void test_random_against_bitmap(void **state)
{
	enum { T = 200 };

	(void)state;
	srand(7);
	for (int round = 0; round < 300; round++) {
		struct busy_set *s = busy_set__new();
		unsigned char busy[T] = { 0 };
		struct gaps g = { 0 };
		int64_t want = 0, idle = 0;
		int n = rand() % 12;
		size_t cur = 0;

		for (int i = 0; i < n; i++) {
			int a = rand() % T, len = rand() % 30;
			int b = a + len > T ? T : a + len;

			assert_int_equal(busy_set__add(s, a, b), 0);
			for (int t = a; t < b; t++)
				busy[t] = 1;
		}
		busy_set__finish(s);
		for (int t = 20; t < 180; t++)
			want += busy[t];
		assert_int_equal(busy_set__covered(s, 20, 180), want);
		for (int t = 0; t < T; t++)
			assert_int_equal(busy_set__contains(s, t, &cur), busy[t]);
		assert_int_equal(busy_set__gaps(s, 20, 180, _collect, &g), 0);
		for (int i = 0; i < g.n; i++) {
			assert_true(g.v[i][0] < g.v[i][1]);
			if (i)
				assert_true(g.v[i][0] > g.v[i - 1][1]);
			for (int64_t t = g.v[i][0]; t < g.v[i][1]; t++)
				assert_int_equal(busy[t], 0);
			idle += g.v[i][1] - g.v[i][0];
		}
		assert_int_equal(idle + want, 160);
		busy_set__free(s);
	}
}

static int _collect_spans(void *ctx, int64_t start, int64_t end)
{
	int64_t *v = ctx;

	v[1 + 2 * v[0]] = start;
	v[2 + 2 * v[0]] = end;
	v[0]++;
	return 0;
}

/* Busy outside coverage: what a fallback source may still say. */
static void test_each_and_outside(void **state)
{
	struct busy_set *src = busy_set__new(), *cover = busy_set__new(), *dst = busy_set__new();
	int64_t v[1 + 2 * 16] = { 0 };

	(void)state;
	assert_non_null(src);
	assert_non_null(cover);
	assert_non_null(dst);
	busy_set__add(src, 0, 100);
	busy_set__add(src, 200, 300);
	busy_set__add(cover, 10, 20);
	busy_set__add(cover, 50, 250);
	busy_set__finish(src);
	busy_set__finish(cover);
	assert_int_equal(busy_set__add_outside(dst, src, cover), 0);
	busy_set__finish(dst);
	assert_int_equal(busy_set__each(dst, 0, 1000, _collect_spans, v), 0);
	assert_int_equal(v[0], 3);
	assert_int_equal(v[1], 0);
	assert_int_equal(v[2], 10);
	assert_int_equal(v[3], 20);
	assert_int_equal(v[4], 50);
	assert_int_equal(v[5], 250);
	assert_int_equal(v[6], 300);
	/* each clips to its window. */
	v[0] = 0;
	assert_int_equal(busy_set__each(cover, 15, 60, _collect_spans, v), 0);
	assert_int_equal(v[0], 2);
	assert_int_equal(v[1], 15);
	assert_int_equal(v[2], 20);
	assert_int_equal(v[3], 50);
	assert_int_equal(v[4], 60);
	busy_set__free(src);
	busy_set__free(cover);
	busy_set__free(dst);
}

static void test_sync_calls(void **state)
{
	static const char *const yes[] = {
		"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaStreamSynchronize_ptsz",
		"cudaEventSynchronize", "cuCtxSynchronize", "cuStreamSynchronize_ptsz",
		"cuEventSynchronize", "cuCtxSynchronize_v2",
	};
	static const char *const no[] = {
		NULL, "", "cudaMemcpy", "cudaMemcpyAsync", "cudaStreamWaitEvent",
		"cudaStreamQuery", "cudaDeviceSynchronizeX", "cuStreamSynchronize_v",
		"cuStreamSynchronize_vx", "mycudaDeviceSynchronize", "cudaLaunchKernel",
		"synchronize",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		assert_true(gpu_idle__is_sync_call(yes[i]));
	for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		assert_false(gpu_idle__is_sync_call(no[i]));
}

static void test_observer_paths(void **state)
{
	(void)state;
	assert_true(gpu_idle__is_observer_path("/opt/fw/lib/libflamewatch-cuda.so"));
	assert_true(gpu_idle__is_observer_path("libflamewatch-cuda.so.1"));
	assert_false(gpu_idle__is_observer_path(NULL));
	assert_false(gpu_idle__is_observer_path(""));
	assert_false(gpu_idle__is_observer_path("/usr/lib/libflamewatch-cuda.sox"));
	assert_false(gpu_idle__is_observer_path("/usr/lib/libcuda.so.1"));
	assert_false(gpu_idle__is_observer_path("/x/libflamewatch-cuda.so/cudart.so.6"));
}

/* A stack's kind: the profiler's own frames first, then a sync call, else plain. */
static void test_stack_kinds(void **state)
{
	struct profile *p = profile__new(1000000, 0);
	struct sync_stacks c = { 0 };
	uint32_t app, fw, cudart, f_main, f_sync, f_ctl, f_fwsync, st[3];

	(void)state;
	assert_non_null(p);
	app = (uint32_t)profile__intern_mapping(p, "/usr/bin/python3", NULL);
	fw = (uint32_t)profile__intern_mapping(p, "/opt/fw/libflamewatch-cuda.so", NULL);
	cudart = (uint32_t)profile__intern_mapping(p, "/usr/lib/libcudart.so.12", NULL);
	f_main = (uint32_t)profile__intern_named_frame(p, FRAME_NATIVE, app, 0x10, "main", NULL, 0);
	f_sync = (uint32_t)profile__intern_named_frame(p, FRAME_NATIVE, cudart, 0x20, "cudaDeviceSynchronize",
						     NULL, 0);
	f_ctl = (uint32_t)profile__intern_named_frame(p, FRAME_NATIVE, fw, 0x30, "_control", NULL, 0);
	f_fwsync = (uint32_t)profile__intern_named_frame(p, FRAME_NATIVE, cudart, 0x40, "cuCtxSynchronize",
						       NULL, 0);
	st[0] = (uint32_t)profile__intern_stack(p, (uint32_t[]){ f_main }, 1);
	st[1] = (uint32_t)profile__intern_stack(p, (uint32_t[]){ f_main, f_sync }, 2);
	st[2] = (uint32_t)profile__intern_stack(p, (uint32_t[]){ f_ctl, f_fwsync }, 2);
	for (int round = 0; round < 2; round++) {	/* the second answers from the cache */
		assert_int_equal(sync_stacks__kind(&c, p, st[0]), STACK_PLAIN);
		assert_int_equal(sync_stacks__kind(&c, p, st[1]), STACK_SYNC);
		assert_int_equal(sync_stacks__kind(&c, p, st[2]), STACK_OBSERVER);
	}
	sync_stacks__release(&c);
	profile__free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_merge_and_gaps),
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_random_against_bitmap),
		cmocka_unit_test(test_sync_calls),
		cmocka_unit_test(test_observer_paths),
		cmocka_unit_test(test_stack_kinds),
		cmocka_unit_test(test_each_and_outside),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
