// SPDX-License-Identifier: Apache-2.0
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

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

struct pid_state {
	uint32_t pid;
	uint64_t newest_launch;		/* highest correlation id launched; 0: none yet */
	struct ring launches;		/* struct cuda_join_launch */
	struct ring records;		/* struct pending_record */
	uint32_t live_records;		/* records not yet done */
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

/* The first index whose key is >= key. */
static uint32_t _lower_bound(const struct ring *r, uint64_t key)
{
	uint32_t lo = 0, hi = r->n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (_key(r, mid) < key)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
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
	if (!j->o.max_pids)
		j->o.max_pids = 1024;
	return j;
}

static void _free_launch(struct cuda_join *j, struct cuda_join_launch *l)
{
	if (!l->matched)
		j->st.launches_unmatched++;
	if (j->o.free_stack && l->stack)
		j->o.free_stack(j->o.ctx, l->stack);
	l->stack = NULL;
}

static void _emit(struct cuda_join *j, uint32_t pid, const struct fw_cuda_record *r,
		  struct cuda_join_launch *l)
{
	if (l) {
		l->matched++;
		j->st.joined++;
	} else {
		j->st.unattributed++;
	}
	j->o.emit(j->o.ctx, pid, r, l);
}

/* Drops the emitted records at the head. */
static void _trim_records(struct pid_state *p)
{
	while (p->records.n && ((struct pending_record *)_at(&p->records, 0))->done)
		_pop_front(&p->records);
}

/* Emits the record at the head unattributed, and drops it. */
static void _evict_record(struct cuda_join *j, struct pid_state *p, uint64_t *counter)
{
	struct pending_record *pr = _at(&p->records, 0);

	if (!pr->done) {
		(*counter)++;
		pr->done = 1;
		p->live_records--;
		_emit(j, p->pid, &pr->r, NULL);
	}
	_pop_front(&p->records);
	_trim_records(p);
}

static void _free_pid(struct cuda_join *j, struct pid_state *p)
{
	for (uint32_t i = 0; i < p->launches.n; i++)
		_free_launch(j, _at(&p->launches, i));
	free(p->launches.items);
	free(p->records.items);
	free(p);
}

static void _flush_state(struct cuda_join *j, struct pid_state *p)
{
	while (p->records.n)
		_evict_record(j, p, &j->st.records_expired);
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
		.weight = weight ? weight : 1, .stack = stack,
	};
	struct cuda_join_launch *kept;
	struct pid_state *p = _get(j, pid);
	uint32_t i;

	(void)now_ns;
	if (!p)
		goto nomem;
	j->st.launches++;
	if (correlation > p->newest_launch)
		p->newest_launch = correlation;

	/* Launches too far behind the newest will not see another record. */
	while (p->launches.n &&
	       _key(&p->launches, 0) + j->o.max_distance < p->newest_launch) {
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
		_emit(j, pid, &pr->r, kept);
	}
	_trim_records(p);

	/* Records whose launch fell too far behind: it is not coming. */
	while (p->records.n && _key(&p->records, 0) + j->o.max_distance < p->newest_launch)
		_evict_record(j, p, &j->st.records_evicted_distance);
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
		_emit(j, pid, r, NULL);
		return -ENOMEM;
	}
	j->st.records++;
	i = _lower_bound(&p->launches, r->correlation);
	if (i < p->launches.n && _key(&p->launches, i) == r->correlation) {
		_emit(j, pid, r, _at(&p->launches, i));
		return 0;
	}
	if (p->newest_launch && r->correlation + j->o.max_distance < p->newest_launch) {
		j->st.records_evicted_distance++;
		_emit(j, pid, r, NULL);
		return 0;
	}
	if (p->records.n >= j->o.max_records)
		_evict_record(j, p, &j->st.records_evicted_count);
	/* After an eviction the ring has room, so this cannot fail for lack of it. */
	if (_insert(&p->records, &pr)) {
		_emit(j, pid, r, NULL);
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
			j->st.records_expired++;
			_emit(j, p->pid, &pr->r, NULL);
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
