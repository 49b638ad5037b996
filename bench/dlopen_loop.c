// SPDX-License-Identifier: Apache-2.0
/*
 * dlopen_loop: dlopen()s and dlclose()s a library (argv[1], a name or a
 * path; one this program does not link) for argv[2] seconds, as fast as it
 * can, or argv[3] times a second. Each pair changes the loader's list of
 * objects twice, so each calls _dl_debug_state() four times. Prints the
 * pairs done and the mean ns per pair.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static double _now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double secs = argc > 2 ? atof(argv[2]) : 5, rate = argc > 3 ? atof(argv[3]) : 0;
	double start, busy = 0, next;
	long pairs = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: dlopen_loop LIB [SECONDS [PER_SECOND]]\n");
		return 2;
	}
	start = next = _now();
	while (_now() - start < secs) {
		double t = _now();
		void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);

		if (!h) {
			fprintf(stderr, "dlopen_loop: %s\n", dlerror());
			return 1;
		}
		dlclose(h);
		busy += _now() - t;
		pairs++;
		if (rate > 0) {
			next += 1 / rate;
			while (_now() < next)
				usleep(200);
		}
	}
	printf("%ld %.0f\n", pairs, pairs ? busy * 1e9 / pairs : 0);
	return 0;
}
