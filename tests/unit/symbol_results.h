/* SPDX-License-Identifier: Apache-2.0 */
/*
 * What the symbolizer tests share: a symbol_cb that records every answer,
 * and a table-driven check of a batch resolver against expected names.
 * Include after <cmocka.h>.
 */
#ifndef FW_TESTS_SYMBOL_RESULTS_H
#define FW_TESTS_SYMBOL_RESULTS_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "symbolize/elf_file.h"

#define MAXQ 32

struct results {
	int calls[MAXQ];
	char *name[MAXQ];
	uint64_t off[MAXQ];
};

static inline void collect(void *ctx, size_t i, const char *name, uint64_t off)
{
	struct results *r = ctx;

	assert_true(i < MAXQ);
	r->calls[i]++;
	free(r->name[i]);
	r->name[i] = name ? strdup(name) : NULL;
	r->off[i] = off;
}

static inline void results_check_once(const struct results *r, size_t n)
{
	for (size_t i = 0; i < MAXQ; i++)
		assert_int_equal(r->calls[i], i < n ? 1 : 0);
}

static inline void results_free(struct results *r)
{
	for (size_t i = 0; i < MAXQ; i++)
		free(r->name[i]);
	memset(r, 0, sizeof(*r));
}

struct q {
	uint64_t addr;
	const char *name;	/* NULL: must stay unresolved */
	uint64_t off;
};

static inline void check_resolver(int (*resolve)(const char *, const uint64_t *, size_t, symbol_cb, void *),
			   const char *path, const struct q *qs, size_t n)
{
	struct results r = { 0 };
	uint64_t addrs[MAXQ];

	assert_true(n <= MAXQ);
	for (size_t i = 0; i < n; i++)
		addrs[i] = qs[i].addr;
	assert_int_equal(resolve(path, addrs, n, collect, &r), 0);
	results_check_once(&r, n);
	for (size_t i = 0; i < n; i++) {
		if (!qs[i].name) {
			if (r.name[i])
				fail_msg("%#llx: got %s, want unresolved",
					 (unsigned long long)qs[i].addr, r.name[i]);
			continue;
		}
		if (!r.name[i])
			fail_msg("%#llx: unresolved, want %s", (unsigned long long)qs[i].addr,
				 qs[i].name);
		assert_string_equal(r.name[i], qs[i].name);
		assert_int_equal(r.off[i], qs[i].off);
	}
	results_free(&r);
}

#endif
