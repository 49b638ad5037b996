// SPDX-License-Identifier: Apache-2.0
/*
 * src/compat/libm_lazy.c: the executables' maths functions load libm.so.6
 * on first use and answer exactly as libm does. Linked like the
 * executables, without -lm: a missing function fails the link.
 */
#include <dlfcn.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>

typedef double (*fn1)(double);
typedef double (*fn2)(double, double);

static void *_libm(void)
{
	void *lm = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);

	assert_non_null(lm);
	return lm;
}

/* volatile: the compiler must call ours, not fold a constant. */
static volatile double x = 0.37, y = 1.9;

int main(void);

static void test_loaded_on_first_use(void **state)
{
	Dl_info info, self;

	/* Not libm at start: the executable's own definition takes the reference. */
	assert_null(dlopen("libm.so.6", RTLD_NOW | RTLD_NOLOAD));
	assert_true(dladdr((void *)&exp, &info) && dladdr((void *)&main, &self));
	assert_ptr_equal(info.dli_fbase, self.dli_fbase);
	assert_true(exp(x) > 1.44 && exp(x) < 1.45);
	assert_non_null(dlopen("libm.so.6", RTLD_NOW | RTLD_NOLOAD));
}

static void test_same_answers_as_libm(void **state)
{
	static const struct { const char *name; fn1 ours; } one[] = {
		{ "acos", acos }, { "acosh", acosh }, { "asin", asin }, { "asinh", asinh },
		{ "atan", atan }, { "atanh", atanh }, { "cos", cos }, { "cosh", cosh },
		{ "exp", exp }, { "log", log }, { "sin", sin }, { "sinh", sinh },
		{ "sqrt", sqrt }, { "tan", tan }, { "tanh", tanh }, { "trunc", trunc },
	};
	static const struct { const char *name; fn2 ours; } two[] = {
		{ "atan2", atan2 }, { "fmod", fmod }, { "pow", pow },
	};
	void *lm = _libm();

	for (size_t i = 0; i < sizeof(one) / sizeof(one[0]); i++) {
		fn1 theirs = (fn1)dlsym(lm, one[i].name);
		double v = one[i].name[1] == 'c' && one[i].name[0] == 'a' && one[i].name[4] == 'h' ?
			   1 + x : x;	/* acosh wants x >= 1 */

		assert_non_null(theirs);
		if (one[i].ours(v) != theirs(v))
			fail_msg("%s(%g): %.17g, libm %.17g", one[i].name, v, one[i].ours(v), theirs(v));
	}
	for (size_t i = 0; i < sizeof(two) / sizeof(two[0]); i++) {
		fn2 theirs = (fn2)dlsym(lm, two[i].name);

		assert_non_null(theirs);
		if (two[i].ours(y, x) != theirs(y, x))
			fail_msg("%s: %.17g, libm %.17g", two[i].name, two[i].ours(y, x), theirs(y, x));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_loaded_on_first_use),
		cmocka_unit_test(test_same_answers_as_libm),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
