/* SPDX-License-Identifier: Apache-2.0 */
#ifndef FW_COMMON_HEX_H
#define FW_COMMON_HEX_H

#include <stdint.h>

/*
 * Parses 1 to 16 hex digits at p, with an optional 0x prefix, into *out.
 * Unlike strtoull() it takes no sign and no leading blanks. Returns the
 * first character after the digits, or NULL when there are none or too many.
 */
const char *hex__parse_u64(const char *p, uint64_t *out);

#endif
