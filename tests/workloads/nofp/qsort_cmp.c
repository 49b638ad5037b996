/*
 * A hot comparator called back by the C library's qsort, built without
 * frame pointers: main -> sort_many -> qsort -> (libc internals) ->
 * compare_items. Only libc's .eh_frame can get a stack from the comparator
 * back to main. The comparator does a deliberately expensive key mix so
 * nearly every sample lands in it.
 *
 * usage: qsort_cmp SECONDS [CPU_TIME_FILE]
 * With CPU_TIME_FILE, the process writes its own user+system CPU seconds
 * there when it finishes, so a test can tell how many samples to expect.
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#define NITEMS 4096

struct item {
	unsigned long key;
	unsigned long payload;
};

static struct item items[NITEMS];
static volatile unsigned long sink;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static unsigned long mix(unsigned long x)
{
	for (int i = 0; i < 64; i++) {
		x ^= x >> 33;
		x *= 0xff51afd7ed558ccdUL;
		x ^= x >> 29;
	}
	return x;
}

/* Called only through a function pointer from libc. */
__attribute__((noinline)) int compare_items(const void *a, const void *b)
{
	unsigned long ka = mix(((const struct item *)a)->key);
	unsigned long kb = mix(((const struct item *)b)->key);

	return (ka > kb) - (ka < kb);
}

__attribute__((noinline)) void shuffle(unsigned long *seed)
{
	for (int i = NITEMS - 1; i > 0; i--) {
		int j;
		struct item t;

		*seed = *seed * 6364136223846793005UL + 1442695040888963407UL;
		j = (*seed >> 33) % (i + 1);
		t = items[i];
		items[i] = items[j];
		items[j] = t;
	}
}

__attribute__((noinline)) void sort_many(double end)
{
	unsigned long seed = 42;

	while (now() < end) {
		shuffle(&seed);
		qsort(items, NITEMS, sizeof(items[0]), compare_items);
		sink += items[0].payload;
	}
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;
	struct rusage ru;

	for (int i = 0; i < NITEMS; i++)
		items[i] = (struct item){ .key = i * 2654435761UL, .payload = i };
	sort_many(now() + secs);
	if (argc > 2 && getrusage(RUSAGE_SELF, &ru) == 0) {
		FILE *f = fopen(argv[2], "w");

		if (f) {
			fprintf(f, "%.6f\n", ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 +
					     ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6);
			fclose(f);
		}
	}
	return 0;
}
