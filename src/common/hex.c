// SPDX-License-Identifier: Apache-2.0
#include <stddef.h>

#include "hex.h"

static int _hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

const char *hex__parse_u64(const char *p, uint64_t *out)
{
	uint64_t v = 0;
	int d, digits = 0;

	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
		p += 2;
	for (; (d = _hexval(*p)) >= 0; p++) {
		if (++digits > 16)
			return NULL;
		v = v << 4 | (uint64_t)d;
	}
	if (!digits)
		return NULL;
	*out = v;
	return p;
}
