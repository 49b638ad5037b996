/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Golden files for the unit tests, in the style of FlameGraph's test.sh:
 * output is compared byte for byte with a file under tests/golden/, and
 * FW_UPDATE_GOLDEN=1 rewrites the file instead, so that `git diff` shows
 * what changed. Include after <cmocka.h>.
 */
#ifndef FW_TESTS_GOLDEN_H
#define FW_TESTS_GOLDEN_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline char *golden__read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	if (!f)
		return NULL;
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = malloc(n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	*len = n;
	return buf;
}

static inline void golden__check(const char *path, const char *got, size_t got_len)
{
	const char *update = getenv("FW_UPDATE_GOLDEN");
	size_t want_len = 0;
	char *want;

	if (update && strcmp(update, "1") == 0) {
		FILE *f = fopen(path, "wb");

		assert_non_null(f);
		assert_int_equal(fwrite(got, 1, got_len, f), got_len);
		assert_int_equal(fclose(f), 0);
		print_message("updated %s\n", path);
		return;
	}
	want = golden__read_file(path, &want_len);
	if (!want)
		fail_msg("cannot read %s (run from the repository root; "
			 "FW_UPDATE_GOLDEN=1 creates it)", path);
	if (want_len != got_len || memcmp(want, got, got_len) != 0) {
		print_error("--- %s\n%s--- got\n%s", path, want, got);
		free(want);
		fail_msg("output differs from %s; FW_UPDATE_GOLDEN=1 rewrites it", path);
	}
	free(want);
}

#endif
