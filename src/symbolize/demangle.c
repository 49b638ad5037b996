// SPDX-License-Identifier: Apache-2.0
#include <stddef.h>
#include <libiberty/demangle.h>

#include "demangle.h"

/*
 * The style is named explicitly rather than taken from libiberty's global
 * current_demangling_style, so nothing else in the process can change our
 * output. DMGL_AUTO covers C++ and both Rust schemes: libiberty's
 * cplus_demangle() tries rust_demangle() first for "_ZN...17h<hash>E" and
 * "_R..." names and, without DMGL_VERBOSE, drops the legacy hash and the v0
 * crate disambiguators; everything else goes to the C++ demangler.
 * DMGL_NO_RECURSE_LIMIT stays off: names come from binaries we did not build,
 * and the limit keeps a hostile name from exhausting the stack.
 */
#define DEMANGLE_FLAGS (DMGL_PARAMS | DMGL_ANSI | DMGL_RET_DROP | DMGL_AUTO)

char *demangle(const char *name)
{
	/*
	 * Only "_Z" and "_R" prefixes are mangled on Linux; checking them first
	 * keeps C and Go names (the common case in a host-wide profile) away
	 * from the demangler entirely, and keeps AUTO from guessing at them.
	 */
	if (!name || name[0] != '_' || (name[1] != 'Z' && name[1] != 'R'))
		return NULL;
	return cplus_demangle(name, DEMANGLE_FLAGS);
}
