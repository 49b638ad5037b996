// SPDX-License-Identifier: Apache-2.0
/*
 * Every mangled name here was produced by a real compiler (g++ 12, rustc
 * 1.95 with -C symbol-mangling-version=legacy and =v0) and read back with
 * nm, so the tests pin what Debian 12's libiberty does with real input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "symbolize/demangle.h"

static void expect(const char *mangled, const char *want)
{
	char *got = demangle(mangled);
	const char *shown = mangled ? mangled : "(NULL)";

	if (!want) {
		if (got)
			fail_msg("demangle(%s) = \"%s\", want NULL", shown, got);
		return;
	}
	if (!got)
		fail_msg("demangle(%s) = NULL, want \"%s\"", shown, want);
	assert_string_equal(got, want);
	free(got);
}

static void test_cpp_namespaces_templates(void **state)
{
	expect("_ZN2ns6WidgetIiE4spinEv", "ns::Widget<int>::spin()");
	expect("_ZN2ns1fERSt6vectorINSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEESaIS6_EEPKc",
	       "ns::f(std::vector<std::__cxx11::basic_string<char, std::char_traits<char>, "
	       "std::allocator<char> >, std::allocator<std::__cxx11::basic_string<char, "
	       "std::char_traits<char>, std::allocator<char> > > >&, char const*)");
	expect("_ZN1a1KD1Ev", "a::K::~K()");
	expect("_ZN1a1KC2Ev", "a::K::K()");
	expect("_ZN1a1K2stEi", "a::K::st(int)");
}

/* Template functions encode their return type; frame labels drop it. */
static void test_cpp_template_function_no_return_type(void **state)
{
	expect("_ZN1a5twiceIiEET_S1_", "a::twice<int>(int)");
	expect("_ZN1a5twiceIdEET_S1_", "a::twice<double>(double)");
	expect("_ZSt4sortIN9__gnu_cxx17__normal_iteratorIPiSt6vectorIiSaIiEEEEEvT_S7_",
	       "std::sort<__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > > >"
	       "(__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >, "
	       "__gnu_cxx::__normal_iterator<int*, std::vector<int, std::allocator<int> > >)");
}

static void test_cpp_operators(void **state)
{
	expect("_ZN2ns1VplERKS0_", "ns::V::operator+(ns::V const&)");
	expect("_ZNK2ns6WidgetIiEeqERKS1_",
	       "ns::Widget<int>::operator==(ns::Widget<int> const&) const");
	expect("_ZN1AIlE1BclEv", "A<long>::B::operator()()");
	expect("_ZNK1AIlE1BltERKS1_", "A<long>::B::operator<(A<long>::B const&) const");
	expect("_ZdlPv", "operator delete(void*)");
}

/* GCC clones (.cold, .isra.0) keep their suffix: they are different code. */
static void test_cpp_clone_suffix(void **state)
{
	expect("_ZN2ns6WidgetIiE4spinEv.cold", "ns::Widget<int>::spin() [clone .cold]");
	expect("_ZN2ns6WidgetIiE4spinEv.isra.0", "ns::Widget<int>::spin() [clone .isra.0]");
}

static void test_rust_legacy(void **state)
{
	expect("_ZN1r5inner4work17hcbd32f4ab67950b2E", "r::inner::work");
	expect("_ZN1r5entry17h0815fc91b4cd6e3aE", "r::entry");
	expect("_ZN1r5inner10S$LT$T$GT$4spin17h1bed0af83810b748E", "r::inner::S<T>::spin");
	expect("_ZN63_$LT$r..inner..S$LT$u8$GT$$u20$as$u20$core..ops..arith..Add$GT$3add17h57b2b25835635cdfE",
	       "<r::inner::S<u8> as core::ops::arith::Add>::add");
	expect("_ZN4main4main28_$u7b$$u7b$closure$u7d$$u7d$17h77506636394b2861E",
	       "main::main::{{closure}}");
	/* LLVM's local-symbol suffix goes too. */
	expect("_ZN1r5entry17h0815fc91b4cd6e3aE.llvm.12345", "r::entry");
}

static void test_rust_v0(void **state)
{
	expect("_RNvNtCs2OpA4fNwd7R_1r5inner4work", "r::inner::work");
	expect("_RNvCs2OpA4fNwd7R_1r5entry", "r::entry");
	expect("_RNvMNtCs2OpA4fNwd7R_1r5innerINtB2_1SmE4spinB4_", "<r::inner::S<u32>>::spin");
	expect("_RNvXs_NtCs2OpA4fNwd7R_1r5innerINtB4_1ShENtNtNtCsgEmfK2I1SDS_4core3ops5arith3Add3add",
	       "<r::inner::S<u8> as core::ops::arith::Add>::add");
	expect("_RNCNvCs32gj3y4fnmh_4main4main0B3_", "main::main::{closure#0}");
	expect("_RNCNvNtCsjrHSEGnQ3l9_3std9panicking12default_hook0B5_",
	       "std::panicking::default_hook::{closure#0}");
}

static void test_not_mangled(void **state)
{
	expect("qsort", NULL);
	expect("main", NULL);
	expect("__libc_start_main", NULL);
	/* Go symbols are readable as they are. */
	expect("main.main", NULL);
	expect("runtime.gcBgMarkWorker", NULL);
	expect("net/http.(*conn).serve", NULL);
	expect("", NULL);
	expect(NULL, NULL);
}

static void test_garbage(void **state)
{
	expect("_Zxyz", NULL);
	expect("_Z", NULL);
	expect("_R", NULL);
	expect("_RNvC", NULL);
	expect("_ZN1r5entry", NULL);
	/* A legacy Rust hash one digit short is no valid mangling at all. */
	expect("_ZN3foo3bar17h0815fc91b4cd6e3E", NULL);
	/* Deep nesting must hit libiberty's recursion limit, not the stack. */
	{
		size_t n = 100000;
		char *deep = malloc(2 + 2 * n + 2);

		assert_non_null(deep);
		memcpy(deep, "_Z", 2);
		for (size_t i = 0; i < n; i++)
			memcpy(deep + 2 + 2 * i, "PA", 2);
		strcpy(deep + 2 + 2 * n, "i");
		free(demangle(deep));
		free(deep);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cpp_namespaces_templates),
		cmocka_unit_test(test_cpp_template_function_no_return_type),
		cmocka_unit_test(test_cpp_operators),
		cmocka_unit_test(test_cpp_clone_suffix),
		cmocka_unit_test(test_rust_legacy),
		cmocka_unit_test(test_rust_v0),
		cmocka_unit_test(test_not_mangled),
		cmocka_unit_test(test_garbage),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
