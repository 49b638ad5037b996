// SPDX-License-Identifier: Apache-2.0
/*
 * What loading the kernel's symbol table costs the agent: the table's size,
 * the load's CPU time, and the process's RSS before, after and at its peak
 * (VmHWM), in a fresh process as at the agent's first flush. Run as root
 * (kallsyms shows zeros otherwise):
 *
 *   gcc -O2 -Isrc bench/kallsyms_load.c build/libflamewatch.a \
 *       -Wl,-Bstatic -lzstd -Wl,-Bdynamic -o build/kallsyms_load
 *   build/kallsyms_load [/proc/kallsyms]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "symbolize/kallsyms.h"

static long _status_kb(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			kb = atol(line + strlen(key));
	if (f)
		fclose(f);
	return kb;
}

static double _cpu_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

int main(int argc, char **argv)
{
	const char *path = argc > 1 ? argv[1] : "/proc/kallsyms";
	struct kallsyms_table t;
	long rss0 = _status_kb("VmRSS:"), hwm0 = _status_kb("VmHWM:");
	double c0 = _cpu_ms();
	int err = kallsyms__load(path, &t);
	double c1 = _cpu_ms();

	if (err) {
		fprintf(stderr, "kallsyms_load: %s: error %d\n", path, err);
		return 1;
	}
	printf("symbols %zu  table %.3f MB  load %.1f ms CPU\n", t.n, kallsyms__memory(&t) / 1e6,
	       c1 - c0);
	printf("RSS before %ld kB (peak %ld)  after %ld kB  peak %ld kB: +%ld kB over before\n",
	       rss0, hwm0, _status_kb("VmRSS:"), _status_kb("VmHWM:"),
	       _status_kb("VmHWM:") - rss0);
	kallsyms__table_free(&t);
	return 0;
}
