/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_SYMBOLIZE_DEMANGLE_H
#define FW_SYMBOLIZE_DEMANGLE_H

/*
 * Demangles an Itanium C++ ("_Z...") or Rust ("_ZN...17h<hash>E" legacy,
 * "_R..." v0) symbol name with libiberty.
 *
 * Borrows name. Returns an owned, malloc'd string the caller frees, or NULL
 * when name is not mangled (C, Go, already readable JIT names), is not a valid
 * mangling, or memory ran out: in every NULL case the caller shows the raw
 * name.
 *
 * C++ names come with their parameters and qualifiers but without the return
 * type of template functions ("ns::twice<int>(int)", not "int ns::twice<int>
 * (int)"), because a frame label should start with the function's name.
 * Rust names come without the "::h<hash>" suffix and without v0 crate
 * disambiguators ("crate::module::function").
 */
char *demangle(const char *name);

#endif
