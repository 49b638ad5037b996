// SPDX-License-Identifier: Apache-2.0
/*
 * The off-CPU half of GET /api/v1/gpu/idle (server/gpu_idle_offcpu.c)
 * over a real SQLite store: a training loop like `cuda_chain blockgap`,
 * whose main thread launches each step's first kernel and then sleeps in
 * load_batch_blocked while the GPU idles, and whose backward thread
 * launches the second kernel right after the first one and stays parked
 * through the idle gap. Every gap but the last is ended by a known launch;
 * the last one (the loop's end) must go to the main thread, whose launches
 * ended nearly all of the idle time, wherever the window begins and
 * whichever thread has the lower tid.
 */
#define _XOPEN_SOURCE 700
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/batch.h"
#include "common/profile.h"
#include "server/gpu_idle.h"
#include "server/gpu_idle_offcpu.h"
#include "store/selector.h"
#include "store/store.h"
#include "testutil.h"

#define T0 1800000000000000000LL
#define US 1000LL
#define MS 1000000LL
#define ROUNDS 4
#define STEP (600 * MS)
#define KERNEL (150 * MS)
#define PID 100

enum { ST_LOAD, ST_WAIT_BW, ST_PARKED, ST_N };

struct loop {
	struct batch *b;
	int64_t series, stack[ST_N], launch_main, launch_bw;
	int64_t kernels[2 * ROUNDS];
	int nkernels;
	uint32_t tid_main, tid_bw;
};

static int64_t _stack(struct batch *b, const char *const *names, uint32_t n)
{
	int64_t m = profile__intern_mapping(b->dict, "/bin/loop", "");
	uint32_t fr[8];

	assert_true(m >= 0 && n <= 8);
	for (uint32_t i = 0; i < n; i++) {
		int64_t f = profile__intern_named_frame(b->dict, FRAME_NATIVE, (uint32_t)m,
							0x100 * (i + 1), names[i], NULL, 0);

		assert_true(f >= 0);
		fr[i] = (uint32_t)f;
	}
	return profile__intern_stack(b->dict, fr, n);
}

static void _sample(struct loop *l, uint32_t type, int64_t stack, uint32_t tid, int64_t ts,
		    int64_t value)
{
	struct batch_sample s = {
		.ts_ns = ts, .stack = (uint32_t)stack, .series = (uint32_t)l->series, .tid = tid,
		.type = type, .value = value,
	};

	assert_int_equal(batch__add_sample(l->b, &s), 0);
}

/* A kernel of KERNEL ns from start, and its GPU-time sample. */
static void _kernel(struct loop *l, int64_t start, uint32_t tid)
{
	_sample(l, SAMPLE_GPU_TIME, tid == l->tid_main ? l->launch_main : l->launch_bw, tid, start,
		KERNEL);
	l->kernels[l->nkernels++] = start;
}

/*
 * Round i begins at T0 + i * STEP + 263 us (the main thread's first launch
 * comes a little after the loop's start). Kernel starts carry sub-
 * microsecond parts, as real ones do.
 */
static void _make_loop(struct loop *l, uint32_t tid_main, uint32_t tid_bw)
{
	const char *names[] = { "pid", "comm" }, *values[] = { "100", "loop" };
	const char *load[] = { "main", "phase_blockgap", "load_batch_blocked", "read" };
	const char *wait[] = { "main", "phase_blockgap", "train_step_with_backward",
			       "pthread_cond_wait" };
	const char *parked[] = { "start_thread", "backward_worker", "pthread_cond_wait" };
	const char *lm[] = { "main", "phase_blockgap", "train_step", "kernelA" };
	const char *lb[] = { "start_thread", "backward_worker", "train_step", "kernelA" };
	int64_t bw_parked = T0;

	memset(l, 0, sizeof(*l));
	l->b = batch__new(1);
	assert_non_null(l->b);
	l->tid_main = tid_main;
	l->tid_bw = tid_bw;
	l->series = batch__intern_series(l->b, names, values, 2);
	l->stack[ST_LOAD] = _stack(l->b, load, 4);
	l->stack[ST_WAIT_BW] = _stack(l->b, wait, 4);
	l->stack[ST_PARKED] = _stack(l->b, parked, 3);
	l->launch_main = _stack(l->b, lm, 4);
	l->launch_bw = _stack(l->b, lb, 4);
	assert_true(l->series >= 0 && l->launch_main >= 0 && l->launch_bw >= 0);
	for (int i = 0; i < ROUNDS; i++) {
		int64_t t = T0 + i * STEP + 263 * US + 419;	/* the main thread's launch */
		int64_t bw = t + KERNEL + 270 * US + 187;	/* the backward thread's */
		int64_t load = bw + KERNEL + 40 * US;		/* the loader's read() */

		_kernel(l, t, tid_main);
		_kernel(l, bw, tid_bw);
		/* The backward thread waits from its last kernel's end to this launch. */
		_sample(l, SAMPLE_OFFCPU, l->stack[ST_PARKED], tid_bw, bw_parked,
			bw - 20 * US - bw_parked);
		bw_parked = bw + KERNEL + 30 * US;
		/* The main thread waits for the backward step, then for its data. */
		_sample(l, SAMPLE_OFFCPU, l->stack[ST_WAIT_BW], tid_main, t + KERNEL + 10 * US,
			load - (t + KERNEL + 10 * US));
		_sample(l, SAMPLE_OFFCPU, l->stack[ST_LOAD], tid_main, load,
			T0 + (i + 1) * STEP + 200 * US - load);
	}
	/* Parked through the last gap until the loop stops it. */
	_sample(l, SAMPLE_OFFCPU, l->stack[ST_PARKED], tid_bw, bw_parked,
		T0 + ROUNDS * STEP + 300 * US - bw_parked);
}

/* Nanoseconds o charged under stacks through a function named fn. */
static uint64_t _charged_under(const struct offcpu_idle *o, const char *fn)
{
	uint64_t sum = 0;

	for (uint32_t i = 0; i < o->p->nsamples; i++) {
		const struct profile_sample *s = &o->p->samples[i];
		uint32_t n;
		const uint32_t *f = profile__stack(o->p, s->stack, &n);

		for (uint32_t k = 0; k < n; k++) {
			if (!strcmp(profile__string(o->p, o->p->frames[f[k]].function), fn)) {
				sum += s->count;
				break;
			}
		}
	}
	return sum;
}

static void _check(struct store *st, const struct loop *l, int64_t from, int64_t to)
{
	char err[128];
	struct selector *sel = selector__parse("{pid=\"100\"}", err, sizeof(err));
	struct busy_set *busy = busy_set__new();
	struct offcpu_idle o = { .busy = busy, .from = from, .to = to };
	uint64_t load, parked;

	assert_non_null(sel);
	assert_non_null(busy);
	/* As the route builds it: the kernels clipped to the window. */
	for (int i = 0; i < l->nkernels; i++) {
		int64_t a = l->kernels[i] > from ? l->kernels[i] : from;
		int64_t b = l->kernels[i] + KERNEL < to ? l->kernels[i] + KERNEL : to;

		assert_int_equal(busy_set__add(busy, a, b), 0);
	}
	busy_set__finish(busy);
	assert_int_equal(offcpu_idle__read(st, sel, PID, &o), 0);
	assert_int_equal(o.ntids, 2);
	load = _charged_under(&o, "load_batch_blocked");
	parked = _charged_under(&o, "backward_worker");
	/* All four loads, the last gap's too; the parked thread only in the short gaps. */
	if (!(load >= 0.99 * (double)o.idle_ns && parked < 2 * MS))
		fail_msg("from T0%+lld us, main tid %u, backward tid %u: load_batch_blocked "
			 "%llu ns, backward_worker %llu ns of %lld ns", (long long)(from - T0) / US,
			 l->tid_main, l->tid_bw, (unsigned long long)load,
			 (unsigned long long)parked, (long long)o.idle_ns);
	assert_true(o.idle_ns > ROUNDS * (290 * MS));
	offcpu_idle__release(&o);
	busy_set__free(busy);
	selector__free(sel);
}

/*
 * The window starts where the UI's millisecond rounding may put it: before
 * the main thread's first launch (each thread then ended as many gaps as
 * the other) or inside its first kernel (the backward thread ended one
 * more). Both thread orders: a tie must not go to the lower tid.
 */
static void test_last_gap_goes_to_the_step_launcher(void **state)
{
	static const uint32_t tids[][2] = { { 100, 104 }, { 100, 97 } };
	char dir[64];

	(void)state;
	for (size_t t = 0; t < sizeof(tids) / sizeof(tids[0]); t++) {
		struct loop l;
		struct store *st;

		assert_non_null(tmpdir_make(dir, sizeof(dir), "test-gpu-idle-offcpu"));
		st = store_open_or_fail(dir);
		_make_loop(&l, tids[t][0], tids[t][1]);
		assert_int_equal(store__write(st, "node-a", l.b), 0);
		/* The loop's printed end is just after the last read() returned. */
		_check(st, &l, T0, T0 + ROUNDS * STEP + 250 * US);
		_check(st, &l, T0 + 1 * MS, T0 + ROUNDS * STEP + 250 * US);
		store__close(st);
		batch__free(l.b);
		tmpdir_remove(dir);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_last_gap_goes_to_the_step_launcher),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
