// SPDX-License-Identifier: Apache-2.0
/*
 * The server's session table: each agent session's dictionary (the shared
 * dictionary batches are handed out with, and the session's ids in it),
 * found by session id and evicted least recently used first.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/batch.h"
#include "common/intern.h"
#include "format/wire.h"
#include "format/wire/wire_int.h"

void wire_sdict__unref(void *owner)
{
	struct wire_sdict *sd = owner;

	if (!sd || __atomic_sub_fetch(&sd->refs, 1, __ATOMIC_ACQ_REL))
		return;
	batch__free(sd->b);
	free(sd);
}

struct wire_sdict *wire_sdict__new(void)
{
	struct wire_sdict *sd = calloc(1, sizeof(*sd));

	if (!sd)
		return NULL;
	sd->refs = 1;
	sd->id = batch__new_dict_id();
	sd->b = batch__new(0);
	if (!sd->b) {
		free(sd);
		return NULL;
	}
	return sd;
}

struct wire_session_table {
	struct wire_session **buckets;
	size_t nbuckets;		/* power of two */
	struct wire_session *newest, *oldest;
	size_t count, max_sessions;
	size_t bytes, max_bytes;
	uint64_t forgotten[WIRE_FORGOT_MAX];
};

static uint64_t _now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static size_t _session_memory(const struct wire_session *s)
{
	size_t bytes = sizeof(*s) + strlen(s->node) + 1;

	for (int k = 0; k < K_MAX; k++)
		bytes += (size_t)s->om[k].cap * sizeof(uint32_t);
	if (s->sd)
		bytes += sizeof(*s->sd) + batch__memory(s->sd->b);
	return bytes;
}

void wire_session__free(struct wire_session *s)
{
	if (!s)
		return;
	for (int k = 0; k < K_MAX; k++)
		dict_ids__release(&s->om[k]);
	wire_sdict__unref(s->sd);
	free(s->node);
	free(s);
}

struct wire_session_table *wire_sessions__new(size_t max_sessions, size_t max_bytes)
{
	struct wire_session_table *t;

	if (!max_sessions || max_sessions > (1u << 24)) {
		errno = EINVAL;
		return NULL;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->max_sessions = max_sessions;
	t->max_bytes = max_bytes;
	for (t->nbuckets = 16; t->nbuckets < max_sessions; t->nbuckets *= 2)
		;
	t->buckets = calloc(t->nbuckets, sizeof(*t->buckets));
	if (!t->buckets) {
		free(t);
		errno = ENOMEM;
		return NULL;
	}
	return t;
}

void wire_sessions__free(struct wire_session_table *t)
{
	struct wire_session *s, *next;

	if (!t)
		return;
	for (s = t->newest; s; s = next) {
		next = s->older;
		wire_session__free(s);
	}
	free(t->buckets);
	free(t);
}

size_t wire_sessions__count(const struct wire_session_table *t)
{
	return t->count;
}

size_t wire_sessions__memory(const struct wire_session_table *t)
{
	return t->bytes;
}

static struct wire_session **_bucket(struct wire_session_table *t, uint64_t id)
{
	return &t->buckets[hash__bytes(&id, sizeof(id)) & (t->nbuckets - 1)];
}

struct wire_session *wire_sessions__find(struct wire_session_table *t, uint64_t id)
{
	struct wire_session *s;

	for (s = *_bucket(t, id); s; s = s->hnext)
		if (s->id == id)
			return s;
	return NULL;
}

static void _lru_unlink(struct wire_session_table *t, struct wire_session *s)
{
	if (s->newer)
		s->newer->older = s->older;
	else
		t->newest = s->older;
	if (s->older)
		s->older->newer = s->newer;
	else
		t->oldest = s->newer;
	s->newer = s->older = NULL;
}

static void _lru_push(struct wire_session_table *t, struct wire_session *s)
{
	s->newer = NULL;
	s->older = t->newest;
	if (t->newest)
		t->newest->newer = s;
	else
		t->oldest = s;
	t->newest = s;
}

static void _session_remove(struct wire_session_table *t, struct wire_session *s,
			    enum wire_forgot why)
{
	struct wire_session **p;

	for (p = _bucket(t, s->id); *p != s; p = &(*p)->hnext)
		;
	*p = s->hnext;
	_lru_unlink(t, s);
	t->count--;
	t->bytes -= s->bytes;
	t->forgotten[why]++;
	wire_session__free(s);
}

void wire_sessions__commit(struct wire_session_table *t, struct wire_session *s, bool is_new)
{
	if (is_new) {
		struct wire_session **b = _bucket(t, s->id);

		s->hnext = *b;
		*b = s;
		t->count++;
	} else {
		_lru_unlink(t, s);
		t->bytes -= s->bytes;
	}
	_lru_push(t, s);
	s->used_ns = _now_ns();
	s->bytes = _session_memory(s);
	t->bytes += s->bytes;
	while ((t->count > t->max_sessions || t->bytes > t->max_bytes) && t->oldest != s)
		_session_remove(t, t->oldest, WIRE_FORGOT_BUDGET);
	if (t->bytes > t->max_bytes)
		_session_remove(t, s, WIRE_FORGOT_BUDGET);
}

bool wire_sessions__end(struct wire_session_table *t, uint64_t id, const char *node)
{
	struct wire_session *s = wire_sessions__find(t, id);

	if (!s || strcmp(s->node, node))
		return false;
	_session_remove(t, s, WIRE_FORGOT_ENDED);
	return true;
}

size_t wire_sessions__expire(struct wire_session_table *t, uint64_t max_idle_ns)
{
	uint64_t now = _now_ns();
	size_t n = 0;

	/* Oldest first: the first one still in use ends the walk. */
	while (t->oldest && now - t->oldest->used_ns > max_idle_ns) {
		_session_remove(t, t->oldest, WIRE_FORGOT_IDLE);
		n++;
	}
	return n;
}

void wire_sessions__stats(const struct wire_session_table *t, struct wire_session_stats *out)
{
	memset(out, 0, sizeof(*out));
	out->sessions = t->count;
	out->max_sessions = t->max_sessions;
	out->bytes = t->bytes;
	out->max_bytes = t->max_bytes;
	memcpy(out->forgotten, t->forgotten, sizeof(out->forgotten));
}
