// SPDX-License-Identifier: Apache-2.0
/*
 * "Why is the GPU idle?": GET /api/v1/gpu/idle?pid=N. The CPU samples of
 * one process taken while its GPU was idle, as a flame graph, and the share
 * of the process's wall time its GPU was idle.
 *
 * Busy comes from the process's kernel intervals when it has them: the GPU
 * is busy while any kernel of the process runs. Copies and memsets do not
 * count: a stall that only moves data is what this page must show. Without
 * kernel intervals (no libflamewatch-cuda.so in the process), or when they
 * were sampled (weights above 1: CUPTI's duty cycle leaves windows
 * unrecorded, and their gaps would read as idle), busy is where NVML saw
 * the process's utilisation (else its node's GPUs') at or above
 * ?threshold= percent. The answer says which source it used ("none" when
 * there is neither: then no sample is called idle).
 *
 * The wall time is the process's span in the window: from its first
 * evidence (a CPU sample, a kernel, or an off-CPU block) to its last, so
 * that a short job in a long window is not reported idle for the time it
 * did not exist.
 *
 * Beside the CPU samples, the process's off-CPU blocks (gpu_idle_offcpu.h):
 * the idle time its threads spent blocked, as a second flame graph
 * ("offcpu"), so that a loader blocked in read() shows as exactly that.
 * ?graph=offcpu makes format=folded give that graph instead of the CPU one.
 *
 * Before either comes the busy timeline, when the process's library sent
 * one (cuda/probes.h): busy spans coalesced from every kernel record, and
 * the coverage, the time in which every record was read; or when the agent
 * sent one from the GPU's own monitors while the process was alone on it
 * (agent/gpu_busy.h), complete where the records are duty-cycled
 * ("sources" in the JSON). Inside the
 * coverage the spans are the whole truth; outside it the answer falls back
 * to the sources above ("fallback" in the JSON; "coverage" is the share of
 * the process's span the timeline covers). With no fallback either, time
 * outside the coverage is neither busy nor idle: no sample there is called
 * idle and the idle fraction is of the covered time. A span carries the idle
 * time inside it (gaps it merged, idle cycles of its samples): idle, in the
 * fraction, though in no gap ("idle_inside_ns"); a CPU sample inside such a
 * span is idle with the odds of the span's idle share ("idle_inside").
 *
 * A CPU sample inside a CUDA synchronisation call is the CPU waiting on a
 * busy GPU, whatever the busy source says of that instant (NVML's averages
 * cannot place sub-second phases): all such samples are counted as
 * waiting_on_gpu, and none is in the idle flame graph. Samples in
 * libflamewatch-cuda.so (the profiler's own thread and callbacks) are
 * counted as "profiler" and are in neither graph. resolution_ns says how
 * finely the source places busy time (0: exact intervals).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/batch.h"
#include "common/profile.h"
#include "common/strbuf.h"
#include "common/timeparse.h"
#include "format/flamegraph.h"
#include "format/folded.h"
#include "server/gpu_idle.h"
#include "server/gpu_idle_offcpu.h"
#include "server/request.h"
#include "server/routes.h"
#include "store/selector.h"
#include "store/store.h"

/*
 * A kernel that started this long before the window may still run in it;
 * an NVML point this old may still hold at its start.
 */
#define KERNEL_LOOKBACK_NS (10LL * 1000000000LL)
#define MAX_KERNELS 2000000
#define MAX_GAPS 5000
#define DEFAULT_MAX_NODES 20000
#define MAX_NODES 1000000
#define DEFAULT_THRESHOLD 5.0
/* Launching threads listed by tid in "offcpu" (tids_total counts them all). */
#define MAX_TIDS_LISTED 64
#define UTIL_PROCESS "flamewatch_gpu_process_utilization_percent"
#define UTIL_NODE "flamewatch_gpu_utilization_percent"

enum idle_source { SRC_AUTO, SRC_KERNELS, SRC_NVML, SRC_TIMELINE };

struct kernels {
	struct busy_set *busy;
	int64_t from, to;
	uint64_t n;
	uint32_t max_weight;
	int64_t first, last;
	/* The busy timeline: its spans, its coverage, the widest merge gap. */
	struct busy_set *tl_busy, *tl_cover;
	/* The records' own coverage: where the library collected every record. */
	struct busy_set *rec_cover;
	uint64_t tl_spans, tl_gap;
	/* Intervals of it by source: the process's records, or the GPU's monitors. */
	uint64_t tl_records, tl_monitors;
	/* ?timeline_from=: TL_FROM_BOTH, or only one source's intervals. */
	int tl_from;
	/* Busy spans with idle time inside them, clipped to the window. */
	struct inside *inside;
	size_t ninside, cap_inside;
};

/*
 * Idle time a busy span holds inside it (the gaps between kernels its
 * records merged, or the idle cycles of its monitors' samples): counted as
 * idle, though no gap places it. idle is already scaled to [start, end).
 */
struct inside {
	int64_t start, end;
	double idle;
	bool monitors;
};

static int _inside_add(struct kernels *k, const struct store_gpu_interval *iv, int64_t a, int64_t b,
		       bool mon)
{
	uint64_t idle = iv->correlation;

	if (!idle || iv->end_ns <= iv->start_ns)
		return 0;
	if (idle > (uint64_t)(iv->end_ns - iv->start_ns))
		idle = (uint64_t)(iv->end_ns - iv->start_ns);
	if (k->ninside == k->cap_inside) {
		size_t cap = k->cap_inside ? 2 * k->cap_inside : 256;
		struct inside *p = realloc(k->inside, cap * sizeof(*p));

		if (!p)
			return -ENOMEM;
		k->inside = p;
		k->cap_inside = cap;
	}
	k->inside[k->ninside++] = (struct inside){
		a, b, (double)idle * (double)(b - a) / (double)(iv->end_ns - iv->start_ns), mon,
	};
	return 0;
}

/*
 * The idle time inside the busy spans in [from, to). Where the records
 * were complete their spans are the finer account, so a monitors' span
 * counts only for its part outside the records' coverage.
 */
static int64_t _inside_idle(const struct kernels *k, int64_t from, int64_t to)
{
	double sum = 0;

	for (size_t i = 0; i < k->ninside; i++) {
		const struct inside *in = &k->inside[i];
		int64_t a = in->start > from ? in->start : from;
		int64_t b = in->end < to ? in->end : to;
		int64_t part;

		if (b <= a)
			continue;
		part = b - a;
		if (in->monitors)
			part -= busy_set__covered(k->rec_cover, a, b);
		sum += in->idle * (double)part / (double)(in->end - in->start);
	}
	return (int64_t)(sum + 0.5);
}

enum { TL_FROM_BOTH, TL_FROM_RECORDS, TL_FROM_MONITORS };

static int _kernel(void *ctx, const struct store_gpu_interval *iv)
{
	struct kernels *k = ctx;
	int64_t a = iv->start_ns > k->from ? iv->start_ns : k->from;
	int64_t b = iv->end_ns < k->to ? iv->end_ns : k->to;
	bool mon = false;

	if (b <= a)
		return 0;
	if (iv->kind == GPU_BUSY || iv->kind == GPU_COVERAGE) {
		mon = iv->name && (!strcmp(iv->name, GPU_BUSY_NAME_MONITORS) ||
				   !strcmp(iv->name, GPU_COVERAGE_NAME_MONITORS));
		if ((k->tl_from == TL_FROM_RECORDS && mon) ||
		    (k->tl_from == TL_FROM_MONITORS && !mon))
			return 0;
		if (mon)
			k->tl_monitors++;
		else
			k->tl_records++;
	}
	if (iv->kind == GPU_BUSY) {
		k->tl_spans++;
		if (iv->bytes > k->tl_gap)
			k->tl_gap = iv->bytes;
		if (_inside_add(k, iv, a, b, mon))
			return -ENOMEM;
		if (!k->first || a < k->first)
			k->first = a;
		if (b > k->last)
			k->last = b;
		return busy_set__add(k->tl_busy, a, b);
	}
	if (iv->kind == GPU_COVERAGE && !mon && busy_set__add(k->rec_cover, a, b))
		return -ENOMEM;
	if (iv->kind == GPU_COVERAGE)
		return busy_set__add(k->tl_cover, a, b);
	if (iv->kind != GPU_KERNEL)
		return 0;
	k->n++;
	if (iv->weight > k->max_weight)
		k->max_weight = iv->weight;
	if (!k->first || a < k->first)
		k->first = a;
	if (b > k->last)
		k->last = b;
	return busy_set__add(k->busy, a, b);
}

/*
 * NVML points, one series at a time: a point holds its value until the next
 * point of its series, but at most twice the series' shortest spacing, so
 * that a series that stops (the process left the GPU) stops being busy.
 */
struct nvml {
	struct busy_set *busy;
	double threshold;
	int64_t from, to;
	int64_t *ts;
	double *val;
	size_t n, cap;
	uint64_t points;
	int64_t resolution;	/* the widest spacing of a series' points */
	int err;
};

static int _nvml_flush(struct nvml *m)
{
	int64_t min_dt = 0;

	for (size_t i = 1; i < m->n; i++) {
		int64_t dt = m->ts[i] - m->ts[i - 1];

		if (dt > 0 && (!min_dt || dt < min_dt))
			min_dt = dt;
	}
	if (!min_dt)
		min_dt = 1000000000LL;	/* one point: the agent's default interval */
	if (m->n && min_dt > m->resolution)
		m->resolution = min_dt;
	for (size_t i = 0; i < m->n; i++) {
		int64_t end = m->ts[i] + 2 * min_dt;

		if (i + 1 < m->n && m->ts[i + 1] < end)
			end = m->ts[i + 1];
		if (m->val[i] >= m->threshold && end > m->from) {
			int err = busy_set__add(m->busy, m->ts[i] > m->from ? m->ts[i] : m->from,
						end < m->to ? end : m->to);

			if (err)
				return err;
		}
	}
	m->n = 0;
	return 0;
}

static int _nvml_series(void *ctx, const char *name, const char *const *lnames,
			const char *const *lvalues, size_t n)
{
	(void)name;
	(void)lnames;
	(void)lvalues;
	(void)n;
	return _nvml_flush(ctx);
}

static int _nvml_point(void *ctx, int64_t ts, double avg, double max, uint32_t count)
{
	struct nvml *m = ctx;

	(void)max;
	(void)count;
	if (m->n == m->cap) {
		size_t cap = m->cap ? m->cap * 2 : 1024;
		int64_t *t = realloc(m->ts, cap * sizeof(*t));
		double *v;

		if (!t)
			return -ENOMEM;
		m->ts = t;
		v = realloc(m->val, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		m->val = v;
		m->cap = cap;
	}
	m->ts[m->n] = ts;
	m->val[m->n++] = avg;
	m->points++;
	return 0;
}

/* Busy spans from the metric `metric` of the series sel_inner names. */
static int _nvml_busy(struct request *r, struct nvml *m, const char *metric, const char *inner)
{
	struct store_metric_visitor v = { _nvml_series, _nvml_point, m };
	struct selector *sel;
	char text[512], err[256];
	int rc;

	snprintf(text, sizeof(text), "{__name__=\"%s\"%s%s}", metric, inner[0] ? "," : "", inner);
	sel = selector__parse(text, err, sizeof(err));
	if (!sel)
		return -EINVAL;
	/*
	 * Raw points (step 0): the agent reads NVML about once a second. The
	 * point before the window holds into it.
	 */
	rc = store__metrics(r->srv->store, m->from - KERNEL_LOOKBACK_NS, m->to, 0, sel, &v);
	if (!rc)
		rc = _nvml_flush(m);
	selector__free(sel);
	return rc;
}

struct idle {
	struct busy_set *busy;
	/* Busy spans with idle inside, by start: a sample there may be idle. */
	const struct inside *inside;
	size_t ninside;
	const struct busy_set *rec_cover;	/* where the records were complete */
	uint64_t idle_inside;	/* idle samples taken inside busy spans */
	/* Non-NULL: only samples inside it may be idle (nothing knows outside). */
	const struct busy_set *known;
	size_t known_cursor;
	struct profile *p;
	size_t cursor;
	uint64_t total, idle, waiting, observer;
	int64_t first, last;
	bool unknown;
	struct sync_stacks sync;
};

static int _by_inside_start(const void *a, const void *b)
{
	const struct inside *x = a, *y = b;

	return x->start < y->start ? -1 : x->start > y->start;
}

/* Entries before ts looked at for one that holds it (other devices', other sources'). */
#define INSIDE_LOOKBACK 8

/*
 * The idle share of the busy span that holds ts (0: none holds idle time):
 * the records' span where there is one, the finer account, else the
 * monitors' outside the records' coverage (rec_cover); of several
 * (devices), the least idle.
 */
static double _inside_share(const struct inside *in, size_t n, const struct busy_set *rec_cover,
			    int64_t ts)
{
	size_t lo = 0, hi = n;
	double rec = -1, mon = -1;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (in[mid].start <= ts)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo, k = 0; i-- > 0 && k < INSIDE_LOOKBACK; k++) {
		const struct inside *e = &in[i];
		double share;

		if (ts >= e->end)
			continue;
		share = e->idle / (double)(e->end - e->start);
		if (e->monitors)
			mon = mon < 0 || share < mon ? share : mon;
		else
			rec = rec < 0 || share < rec ? share : rec;
	}
	if (rec >= 0)
		return rec;
	/* Complete records with no idle inside here: the monitors' account does not apply. */
	return mon >= 0 && !busy_set__covered(rec_cover, ts, ts + 1) ? mon : 0;
}

/* A number in [0, 1) that depends only on the sample (splitmix64's mix). */
static double _sample_dice(int64_t ts, uint32_t tid)
{
	uint64_t z = (uint64_t)ts * 0x9e3779b97f4a7c15ULL + tid;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	return (double)(z >> 11) * 0x1.0p-53;
}

static int _sample(void *ctx, int64_t ts, uint32_t stack, uint32_t tid, uint32_t cpu,
		   int64_t value, const char *comm, uint32_t pid)
{
	struct idle *s = ctx;
	bool inside = false;
	int64_t c;
	int kind;

	(void)cpu;
	if (!s->first)
		s->first = ts;
	s->last = ts;
	s->total += value;
	kind = sync_stacks__kind(&s->sync, s->p, stack);
	if (kind < 0)
		return kind;
	if (kind == STACK_OBSERVER)
		s->observer += value;
	if (kind == STACK_SYNC)
		s->waiting += value;
	if (kind != STACK_PLAIN || s->unknown)
		return 0;
	/*
	 * Inside a busy span that is 60 % idle gaps (a launch-bound loop), a
	 * sample falls in a gap with odds 0.6: it is called idle with those
	 * odds, by a dice of its own, so that the idle graph shows the CPU
	 * code between the kernels in proportion and every reply agrees.
	 */
	if (busy_set__contains(s->busy, ts, &s->cursor)) {
		double share = s->ninside ? _inside_share(s->inside, s->ninside, s->rec_cover, ts)
					  : 0;

		if (!(share > 0 && _sample_dice(ts, tid) < share))
			return 0;
		inside = true;
	}
	if (s->known && !busy_set__contains(s->known, ts, &s->known_cursor))
		return 0;
	s->idle += value;
	if (inside)
		s->idle_inside += value;
	c = profile__intern_string(s->p, comm ? comm : "");
	if (c < 0)
		return -ENOMEM;
	return profile__add_sample(s->p, stack, pid, 0, 0, (uint32_t)c, (uint64_t)value);
}

struct gaps_out {
	struct strbuf *sb;
	int64_t min;
	uint32_t n;
	bool truncated;
};

static int _gap(void *ctx, int64_t start, int64_t end)
{
	struct gaps_out *g = ctx;

	if (end - start < g->min)
		return 0;
	if (g->n == MAX_GAPS) {
		g->truncated = true;
		return 1;
	}
	strbuf__printf(g->sb, "%s[%lld,%lld]", g->n++ ? "," : "", (long long)start,
		       (long long)end);
	return 0;
}

static int _add_span(void *ctx, int64_t start, int64_t end)
{
	return busy_set__add(ctx, start, end);
}

/* Busy and idle time inside the coverage, and its idle gaps. */
struct known {
	const struct busy_set *busy;
	int64_t known_ns, busy_ns;
	struct gaps_out *g;
};

/*
 * "records": how the process's library collected its activity records over
 * its span: "all" (every record, as it does while they cost the process
 * little), "duty_cycled" (in windows: the GPU time estimated, the busy
 * timeline left to the GPU's monitors) or "mixed", with the share of the
 * span in which every record was read.
 */
static void _records_json(struct strbuf *sb, const struct busy_set *rec_cover, int64_t from,
			  int64_t to)
{
	double share = to > from ? (double)busy_set__covered(rec_cover, from, to) / (double)(to - from)
				 : 0;

	strbuf__printf(sb, "\"records\":{\"mode\":\"%s\",\"complete\":%.6f}",
		       share >= 0.99 ? "all" : share <= 0.01 ? "duty_cycled" : "mixed", share);
}

static int _known_part(void *ctx, int64_t start, int64_t end)
{
	struct known *k = ctx;

	k->known_ns += end - start;
	k->busy_ns += busy_set__covered(k->busy, start, end);
	return 0;
}

static int _known_gaps(void *ctx, int64_t start, int64_t end)
{
	struct known *k = ctx;

	return busy_set__gaps(k->busy, start, end, _gap, k->g);
}

static int _params(struct request *r, uint64_t *pid, enum idle_source *src, double *threshold,
		   uint64_t *max_nodes, bool *folded, bool *offcpu_graph, int64_t *min_gap,
		   const char **node, int *tl_from)
{
	const char *s = request__param(r, "source"), *f = request__param(r, "format");
	const char *gr = request__param(r, "graph"), *tf = request__param(r, "timeline_from");

	if (!request__param(r, "pid")) {
		request__error(r, 400, "pid: missing; the process id to look at");
		return -1;
	}
	if (request__uint_param(r, "pid", 0, 1, UINT32_MAX, pid) ||
	    request__double_param(r, "threshold", DEFAULT_THRESHOLD, 0, 100, threshold) ||
	    request__uint_param(r, "max_nodes", DEFAULT_MAX_NODES, 1, MAX_NODES, max_nodes) ||
	    request__duration_param(r, "min_gap", 0, -1, 0, PARAM_MAX_DURATION_NS, min_gap) ||
	    request__text_param(r, "node", PARAM_MAX_NODE_LEN, node))
		return -1;
	/* The node goes into a selector's quoted value. */
	if (*node && (!(*node)[0] || strpbrk(*node, "\"\\"))) {
		request__error(r, 400, "node: '%.64s' is not a node name", *node);
		return -1;
	}
	*src = SRC_AUTO;
	if (s && !strcmp(s, "kernels")) {
		*src = SRC_KERNELS;
	} else if (s && !strcmp(s, "timeline")) {
		*src = SRC_TIMELINE;
	} else if (s && !strcmp(s, "nvml")) {
		*src = SRC_NVML;
	} else if (s && strcmp(s, "auto")) {
		request__error(r, 400, "source: '%s' is not one of auto, timeline, kernels, nvml", s);
		return -1;
	}
	*folded = false;
	if (f && !strcmp(f, "folded")) {
		*folded = true;
	} else if (f && strcmp(f, "json")) {
		request__error(r, 400, "format: '%s' is not one of json, folded", f);
		return -1;
	}
	/* One source of the busy timeline alone: to compare the two over one run. */
	*tl_from = TL_FROM_BOTH;
	if (tf && !strcmp(tf, "records")) {
		*tl_from = TL_FROM_RECORDS;
	} else if (tf && !strcmp(tf, "gpu_monitors")) {
		*tl_from = TL_FROM_MONITORS;
	} else if (tf && strcmp(tf, "both")) {
		request__error(r, 400, "timeline_from: '%.64s' is not one of both, records, "
			       "gpu_monitors", tf);
		return -1;
	}
	*offcpu_graph = false;
	if (gr && !strcmp(gr, "offcpu")) {
		*offcpu_graph = true;
	} else if (gr && strcmp(gr, "cpu")) {
		request__error(r, 400, "graph: '%.64s' is not one of cpu, offcpu", gr);
		return -1;
	}
	return 0;
}

/*
 * The CPU time one sample stands for. The samples come as counts, so the
 * period is the store's: that of every sample in the window, or their mean
 * where agents with different -F mixed (the store then sums nanoseconds).
 * The request's period would be a guess; the store knows what was sampled.
 */
static int _cpu_period(struct request *r, const struct selector *sel, int64_t from, int64_t to,
		       uint64_t samples, uint64_t *period)
{
	struct profile *p = profile__new(1000000000ULL / r->srv->default_hz, (uint64_t)from);
	int err;

	if (!p)
		return -ENOMEM;
	err = store__profile(r->srv->store, from, to, sel, SAMPLE_CPU, p);
	*period = p->period_ns;
	if (!err && p->period_ns == 1 && samples)
		*period = profile__total(p) / samples;
	profile__free(p);
	return err;
}

/* "null", or num / den with 6 decimals. */
static void _ratio(struct strbuf *sb, int64_t num, int64_t den)
{
	if (den > 0)
		strbuf__printf(sb, "%.6f", (double)num / (double)den);
	else
		strbuf__puts(sb, "null");
}

static void _reply_folded(struct request *r, const struct profile *p)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	int err;

	if (!f) {
		request__error(r, 503, "out of memory");
		return;
	}
	err = folded__write(p, f);
	if (fclose(f) && !err)
		err = -EIO;
	if (err)
		request__error(r, 500, "cannot encode the profile: %s", strerror(-err));
	else
		request__reply(r, 200, "text/plain", buf, len);
	free(buf);
}

/*
 * "offcpu": null when no thread of the process has a block in the window
 * (the agent ran without off-CPU time, or no thread blocked as long as its
 * minimum): zeros would read as a measurement. share: the part of the idle
 * time in which a launching thread was blocked (wall_ns over it, at most 1);
 * the graph's total is idle_ns, their blocked idle time summed.
 */
static void _offcpu_json(struct strbuf *sb, const struct offcpu_idle *o, int64_t idle_ns,
			 const struct strbuf *graph)
{
	if (!o->blocks && !o->other_blocks) {
		strbuf__puts(sb, ",\"offcpu\":null");
		return;
	}
	strbuf__printf(sb, ",\"offcpu\":{\"threads\":\"%s\",\"tids\":[",
		       o->main_thread ? "main" : "launching");
	for (size_t i = 0; i < o->ntids && i < MAX_TIDS_LISTED; i++)
		strbuf__printf(sb, "%s%u", i ? "," : "", o->tids[i]);
	strbuf__printf(sb, "],\"tids_total\":%zu,\"blocks\":%llu,\"blocked_ns\":%lld,"
		       "\"idle_ns\":%lld,\"waiting_on_gpu_ns\":%lld,\"wall_ns\":%lld,"
		       "\"lookback_ns\":%lld,\"not_next_ns\":%lld,"
		       "\"other_threads\":{\"blocks\":%llu,\"blocked_ns\":%lld},\"share\":",
		       o->ntids, (unsigned long long)o->blocks, (long long)o->blocked_ns,
		       (long long)o->idle_ns, (long long)o->waiting_ns, (long long)o->wall_ns,
		       (long long)OFFCPU_LOOKBACK_NS, (long long)o->not_next_ns,
		       (unsigned long long)o->other_blocks,
		       (long long)o->other_blocked_ns);
	_ratio(sb, o->wall_ns, idle_ns);
	strbuf__puts(sb, ",\"profile\":");
	strbuf__append(sb, graph->buf, graph->len);
	strbuf__putc(sb, '}');
}

void routes__gpu_idle(struct request *r)
{
	const char *node;
	struct kernels k = { 0 };
	struct nvml m = { 0 };
	struct idle s = { 0 };
	struct offcpu_idle o = { 0 };
	struct selector *sel = NULL;
	struct strbuf sb = STRBUF_INIT, fg = STRBUF_INIT, ofg = STRBUF_INIT;
	struct gaps_out g = { .sb = &sb };
	const char *source = "kernels";
	char inner[PARAM_MAX_NODE_LEN + 64], text[PARAM_MAX_NODE_LEN + 72], err_text[256];
	uint64_t pid, max_nodes, period = 0;
	enum idle_source src;
	int64_t from, to, span_from, span_to, busy_ns, idle_ns, span_ns, min_gap = -1;
	int64_t resolution, inside_ns;
	struct known known = { 0 };
	const char *fallback;
	double threshold;
	bool folded, offcpu_graph, from_nvml = false, have_tl;
	int err;

	if (request__window(r, &from, &to) ||
	    _params(r, &pid, &src, &threshold, &max_nodes, &folded, &offcpu_graph, &min_gap,
		    &node, &k.tl_from))
		goto out;
	/*
	 * Kernels launched back to back leave gaps of microseconds between
	 * them: listed, they would crowd out the gaps that matter. By default
	 * only those at least 1/2000 of the window long are listed (about a
	 * pixel on a wide screen); the idle time counts every gap.
	 */
	g.min = min_gap >= 0 ? min_gap : (to - from) / 2000;
	snprintf(inner, sizeof(inner), "pid=\"%llu\"%s%s%s", (unsigned long long)pid,
		 node ? ",node=\"" : "", node ? node : "", node ? "\"" : "");
	snprintf(text, sizeof(text), "{%s}", inner);
	sel = selector__parse(text, err_text, sizeof(err_text));
	k.busy = busy_set__new();
	k.tl_busy = busy_set__new();
	k.tl_cover = busy_set__new();
	k.rec_cover = busy_set__new();
	s.p = profile__new(1, from);
	if (!sel || !k.busy || !k.tl_busy || !k.tl_cover || !k.rec_cover || !s.p) {
		request__error(r, 503, "out of memory");
		goto out;
	}
	k.from = from;
	k.to = to;
	if (src != SRC_NVML) {
		err = store__gpu_intervals(r->srv->store, from - KERNEL_LOOKBACK_NS, to, sel, NULL,
					   MAX_KERNELS, _kernel, &k);
		if (err == -E2BIG) {
			request__error(r, 400, "the window holds more than %d GPU intervals of "
				       "process %lu: narrow it", MAX_KERNELS, pid);
			goto out;
		}
		if (err) {
			request__error(r, err == -ENOMEM ? 503 : 500, "store: %s", strerror(-err));
			goto out;
		}
	}
	busy_set__finish(k.tl_busy);
	busy_set__finish(k.tl_cover);
	busy_set__finish(k.rec_cover);
	have_tl = (src == SRC_AUTO || src == SRC_TIMELINE) && busy_set__count(k.tl_cover);
	if (src == SRC_TIMELINE && !have_tl) {
		request__error(r, 404, "no busy timeline of process %lu in this window (its "
			       "libflamewatch-cuda.so sends one while it reads every kernel record)",
			       pid);
		goto out;
	}
	if (src == SRC_TIMELINE)
		source = "none";	/* no fallback outside the coverage */
	if (src == SRC_NVML || (src == SRC_AUTO && (!k.n || k.max_weight > 1))) {
		m.busy = busy_set__new();
		if (!m.busy) {
			request__error(r, 503, "out of memory");
			goto out;
		}
		m.threshold = threshold;
		m.from = from;
		m.to = to;
		source = "nvml_process";
		err = _nvml_busy(r, &m, UTIL_PROCESS, inner);
		if (!err && !m.points) {
			/* The process never showed in NVML's per-process list: its node's GPUs. */
			snprintf(inner, sizeof(inner), "%s%s%s", node ? "node=\"" : "",
				 node ? node : "", node ? "\"" : "");
			source = "nvml_node";
			err = _nvml_busy(r, &m, UTIL_NODE, inner);
		}
		if (err) {
			request__error(r, err == -ENOMEM ? 503 : 500, "store: %s", strerror(-err));
			goto out;
		}
		if (!m.points && src == SRC_NVML) {
			request__error(r, 404, "no NVML utilisation of process %lu or of its node's "
				       "GPUs in this window", pid);
			goto out;
		}
		if (m.points) {
			busy_set__free(k.busy);
			k.busy = m.busy;
			m.busy = NULL;
			from_nvml = true;
		} else {
			/* Nothing from NVML either: the sampled kernels are all there is. */
			source = k.n ? "kernels" : "none";
		}
	}
	busy_set__finish(k.busy);
	fallback = source;
	if (have_tl) {
		/* The timeline inside its coverage, the fallback outside it. */
		struct busy_set *all = busy_set__new();

		if (!all || busy_set__each(k.tl_busy, from, to, _add_span, all) ||
		    (strcmp(fallback, "none") && busy_set__add_outside(all, k.busy, k.tl_cover))) {
			busy_set__free(all);
			request__error(r, 503, "out of memory");
			goto out;
		}
		busy_set__finish(all);
		busy_set__free(k.busy);
		k.busy = all;
		source = "timeline";
		if (!strcmp(fallback, "none"))
			s.known = k.tl_cover;
	}
	/* Nothing says when the GPU was busy: no sample is called idle. */
	s.unknown = !strcmp(source, "none");
	s.busy = k.busy;
	if (have_tl && k.ninside) {
		qsort(k.inside, k.ninside, sizeof(*k.inside), _by_inside_start);
		s.inside = k.inside;
		s.ninside = k.ninside;
		s.rec_cover = k.rec_cover;
	}
	err = store__samples(r->srv->store, from, to, sel, SAMPLE_CPU, 0, s.p, _sample, &s, NULL);
	if (err) {
		request__error(r, err == -ENOMEM ? 503 : 500, "store: %s", strerror(-err));
		goto out;
	}
	if (!folded || offcpu_graph) {
		o.busy = k.busy;
		o.known = s.known;
		o.unknown = s.unknown;
		o.from = from;
		o.to = to;
		err = offcpu_idle__read(r->srv->store, sel, (uint32_t)pid, &o);
		if (!err && !folded)
			err = _cpu_period(r, sel, from, to, s.total, &period);
		if (err) {
			request__error(r, err == -ENOMEM ? 503 : 500, "store: %s", strerror(-err));
			goto out;
		}
	}
	if (folded) {
		_reply_folded(r, offcpu_graph ? o.p : s.p);
		goto out;
	}
	/* The process's span: from its first sample, kernel or block to its last. */
	span_from = s.first;
	span_to = s.last;
	if (k.first && (!span_from || k.first < span_from))
		span_from = k.first;
	if (k.last > span_to)
		span_to = k.last;
	if (o.span_from && (!span_from || o.span_from < span_from))
		span_from = o.span_from;
	if (o.span_to > span_to)
		span_to = o.span_to;
	if (!span_from) {
		span_from = from;
		span_to = from;
	}
	span_ns = span_to - span_from;
	busy_ns = busy_set__covered(k.busy, span_from, span_to);
	known.busy = k.busy;
	known.g = &g;
	if (have_tl)
		busy_set__each(k.tl_cover, span_from, span_to, _known_part, &known);
	if (s.known) {
		/* Only the covered time is known: the fraction is of it. */
		busy_ns = known.busy_ns;
		span_ns = known.known_ns;
	}
	/* What the spans hold of idle time is idle, though no gap shows it. */
	inside_ns = have_tl ? _inside_idle(&k, span_from, span_to) : 0;
	if (inside_ns > busy_ns)
		inside_ns = busy_ns;
	busy_ns -= inside_ns;
	idle_ns = span_ns - busy_ns;
	err = flamegraph__write_json(s.p, "samples", max_nodes, &fg);
	if (!err && (o.blocks || o.other_blocks))
		err = flamegraph__write_json(o.p, "nanoseconds", max_nodes, &ofg);
	if (err) {
		request__error(r, 500, "cannot build the flame graph: %s", strerror(-err));
		goto out;
	}
	strbuf__printf(&sb, "{\"from\":%lld,\"to\":%lld,\"pid\":%lu,\"source\":\"%s\","
		       "\"threshold\":%g,\"span\":[%lld,%lld],\"busy_ns\":%lld,\"idle_ns\":%lld,"
		       "\"idle_fraction\":",
		       (long long)from, (long long)to, pid, source, threshold,
		       (long long)span_from, (long long)span_to, (long long)busy_ns,
		       (long long)idle_ns);
	if (span_ns > 0 && !s.unknown)
		strbuf__printf(&sb, "%.6f", (double)idle_ns / (double)span_ns);
	else
		strbuf__puts(&sb, "null");
	/*
	 * Exact intervals unless they came from NVML's points or sampled
	 * kernels; the timeline's spans merged gaps up to their merge gap.
	 */
	resolution = from_nvml ? m.resolution : 0;
	if (have_tl) {
		if (known.known_ns >= span_to - span_from)
			resolution = 0;
		if ((int64_t)k.tl_gap > resolution)
			resolution = (int64_t)k.tl_gap;
		strbuf__printf(&sb, ",\"coverage\":%.6f,\"fallback\":\"%s\","
			       "\"timeline\":{\"spans\":%llu,\"merge_gap_ns\":%llu,"
			       "\"idle_inside_ns\":%lld,\"sources\":\"%s\",",
			       span_to > span_from ?
			       (double)known.known_ns / (double)(span_to - span_from) : 1.0,
			       fallback, (unsigned long long)k.tl_spans,
			       (unsigned long long)k.tl_gap, (long long)inside_ns,
			       k.tl_records && k.tl_monitors ? "records+gpu_monitors" :
			       k.tl_monitors ? "gpu_monitors" : "records");
		_records_json(&sb, k.rec_cover, span_from, span_to);
		strbuf__putc(&sb, '}');
	} else {
		strbuf__puts(&sb, ",\"coverage\":null,\"fallback\":null,\"timeline\":null");
	}
	if (s.unknown)
		strbuf__puts(&sb, ",\"resolution_ns\":null");
	else
		strbuf__printf(&sb, ",\"resolution_ns\":%lld", (long long)resolution);
	/*
	 * The share of the idle time each graph explains, as thread time over
	 * idle wall time: two threads on CPU through one idle second explain
	 * two seconds of it, so cpu_share can pass 1. The off-CPU share counts
	 * overlapping blocks once and stays within 1.
	 */
	strbuf__printf(&sb, ",\"sample_period_ns\":%llu,\"cpu_idle_ns\":%llu,\"cpu_share\":",
		       (unsigned long long)period, (unsigned long long)(s.idle * period));
	_ratio(&sb, s.unknown ? 0 : (int64_t)(s.idle * period), s.unknown ? 0 : idle_ns);
	strbuf__printf(&sb, ",\"samples\":{\"total\":%llu,\"idle\":%llu,\"idle_inside\":%llu,"
		       "\"waiting_on_gpu\":%llu,\"profiler\":%llu},"
		       "\"kernels\":{\"intervals\":%llu,\"max_weight\":%u},\"nvml_points\":%llu,"
		       "\"gaps\":[",
		       (unsigned long long)s.total, (unsigned long long)s.idle,
		       (unsigned long long)s.idle_inside, (unsigned long long)s.waiting,
		       (unsigned long long)s.observer,
		       (unsigned long long)k.n, k.max_weight, (unsigned long long)m.points);
	if (span_ns > 0 && s.known)
		busy_set__each(s.known, span_from, span_to, _known_gaps, &known);
	else if (span_ns > 0 && !s.unknown)
		busy_set__gaps(k.busy, span_from, span_to, _gap, &g);
	strbuf__printf(&sb, "],\"gaps_min_ns\":%lld,\"gaps_truncated\":%s,\"profile\":",
		       (long long)g.min, g.truncated ? "true" : "false");
	strbuf__append(&sb, fg.buf, fg.len);
	_offcpu_json(&sb, &o, s.unknown ? 0 : idle_ns, &ofg);
	strbuf__putc(&sb, '}');
	if (sb.oom) {
		request__error(r, 503, "out of memory");
		goto out;
	}
	request__reply_json(r, 200, &sb);
out:
	strbuf__release(&sb);
	strbuf__release(&fg);
	strbuf__release(&ofg);
	offcpu_idle__release(&o);
	sync_stacks__release(&s.sync);
	profile__free(s.p);
	busy_set__free(k.busy);
	busy_set__free(k.tl_busy);
	busy_set__free(k.tl_cover);
	busy_set__free(k.rec_cover);
	free(k.inside);
	busy_set__free(m.busy);
	free(m.ts);
	free(m.val);
	selector__free(sel);
}
