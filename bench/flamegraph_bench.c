// SPDX-License-Identifier: Apache-2.0
/*
 * What building a flame graph reply costs the server (issue 26: a 50k-stack
 * store spent most of a query building the whole tree only to trim it).
 *
 *   gcc -std=gnu11 -D_GNU_SOURCE -O2 -g -Isrc bench/flamegraph_bench.c \
 *       src/format/flamegraph.c src/common/flametree.c src/common/profile.c src/common/intern.c \
 *       src/common/strbuf.c -o build/flamegraph_bench
 *   build/flamegraph_bench [STACKS [MAX_NODES [REPEATS [OUT]]]]   # 50000 20000 7
 *
 * A fleet-like profile: STACKS distinct stacks of depth 20 to 60, walked
 * down a synthetic call tree whose callees are picked with Zipf-like
 * popularity (so stacks share long prefixes, as real ones do), 40
 * processes, counts Zipf-like too. Prints the median and range of
 * flamegraph__write_json() over REPEATS runs and the reply's size; OUT, if
 * given, gets the reply (to compare two builds' replies).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/profile.h"
#include "common/strbuf.h"
#include "format/flamegraph.h"

#define FANOUT 12
#define NAMES 4000

static uint64_t _rng = 0x9e3779b97f4a7c15ULL;

static uint64_t _next(void)
{
	_rng ^= _rng << 13;
	_rng ^= _rng >> 7;
	_rng ^= _rng << 17;
	return _rng;
}

/* 0..n-1, small values far likelier (about 1/(k+1)). */
static uint32_t _zipf(uint32_t n)
{
	double u = (double)(_next() >> 11) / 9007199254740992.0;

	return (uint32_t)((double)n * u * u * u) % n;
}

static double _ms(const struct timespec *a, const struct timespec *b)
{
	return (double)(b->tv_sec - a->tv_sec) * 1e3 + (double)(b->tv_nsec - a->tv_nsec) / 1e6;
}

static int _cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint32_t nstacks = argc > 1 ? (uint32_t)atoi(argv[1]) : 50000;
	size_t max_nodes = argc > 2 ? (size_t)atoi(argv[2]) : 20000;
	int reps = argc > 3 ? atoi(argv[3]) : 7;
	struct profile *p = profile__new(1000000, 0);
	uint32_t frames[64], comm[40], fid[NAMES];
	double ms[64];
	size_t out_len = 0;
	int64_t bin;

	if (!p || reps < 1 || reps > 64)
		return 2;
	bin = profile__intern_mapping(p, "/usr/lib/libtorch_cpu.so", NULL);
	for (uint32_t i = 0; i < NAMES; i++) {
		char name[32];

		fid[i] = (uint32_t)profile__intern_frame(p, FRAME_NATIVE, (uint32_t)bin, 0x1000 + i);
		snprintf(name, sizeof(name), "fn_%u", i);
		profile__set_frame_name(p, fid[i], name, NULL, 0);
	}
	for (uint32_t i = 0; i < 40; i++) {
		char name[16];

		snprintf(name, sizeof(name), "proc%u", i);
		comm[i] = (uint32_t)profile__intern_string(p, name);
	}
	for (uint32_t s = 0; profile__nstacks(p) < nstacks; s++) {
		uint32_t depth = 20 + (uint32_t)(_next() % 41), node = 0;
		int64_t stack;

		for (uint32_t d = 0; d < depth; d++) {
			/* The callee: child k of this node, k Zipf-like. */
			node = (node * FANOUT + 1 + _zipf(FANOUT)) % 1000003;
			frames[d] = fid[node % NAMES];
		}
		stack = profile__intern_stack(p, frames, depth);
		if (stack < 0)
			return 1;
		profile__add_sample(p, (uint32_t)stack, 1000 + (uint32_t)(s % 40), 0, 0,
				    comm[s % 40], 1 + _zipf(1000));
	}
	for (int r = 0; r < reps; r++) {
		struct strbuf out = STRBUF_INIT;
		struct timespec a, b;

		clock_gettime(CLOCK_MONOTONIC, &a);
		if (flamegraph__write_json(p, "samples", max_nodes, &out))
			return 1;
		clock_gettime(CLOCK_MONOTONIC, &b);
		ms[r] = _ms(&a, &b);
		out_len = out.len;
		if (argc > 4 && r == 0) {
			FILE *f = fopen(argv[4], "w");

			if (!f || fwrite(out.buf, 1, out.len, f) != out.len || fclose(f))
				return 1;
		}
		strbuf__release(&out);
	}
	qsort(ms, (size_t)reps, sizeof(ms[0]), _cmp);
	printf("stacks %u samples %u max_nodes %zu: %.1f ms median [%.1f, %.1f], reply %zu bytes\n",
	       profile__nstacks(p), p->nsamples, max_nodes, ms[reps / 2], ms[0], ms[reps - 1],
	       out_len);
	profile__free(p);
	return 0;
}
