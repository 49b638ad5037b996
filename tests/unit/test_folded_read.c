// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/batch.h"
#include "common/profile.h"
#include "format/folded_read.h"

static const char *const names[] = { "env" };
static const char *const values[] = { "test" };

/* The text of sample i's stack, "comm;a;b", for comparisons. */
static void _stack_text(const struct batch *b, uint32_t i, char *out, size_t len)
{
	const struct batch_sample *s = &b->samples[i];
	uint32_t n;
	const uint32_t *frames = profile__stack(b->dict, s->stack, &n);
	size_t off = (size_t)snprintf(out, len, "%s", batch__series_label(b, s->series, "comm"));

	for (uint32_t k = 0; k < n; k++)
		off += (size_t)snprintf(out + off, len - off, ";%s",
					profile__string(b->dict, b->dict->frames[frames[k]].function));
}

static void test_reads_lines(void **state)
{
	const char *text = "# a comment\n"
			   "app;main;hot 7\r\n"
			   "\n"
			   "app;main;cold 3\n"
			   "other;x 1";
	struct batch *b = batch__new(1000);
	char err[128], buf[256];

	assert_non_null(b);
	assert_int_equal(folded__read(text, strlen(text), names, values, 1, 42, b, err,
				      sizeof(err)), 0);
	assert_int_equal(b->nsamples, 3);
	_stack_text(b, 0, buf, sizeof(buf));
	assert_string_equal(buf, "app;main;hot");
	assert_int_equal(b->samples[0].value, 7);
	assert_int_equal(b->samples[0].ts_ns, 42);
	_stack_text(b, 2, buf, sizeof(buf));
	assert_string_equal(buf, "other;x");
	assert_string_equal(batch__series_label(b, b->samples[1].series, "env"), "test");
	/* main is one frame in both stacks. */
	assert_int_equal(b->dict->nframes, 4);
	batch__free(b);
}

static void _expect_error(const char *text, size_t len, int ret, const char *words)
{
	struct batch *b = batch__new(1000);
	char err[128] = "";

	assert_non_null(b);
	assert_int_equal(folded__read(text, len, names, values, 1, 1, b, err, sizeof(err)), ret);
	/* All or nothing: the good first line is not kept either. */
	assert_int_equal(b->nsamples, 0);
	if (!strstr(err, words))
		fail_msg("error '%s' does not mention '%s'", err, words);
	batch__free(b);
}

static void test_rejects_bad_lines(void **state)
{
	char deep[FOLDED_MAX_DEPTH * 2 + 64];
	size_t off = 0;

	_expect_error("a;b 1\nno_count\n", 15, -EINVAL, "line 2");
	_expect_error("a;b 1\na;b -1\n", 13, -EINVAL, "line 2: '-1'");
	_expect_error("a;b 1\na;b 0\n", 12, -EINVAL, "positive count");
	_expect_error("a;b 1\nlonely 3\n", 15, -EINVAL, "process name");
	_expect_error("a;b 1\na;;b 3\n", 13, -EINVAL, "empty frame");
	_expect_error("a;b 1\napp; 7\n", 13, -EINVAL, "no frames");
	_expect_error("a;b 1\na;b\0 3\n", 13, -EINVAL, "NUL");
	off += (size_t)snprintf(deep, sizeof(deep), "a");
	for (int i = 0; i <= FOLDED_MAX_DEPTH; i++)
		off += (size_t)snprintf(deep + off, sizeof(deep) - off, ";f");
	off += (size_t)snprintf(deep + off, sizeof(deep) - off, " 1\n");
	_expect_error(deep, off, -E2BIG, "deeper");
}

static void test_long_names_are_cut(void **state)
{
	size_t n = 5000;
	char *text = malloc(n + 16);
	struct batch *b = batch__new(1000);
	char err[128];

	assert_non_null(text);
	assert_non_null(b);
	memcpy(text, "a;", 2);
	memset(text + 2, 'x', n);
	memcpy(text + 2 + n, " 2\n", 3);
	assert_int_equal(folded__read(text, n + 5, names, values, 1, 1, b, err, sizeof(err)), 0);
	assert_int_equal(b->nsamples, 1);
	assert_int_equal(strlen(profile__string(b->dict, b->dict->frames[0].function)), 1023);
	free(text);
	batch__free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_reads_lines),
		cmocka_unit_test(test_rejects_bad_lines),
		cmocka_unit_test(test_long_names_are_cut),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
