// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/intern.h"
#include "common/profile.h"

static void test_intern_dedups_and_grows(void **state)
{
	struct intern *t = intern__new();
	char key[32];
	size_t len;

	assert_non_null(t);
	/* Enough keys to grow the index and the arena several times. */
	for (int i = 0; i < 100000; i++) {
		snprintf(key, sizeof(key), "key-%d", i);
		assert_int_equal(intern__add(t, key, strlen(key), NULL), i);
	}
	for (int i = 0; i < 100000; i += 997) {
		bool added = true;

		snprintf(key, sizeof(key), "key-%d", i);
		assert_int_equal(intern__add(t, key, strlen(key), &added), i);
		assert_false(added);
		assert_int_equal(intern__find(t, key, strlen(key)), i);
		assert_memory_equal(intern__key(t, i, &len), key, strlen(key));
		assert_int_equal(len, strlen(key));
	}
	assert_int_equal(intern__find(t, "absent", 6), -ENOENT);
	/* An empty key and keys that are prefixes of each other are distinct. */
	assert_int_equal(intern__add(t, "", 0, NULL), 100000);
	assert_int_equal(intern__add(t, "key-1", 4, NULL), 100001);
	assert_int_equal(intern__count(t), 100002);
	assert_true(intern__memory(t) > 100000 * 6);
	intern__free(t);
	intern__free(NULL);
}

static void test_profile_aggregates(void **state)
{
	struct profile *p = profile__new(1000000, 42);
	uint32_t frames[3], n;
	int64_t m, s1, s2, comm;
	const uint32_t *st;

	assert_non_null(p);
	assert_string_equal(profile__string(p, 0), "");
	m = profile__intern_mapping(p, "/bin/x", "abcd");
	assert_int_equal(profile__intern_mapping(p, "/bin/x", "abcd"), m);
	assert_int_not_equal(profile__intern_mapping(p, "/bin/x", "ef01"), m);
	assert_int_equal(p->nmappings, 2);

	frames[0] = profile__intern_frame(p, FRAME_NATIVE, m, 0x10);
	frames[1] = profile__intern_frame(p, FRAME_NATIVE, m, 0x20);
	frames[2] = profile__intern_frame(p, FRAME_KERNEL, m, 0x20);
	assert_int_equal(profile__intern_frame(p, FRAME_NATIVE, m, 0x10), frames[0]);
	assert_int_equal(p->nframes, 3);
	assert_int_equal(profile__set_frame_name(p, frames[0], "main", "x.c", 7), 0);
	assert_string_equal(profile__string(p, p->frames[frames[0]].function), "main");
	assert_int_equal(p->frames[frames[0]].line, 7);

	s1 = profile__intern_stack(p, frames, 3);
	s2 = profile__intern_stack(p, frames, 2);
	assert_int_not_equal(s1, s2);
	assert_int_equal(profile__intern_stack(p, frames, 3), s1);
	st = profile__stack(p, s1, &n);
	assert_int_equal(n, 3);
	assert_memory_equal(st, frames, sizeof(frames));

	comm = profile__intern_string(p, "worker");
	assert_int_equal(profile__add_sample(p, s1, 1, 1, 0, comm, 1), 0);
	assert_int_equal(profile__add_sample(p, s1, 1, 1, 0, comm, 2), 0);
	assert_int_equal(profile__add_sample(p, s1, 1, 2, 0, comm, 1), 0);
	assert_int_equal(profile__add_sample(p, s2, 1, 1, 1, comm, 4), 0);
	assert_int_equal(p->nsamples, 3);
	assert_int_equal(p->samples[0].count, 3);
	assert_int_equal(profile__total(p), 8);
	profile__free(p);
	profile__free(NULL);
}

static void test_named_frames_keep_their_names(void **state)
{
	struct profile *p = profile__new(1, 0);
	int64_t k = profile__intern_mapping(p, "[kernel.kallsyms]", NULL);
	int64_t a, b, again, unnamed;

	/* One KASLR address, two hosts, two functions: two frames. */
	a = profile__intern_named_frame(p, FRAME_KERNEL, k, 0xffffffff81000000ULL, "kfunc_a", NULL, 0);
	b = profile__intern_named_frame(p, FRAME_KERNEL, k, 0xffffffff81000000ULL, "kfunc_b", NULL, 0);
	again = profile__intern_named_frame(p, FRAME_KERNEL, k, 0xffffffff81000000ULL, "kfunc_a", NULL, 0);
	unnamed = profile__intern_frame(p, FRAME_KERNEL, k, 0xffffffff81000000ULL);
	assert_true(a >= 0 && b >= 0);
	assert_int_not_equal(a, b);
	assert_int_equal(a, again);
	assert_int_not_equal(unnamed, a);
	assert_int_not_equal(unnamed, b);
	assert_string_equal(profile__string(p, p->frames[a].function), "kfunc_a");
	assert_string_equal(profile__string(p, p->frames[b].function), "kfunc_b");
	profile__free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_intern_dedups_and_grows),
		cmocka_unit_test(test_profile_aggregates),
		cmocka_unit_test(test_named_frames_keep_their_names),
	};

	return cmocka_run_group_tests_name("profile", tests, NULL, NULL);
}
