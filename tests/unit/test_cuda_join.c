// SPDX-License-Identifier: Apache-2.0
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gpu/cuda_join.h"

/* What the join emitted, in order. Stacks are malloc'd ints naming the launch. */
struct out {
	uint32_t pid[64];
	uint64_t corr[64];
	int stack[64];		/* -1: unattributed */
	uint64_t value[64];	/* GPU ns x weight, as the agent computes it */
	enum cuda_join_how how[64];
	int n;
	int freed;		/* stacks whose last hold was dropped */
};

static void _emit(void *ctx, uint32_t pid, const struct fw_cuda_record *r,
		  const struct cuda_join_launch *l, enum cuda_join_how how)
{
	struct out *o = ctx;
	uint32_t w = cuda_join__weight(r, l);

	assert_true(o->n < 64);
	assert_true((l == NULL) == (how == CUDA_JOIN_LOST));
	o->pid[o->n] = pid;
	o->corr[o->n] = r->correlation;
	o->stack[o->n] = l ? ((int *)l->stack)[0] : -1;
	o->value[o->n] = (r->end_ns - r->start_ns) * w;
	o->how[o->n] = how;
	o->n++;
}

/* A stack is two ints: the launch it names, and its holds. */
static void _free_stack(void *ctx, void *stack)
{
	int *s = stack;

	assert_true(s[1] > 0);
	if (--s[1] == 0) {
		((struct out *)ctx)->freed++;
		free(stack);
	}
}

static void _hold_stack(void *ctx, void *stack)
{
	((int *)stack)[1]++;
}

static void *_stack(int v)
{
	int *p = malloc(2 * sizeof(*p));

	p[0] = v;
	p[1] = 1;
	return p;
}

static struct fw_cuda_record _rec(uint64_t corr, uint64_t dur, uint32_t weight)
{
	struct fw_cuda_record r = {
		.correlation = corr, .start_ns = 1000, .end_ns = 1000 + dur, .weight = weight,
	};
	return r;
}

static struct cuda_join *_join_fb(struct out *o, uint32_t max, uint64_t dist, int fallback)
{
	struct cuda_join_opts opts = {
		.max_launches = max, .max_records = max, .max_distance = dist,
		.max_record_age_ns = 1000, .max_launch_age_ns = 5000, .emit = _emit,
		.free_stack = _free_stack, .hold_stack = fallback ? _hold_stack : NULL, .ctx = o,
	};
	struct cuda_join *j = cuda_join__new(&opts);

	assert_non_null(j);
	return j;
}

static struct cuda_join *_join(struct out *o, uint32_t max, uint64_t dist)
{
	return _join_fb(o, max, dist, 0);
}

static void test_launch_first(void **state)
{
	struct out o = { 0 };
	struct cuda_join *j = _join(&o, 0, 0);
	struct fw_cuda_record r = _rec(7, 500, 1);

	assert_int_equal(cuda_join__launch(j, 10, 7, 11, 0, 1, _stack(70), 0), 0);
	assert_int_equal(o.n, 0);
	assert_int_equal(cuda_join__record(j, 10, &r, 1), 0);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.stack[0], 70);
	assert_int_equal(o.value[0], 500);
	/* Another pid's record with the same id does not join it. */
	assert_int_equal(cuda_join__record(j, 20, &r, 1), 0);
	assert_int_equal(o.n, 1);
	cuda_join__flush(j);
	assert_int_equal(o.n, 2);
	assert_int_equal(o.pid[1], 20);
	assert_int_equal(o.stack[1], -1);
	assert_int_equal(o.freed, 1);
	cuda_join__free(j);
}

static void test_records_first_out_of_order(void **state)
{
	struct out o = { 0 };
	struct cuda_join *j = _join(&o, 0, 0);
	struct fw_cuda_record r3 = _rec(3, 30, 1), r1 = _rec(1, 10, 1), r2 = _rec(2, 20, 1);
	struct cuda_join_stats st;
	uint64_t nl, nr;

	assert_int_equal(cuda_join__record(j, 5, &r3, 0), 0);
	assert_int_equal(cuda_join__record(j, 5, &r1, 0), 0);
	assert_int_equal(cuda_join__record(j, 5, &r2, 0), 0);
	cuda_join__pending(j, &nl, &nr);
	assert_int_equal(nr, 3);
	assert_int_equal(o.n, 0);
	/* Launches arrive out of order too. */
	assert_int_equal(cuda_join__launch(j, 5, 2, 1, 0, 1, _stack(20), 0), 0);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.corr[0], 2);
	assert_int_equal(o.stack[0], 20);
	assert_int_equal(cuda_join__launch(j, 5, 3, 1, 0, 1, _stack(30), 0), 0);
	assert_int_equal(cuda_join__launch(j, 5, 1, 1, 0, 1, _stack(10), 0), 0);
	assert_int_equal(o.n, 3);
	assert_int_equal(o.stack[1], 30);
	assert_int_equal(o.value[1], 30);
	assert_int_equal(o.stack[2], 10);
	assert_int_equal(o.value[2], 10);
	cuda_join__pending(j, &nl, &nr);
	assert_int_equal(nl, 3);
	assert_int_equal(nr, 0);
	cuda_join__stats(j, &st);
	assert_int_equal(st.how[CUDA_JOIN_JOINED_LATE], 3);
	assert_int_equal(st.how[CUDA_JOIN_LOST], 0);
	cuda_join__free(j);
	assert_int_equal(o.freed, 3);
}

/* One graph launch completes several kernels under the same correlation id. */
static void test_graph_launch_many_records(void **state)
{
	struct out o = { 0 };
	struct cuda_join *j = _join(&o, 0, 0);
	struct fw_cuda_record a = _rec(9, 100, 1), b = _rec(9, 200, 1), c = _rec(9, 300, 1);

	assert_int_equal(cuda_join__record(j, 1, &a, 0), 0);
	assert_int_equal(cuda_join__launch(j, 1, 9, 1, 0, 1, _stack(90), 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &b, 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &c, 0), 0);
	assert_int_equal(o.n, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(o.stack[i], 90);
	assert_int_equal(o.value[0] + o.value[1] + o.value[2], 600);
	cuda_join__free(j);
}

static void test_weights(void **state)
{
	struct out o = { 0 };
	struct cuda_join *j = _join(&o, 0, 0);
	struct fw_cuda_record r = _rec(4, 1000, 8), unweighted = _rec(5, 1000, 0);

	assert_int_equal(cuda_join__launch(j, 1, 4, 1, 0, 8, _stack(40), 0), 0);
	assert_int_equal(cuda_join__launch(j, 1, 5, 1, 0, 3, _stack(50), 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &r, 0), 0);
	/* A record without a weight takes its launch's. */
	assert_int_equal(cuda_join__record(j, 1, &unweighted, 0), 0);
	assert_int_equal(o.n, 2);
	assert_int_equal(o.value[0], 8000);
	assert_int_equal(o.value[1], 3000);
	cuda_join__free(j);
}

static void test_eviction_by_count(void **state)
{
	struct out o = { 0 };
	struct cuda_join *j = _join(&o, 4, 1000);
	struct cuda_join_stats st;
	uint64_t nl, nr;

	/* Six records wait in a process allowed four: the two oldest go unattributed. */
	for (uint64_t c = 1; c <= 6; c++) {
		struct fw_cuda_record r = _rec(c, c, 1);

		assert_int_equal(cuda_join__record(j, 1, &r, 0), 0);
	}
	assert_int_equal(o.n, 2);
	assert_int_equal(o.corr[0], 1);
	assert_int_equal(o.stack[0], -1);
	assert_int_equal(o.corr[1], 2);
	cuda_join__pending(j, &nl, &nr);
	assert_int_equal(nr, 4);
	/* Six launches: the two oldest are dropped (and had matched nothing). */
	for (uint64_t c = 101; c <= 106; c++)
		assert_int_equal(cuda_join__launch(j, 1, c, 1, 0, 1, _stack((int)c), 0), 0);
	cuda_join__stats(j, &st);
	assert_int_equal(st.why[CUDA_JOIN_WHY_COUNT], 2);
	assert_int_equal(st.launches_evicted_count, 2);
	assert_int_equal(st.launches_unmatched, 2);
	assert_int_equal(o.freed, 2);
	cuda_join__pending(j, &nl, &nr);
	assert_int_equal(nl, 4);
	cuda_join__free(j);
}

static void test_eviction_by_distance(void **state)
{
	struct out o = { 0 };
	struct cuda_join *j = _join(&o, 0, 10);
	struct fw_cuda_record early = _rec(5, 50, 1), late = _rec(2, 20, 1);
	struct cuda_join_stats st;

	assert_int_equal(cuda_join__launch(j, 1, 1, 1, 0, 1, _stack(1), 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &early, 0), 0);
	assert_int_equal(o.n, 0);
	/* Launch 20 is more than 10 ids past both: record 5's launch is not coming. */
	assert_int_equal(cuda_join__launch(j, 1, 20, 1, 0, 1, _stack(20), 0), 0);
	assert_int_equal(o.n, 1);
	assert_int_equal(o.corr[0], 5);
	assert_int_equal(o.stack[0], -1);
	assert_int_equal(o.how[0], CUDA_JOIN_LOST);
	/* Launch 1 is far behind too, but launches leave by age: its late record joins. */
	struct fw_cuda_record one = _rec(1, 10, 1);
	assert_int_equal(cuda_join__record(j, 1, &one, 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &late, 0), 0);
	assert_int_equal(o.n, 3);
	assert_int_equal(o.stack[1], 1);
	assert_int_equal(o.how[1], CUDA_JOIN_JOINED);
	assert_int_equal(o.stack[2], -1);
	/* Past max_launch_age_ns (5000 here) a launch leaves with the next one. */
	assert_int_equal(cuda_join__launch(j, 1, 30, 1, 0, 1, _stack(30), 6000), 0);
	assert_int_equal(cuda_join__record(j, 1, &one, 6000), 0);
	assert_int_equal(o.stack[3], -1);
	cuda_join__stats(j, &st);
	assert_int_equal(st.why[CUDA_JOIN_WHY_DISTANCE], 3);
	assert_int_equal(st.how[CUDA_JOIN_LOST], 3);
	assert_int_equal(st.how[CUDA_JOIN_JOINED], 1);
	assert_int_equal(st.launches_unmatched, 1);	/* 20 */
	cuda_join__free(j);
	assert_int_equal(o.freed, 3);
}

/*
 * A record that leaves without its launch takes the stack of the launch
 * that last joined a record of its kind and name, else the process's last
 * one; its own weight, not that launch's. A process none of whose launches
 * joined anything has its records emitted without a stack. Stacks held by
 * the fallback outlive their launch, and are all dropped in the end.
 */
static void test_fallback(void **state)
{
	struct out o = { 0 };
	struct cuda_join *j = _join_fb(&o, 0, 10, 1);
	struct fw_cuda_record k1 = _rec(1, 100, 0), k2 = _rec(2, 100, 0), copy = _rec(3, 50, 0);
	struct fw_cuda_record carried = _rec(0, 100, 4), lost = _rec(0, 7, 1);
	struct fw_cuda_record stray = _rec(0, 30, 1), other = _rec(9, 10, 2);
	struct cuda_join_stats st;

	/* pid 2 never launched: nothing to fall back to. */
	assert_int_equal(cuda_join__record(j, 2, &lost, 0), 0);
	assert_int_equal(o.how[0], CUDA_JOIN_LOST);

	k1.name_addr = k2.name_addr = carried.name_addr = 0x100;
	other.name_addr = 0x200;
	stray.name_addr = 0x300;
	copy.kind = FW_CUDA_MEMCPY_DTOH;
	assert_int_equal(cuda_join__launch(j, 1, 1, 11, 0, 3, _stack(1), 0), 0);
	assert_int_equal(cuda_join__launch(j, 1, 2, 11, 0, 3, _stack(2), 0), 0);
	assert_int_equal(cuda_join__launch(j, 1, 3, 11, 0, 1, _stack(3), 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &k1, 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &k2, 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &copy, 0), 0);
	/* The launches leave (age); their stacks stay held by the fallback. */
	assert_int_equal(cuda_join__launch(j, 1, 4, 11, 0, 1, _stack(4), 9000), 0);
	assert_int_equal(o.freed, 1);	/* 1: no longer anyone's fallback */
	/* Carried time of the kernel at 0x100 (id 0): the last launch that ran it. */
	assert_int_equal(cuda_join__record(j, 1, &carried, 9000), 0);
	assert_int_equal(o.stack[4], 2);
	assert_int_equal(o.how[4], CUDA_JOIN_FALLBACK_SAME);
	assert_int_equal(o.value[4], 400);	/* its own weight */
	/* A kernel no launch ran: the process's last launch (the copy's). */
	assert_int_equal(cuda_join__record(j, 1, &stray, 9000), 0);
	assert_int_equal(o.stack[5], 3);
	assert_int_equal(o.how[5], CUDA_JOIN_FALLBACK_OTHER);
	/* A record waiting for a launch that never comes falls back when it expires. */
	assert_int_equal(cuda_join__record(j, 1, &other, 9000), 0);
	cuda_join__expire(j, 10000);
	assert_int_equal(o.n, 7);
	assert_int_equal(o.stack[6], 3);
	assert_int_equal(o.value[6], 20);
	cuda_join__stats(j, &st);
	assert_int_equal(st.how[CUDA_JOIN_JOINED], 3);
	assert_int_equal(st.how[CUDA_JOIN_FALLBACK_SAME], 1);
	assert_int_equal(st.how[CUDA_JOIN_FALLBACK_OTHER], 2);
	assert_int_equal(st.how[CUDA_JOIN_LOST], 1);
	assert_int_equal(st.how_ns[CUDA_JOIN_FALLBACK_OTHER], 50);
	assert_int_equal(st.why[CUDA_JOIN_WHY_UNNAMED], 3);
	assert_int_equal(st.why[CUDA_JOIN_WHY_AGE], 1);
	cuda_join__free(j);
	assert_int_equal(o.freed, 4);
}

static void test_expiry_and_exit(void **state)
{
	struct out o = { 0 };
	struct cuda_join *j = _join(&o, 0, 0);
	struct fw_cuda_record a = _rec(1, 10, 1), b = _rec(2, 20, 1);
	uint64_t total = 0;

	assert_int_equal(cuda_join__record(j, 1, &a, 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &b, 900), 0);
	cuda_join__expire(j, 1000);	/* a waited 1000 ns: the limit */
	assert_int_equal(o.n, 1);
	assert_int_equal(o.corr[0], 1);
	assert_true(cuda_join__has_pid(j, 1));
	cuda_join__flush_pid(j, 1);
	assert_false(cuda_join__has_pid(j, 1));
	assert_int_equal(o.n, 2);
	for (int i = 0; i < o.n; i++)
		total += o.value[i];
	assert_int_equal(total, 30);	/* nothing lost */
	cuda_join__free(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_launch_first),
		cmocka_unit_test(test_records_first_out_of_order),
		cmocka_unit_test(test_graph_launch_many_records),
		cmocka_unit_test(test_weights),
		cmocka_unit_test(test_eviction_by_count),
		cmocka_unit_test(test_eviction_by_distance),
		cmocka_unit_test(test_fallback),
		cmocka_unit_test(test_expiry_and_exit),
	};

	return cmocka_run_group_tests_name("cuda_join", tests, NULL, NULL);
}
