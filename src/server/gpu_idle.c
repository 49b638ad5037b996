// SPDX-License-Identifier: Apache-2.0
/* The busy intervals of a GPU as one sorted, merged set (see gpu_idle.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/profile.h"
#include "server/gpu_idle.h"

struct span {
	int64_t start, end;
};

struct busy_set {
	struct span *v;
	size_t n, cap;
};

struct busy_set *busy_set__new(void)
{
	struct busy_set *s = calloc(1, sizeof(*s));

	if (!s)
		errno = ENOMEM;
	return s;
}

void busy_set__free(struct busy_set *s)
{
	if (!s)
		return;
	free(s->v);
	free(s);
}

int busy_set__add(struct busy_set *s, int64_t start, int64_t end)
{
	if (end <= start)
		return 0;
	/* Intervals that come in start order extend the last one in place. */
	if (s->n && start >= s->v[s->n - 1].start && start <= s->v[s->n - 1].end) {
		if (end > s->v[s->n - 1].end)
			s->v[s->n - 1].end = end;
		return 0;
	}
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 256;
		struct span *v = realloc(s->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = (struct span){ start, end };
	return 0;
}

static int _by_start(const void *a, const void *b)
{
	const struct span *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return (x->end > y->end) - (x->end < y->end);
}

void busy_set__finish(struct busy_set *s)
{
	size_t out = 0;

	if (!s->n)
		return;
	qsort(s->v, s->n, sizeof(*s->v), _by_start);
	for (size_t i = 1; i < s->n; i++) {
		if (s->v[i].start <= s->v[out].end) {
			if (s->v[i].end > s->v[out].end)
				s->v[out].end = s->v[i].end;
		} else {
			s->v[++out] = s->v[i];
		}
	}
	s->n = out + 1;
}

size_t busy_set__count(const struct busy_set *s)
{
	return s->n;
}

/* The first interval that ends after ts (s->n if none). */
static size_t _first_ending_after(const struct busy_set *s, int64_t ts)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->v[mid].end <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

int64_t busy_set__covered(const struct busy_set *s, int64_t from, int64_t to)
{
	int64_t sum = 0;

	for (size_t i = _first_ending_after(s, from); i < s->n && s->v[i].start < to; i++) {
		int64_t a = s->v[i].start > from ? s->v[i].start : from;
		int64_t b = s->v[i].end < to ? s->v[i].end : to;

		if (b > a)
			sum += b - a;
	}
	return sum;
}

int64_t busy_set__next_start(const struct busy_set *s, int64_t ts)
{
	size_t i = _first_ending_after(s, ts);

	if (i < s->n && s->v[i].start < ts)
		i++;	/* ts lies inside it: the next one */
	return i < s->n ? s->v[i].start : INT64_MAX;
}

int busy_set__contains(const struct busy_set *s, int64_t ts, size_t *cursor)
{
	size_t i = *cursor;

	if (i > s->n || (i > 0 && s->v[i - 1].end > ts))
		i = _first_ending_after(s, ts);
	while (i < s->n && s->v[i].end <= ts)
		i++;
	*cursor = i;
	return i < s->n && s->v[i].start <= ts;
}

int busy_set__gaps(const struct busy_set *s, int64_t from, int64_t to,
		   int (*cb)(void *ctx, int64_t start, int64_t end), void *ctx)
{
	int64_t at = from;
	int err;

	for (size_t i = _first_ending_after(s, from); i < s->n && s->v[i].start < to; i++) {
		if (s->v[i].start > at) {
			err = cb(ctx, at, s->v[i].start);
			if (err)
				return err;
		}
		if (s->v[i].end > at)
			at = s->v[i].end;
	}
	if (at < to)
		return cb(ctx, at, to);
	return 0;
}

int busy_set__each(const struct busy_set *s, int64_t from, int64_t to,
		   int (*cb)(void *ctx, int64_t start, int64_t end), void *ctx)
{
	for (size_t i = _first_ending_after(s, from); i < s->n && s->v[i].start < to; i++) {
		int err = cb(ctx, s->v[i].start > from ? s->v[i].start : from,
			     s->v[i].end < to ? s->v[i].end : to);

		if (err)
			return err;
	}
	return 0;
}

static int _add(void *ctx, int64_t start, int64_t end)
{
	return busy_set__add(ctx, start, end);
}

int busy_set__add_outside(struct busy_set *dst, const struct busy_set *src,
			  const struct busy_set *cover)
{
	for (size_t i = 0; i < src->n; i++) {
		int err = busy_set__gaps(cover, src->v[i].start, src->v[i].end, _add, dst);

		if (err)
			return err;
	}
	return 0;
}

/* "", "_ptsz" (the runtime's per-thread default stream) or "_v" and digits (the driver's versions). */
static bool _entry_suffix(const char *s)
{
	if (!*s || !strcmp(s, "_ptsz"))
		return true;
	if (strncmp(s, "_v", 2) || !s[2])
		return false;
	for (s += 2; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

bool gpu_idle__is_sync_call(const char *function)
{
	static const char *const calls[] = {
		"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
		"cudaThreadSynchronize", "cuCtxSynchronize", "cuStreamSynchronize",
		"cuEventSynchronize",
	};

	if (!function || function[0] != 'c' || function[1] != 'u')
		return false;
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
		size_t n = strlen(calls[i]);

		if (!strncmp(function, calls[i], n) && _entry_suffix(function + n))
			return true;
	}
	return false;
}

bool gpu_idle__is_observer_path(const char *path)
{
	static const char lib[] = "libflamewatch-cuda.so";
	const char *base;

	if (!path)
		return false;
	base = strrchr(path, '/');
	base = base ? base + 1 : path;
	return !strncmp(base, lib, sizeof(lib) - 1) && (!base[sizeof(lib) - 1] || base[sizeof(lib) - 1] == '.');
}

static uint8_t _stack_kind(const struct profile *p, uint32_t stack)
{
	uint8_t kind = STACK_PLAIN;
	const uint32_t *f;
	uint32_t n;

	f = profile__stack(p, stack, &n);
	for (uint32_t i = 0; f && i < n; i++) {
		const struct profile_frame *fr = &p->frames[f[i]];

		if (fr->mapping != PROFILE_NO_MAPPING && fr->mapping < p->nmappings &&
		    gpu_idle__is_observer_path(profile__string(p, p->mappings[fr->mapping].path)))
			return STACK_OBSERVER;
		if (gpu_idle__is_sync_call(profile__string(p, fr->function)))
			kind = STACK_SYNC;
	}
	return kind;
}

int sync_stacks__kind(struct sync_stacks *c, const struct profile *p, uint32_t stack)
{
	if (stack >= c->cap) {
		size_t cap = c->cap ? c->cap : 1024;
		uint8_t *v;

		while (cap <= stack)
			cap *= 2;
		v = realloc(c->v, cap);
		if (!v)
			return -ENOMEM;
		memset(v + c->cap, 0, cap - c->cap);
		c->v = v;
		c->cap = cap;
	}
	if (!c->v[stack])
		c->v[stack] = _stack_kind(p, stack);
	return c->v[stack];
}

void sync_stacks__release(struct sync_stacks *c)
{
	free(c->v);
	c->v = NULL;
	c->cap = 0;
}
