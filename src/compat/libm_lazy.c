// SPDX-License-Identifier: Apache-2.0
/*
 * The maths functions flamewatch refers to, loaded from libm.so.6 on first
 * use instead of at start.
 *
 * No flamewatch code calls them; SQLite (linked statically, for the store)
 * refers to these 19 for its SQL maths functions. With
 * libm.so.6 as a needed library, every process (the node agent too) paid
 * RSS for it: ld.so runs libm's IFUNC resolvers as it loads it,
 * and the kernel maps 64 KiB of text around each page they touch. These
 * definitions take the executable's references, so that libm is loaded
 * only by a process whose SQL calls one of them.
 *
 * Linked into the flamewatch executables only (not into libflamewatch.a):
 * tests link libm as usual.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

static void *_libm_sym(const char *name)
{
	static void *lib;
	void *lm = __atomic_load_n(&lib, __ATOMIC_ACQUIRE), *s;

	if (!lm) {
		lm = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);
		__atomic_store_n(&lib, lm, __ATOMIC_RELEASE);
	}
	s = lm ? dlsym(lm, name) : NULL;
	if (!s) {
		/* No result to return: a wrong number would be worse. */
		fprintf(stderr, "flamewatch: fatal: cannot load %s from libm.so.6: %s\n", name,
			dlerror());
		abort();
	}
	return s;
}

#define LAZY_MATH(fn, params, args)						\
	double fn params								\
	{										\
		static double (*f) params;						\
		double (*p) params = __atomic_load_n(&f, __ATOMIC_RELAXED);		\
										\
		if (!p) {								\
			p = (double (*) params)_libm_sym(#fn);				\
			__atomic_store_n(&f, p, __ATOMIC_RELAXED);			\
		}									\
		return p args;								\
	}

#define LAZY_MATH1(fn) LAZY_MATH(fn, (double x), (x))
#define LAZY_MATH2(fn) LAZY_MATH(fn, (double x, double y), (x, y))

LAZY_MATH1(acos) LAZY_MATH1(acosh) LAZY_MATH1(asin) LAZY_MATH1(asinh)
LAZY_MATH1(atan) LAZY_MATH1(atanh) LAZY_MATH1(cos) LAZY_MATH1(cosh)
LAZY_MATH1(exp) LAZY_MATH1(log) LAZY_MATH1(sin) LAZY_MATH1(sinh)
LAZY_MATH1(sqrt) LAZY_MATH1(tan) LAZY_MATH1(tanh) LAZY_MATH1(trunc)
LAZY_MATH2(atan2) LAZY_MATH2(fmod) LAZY_MATH2(pow)
