// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdlib.h>

#include "env.h"
#include "log.h"

/* 2^44 KiB = 16 PiB: far above any cap, and shifting by 10 cannot overflow. */
#define ENV_KIB_MAX (1ULL << 44)

uint64_t env__kib(const char *name, uint64_t dflt_bytes, uint64_t min_kib)
{
	const char *s = getenv(name);
	unsigned long long kib;
	char *end;

	if (!s || !*s)
		return dflt_bytes;
	errno = 0;
	kib = strtoull(s, &end, 10);
	if (*s < '0' || *s > '9' || *end || errno || kib < min_kib || kib > ENV_KIB_MAX) {
		pr_warn("%s: '%s' is not a number of KiB from %llu to %llu: the default (%llu KiB) is kept\n",
			name, s, (unsigned long long)min_kib, ENV_KIB_MAX,
			(unsigned long long)(dflt_bytes >> 10));
		return dflt_bytes;
	}
	return (uint64_t)kib << 10;
}
