// SPDX-License-Identifier: Apache-2.0
/* GET /api/v1/cpu/strips: when each CPU was busy, and with what. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/intern.h"
#include "common/strbuf.h"
#include "common/timeparse.h"
#include "server/cpu_strips.h"
#include "server/request.h"
#include "server/routes.h"
#include "store/selector.h"
#include "store/store.h"

struct strip_buckets {
	int64_t from, to, res;
	uint32_t n;
	int64_t *busy;
	uint32_t *dominant;		/* comm id + 1 of the leader so far; 0: none */
	int64_t *dominant_ns;
	struct intern *comms;		/* comm text */
	struct intern *pairs;		/* (bucket, comm id) -> index in pair_ns */
	int64_t *pair_ns;
	uint32_t cap_pairs;
};

struct strip_buckets *strip_buckets__new(int64_t from, int64_t to, int64_t res)
{
	struct strip_buckets *b;
	uint64_t n;

	if (from >= to || res <= 0) {
		errno = EINVAL;
		return NULL;
	}
	n = ((uint64_t)to - (uint64_t)from + (uint64_t)res - 1) / (uint64_t)res;
	if (n > STRIP_MAX_BUCKETS) {
		errno = EINVAL;
		return NULL;
	}
	b = calloc(1, sizeof(*b));
	if (!b)
		return NULL;
	b->from = from;
	b->to = to;
	b->res = res;
	b->n = (uint32_t)n;
	b->busy = calloc(n, sizeof(*b->busy));
	b->dominant = calloc(n, sizeof(*b->dominant));
	b->dominant_ns = calloc(n, sizeof(*b->dominant_ns));
	b->comms = intern__new();
	b->pairs = intern__new();
	if (!b->busy || !b->dominant || !b->dominant_ns || !b->comms || !b->pairs) {
		strip_buckets__free(b);
		errno = ENOMEM;
		return NULL;
	}
	return b;
}

void strip_buckets__free(struct strip_buckets *b)
{
	if (!b)
		return;
	free(b->busy);
	free(b->dominant);
	free(b->dominant_ns);
	intern__free(b->comms);
	intern__free(b->pairs);
	free(b->pair_ns);
	free(b);
}

void strip_buckets__clear(struct strip_buckets *b)
{
	memset(b->busy, 0, b->n * sizeof(*b->busy));
	memset(b->dominant, 0, b->n * sizeof(*b->dominant));
	memset(b->dominant_ns, 0, b->n * sizeof(*b->dominant_ns));
	intern__free(b->pairs);
	b->pairs = intern__new();
}

uint32_t strip_buckets__count(const struct strip_buckets *b)
{
	return b->n;
}

static const char *_comm(const struct strip_buckets *b, uint32_t id)
{
	return intern__key(b->comms, id, NULL);
}

int strip_buckets__add(struct strip_buckets *b, int64_t start, int64_t end, const char *comm)
{
	int64_t cid;

	if (!b->pairs)
		return -ENOMEM;
	if (start < b->from)
		start = b->from;
	if (end > b->to)
		end = b->to;
	if (start >= end)
		return 0;
	cid = intern__add(b->comms, comm, strlen(comm) + 1, NULL);
	if (cid < 0)
		return (int)cid;
	for (uint64_t i = (uint64_t)(start - b->from) / b->res; i < b->n; i++) {
		int64_t bs = b->from + (int64_t)i * b->res, be = bs + b->res;
		uint64_t key = i << 32 | (uint64_t)cid;
		int64_t d, idx, ns;
		bool added;

		if (bs >= end)
			break;
		d = (end < be ? end : be) - (start > bs ? start : bs);
		b->busy[i] += d;
		idx = intern__add(b->pairs, &key, sizeof(key), &added);
		if (idx < 0)
			return (int)idx;
		if ((uint32_t)idx >= b->cap_pairs) {
			uint32_t cap = b->cap_pairs ? b->cap_pairs * 2 : 256;
			int64_t *a = realloc(b->pair_ns, cap * sizeof(*a));

			if (!a)
				return -ENOMEM;
			b->pair_ns = a;
			b->cap_pairs = cap;
		}
		if (added)
			b->pair_ns[idx] = 0;
		ns = b->pair_ns[idx] += d;
		if (!b->dominant[i] || ns > b->dominant_ns[i] ||
		    (ns == b->dominant_ns[i] &&
		     strcmp(comm, _comm(b, b->dominant[i] - 1)) < 0)) {
			b->dominant[i] = (uint32_t)cid + 1;
			b->dominant_ns[i] = ns;
		}
	}
	return 0;
}

void strip_buckets__get(const struct strip_buckets *b, uint32_t i, int64_t *start,
			double *fraction, const char **dominant)
{
	int64_t bs = b->from + (int64_t)i * b->res;
	int64_t len = (b->to - bs < b->res ? b->to - bs : b->res);
	double f = (double)b->busy[i] / (double)len;

	*start = bs;
	*fraction = f > 1 ? 1 : f;
	*dominant = b->dominant[i] ? _comm(b, b->dominant[i] - 1) : NULL;
}

/* ---- the route ------------------------------------------------------------ */

#define DEFAULT_MAX_INTERVALS 500000
#define MAX_INTERVALS 5000000

struct strips_out {
	struct strbuf sb;
	struct strip_buckets *buckets;	/* NULL: raw intervals */
	char *node_copy;		/* node of the CPU being written */
	int64_t cpu;			/* -1: none open yet */
	uint64_t nintervals, max_intervals;
	bool too_many;
};

static void _close_cpu(struct strips_out *o)
{
	bool first = true;

	if (o->cpu < 0)
		return;
	strbuf__puts(&o->sb, "],\"busy\":[");
	for (uint32_t i = 0; o->buckets && i < strip_buckets__count(o->buckets); i++) {
		const char *dom;
		int64_t bs;
		double f;

		strip_buckets__get(o->buckets, i, &bs, &f, &dom);
		if (!dom)
			continue;
		strbuf__printf(&o->sb, "%s[%lld,%.4f,", first ? "" : ",", (long long)bs, f);
		strbuf__json_string(&o->sb, dom);
		strbuf__putc(&o->sb, ']');
		first = false;
	}
	strbuf__puts(&o->sb, "]}");
	if (o->buckets)
		strip_buckets__clear(o->buckets);
}

static int _on_interval(void *ctx, const struct store_cpu_interval *iv)
{
	struct strips_out *o = ctx;

	if (o->cpu != iv->cpu || !o->node_copy || strcmp(o->node_copy, iv->node)) {
		bool first = o->cpu < 0;

		_close_cpu(o);
		free(o->node_copy);
		o->node_copy = strdup(iv->node);
		if (!o->node_copy)
			return -ENOMEM;
		o->cpu = iv->cpu;
		strbuf__printf(&o->sb, "%s{\"cpu\":%u,\"node\":", first ? "" : ",", iv->cpu);
		strbuf__json_string(&o->sb, iv->node);
		strbuf__puts(&o->sb, ",\"intervals\":[");
	}
	if (o->buckets)
		return strip_buckets__add(o->buckets, iv->start_ns, iv->end_ns, iv->comm);
	if (++o->nintervals > o->max_intervals) {
		o->too_many = true;
		return 1;
	}
	/* Whether this CPU's list is still empty: the byte before is '['. */
	strbuf__printf(&o->sb, "%s[%lld,%lld,%u,", o->sb.len && o->sb.buf[o->sb.len - 1] == '[' ?
		       "" : ",", (long long)iv->start_ns, (long long)iv->end_ns, iv->pid);
	strbuf__json_string(&o->sb, iv->comm);
	strbuf__putc(&o->sb, ']');
	return o->sb.oom ? -ENOMEM : 0;
}

void routes__cpu_strips(struct request *r)
{
	const char *q = request__param(r, "query");
	struct strips_out o = { .cpu = -1 };
	struct selector *sel = NULL;
	int64_t from, to, res;
	char err[256];
	int rc;

	/* No resolution: the raw intervals. */
	if (request__window(r, &from, &to) ||
	    request__duration_param(r, "resolution", PARAM_BARE_NS, 0, 1, PARAM_MAX_DURATION_NS,
				    &res) ||
	    request__uint_param(r, "max_intervals", DEFAULT_MAX_INTERVALS, 1, MAX_INTERVALS,
				&o.max_intervals))
		return;
	if (q && q[0]) {
		sel = selector__parse(q, err, sizeof(err));
		if (!sel) {
			request__error(r, 400, "query: %s", err);
			return;
		}
	}
	/* Buckets only when the window is wider than one of them. */
	if (res > 0 && to - from > res) {
		if (((uint64_t)to - (uint64_t)from) / (uint64_t)res >= STRIP_MAX_BUCKETS) {
			request__error(r, 400, "resolution: makes more than %d buckets",
				       STRIP_MAX_BUCKETS);
			goto out;
		}
		o.buckets = strip_buckets__new(from, to, res);
		if (!o.buckets) {
			request__error(r, 500, "out of memory");
			goto out;
		}
	}
	strbuf__puts(&o.sb, "{\"cpus\":[");
	rc = store__cpu_intervals(r->srv->store, from, to, sel, -1, _on_interval, &o);
	if (o.too_many) {
		request__error(r, 400, "more than %llu intervals in the window: pass a "
			       "resolution, a narrower window or max_intervals",
			       (unsigned long long)o.max_intervals);
		goto out;
	}
	if (rc) {
		request__error(r, rc == -ENOMEM ? 503 : 500, "store: %s", strerror(-rc));
		goto out;
	}
	_close_cpu(&o);
	strbuf__puts(&o.sb, "]}\n");
	if (o.sb.oom) {
		request__error(r, 503, "out of memory");
		goto out;
	}
	request__reply_json(r, 200, &o.sb);
out:
	strbuf__release(&o.sb);
	strip_buckets__free(o.buckets);
	free(o.node_copy);
	selector__free(sel);
}
