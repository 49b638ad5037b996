// SPDX-License-Identifier: Apache-2.0
/* Record weights from the monitors' kernel counts (see dispatch_scale.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpu/dispatch_scale.h"

#define SEC_NS		1000000000LL
#define NSECS		16		/* seconds kept per process: a power of two */
/* A second's records are in this long after it ends (windows flush at their end). */
#define SETTLE_NS	(3 * SEC_NS)
#define COVERED_MIN	(SEC_NS * 95 / 100)
/*
 * A second the windows saw nothing of counts only if records came within
 * this many seconds of it: a burst the random windows missed is part of
 * the estimate's error, but a library that stopped collecting (another
 * CUPTI client took the process) is not.
 */
#define NEAR_SECS	2
/* Per second used: about half a minute of memory. */
#define DECAY		0.97
#define MIN_LAUNCHES	1000.0
#define FACTOR_MIN	0.5
#define FACTOR_MAX	2.0
#define MAX_PROCS	256
/*
 * A time further ahead of now than this is not believed: it would take the
 * slot of seconds still to come, which a later second then could not have.
 */
#define AHEAD_NS	(5 * SEC_NS)

struct second {
	int64_t sec;		/* Unix second; -1: unused */
	bool done;		/* used or dropped: later news of it is ignored */
	uint64_t covered_ns;
	double counted;		/* kernels the monitors counted */
	double recorded;	/* launches the duty-cycled records stand for */
	uint32_t records, exact;	/* records in it; of them, not duty-cycled */
};

struct proc {
	uint32_t pid;
	int64_t hw_dev, rec_dev;	/* -1: none yet */
	bool mixed;
	int64_t first_sec;		/* of its first duty-cycled record; -1: none */
	int64_t last_fold_sec;
	int64_t last_sec;		/* the newest second with news of it */
	struct second s[NSECS];
	double sum_counted, sum_recorded;
	double factor;			/* 1: none in force */
	double told;			/* the factor dispatch_scale__news() last gave */
	double short_by;		/* counted / recorded, when over FACTOR_MAX; 0: not */
	bool short_told;		/* dispatch_scale__short() said so */
	uint64_t rng;
};

struct dispatch_scale {
	struct proc *p;
	uint32_t n, cap;
	struct dispatch_scale_stats st;
};

struct dispatch_scale *dispatch_scale__new(void)
{
	return calloc(1, sizeof(struct dispatch_scale));
}

void dispatch_scale__free(struct dispatch_scale *s)
{
	if (!s)
		return;
	free(s->p);
	free(s);
}

static struct proc *_find(const struct dispatch_scale *s, uint32_t pid)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (s->p[i].pid == pid)
			return &s->p[i];
	return NULL;
}

static struct proc *_get(struct dispatch_scale *s, uint32_t pid)
{
	struct proc *p = _find(s, pid);

	if (p)
		return p;
	if (s->n == MAX_PROCS) {
		/* Processes NVML named that never load the library are never
		 * forgotten otherwise: the one heard of least recently goes. */
		p = &s->p[0];
		for (uint32_t i = 1; i < s->n; i++)
			if (s->p[i].last_sec < p->last_sec)
				p = &s->p[i];
	} else {
		if (s->n == s->cap) {
			uint32_t cap = s->cap ? s->cap * 2 : 8;
			struct proc *np = realloc(s->p, cap * sizeof(*np));

			if (!np)
				return NULL;
			s->p = np;
			s->cap = cap;
		}
		p = &s->p[s->n++];
	}
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->hw_dev = p->rec_dev = p->first_sec = -1;
	p->last_fold_sec = -1;
	p->factor = p->told = 1.0;
	p->rng = 0x9e3779b97f4a7c15ULL ^ pid;
	for (int i = 0; i < NSECS; i++)
		p->s[i].sec = -1;
	return p;
}

/* The slot of second sec, cleared if it held an older one; NULL: too old or done. */
static struct second *_second(struct dispatch_scale *s, struct proc *p, int64_t sec)
{
	struct second *x = &p->s[sec & (NSECS - 1)];

	if (sec < 0 || x->sec > sec)
		return NULL;
	if (sec > p->last_sec)
		p->last_sec = sec;
	if (x->sec != sec) {
		if (x->sec >= 0 && !x->done)
			s->st.seconds_dropped++;
		*x = (struct second){ .sec = sec };
	}
	return x->done ? NULL : x;
}

static bool _device(struct dispatch_scale *s, struct proc *p, int64_t *have, uint32_t dev)
{
	if (*have < 0)
		*have = dev;
	if (*have != (int64_t)dev && !p->mixed) {
		p->mixed = true;
		p->factor = 1.0;
		s->st.mixed++;
	}
	return !p->mixed;
}

void dispatch_scale__counted(struct dispatch_scale *s, uint32_t pid, uint32_t dev,
			     int64_t start_ns, int64_t end_ns, uint64_t n, int64_t now_ns)
{
	struct proc *p;

	if (!s || end_ns <= start_ns || start_ns < 0 || end_ns > now_ns + AHEAD_NS ||
	    !(p = _get(s, pid)) || !_device(s, p, &p->hw_dev, dev))
		return;
	/* Spread over the seconds the range covers, in proportion. */
	for (int64_t t = start_ns; t < end_ns;) {
		int64_t sec = t / SEC_NS, stop = (sec + 1) * SEC_NS;
		struct second *x;

		if (stop > end_ns)
			stop = end_ns;
		x = _second(s, p, sec);
		if (x) {
			x->covered_ns += (uint64_t)(stop - t);
			x->counted += (double)n * (double)(stop - t) / (double)(end_ns - start_ns);
		}
		t = stop;
	}
}

static bool _records_near(const struct proc *p, int64_t sec)
{
	for (int i = 0; i < NSECS; i++)
		if (p->s[i].sec >= 0 && p->s[i].records && llabs(p->s[i].sec - sec) <= NEAR_SECS)
			return true;
	return false;
}

/* Uses or drops the seconds of p that are over, oldest first. */
static void _fold(struct dispatch_scale *s, struct proc *p, int64_t now_ns)
{
	int64_t last = (now_ns - SETTLE_NS) / SEC_NS - 1;	/* the newest second over */
	bool used = false;

	if (last <= p->last_fold_sec)
		return;
	p->last_fold_sec = last;
	for (int64_t sec = last - NSECS + 1; sec <= last; sec++) {
		struct second *x = &p->s[sec & (NSECS - 1)];

		if (x->sec != sec || x->done)
			continue;
		x->done = true;
		if (p->first_sec < 0 || sec < p->first_sec || x->exact || x->covered_ns < COVERED_MIN ||
		    (!x->records && !_records_near(p, sec))) {
			s->st.seconds_dropped++;
			continue;
		}
		p->sum_counted = p->sum_counted * DECAY + x->counted;
		p->sum_recorded = p->sum_recorded * DECAY + x->recorded;
		s->st.seconds_used++;
		used = true;
	}
	if (!used || p->sum_recorded < MIN_LAUNCHES)
		return;
	p->factor = p->sum_counted / p->sum_recorded;
	p->short_by = p->factor > FACTOR_MAX ? p->factor : 0;
	if (!p->short_by)
		p->short_told = false;	/* said again if it falls short again */
	if (!(p->factor >= FACTOR_MIN && p->factor <= FACTOR_MAX)) {
		s->st.implausible++;
		p->factor = 1.0;
	}
}

static double _uniform(struct proc *p)
{
	/* xorshift64*: enough to round weights without a bias. */
	p->rng ^= p->rng >> 12;
	p->rng ^= p->rng << 25;
	p->rng ^= p->rng >> 27;
	return (double)((p->rng * 0x2545f4914f6cdd1dULL) >> 11) / 9007199254740992.0;
}

uint32_t dispatch_scale__record(struct dispatch_scale *s, uint32_t pid, uint32_t dev,
				int64_t end_ns, uint32_t weight, bool duty_cycled, int64_t now_ns)
{
	struct second *x;
	struct proc *p;
	double w;

	if (!weight)
		weight = 1;
	if (!s || end_ns <= 0 || end_ns > now_ns + AHEAD_NS || !(p = _get(s, pid)) ||
	    !_device(s, p, &p->rec_dev, dev))
		return weight;
	x = _second(s, p, end_ns / SEC_NS);
	if (x) {
		x->records++;
		if (duty_cycled)
			x->recorded += weight;
		else
			x->exact++;
	}
	if (duty_cycled && p->first_sec < 0)
		p->first_sec = end_ns / SEC_NS + 1;	/* its first second may be partly exact */
	_fold(s, p, now_ns);
	if (!duty_cycled || p->factor == 1.0)
		return weight;
	w = (double)weight * p->factor;
	w = floor(w) + (_uniform(p) < w - floor(w));
	if (w < 1)
		w = 1;
	if (w > UINT32_MAX)
		w = UINT32_MAX;
	s->st.records_scaled += (uint32_t)w != weight;
	return (uint32_t)w;
}

double dispatch_scale__factor(const struct dispatch_scale *s, uint32_t pid)
{
	const struct proc *p = s ? _find(s, pid) : NULL;

	return p ? p->factor : 1.0;
}

bool dispatch_scale__news(struct dispatch_scale *s, uint32_t pid, double *factor)
{
	struct proc *p = s ? _find(s, pid) : NULL;

	if (!p || fabs(p->factor - p->told) <= 0.05 * p->told)
		return false;
	*factor = p->told = p->factor;
	return true;
}

bool dispatch_scale__short(struct dispatch_scale *s, uint32_t pid, double *counted_per_recorded)
{
	struct proc *p = s ? _find(s, pid) : NULL;

	if (!p || !p->short_by || p->short_told)
		return false;
	p->short_told = true;
	*counted_per_recorded = p->short_by;
	return true;
}

void dispatch_scale__forget(struct dispatch_scale *s, uint32_t pid)
{
	struct proc *p = s ? _find(s, pid) : NULL;

	if (!p)
		return;
	*p = s->p[--s->n];
}

void dispatch_scale__stats(const struct dispatch_scale *s, struct dispatch_scale_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (!s)
		return;
	*out = s->st;
	for (uint32_t i = 0; i < s->n; i++) {
		out->processes += s->p[i].factor != 1.0;
		out->short_processes += s->p[i].short_by != 0;
	}
}
