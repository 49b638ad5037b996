// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/lower_bound.h"
#include "gpu/cuda_join.h"

/*
 * A ring of fixed-size entries kept sorted by their first field, a u64
 * correlation id. Launches and records of one process arrive almost in
 * correlation order, so an insert is nearly always an append, and the
 * entries that leave first (the oldest ids) sit at the head.
 */
struct ring {
	char *items;
	uint32_t head, n, cap;	/* cap: a power of two */
	uint32_t size;		/* bytes per entry */
};

struct pending_record {
	struct fw_cuda_record r;	/* correlation first: the ring's key */
	uint64_t arrived_ns;
	uint32_t done;			/* emitted already; skipped until trimmed */
	uint32_t pad;
};

/* The launch that last joined a record of one kind and name (cuda_join.h). */
struct fallback {
	uint64_t name;			/* the records' name_addr: 0 for copies and sets */
	uint32_t kind;
	uint32_t used;			/* 0: a free slot */
	struct cuda_join_launch l;	/* a copy, holding its stack */
};

struct pid_state {
	uint32_t pid;
	uint64_t newest_launch;		/* highest correlation id launched; 0: none yet */
	struct ring launches;		/* struct cuda_join_launch */
	struct ring records;		/* struct pending_record */
	uint32_t live_records;		/* records not yet done */
	struct fallback *fb;		/* open addressing, a power of two */
	uint32_t fb_cap, fb_n;
	struct fallback last;		/* the launch that last joined any record */
};

struct cuda_join {
	struct cuda_join_opts o;
	struct pid_state **pids;
	uint32_t npids;
	struct cuda_join_stats st;
};

static void *_at(const struct ring *r, uint32_t i)
{
	return r->items + (size_t)((r->head + i) & (r->cap - 1)) * r->size;
}

static uint64_t _key(const struct ring *r, uint32_t i)
{
	uint64_t k;

	memcpy(&k, _at(r, i), sizeof(k));
	return k;
}

/*
 * The first index whose key is >= key. The entries are at most two sorted
 * runs of the array, [head, cap) and then [0, ...): the second is only
 * searched when every key of the first is below key.
 */
static uint32_t _lower_bound(const struct ring *r, uint64_t key)
{
	uint32_t first = r->cap - r->head < r->n ? r->cap - r->head : r->n;
	size_t i;

	if (!r->n)
		return 0;
	i = lower_bound__u64(r->items + (size_t)r->head * r->size, first, r->size, 0, key);
	if (i < first)
		return (uint32_t)i;
	return first + (uint32_t)lower_bound__u64(r->items, r->n - first, r->size, 0, key);
}

static int _grow(struct ring *r)
{
	uint32_t cap = r->cap ? r->cap * 2 : 16;
	char *items = malloc((size_t)cap * r->size);

	if (!items)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->n; i++)
		memcpy(items + (size_t)i * r->size, _at(r, i), r->size);
	free(r->items);
	r->items = items;
	r->head = 0;
	r->cap = cap;
	return 0;
}

static int _insert(struct ring *r, const void *entry)
{
	uint64_t key;
	uint32_t i;

	if (r->n == r->cap && _grow(r))
		return -ENOMEM;
	memcpy(&key, entry, sizeof(key));
	/* Out-of-order entries are few and near the tail: shift them up one. */
	for (i = r->n; i > 0 && _key(r, i - 1) > key; i--)
		memcpy(_at(r, i), _at(r, i - 1), r->size);
	memcpy(_at(r, i), entry, r->size);
	r->n++;
	return 0;
}

static void _pop_front(struct ring *r)
{
	r->head = (r->head + 1) & (r->cap - 1);
	r->n--;
}

struct cuda_join *cuda_join__new(const struct cuda_join_opts *opts)
{
	struct cuda_join *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->o = *opts;
	if (!j->o.max_launches)
		j->o.max_launches = 4096;
	if (!j->o.max_records)
		j->o.max_records = 4096;
	if (!j->o.max_distance)
		j->o.max_distance = 65536;
	if (!j->o.max_record_age_ns)
		j->o.max_record_age_ns = 2000000000ULL;
	if (!j->o.max_launch_age_ns)
		j->o.max_launch_age_ns = 10000000000ULL;
	if (!j->o.max_pids)
		j->o.max_pids = 1024;
	if (!j->o.max_fallbacks)
		j->o.max_fallbacks = 1024;
	return j;
}

const char *cuda_join_how__name(enum cuda_join_how how)
{
	static const char *const n[CUDA_JOIN_HOW_MAX] = {
		"joined", "joined_late", "fallback_same", "fallback_other", "lost",
	};

	return how < CUDA_JOIN_HOW_MAX ? n[how] : "?";
}

const char *cuda_join_why__name(enum cuda_join_why why)
{
	static const char *const n[CUDA_JOIN_WHY_MAX] = {
		"count", "distance", "age", "gone", "memory", "unnamed", "no_stack",
	};

	return why < CUDA_JOIN_WHY_MAX ? n[why] : "?";
}

static void _free_launch(struct cuda_join *j, struct cuda_join_launch *l)
{
	if (!l->matched)
		j->st.launches_unmatched++;
	if (j->o.free_stack && l->stack)
		j->o.free_stack(j->o.ctx, l->stack);
	l->stack = NULL;
}

/* ---- fallback ---- */

static void _fb_release(struct cuda_join *j, struct fallback *f)
{
	if (f->used && j->o.free_stack && f->l.stack)
		j->o.free_stack(j->o.ctx, f->l.stack);
	f->used = 0;
}

/* Makes f hold a copy of l (its stack held once more), if it is another stack. */
static void _fb_set(struct cuda_join *j, struct fallback *f, const struct cuda_join_launch *l)
{
	if (f->used && f->l.stack == l->stack) {
		f->l = *l;
		return;
	}
	_fb_release(j, f);
	j->o.hold_stack(j->o.ctx, l->stack);
	f->l = *l;
	f->used = 1;
}

static void _fb_clear(struct cuda_join *j, struct pid_state *p)
{
	for (uint32_t i = 0; i < p->fb_cap; i++)
		_fb_release(j, &p->fb[i]);
	free(p->fb);
	p->fb = NULL;
	p->fb_cap = p->fb_n = 0;
	_fb_release(j, &p->last);
}

static uint32_t _fb_hash(uint32_t kind, uint64_t name)
{
	return (uint32_t)(((name ^ ((uint64_t)kind << 56)) * 0x9E3779B97F4A7C15ULL) >> 32);
}

/* The slot of (kind, name): its entry, or the free slot where it goes. */
static struct fallback *_fb_slot(struct fallback *tab, uint32_t cap, uint32_t kind, uint64_t name)
{
	uint32_t mask = cap - 1;

	for (uint32_t i = _fb_hash(kind, name) & mask;; i = (i + 1) & mask)
		if (!tab[i].used || (tab[i].kind == kind && tab[i].name == name))
			return &tab[i];
}

static struct fallback *_fb_find(struct pid_state *p, uint32_t kind, uint64_t name)
{
	struct fallback *f;

	if (!p->fb_cap)
		return NULL;
	f = _fb_slot(p->fb, p->fb_cap, kind, name);
	return f->used ? f : NULL;
}

/* The table with room for one more; at its bound, the names start again. */
static int _fb_room(struct cuda_join *j, struct pid_state *p)
{
	uint32_t cap = p->fb_cap ? p->fb_cap * 2 : 16;
	struct fallback *tab;

	if ((p->fb_n + 1) * 2 <= p->fb_cap)
		return 0;
	if (p->fb_n >= j->o.max_fallbacks) {
		for (uint32_t i = 0; i < p->fb_cap; i++)
			_fb_release(j, &p->fb[i]);
		p->fb_n = 0;
		return 0;
	}
	tab = calloc(cap, sizeof(*tab));
	if (!tab)
		return -ENOMEM;
	for (uint32_t i = 0; i < p->fb_cap; i++)
		if (p->fb[i].used)
			*_fb_slot(tab, cap, p->fb[i].kind, p->fb[i].name) = p->fb[i];
	free(p->fb);
	p->fb = tab;
	p->fb_cap = cap;
	return 0;
}

/* r joined l: l is what records of r's kind and name fall back to from now on. */
static void _fb_learn(struct cuda_join *j, struct pid_state *p, const struct fw_cuda_record *r,
		      const struct cuda_join_launch *l)
{
	struct fallback *f;

	if (!j->o.hold_stack || !l->stack)
		return;
	_fb_set(j, &p->last, l);
	f = _fb_find(p, r->kind, r->name_addr);
	if (!f) {
		if (_fb_room(j, p))
			return;
		f = _fb_slot(p->fb, p->fb_cap, r->kind, r->name_addr);
		f->kind = r->kind;
		f->name = r->name_addr;
		p->fb_n++;
	}
	_fb_set(j, f, l);
}

static void _emit_how(struct cuda_join *j, uint32_t pid, const struct fw_cuda_record *r,
		      const struct cuda_join_launch *l, enum cuda_join_how how)
{
	uint64_t dur = r->end_ns > r->start_ns ? r->end_ns - r->start_ns : 0;

	j->st.how[how]++;
	j->st.how_ns[how] += dur * cuda_join__weight(r, l);
	j->o.emit(j->o.ctx, pid, r, l, how);
}

/* Emits r, which left without its launch (p may be NULL: no state). */
static void _emit_without(struct cuda_join *j, uint32_t pid, struct pid_state *p,
			  const struct fw_cuda_record *r, enum cuda_join_why why)
{
	struct fallback *f = p ? _fb_find(p, r->kind, r->name_addr) : NULL;
	struct cuda_join_launch l;
	enum cuda_join_how how = CUDA_JOIN_FALLBACK_SAME;

	j->st.why[why]++;
	if (!f && p && p->last.used) {
		f = &p->last;
		how = CUDA_JOIN_FALLBACK_OTHER;
	}
	if (!f) {
		_emit_how(j, pid, r, NULL, CUDA_JOIN_LOST);
		return;
	}
	/* Its stack, but not its weight: that was the other launch's. */
	l = f->l;
	l.weight = 1;
	_emit_how(j, pid, r, &l, how);
}

/* Emits r with its own launch l; as without one if l has no stack. */
static void _emit(struct cuda_join *j, struct pid_state *p, const struct fw_cuda_record *r,
		  struct cuda_join_launch *l, enum cuda_join_how how)
{
	l->matched++;
	if (!l->stack && j->o.hold_stack) {
		_emit_without(j, p->pid, p, r, CUDA_JOIN_WHY_NO_STACK);
		return;
	}
	_emit_how(j, p->pid, r, l, how);
	_fb_learn(j, p, r, l);
}

/* Drops the emitted records at the head. */
static void _trim_records(struct pid_state *p)
{
	while (p->records.n && ((struct pending_record *)_at(&p->records, 0))->done)
		_pop_front(&p->records);
}

/* Emits the record at the head without its launch, and drops it. */
static void _evict_record(struct cuda_join *j, struct pid_state *p, enum cuda_join_why why)
{
	struct pending_record *pr = _at(&p->records, 0);

	if (!pr->done) {
		pr->done = 1;
		p->live_records--;
		_emit_without(j, p->pid, p, &pr->r, why);
	}
	_pop_front(&p->records);
	_trim_records(p);
}

static void _free_pid(struct cuda_join *j, struct pid_state *p)
{
	for (uint32_t i = 0; i < p->launches.n; i++)
		_free_launch(j, _at(&p->launches, i));
	_fb_clear(j, p);
	free(p->launches.items);
	free(p->records.items);
	free(p);
}

static void _flush_state(struct cuda_join *j, struct pid_state *p)
{
	while (p->records.n)
		_evict_record(j, p, CUDA_JOIN_WHY_GONE);
}

static struct pid_state *_find(const struct cuda_join *j, uint32_t pid, uint32_t *idx)
{
	for (uint32_t i = 0; i < j->npids; i++)
		if (j->pids[i]->pid == pid) {
			if (idx)
				*idx = i;
			return j->pids[i];
		}
	return NULL;
}

static void _remove_at(struct cuda_join *j, uint32_t i)
{
	struct pid_state *p = j->pids[i];

	_flush_state(j, p);
	_free_pid(j, p);
	j->pids[i] = j->pids[--j->npids];
}

static struct pid_state *_get(struct cuda_join *j, uint32_t pid)
{
	struct pid_state *p = _find(j, pid, NULL), **pids;

	if (p)
		return p;
	if (j->npids >= j->o.max_pids) {
		/* Processes that exit without an exit event (missed) must not pin memory. */
		_remove_at(j, 0);
		j->st.pids_evicted++;
	}
	pids = realloc(j->pids, (j->npids + 1) * sizeof(*pids));
	if (!pids)
		return NULL;
	j->pids = pids;
	p = calloc(1, sizeof(*p));
	if (!p)
		return NULL;
	p->pid = pid;
	p->launches.size = sizeof(struct cuda_join_launch);
	p->records.size = sizeof(struct pending_record);
	j->pids[j->npids++] = p;
	return p;
}

void cuda_join__free(struct cuda_join *j)
{
	if (!j)
		return;
	for (uint32_t i = 0; i < j->npids; i++)
		_free_pid(j, j->pids[i]);
	free(j->pids);
	free(j);
}

int cuda_join__launch(struct cuda_join *j, uint32_t pid, uint64_t correlation, uint32_t tid,
		      uint32_t cpu, uint32_t weight, void *stack, uint64_t now_ns)
{
	struct cuda_join_launch l = {
		.correlation = correlation, .tid = tid, .cpu = cpu,
		.weight = weight ? weight : 1, .stack = stack, .added_ns = now_ns,
	};
	struct cuda_join_launch *kept;
	struct pid_state *p = _get(j, pid);
	uint32_t i;

	if (!p)
		goto nomem;
	j->st.launches++;
	if (correlation > p->newest_launch)
		p->newest_launch = correlation;

	/* Launches leave by age; the ring is in about the order they came. */
	while (p->launches.n &&
	       now_ns - ((struct cuda_join_launch *)_at(&p->launches, 0))->added_ns >
		       j->o.max_launch_age_ns) {
		_free_launch(j, _at(&p->launches, 0));
		_pop_front(&p->launches);
	}
	if (p->launches.n >= j->o.max_launches) {
		_free_launch(j, _at(&p->launches, 0));
		_pop_front(&p->launches);
		j->st.launches_evicted_count++;
	}
	if (_insert(&p->launches, &l))
		goto nomem;
	i = _lower_bound(&p->launches, correlation);
	while (i + 1 < p->launches.n && ((struct cuda_join_launch *)_at(&p->launches, i))->stack != stack)
		i++;
	kept = _at(&p->launches, i);

	/* Records that came first. */
	for (uint32_t k = _lower_bound(&p->records, correlation);
	     k < p->records.n && _key(&p->records, k) == correlation; k++) {
		struct pending_record *pr = _at(&p->records, k);

		if (pr->done)
			continue;
		pr->done = 1;
		p->live_records--;
		_emit(j, p, &pr->r, kept, CUDA_JOIN_JOINED_LATE);
	}
	_trim_records(p);

	/* Records whose launch fell too far behind: it is not coming. */
	while (p->records.n && _key(&p->records, 0) + j->o.max_distance < p->newest_launch)
		_evict_record(j, p, CUDA_JOIN_WHY_DISTANCE);
	return 0;
nomem:
	if (j->o.free_stack && stack)
		j->o.free_stack(j->o.ctx, stack);
	return -ENOMEM;
}

int cuda_join__record(struct cuda_join *j, uint32_t pid, const struct fw_cuda_record *r,
		      uint64_t now_ns)
{
	struct pending_record pr = { .r = *r, .arrived_ns = now_ns };
	struct pid_state *p = _get(j, pid);
	uint32_t i;

	if (!p) {
		/* Without memory to keep it, the record still counts. */
		j->st.records++;
		_emit_without(j, pid, NULL, r, CUDA_JOIN_WHY_MEMORY);
		return -ENOMEM;
	}
	j->st.records++;
	i = _lower_bound(&p->launches, r->correlation);
	if (r->correlation && i < p->launches.n && _key(&p->launches, i) == r->correlation) {
		_emit(j, p, r, _at(&p->launches, i), CUDA_JOIN_JOINED);
		return 0;
	}
	/* Id 0 names no launch: time carried from launches no window kept. */
	if (!r->correlation) {
		_emit_without(j, pid, p, r, CUDA_JOIN_WHY_UNNAMED);
		return 0;
	}
	if (p->newest_launch && r->correlation + j->o.max_distance < p->newest_launch) {
		_emit_without(j, pid, p, r, CUDA_JOIN_WHY_DISTANCE);
		return 0;
	}
	if (p->records.n >= j->o.max_records)
		_evict_record(j, p, CUDA_JOIN_WHY_COUNT);
	/* After an eviction the ring has room, so this cannot fail for lack of it. */
	if (_insert(&p->records, &pr)) {
		_emit_without(j, pid, p, r, CUDA_JOIN_WHY_MEMORY);
		return -ENOMEM;
	}
	p->live_records++;
	return 0;
}

void cuda_join__expire(struct cuda_join *j, uint64_t now_ns)
{
	for (uint32_t i = 0; i < j->npids; i++) {
		struct pid_state *p = j->pids[i];

		if (!p->live_records)
			continue;
		for (uint32_t k = 0; k < p->records.n; k++) {
			struct pending_record *pr = _at(&p->records, k);

			if (pr->done || now_ns - pr->arrived_ns < j->o.max_record_age_ns)
				continue;
			pr->done = 1;
			p->live_records--;
			_emit_without(j, p->pid, p, &pr->r, CUDA_JOIN_WHY_AGE);
		}
		_trim_records(p);
	}
}

void cuda_join__flush_pid(struct cuda_join *j, uint32_t pid)
{
	uint32_t i;

	if (_find(j, pid, &i))
		_remove_at(j, i);
}

void cuda_join__flush(struct cuda_join *j)
{
	while (j->npids)
		_remove_at(j, j->npids - 1);
}

int cuda_join__has_pid(const struct cuda_join *j, uint32_t pid)
{
	return _find(j, pid, NULL) != NULL;
}

void cuda_join__stats(const struct cuda_join *j, struct cuda_join_stats *out)
{
	*out = j->st;
}

void cuda_join__pending(const struct cuda_join *j, uint64_t *launches, uint64_t *records)
{
	*launches = 0;
	*records = 0;
	for (uint32_t i = 0; i < j->npids; i++) {
		*launches += j->pids[i]->launches.n;
		*records += j->pids[i]->live_records;
	}
}

uint32_t cuda_join__weight(const struct fw_cuda_record *r, const struct cuda_join_launch *l)
{
	if (r->weight)
		return r->weight;
	return l && l->weight ? l->weight : 1;
}
