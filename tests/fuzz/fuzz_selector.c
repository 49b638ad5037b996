// SPDX-License-Identifier: Apache-2.0
/*
 * libFuzzer target for the label selector parser: whatever parses must
 * format to a canonical text that parses back to the same text, and every
 * rejection must come with a message. Build and run:
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Isrc \
 *	tests/fuzz/fuzz_selector.c src/store/selector.c -o /tmp/fuzz_selector
 *   /tmp/fuzz_selector -max_total_time=180 tests/fuzz/corpus/selector
 */
#include <errno.h>
#include <regex.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/selector.h"

static char *_format(const struct selector *s)
{
	int n = selector__format(s, NULL, 0);
	char *buf;

	if (n < 2)
		abort();
	buf = malloc((size_t)n + 1);
	if (!buf || selector__format(s, buf, (size_t)n + 1) != n ||
	    strlen(buf) != (size_t)n)
		abort();
	return buf;
}

/*
 * The ^(pattern)$ wrapping must mean "the whole value matches". Cross-check
 * it with the unwrapped pattern: a match spanning the whole value exists
 * exactly when the leftmost-longest match does.
 */
static void _check_anchoring(const struct selector_matcher *m, const char *v)
{
	regmatch_t pm[1];
	regex_t re;
	bool whole, got;

	if (m->op != SEL_RE && m->op != SEL_NRE)
		return;
	if (regcomp(&re, m->value, REG_EXTENDED))
		return;		/* '*' and the like are valid only in a group */
	whole = regexec(&re, v, 1, pm, 0) == 0 && pm[0].rm_so == 0 &&
		(size_t)pm[0].rm_eo == strlen(v);
	regfree(&re);
	got = selector_matcher__matches(m, v);
	if (got != (m->op == SEL_RE ? whole : !whole)) {
		fprintf(stderr, "anchoring: /%s/ on \"%s\": %d\n", m->value, v, got);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct selector *s, *s2;
	char err[256], *text, *a, *b;
	const struct selector_matcher *m;

	text = malloc(size + 1);
	if (!text)
		return 0;
	memcpy(text, data, size);
	text[size] = '\0';

	s = selector__parse(text, err, sizeof(err));
	if (!s) {
		if (errno != EINVAL || strncmp(err, "at ", 3))
			abort();
		goto out;
	}
	/* Every matcher against every value in the selector, and absent. */
	for (size_t i = 0; i < selector__count(s); i++) {
		m = selector__matcher(s, i);
		if (m->op == SEL_EQ && !selector_matcher__matches(m, m->value))
			abort();
		if (m->op == SEL_NE && selector_matcher__matches(m, m->value))
			abort();
		(void)selector_matcher__matches(m, NULL);
		for (size_t j = 0; j < selector__count(s); j++)
			_check_anchoring(m, selector__matcher(s, j)->value);
	}
	a = _format(s);
	s2 = selector__parse(a, err, sizeof(err));
	if (!s2) {
		/* Escaping may grow a near-limit input past the limit. */
		if (strlen(a) <= SELECTOR_MAX_TEXT) {
			fprintf(stderr, "canonical text rejected: %s\n%s\n", err, a);
			abort();
		}
	} else {
		b = _format(s2);
		if (strcmp(a, b)) {
			fprintf(stderr, "not a fixed point:\n%s\n%s\n", a, b);
			abort();
		}
		free(b);
		selector__free(s2);
	}
	free(a);
	selector__free(s);
out:
	free(text);
	return 0;
}
