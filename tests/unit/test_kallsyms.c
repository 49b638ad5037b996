// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "symbolize/kallsyms.h"

#define BASIC FW_TEST_DATA "/fixtures/kallsyms_basic"
#define ZERO FW_TEST_DATA "/fixtures/kallsyms_zero"
#include "symbol_results.h"

static void check(const char *path, const struct q *qs, size_t n)
{
	check_resolver(kallsyms__resolve, path, qs, n);
}

/* The fixture is deliberately unsorted, with modules first. */
static void test_core_text(void **state)
{
	static const struct q qs[] = {
		/* Aliases: the name with the fewest leading underscores. */
		{ 0xffffffff81000005, "srso_alias_untrain_ret", 5 },
		{ 0xffffffff81000110, "do_one", 0 },
		{ 0xffffffff8100010f, "__pfx_do_one", 0xf },
		{ 0xffffffff81000250, "do_two", 0x50 },
		{ 0xffffffff81000290, "r::inner::work", 0x10 },	/* Rust v0, demangled */
		{ 0xffffffff810003ff, "last_core_fn", 0xff },
		{ 0xffffffff81000110, "do_one", 0 },			/* duplicate */
		{ 0xffffffff80000000, NULL, 0 },			/* below everything */
	};

	check(BASIC, qs, sizeof(qs) / sizeof(qs[0]));
}

static void test_region_ends(void **state)
{
	static const struct q qs[] = {
		{ 0xffffffff81000400, NULL, 0 },	/* at _etext */
		{ 0xffffffff81000700, NULL, 0 },	/* between _etext and rodata */
		{ 0xffffffff81000900, NULL, 0 },	/* after a data symbol */
		{ 0xffffffff81100000, "start_kernel_init", 0 },
		{ 0xffffffff811003ff, "start_kernel_init", 0x3ff },
		{ 0xffffffff81100400, NULL, 0 },	/* at _einittext */
		{ 0xffffffffc0a013ff, "bar [mod]", 0x1ff },
		{ 0xffffffffc0a01400, NULL, 0 },	/* module data follows */
		/* The last symbol of all: bounded by KALLSYMS_MAX_OFFSET. */
		{ 0xffffffffc0b00000 + KALLSYMS_MAX_OFFSET - 1,
		  "ftrace_trampoline [__builtin__ftrace]", KALLSYMS_MAX_OFFSET - 1 },
		{ 0xffffffffc0b00000 + KALLSYMS_MAX_OFFSET, NULL, 0 },
		{ UINT64_MAX, NULL, 0 },
	};

	check(BASIC, qs, sizeof(qs) / sizeof(qs[0]));
}

static void test_modules(void **state)
{
	static const struct q qs[] = {
		{ 0xffffffffc0a01000, "foo [mod]", 0 },
		{ 0xffffffffc0a01010, "foo [mod]", 0x10 },
		{ 0xffffffffc0a011ff, "foo [mod]", 0x1ff },
		{ 0xffffffffc0a01200, "bar [mod]", 0 },
		{ 0xffffffffc0a02004, "bpf_prog_6deef7357e7b4530_sd_fw_ingress [bpf]", 4 },
		{ 0xffffffffc0b00010, "ftrace_trampoline [__builtin__ftrace]", 0x10 },
	};

	check(BASIC, qs, sizeof(qs) / sizeof(qs[0]));
}

static void test_zero_addresses(void **state)
{
	uint64_t addrs[2] = { 0xffffffff81000110, 0 };
	struct results r = { 0 };

	/* Twice: the second call must fail the same way (and warn no more). */
	for (int round = 0; round < 2; round++) {
		assert_int_equal(kallsyms__resolve(ZERO, addrs, 2, collect, &r), -EPERM);
		results_check_once(&r, 2);
		assert_null(r.name[0]);
		assert_null(r.name[1]);
		results_free(&r);
	}
}

static void test_missing_and_invalid(void **state)
{
	uint64_t addrs[3] = { 1, 2, 3 };
	struct results r = { 0 };

	assert_int_equal(kallsyms__resolve(FW_TEST_DATA "/fixtures/no_such_file", addrs, 3,
					   collect, &r), -ENOENT);
	results_check_once(&r, 3);
	for (int i = 0; i < 3; i++)
		assert_null(r.name[i]);
	results_free(&r);

	assert_int_equal(kallsyms__resolve(BASIC, addrs, 0, collect, &r), 0);
	assert_int_equal(kallsyms__resolve(BASIC, NULL, 3, collect, &r), -EINVAL);
	assert_int_equal(kallsyms__resolve(BASIC, addrs, 3, NULL, &r), -EINVAL);
	assert_int_equal(kallsyms__resolve(NULL, addrs, 3, collect, &r), -EINVAL);
	results_check_once(&r, 0);
}

/*
 * The real table, when this process may read it: a unique, well-known
 * function must come back by name. Skipped without kallsyms or privileges.
 */
static void test_proc_kallsyms(void **state)
{
	FILE *fp = fopen("/proc/kallsyms", "r");
	unsigned long long addr = 0, a;
	struct results r = { 0 };
	char line[512], name[256], type;
	uint64_t q[1];
	int rc;

	if (!fp)
		skip();
	while (fgets(line, sizeof(line), fp)) {
		if (sscanf(line, "%llx %c %255s", &a, &type, name) == 3 &&
		    (type == 'T' || type == 't') && !strcmp(name, "schedule")) {
			addr = a;
			break;
		}
	}
	fclose(fp);
	if (!addr)
		skip();
	q[0] = addr + 1;
	rc = kallsyms__resolve("/proc/kallsyms", q, 1, collect, &r);
	if (rc == -EPERM)
		skip();
	assert_int_equal(rc, 0);
	results_check_once(&r, 1);
	assert_non_null(r.name[0]);
	assert_string_equal(r.name[0], "schedule");
	assert_int_equal(r.off[0], 1);
	results_free(&r);
}

/* The in-memory table agents keep names what the two-pass resolver names. */
static void test_table_agrees(void **state)
{
	static const struct { uint64_t addr; const char *name; uint64_t off; } qs[] = {
		{ 0xffffffff81000005, "srso_alias_untrain_ret", 5 },
		{ 0xffffffff81000110, "do_one", 0 },
		{ 0xffffffff8100010f, "__pfx_do_one", 0xf },
		{ 0xffffffff81000250, "do_two", 0x50 },
		{ 0xffffffff81000290, "r::inner::work", 0x10 },
		{ 0xffffffff810003ff, "last_core_fn", 0xff },
		{ 0xffffffff81000400, NULL, 0 },	/* at _etext */
	};
	struct kallsyms_table t;
	uint64_t off;

	assert_int_equal(kallsyms__load(FW_TEST_DATA "/fixtures/kallsyms_basic", &t), 0);
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		const char *name = kallsyms__lookup(&t, qs[i].addr, &off);

		if (!qs[i].name) {
			assert_null(name);
			continue;
		}
		assert_non_null(name);
		assert_string_equal(name, qs[i].name);
		assert_int_equal(off, qs[i].off);
	}
	kallsyms__table_free(&t);
	assert_int_equal(kallsyms__load(ZERO, &t), -EPERM);
}

struct many {
	char **name;
	uint64_t *off;
	int *calls;
};

static void collect_many(void *ctx, size_t i, const char *name, uint64_t off)
{
	struct many *m = ctx;

	m->calls[i]++;
	free(m->name[i]);
	m->name[i] = name ? strdup(name) : NULL;
	m->off[i] = off;
}

/*
 * The compact table against the two-pass resolver on this machine's
 * /proc/kallsyms: the same name and offset for an address inside every
 * 23rd text symbol, whatever block its name was compressed in; and the
 * table is compact (the plain array of addresses and names it replaces
 * took ~46 bytes a symbol). Skipped without kallsyms or privileges.
 */
static void test_table_agrees_proc(void **state)
{
	FILE *fp = fopen("/proc/kallsyms", "r");
	struct kallsyms_table t;
	struct many r;
	uint64_t *q = NULL;
	size_t nq = 0, cap = 0, nline = 0, named = 0;
	unsigned long long a;
	char line[1024], name[512], type;
	int rc;

	(void)state;
	if (!fp)
		skip();
	while (fgets(line, sizeof(line), fp)) {
		if (sscanf(line, "%llx %c %511s", &a, &type, name) != 3 || !a ||
		    !strchr("tTwW", type) || nline++ % 23)
			continue;
		if (nq == cap) {
			cap = cap ? cap * 2 : 1024;
			q = realloc(q, cap * sizeof(*q));
			assert_non_null(q);
		}
		q[nq++] = a + 1;
	}
	fclose(fp);
	if (nq < 100) {
		free(q);
		skip();
	}
	rc = kallsyms__load("/proc/kallsyms", &t);
	if (rc == -EPERM) {
		free(q);
		skip();
	}
	assert_int_equal(rc, 0);
	assert_true(kallsyms__memory(&t) < t.n * 12);
	r.name = calloc(nq, sizeof(*r.name));
	r.off = calloc(nq, sizeof(*r.off));
	r.calls = calloc(nq, sizeof(*r.calls));
	assert_true(r.name && r.off && r.calls);
	rc = kallsyms__resolve("/proc/kallsyms", q, nq, collect_many, &r);
	assert_int_equal(rc, 0);
	for (size_t i = 0; i < nq; i++)
		assert_int_equal(r.calls[i], 1);
	for (size_t i = 0; i < nq; i++) {
		uint64_t off = 0;
		const char *got = kallsyms__lookup(&t, q[i], &off);

		if (!r.name[i]) {
			continue;	/* a 1-byte symbol before a data region: the resolver stops there */
		}
		if (!got)
			fail_msg("%#llx: the resolver names %s, the table nothing",
				 (unsigned long long)q[i], r.name[i]);
		if (strcmp(got, r.name[i]) || off != r.off[i])
			fail_msg("%#llx: the resolver names %s+%#llx, the table %s+%#llx",
				 (unsigned long long)q[i], r.name[i], (unsigned long long)r.off[i],
				 got, (unsigned long long)off);
		named++;
	}
	assert_true(named > nq * 9 / 10);
	/* Names expanded once are kept: the same pointer the second time. */
	{
		uint64_t off;
		const char *a1 = kallsyms__lookup(&t, q[nq / 2], &off);

		assert_ptr_equal(a1, kallsyms__lookup(&t, q[nq / 2], &off));
	}
	for (size_t i = 0; i < nq; i++)
		free(r.name[i]);
	free(r.name);
	free(r.off);
	free(r.calls);
	kallsyms__table_free(&t);
	free(q);
}

/*
 * Names that reach the compressor out of address order, across many
 * blocks: 1,000 functions listed in a scrambled order (modules and BPF
 * programs do this in /proc/kallsyms), each with an alias that must lose.
 */
static void test_table_scrambled(void **state)
{
	char path[] = "/tmp/fw-kallsyms-XXXXXX";
	int fd = mkstemp(path);
	FILE *fp = fd >= 0 ? fdopen(fd, "w") : NULL;
	struct kallsyms_table t;
	const unsigned n = 1000;

	(void)state;
	assert_non_null(fp);
	for (unsigned j = 0; j < n; j++) {
		unsigned i = (j * 7919u) % n;	/* 7919 is prime: a permutation */

		fprintf(fp, "%llx T __alias_%u\n", 0xffffffff81000000ull + i * 0x40ull, i);
		fprintf(fp, "%llx T fn_%u%s\n", 0xffffffff81000000ull + i * 0x40ull, i,
			i % 3 ? "" : "\t[mod]");
	}
	fclose(fp);
	assert_int_equal(kallsyms__load(path, &t), 0);
	unlink(path);
	assert_int_equal(t.n, n);
	for (unsigned i = 0; i < n; i++) {
		char want[32];
		uint64_t off = 0;
		const char *got = kallsyms__lookup(&t, 0xffffffff81000000ull + i * 0x40ull + 5, &off);

		snprintf(want, sizeof(want), "fn_%u%s", i, i % 3 ? "" : " [mod]");
		assert_non_null(got);
		assert_string_equal(got, want);
		assert_int_equal(off, 5);
	}
	kallsyms__table_free(&t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_table_agrees),
		cmocka_unit_test(test_core_text),
		cmocka_unit_test(test_region_ends),
		cmocka_unit_test(test_modules),
		cmocka_unit_test(test_zero_addresses),
		cmocka_unit_test(test_missing_and_invalid),
		cmocka_unit_test(test_proc_kallsyms),
		cmocka_unit_test(test_table_agrees_proc),
		cmocka_unit_test(test_table_scrambled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
