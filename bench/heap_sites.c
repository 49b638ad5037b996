// SPDX-License-Identifier: Apache-2.0
/*
 * heap_sites: which code holds a process's heap. Preloaded into it, it
 * counts every live malloc/calloc/realloc/posix_memalign block by the
 * three return addresses above the allocation (frame pointers: build the
 * program with them), and after HEAP_SITES_AT seconds (default 30) writes
 * the live bytes per site, largest first, to HEAP_SITES_OUT (default
 * /tmp/heap_sites.<pid>), as "bytes blocks module+offset ..."; with
 * HEAP_SITES_PEAK=S also the sites when the live total was highest (to
 * within 64 KiB) from S seconds on. Sizes are as requested: a block that is
 * never written in full counts in full here, not in the RSS. Name the offsets with bench/heap_sites.py (addr2line on
 * the same binaries).
 *
 *   gcc -O2 -shared -fPIC bench/heap_sites.c -o build/heap_sites.so -ldl -lpthread
 *   HEAP_SITES_AT=40 LD_PRELOAD=build/heap_sites.so build/flamewatch agent ...
 *
 * Costs a mutex and a hash insert per allocation: for finding where memory
 * lives, not for timing.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void __libc_free(void *);

#define DEPTH 3
#define NSITES (1u << 14)
#define NBLOCKS (1u << 20)	/* live blocks tracked; more are counted apart */

struct site {
	uintptr_t pc[DEPTH];
	size_t bytes, blocks;
};

struct block {
	uintptr_t ptr;		/* 0: empty, 1: deleted */
	uint32_t site;
	size_t size;
};

static struct site *sites;
static struct block *blocks;
static size_t untracked;
/* The sites when the live total was highest, taken each time it grows by 64 KiB. */
static struct site *peak_sites;
static size_t live, peak_live;
static volatile int peak_armed;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int busy;

static void _init_tables(void)
{
	if (sites)
		return;
	sites = mmap(NULL, NSITES * sizeof(*sites), PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (getenv("HEAP_SITES_PEAK"))
		peak_sites = mmap(NULL, NSITES * sizeof(*sites), PROT_READ | PROT_WRITE,
				  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	blocks = mmap(NULL, NBLOCKS * sizeof(*blocks), PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (sites == MAP_FAILED || blocks == MAP_FAILED)
		abort();
}

static uint32_t _hash(uintptr_t v)
{
	v ^= v >> 33;
	v *= 0xff51afd7ed558ccdULL;
	v ^= v >> 33;
	return (uint32_t)v;
}

/*
 * The return addresses of the allocation's callers, by frame pointers;
 * inlined, so that the first is the one into malloc's caller.
 */
static inline __attribute__((always_inline)) void _callers(uintptr_t pc[DEPTH])
{
	uintptr_t *fp = __builtin_frame_address(0);

	for (int i = 0; i < DEPTH; i++) {
		pc[i] = 0;
		if (!fp || (uintptr_t)fp & 7)
			continue;
		pc[i] = fp[1];
		if ((uintptr_t *)fp[0] <= fp || (uintptr_t)fp[0] - (uintptr_t)fp > (1u << 20)) {
			fp = NULL;
			continue;
		}
		fp = (uintptr_t *)fp[0];
	}
}

static uint32_t _site(const uintptr_t pc[DEPTH])
{
	uint32_t h = _hash(pc[0] ^ pc[1] * 31 ^ pc[2] * 131) & (NSITES - 1);

	for (uint32_t i = 0; i < NSITES; i++, h = (h + 1) & (NSITES - 1)) {
		struct site *s = &sites[h];

		if (!memcmp(s->pc, pc, sizeof(s->pc)))
			return h;
		if (!s->pc[0] && !s->pc[1] && !s->pc[2]) {
			memcpy(s->pc, pc, sizeof(s->pc));
			return h;
		}
	}
	return 0;
}

static void _track(void *p, size_t size, const uintptr_t pc[DEPTH])
{
	uint32_t h;

	if (!p)
		return;
	pthread_mutex_lock(&lock);
	_init_tables();
	h = _hash((uintptr_t)p) & (NBLOCKS - 1);
	for (uint32_t i = 0; i < NBLOCKS / 2; i++, h = (h + 1) & (NBLOCKS - 1))
		if (blocks[h].ptr <= 1) {
			uint32_t s = _site(pc);

			blocks[h] = (struct block){ (uintptr_t)p, s, size };
			sites[s].bytes += size;
			sites[s].blocks++;
			live += size;
			if (live > peak_live + 65536 && peak_sites && peak_armed) {
				memcpy(peak_sites, sites, NSITES * sizeof(*sites));
				peak_live = live;
			}
			pthread_mutex_unlock(&lock);
			return;
		}
	untracked += size;
	pthread_mutex_unlock(&lock);
}

static void _untrack(void *p)
{
	uint32_t h;

	if (!p || !blocks)
		return;
	pthread_mutex_lock(&lock);
	h = _hash((uintptr_t)p) & (NBLOCKS - 1);
	for (uint32_t i = 0; i < NBLOCKS / 2; i++, h = (h + 1) & (NBLOCKS - 1)) {
		if (blocks[h].ptr == (uintptr_t)p) {
			sites[blocks[h].site].bytes -= blocks[h].size;
			live -= blocks[h].size;
			sites[blocks[h].site].blocks--;
			blocks[h].ptr = 1;
			break;
		}
		if (!blocks[h].ptr)
			break;
	}
	pthread_mutex_unlock(&lock);
}

void *malloc(size_t n)
{
	uintptr_t pc[DEPTH];
	void *p = __libc_malloc(n);

	if (!busy) {
		busy = 1;
		_callers(pc);
		_track(p, n, pc);
		busy = 0;
	}
	return p;
}

void *calloc(size_t a, size_t b)
{
	uintptr_t pc[DEPTH];
	void *p = __libc_calloc(a, b);

	if (!busy) {
		busy = 1;
		_callers(pc);
		_track(p, a * b, pc);
		busy = 0;
	}
	return p;
}

void *realloc(void *old, size_t n)
{
	uintptr_t pc[DEPTH];
	void *p;

	if (busy)
		return __libc_realloc(old, n);
	busy = 1;
	_untrack(old);
	p = __libc_realloc(old, n);
	_callers(pc);
	/* A failed realloc leaves old in place: count it again. */
	_track(p ? p : old, n, pc);
	busy = 0;
	return p;
}

int posix_memalign(void **out, size_t align, size_t n)
{
	uintptr_t pc[DEPTH];
	void *p = __libc_memalign(align, n);

	if (!p)
		return ENOMEM;
	*out = p;
	if (!busy) {
		busy = 1;
		_callers(pc);
		_track(p, n, pc);
		busy = 0;
	}
	return 0;
}

void free(void *p)
{
	if (!busy) {
		busy = 1;
		_untrack(p);
		busy = 0;
	}
	__libc_free(p);
}

static void _name(FILE *f, uintptr_t pc)
{
	Dl_info di;

	if (pc && dladdr((void *)pc, &di) && di.dli_fname)
		fprintf(f, " %s+0x%lx", di.dli_fname, (unsigned long)(pc - (uintptr_t)di.dli_fbase));
	else
		fprintf(f, " 0x%lx", (unsigned long)pc);
}

static int _by_bytes(const void *a, const void *b)
{
	const struct site *x = a, *y = b;

	return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

static void _write(FILE *f, const char *what, const struct site *from, struct site *copy)
{
	size_t total = 0;

	memcpy(copy, from, NSITES * sizeof(*copy));
	qsort(copy, NSITES, sizeof(*copy), _by_bytes);
	for (size_t i = 0; i < NSITES; i++)
		total += copy[i].bytes;
	fprintf(f, "# %s: live %zu bytes in tracked blocks, %zu untracked\n", what, total, untracked);
	for (size_t i = 0; i < NSITES && copy[i].bytes; i++) {
		fprintf(f, "%zu %zu", copy[i].bytes, copy[i].blocks);
		for (int d = 0; d < DEPTH; d++)
			_name(f, copy[i].pc[d]);
		fputc('\n', f);
	}
}

static void *_reporter(void *arg)
{
	const char *at = getenv("HEAP_SITES_AT"), *out = getenv("HEAP_SITES_OUT");
	struct site *copy;
	char path[256];
	FILE *f;

	(void)arg;
	busy = 1;
	if (getenv("HEAP_SITES_PEAK")) {
		unsigned int after = (unsigned)atoi(getenv("HEAP_SITES_PEAK"));

		sleep(after);
		peak_live = live;
		peak_armed = 1;
		sleep((at ? (unsigned)atoi(at) : 30) - after);
	} else {
		sleep(at ? (unsigned)atoi(at) : 30);
	}
	copy = __libc_malloc(NSITES * sizeof(*copy));
	if (!out) {
		snprintf(path, sizeof(path), "/tmp/heap_sites.%d", (int)getpid());
		out = path;
	}
	f = fopen(out, "w");
	if (!f || !copy)
		return NULL;
	pthread_mutex_lock(&lock);
	_init_tables();
	_write(f, "now", sites, copy);
	if (peak_sites)
		_write(f, "at the peak", peak_sites, copy);
	pthread_mutex_unlock(&lock);
	fclose(f);
	return NULL;
}

__attribute__((constructor)) static void _start(void)
{
	pthread_t t;

	busy = 1;
	if (!pthread_create(&t, NULL, _reporter, NULL))
		pthread_detach(t);
	busy = 0;
}
