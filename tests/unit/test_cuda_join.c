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
	int n;
	int freed;
};

static void _emit(void *ctx, uint32_t pid, const struct fw_cuda_record *r,
		  const struct cuda_join_launch *l)
{
	struct out *o = ctx;
	uint32_t w = cuda_join__weight(r, l);

	assert_true(o->n < 64);
	o->pid[o->n] = pid;
	o->corr[o->n] = r->correlation;
	o->stack[o->n] = l ? *(int *)l->stack : -1;
	o->value[o->n] = (r->end_ns - r->start_ns) * w;
	o->n++;
}

static void _free_stack(void *ctx, void *stack)
{
	((struct out *)ctx)->freed++;
	free(stack);
}

static void *_stack(int v)
{
	int *p = malloc(sizeof(*p));

	*p = v;
	return p;
}

static struct fw_cuda_record _rec(uint64_t corr, uint64_t dur, uint32_t weight)
{
	struct fw_cuda_record r = {
		.correlation = corr, .start_ns = 1000, .end_ns = 1000 + dur, .weight = weight,
	};
	return r;
}

static struct cuda_join *_join(struct out *o, uint32_t max, uint64_t dist)
{
	struct cuda_join_opts opts = {
		.max_launches = max, .max_records = max, .max_distance = dist,
		.max_record_age_ns = 1000, .emit = _emit, .free_stack = _free_stack, .ctx = o,
	};
	struct cuda_join *j = cuda_join__new(&opts);

	assert_non_null(j);
	return j;
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
	assert_int_equal(st.joined, 3);
	assert_int_equal(st.unattributed, 0);
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
	assert_int_equal(st.records_evicted_count, 2);
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
	/* A record for launch 1, which was dropped: emitted at once, unattributed. */
	struct fw_cuda_record one = _rec(1, 10, 1);
	assert_int_equal(cuda_join__record(j, 1, &one, 0), 0);
	assert_int_equal(cuda_join__record(j, 1, &late, 0), 0);
	assert_int_equal(o.n, 3);
	assert_int_equal(o.stack[1], -1);
	assert_int_equal(o.stack[2], -1);
	cuda_join__stats(j, &st);
	assert_int_equal(st.records_evicted_distance, 3);
	assert_int_equal(st.launches_unmatched, 1);
	cuda_join__free(j);
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
		cmocka_unit_test(test_expiry_and_exit),
	};

	return cmocka_run_group_tests_name("cuda_join", tests, NULL, NULL);
}
