// SPDX-License-Identifier: Apache-2.0
/*
 * One round of NVML queries (nvml__collect()): each GPU's metrics, then
 * its processes' memory and utilisation. nvml.c loads the library, finds
 * the GPUs, and says which queries are costly and how often they are made.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/batch.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/profile.h"
#include "common/safe_open.h"
#include "gpu/nvml.h"
#include "gpu/nvml_api.h"
#include "gpu/nvml_impl.h"
#include "host/cgroup.h"

/* How often the values that hardly change are asked again. */
#define STATIC_REFRESH_NS (60 * 1000000000LL)
/*
 * The energy counter: reading it is one of the costliest queries (through
 * nvmlDeviceGetFieldValues or nvmlDeviceGetTotalEnergyConsumption alike),
 * and a counter of joules since the driver loaded needs no per-second
 * reads for rate() over minutes.
 */
#define ENERGY_REFRESH_NS (60 * 1000000000LL)

static uint64_t _thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

static void _account(struct nvml *n, enum nvml_query q, uint64_t t0)
{
	n->cost[q].calls++;
	n->stats.calls++;
	if (t0)
		n->cost[q].cpu_ns += _thread_cpu_ns() - t0;
}

/* Every NVML call of a round goes through here: counted, and timed when profiling. */
#define CALL(n, q, expr) ({						\
	uint64_t _t0 = (n)->profile ? _thread_cpu_ns() : 0;		\
	nvmlReturn_t _ret = (expr);					\
	_account((n), (q), _t0);					\
	_ret;								\
})

static void _unavailable(struct nvml *n, struct gpu *g, enum nvml_metric m, const char *why)
{
	if (g->unavailable & (1u << m))
		return;
	g->unavailable |= 1u << m;
	pr_info("nvml: GPU %s: %s unavailable (%s)\n", g->index, gpu_metric__name(m), why);
}

/* Whether the answer r to the query of metric m means "never ask again". */
static bool _check(struct nvml *n, struct gpu *g, enum nvml_metric m, nvmlReturn_t r)
{
	if (r == NVML_SUCCESS)
		return true;
	if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_NO_PERMISSION ||
	    r == NVML_ERROR_INVALID_ARGUMENT)
		_unavailable(n, g, m, _err(n, r));
	else
		pr_debug("nvml: GPU %s: %s: %s\n", g->index, gpu_metric__name(m), _err(n, r));
	return false;
}

struct round {
	struct nvml *n;
	struct batch *b;
	int64_t now_ns;
	int64_t gpu_series;		/* this GPU's series in b */
	uint32_t names[NVML_M_MAX];	/* string ids in b->dict, UINT32_MAX: not yet */
	bool each_second;		/* the round that makes the once-a-second queries */
	int added;
	int err;
};

/*
 * Whether a query asked every interval_ns is due this round (and if so,
 * when next). 0: every round. A clock that went back more than an interval
 * makes it due at once rather than never.
 */
static bool _due(const struct round *r, int64_t *due_ns, uint64_t interval_ns)
{
	/* Half a round early is on time: rounds come a little early or late. */
	int64_t slack = (int64_t)(r->n->interval_ns / 2);

	if (!interval_ns)
		return true;
	if (r->now_ns + slack < *due_ns && *due_ns - r->now_ns <= (int64_t)interval_ns)
		return false;
	*due_ns = r->now_ns + (int64_t)interval_ns;
	return true;
}


static void _point(struct round *r, int64_t series, enum nvml_metric m, int64_t ts, double v)
{
	struct batch_metric bm;

	if (r->err)
		return;
	if (r->names[m] == UINT32_MAX) {
		int64_t id = profile__intern_string(r->b->dict, gpu_metric__name(m));

		if (id < 0) {
			r->err = (int)id;
			return;
		}
		r->names[m] = (uint32_t)id;
	}
	bm = (struct batch_metric){ .ts_ns = ts, .series = (uint32_t)series,
				    .name = r->names[m], .value = v };
	r->err = batch__add_metric(r->b, &bm);
	if (!r->err)
		r->added++;
}

/* A driver sample time (Unix µs) as ns, or now when it is not plausible. */
static int64_t _sample_ns(const struct round *r, unsigned long long us)
{
	int64_t ns = (int64_t)us * 1000;

	if (us > (unsigned long long)INT64_MAX / 1000 || ns > r->now_ns + 60000000000LL ||
	    ns < r->now_ns - 3600000000000LL)
		return r->now_ns;
	return ns;
}

static double _value(nvmlValueType_t t, nvmlValue_t v)
{
	switch (t) {
	case NVML_VALUE_TYPE_DOUBLE: return v.dVal;
	case NVML_VALUE_TYPE_UNSIGNED_INT: return v.uiVal;
	case NVML_VALUE_TYPE_UNSIGNED_LONG: return (double)v.ulVal;
	case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return (double)v.ullVal;
	case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return (double)v.sllVal;
	case NVML_VALUE_TYPE_SIGNED_INT: return v.siVal;
	default: return v.uiVal;
	}
}

/* The GPU's newest utilisation sample, kept for a process alone on it. */
static void _note_util(struct gpu *g, enum nvml_metric m, int64_t ts, double v)
{
	if (m == NVML_M_UTIL && ts >= g->util_ns) {
		g->util = v;
		g->util_ns = ts;
	} else if (m == NVML_M_MEM_UTIL && ts >= g->mem_util_ns) {
		g->mem_util = v;
		g->mem_util_ns = ts;
	}
}

static int _grow_samples(struct round *r, unsigned int cap)
{
	nvmlSample_t *s = realloc(r->n->samples, cap * sizeof(*s));

	if (!s) {
		r->err = -ENOMEM;
		return -ENOMEM;
	}
	r->n->samples = s;
	r->n->cap_samples = cap;
	return 0;
}

/*
 * Sub-second utilisation: every sample the driver took since the last one
 * we saw, each with its own time, in one call (the buffer is sized once).
 * The first round takes only the newest, not the driver's whole history.
 * Returns false when the caller should fall back to
 * nvmlDeviceGetUtilizationRates.
 */
static bool _sampled(struct round *r, struct gpu *g, nvmlSamplingType_t type,
		     enum nvml_metric m, unsigned long long *last)
{
	struct nvml *n = r->n;
	nvmlValueType_t vt = NVML_VALUE_TYPE_UNSIGNED_INT;
	unsigned int cnt = 0;
	nvmlReturn_t ret;

	/* Once: the driver says how many samples it keeps. */
	if (!n->cap_samples) {
		ret = CALL(n, NVML_Q_SAMPLES, n->f.samples(g->dev, type, 0, &vt, &cnt, NULL));
		if (ret != NVML_SUCCESS && ret != NVML_ERROR_INSUFFICIENT_SIZE &&
		    ret != NVML_ERROR_NOT_FOUND)
			goto fail;
		if (_grow_samples(r, cnt > 64 ? cnt : 64))
			return true;
	}
	for (int tries = 0; tries < 2; tries++) {
		cnt = n->cap_samples;
		ret = CALL(n, NVML_Q_SAMPLES,
			   n->f.samples(g->dev, type, *last, &vt, &cnt, n->samples));
		if (ret != NVML_ERROR_INSUFFICIENT_SIZE)
			break;
		if (_grow_samples(r, 2 * n->cap_samples > cnt ? 2 * n->cap_samples : cnt))
			return true;
	}
	if (ret == NVML_ERROR_NOT_FOUND)
		return true;	/* no new sample since last */
	if (ret != NVML_SUCCESS)
		goto fail;
	if (cnt > n->cap_samples)
		cnt = n->cap_samples;
	{
		unsigned long long newest = *last;
		unsigned int from = 0;

		if (!*last) {
			for (unsigned int i = 1; i < cnt; i++)
				if (n->samples[i].timeStamp > n->samples[from].timeStamp)
					from = i;
		}
		for (unsigned int i = from; i < cnt; i++) {
			const nvmlSample_t *s = &n->samples[i];

			if (s->timeStamp <= *last)
				continue;
			_point(r, r->gpu_series, m, _sample_ns(r, s->timeStamp),
			       _value(vt, s->sampleValue));
			_note_util(g, m, _sample_ns(r, s->timeStamp), _value(vt, s->sampleValue));
			if (s->timeStamp > newest)
				newest = s->timeStamp;
			if (!*last)
				break;
		}
		*last = newest;
	}
	return true;
fail:
	if (ret == NVML_ERROR_NOT_SUPPORTED || ret == NVML_ERROR_NO_PERMISSION ||
	    ret == NVML_ERROR_INVALID_ARGUMENT) {
		pr_info("nvml: GPU %s: nvmlDeviceGetSamples: %s; utilisation from "
			"nvmlDeviceGetUtilizationRates instead\n", g->index, _err(n, ret));
		g->samples_ok = false;
		return false;
	}
	pr_debug("nvml: GPU %s: nvmlDeviceGetSamples: %s\n", g->index, _err(n, ret));
	return true;
}

static void _utilization(struct round *r, struct gpu *g)
{
	struct nvml *n = r->n;
	bool done_util = !_want(g, NVML_M_UTIL), done_mem = !_want(g, NVML_M_MEM_UTIL);
	nvmlUtilization_t u;
	nvmlReturn_t ret;

	if (n->use_samples && g->samples_ok) {
		/* The samples of the rounds in between come with the next call. */
		if (!r->each_second)
			return;
		if (!done_util)
			done_util = _sampled(r, g, NVML_GPU_UTILIZATION_SAMPLES, NVML_M_UTIL,
					     &g->last_util_us);
		if (!done_mem && g->samples_ok)
			done_mem = _sampled(r, g, NVML_MEMORY_UTILIZATION_SAMPLES,
					    NVML_M_MEM_UTIL, &g->last_mem_util_us);
	}
	if (done_util && done_mem)
		return;
	if (!n->f.utilization_rates) {
		_unavailable(n, g, NVML_M_UTIL, "no nvmlDeviceGetUtilizationRates");
		_unavailable(n, g, NVML_M_MEM_UTIL, "no nvmlDeviceGetUtilizationRates");
		return;
	}
	ret = CALL(n, NVML_Q_UTILIZATION, n->f.utilization_rates(g->dev, &u));
	if (!done_util && _check(n, g, NVML_M_UTIL, ret)) {
		_point(r, r->gpu_series, NVML_M_UTIL, r->now_ns, u.gpu);
		_note_util(g, NVML_M_UTIL, r->now_ns, u.gpu);
	}
	if (!done_mem && _check(n, g, NVML_M_MEM_UTIL, ret)) {
		_point(r, r->gpu_series, NVML_M_MEM_UTIL, r->now_ns, u.memory);
		_note_util(g, NVML_M_MEM_UTIL, r->now_ns, u.memory);
	}
}

/* A value that hardly changes: remembered on success, forgotten when unavailable. */
static void _static_value(struct nvml *n, struct gpu *g, enum nvml_metric m, nvmlReturn_t ret,
			  double v)
{
	if (_check(n, g, m, ret)) {
		g->statics[m] = v;
		g->have_static |= 1u << m;
	} else if (!_want(g, m)) {
		g->have_static &= ~(1u << m);
	}
}

/*
 * Maximum clocks, power limit, slowdown temperature and MIG mode: asked at
 * the first round and every STATIC_REFRESH_NS after (a power limit or the
 * MIG mode can be changed by an administrator), exported every round so
 * that every scrape and chart has them: nvmlDeviceGetMaxClockInfo alone
 * costs more than a whole round of the rest.
 */
static void _statics(struct round *r, struct gpu *g)
{
	struct nvml *n = r->n;
	unsigned int v = 0, v2;
	nvmlReturn_t ret;

	if (r->now_ns >= g->static_due_ns || g->static_due_ns - r->now_ns > STATIC_REFRESH_NS) {
		g->static_due_ns = r->now_ns + STATIC_REFRESH_NS;
		if (_want(g, NVML_M_SM_CLOCK_MAX)) {
			ret = CALL(n, NVML_Q_MAX_CLOCK, n->f.max_clock_info(g->dev, NVML_CLOCK_SM, &v));
			_static_value(n, g, NVML_M_SM_CLOCK_MAX, ret, v * 1e6);
		}
		if (_want(g, NVML_M_MEM_CLOCK_MAX)) {
			ret = CALL(n, NVML_Q_MAX_CLOCK, n->f.max_clock_info(g->dev, NVML_CLOCK_MEM, &v));
			_static_value(n, g, NVML_M_MEM_CLOCK_MAX, ret, v * 1e6);
		}
		/* Milliwatts to watts: divided, so that 250123 mW is exactly the double 250.123. */
		if (_want(g, NVML_M_POWER_LIMIT)) {
			ret = CALL(n, NVML_Q_POWER_LIMIT, n->f.power_limit(g->dev, &v));
			_static_value(n, g, NVML_M_POWER_LIMIT, ret, v / 1000.0);
		}
		if (_want(g, NVML_M_TEMP_SLOWDOWN)) {
			ret = CALL(n, NVML_Q_TEMPERATURE_THRESHOLD,
				   n->f.temperature_threshold(g->dev, NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
							      &v));
			_static_value(n, g, NVML_M_TEMP_SLOWDOWN, ret, v);
		}
		if (_want(g, NVML_M_MIG_MODE)) {
			ret = CALL(n, NVML_Q_MIG_MODE, n->f.mig_mode(g->dev, &v, &v2));
			_static_value(n, g, NVML_M_MIG_MODE, ret, v);
		}
	}
	for (int m = 0; m < NVML_M_MAX; m++)
		if (g->have_static & (1u << m))
			_point(r, r->gpu_series, m, r->now_ns, g->statics[m]);
}

/*
 * A PCIe byte counter: the rate since the previous read, over the driver's
 * own timestamps. A 32-bit counter may wrap once between reads; a 64-bit
 * one that goes back was reset (driver reload): no rate then.
 */
static void _pcie_counter(struct round *r, struct gpu *g, int dir, const nvmlFieldValue_t *f)
{
	struct counter *c = &g->pcie[dir];
	long long us = f->timestamp > 0 ? f->timestamp : r->now_ns / 1000;
	unsigned long long v, d;
	bool wraps = false;

	switch (f->valueType) {
	case NVML_VALUE_TYPE_UNSIGNED_INT:
		v = f->value.uiVal;
		wraps = true;
		g->pcie_wraps = true;
		break;
	case NVML_VALUE_TYPE_UNSIGNED_LONG:
		v = f->value.ulVal;
		break;
	case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG:
		v = f->value.ullVal;
		break;
	default:
		pr_debug("nvml: GPU %s: PCIe counter of value type %d\n", g->index, f->valueType);
		return;
	}
	if (c->have && us <= c->us)
		return;		/* the driver has not updated it since */
	if (c->have) {
		if (v >= c->value)
			d = v - c->value;
		else
			d = wraps ? v + (1ULL << 32) - c->value : 0;
		if (v >= c->value || wraps) {
			c->rate = (double)d * 1e6 / (double)(us - c->us);
			c->have_rate = true;
		}
	}
	c->value = v;
	c->us = us;
	c->have = true;
}

/*
 * How long 32-bit byte counters may go unread: until, at four times the
 * faster direction's last rate, they would have moved 2^32 bytes (one wrap
 * between two reads is told, two are not); the PCIe interval at most.
 * Below 215 MB/s that is the whole 5 s; from ~1 GB/s on, every round. A
 * read is costly and some GPUs' counters are 32-bit: read every round,
 * they were most of a round's cost. Traffic that jumps from
 * under 215 MB/s to over 860 MB/s within one 5 s wait is read short for
 * that wait, as all traffic over 4 GiB/s is at every round.
 */
static int64_t _wrap_safe_ns(const struct nvml *n, const struct gpu *g)
{
	double rate = 0, ns;

	for (int k = FV_PCIE_TX; k <= FV_PCIE_RX; k++)
		if (g->pcie[k].have_rate && g->pcie[k].rate > rate)
			rate = g->pcie[k].rate;
	ns = rate > 0 ? 4294967296.0 / (4 * rate) * 1e9 : (double)n->pcie_interval_ns;
	return ns < (double)n->pcie_interval_ns ? (int64_t)ns : (int64_t)n->pcie_interval_ns;
}

/* Whether field answer ret means "use the older query from now on". */
static bool _field_unsupported(nvmlReturn_t ret)
{
	return ret == NVML_ERROR_NOT_SUPPORTED || ret == NVML_ERROR_NO_PERMISSION ||
	       ret == NVML_ERROR_INVALID_ARGUMENT;
}

/*
 * PCIe traffic and energy: one nvmlDeviceGetFieldValues call for the
 * cumulative counters, where nvmlDeviceGetPcieThroughput sleeps 20 ms per
 * direction and costs more CPU than the field read, as does
 * nvmlDeviceGetTotalEnergyConsumption. A field the driver does not
 * support falls back to the older query for good.
 */
static void _counters(struct round *r, struct gpu *g)
{
	static const unsigned int ids[FV_MAX] = {
		[FV_PCIE_TX] = NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
		[FV_PCIE_RX] = NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
		[FV_ENERGY] = NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
	};
	static const enum nvml_metric metric[FV_MAX] = {
		[FV_PCIE_TX] = NVML_M_PCIE_TX, [FV_PCIE_RX] = NVML_M_PCIE_RX,
		[FV_ENERGY] = NVML_M_ENERGY,
	};
	struct nvml *n = r->n;
	nvmlFieldValue_t fv[FV_MAX];
	int slot[FV_MAX], nf = 0;
	unsigned int v;
	unsigned long long ull;
	bool pcie_due, energy_due, pcie_fields = false;

	/* The first two rounds read the counters, so that a rate comes at once. */
	if (g->pcie_reads < 2) {
		g->pcie_due_ns = r->now_ns + (int64_t)n->pcie_interval_ns;
		g->pcie_reads++;
		pcie_due = true;
	} else {
		pcie_due = _due(r, &g->pcie_due_ns, n->pcie_interval_ns);
	}
	if (!n->f.field_values)
		g->fv_unsupported = (1u << FV_MAX) - 1;
	for (int k = FV_PCIE_TX; k <= FV_PCIE_RX; k++)
		pcie_fields |= _want(g, metric[k]) && !(g->fv_unsupported & (1u << k));
	/* Energy rides along with the PCIe counters: one call, not two. */
	energy_due = (r->now_ns >= g->energy_due_ns ||
		      g->energy_due_ns - r->now_ns > ENERGY_REFRESH_NS) &&
		     (pcie_due || !pcie_fields);
	if (energy_due)
		g->energy_due_ns = r->now_ns + ENERGY_REFRESH_NS;
	for (int k = 0; k < FV_MAX; k++) {
		if (!_want(g, metric[k]) || (g->fv_unsupported & (1u << k)) ||
		    (k == FV_ENERGY ? !energy_due : !pcie_due))
			continue;
		memset(&fv[nf], 0, sizeof(fv[nf]));
		fv[nf].fieldId = ids[k];
		slot[nf++] = k;
	}
	if (nf) {
		nvmlReturn_t ret = CALL(n, NVML_Q_FIELD_VALUES, n->f.field_values(g->dev, nf, fv));

		for (int i = 0; i < nf; i++) {
			int k = slot[i];
			nvmlReturn_t fr = ret == NVML_SUCCESS ? fv[i].nvmlReturn : ret;

			if (fr == NVML_SUCCESS) {
				if (k == FV_ENERGY) {
					g->energy_j = _value(fv[i].valueType, fv[i].value) / 1000.0;
					g->have_energy = true;
				} else {
					_pcie_counter(r, g, k, &fv[i]);
				}
			} else if (_field_unsupported(fr)) {
				g->fv_unsupported |= 1u << k;
				pr_info("nvml: GPU %s: field %u: %s; %s from %s instead\n", g->index,
					ids[k], _err(n, fr), gpu_metric__name(metric[k]),
					k == FV_ENERGY ? "nvmlDeviceGetTotalEnergyConsumption" :
					"nvmlDeviceGetPcieThroughput");
			} else {
				pr_debug("nvml: GPU %s: field %u: %s\n", g->index, ids[k], _err(n, fr));
			}
		}
	}

	if (pcie_due && g->pcie_wraps && g->pcie_reads >= 2)
		g->pcie_due_ns = r->now_ns + _wrap_safe_ns(n, g);

	/* The older queries, for the fields this driver lacks. NVML: KB/s over 20 ms. */
	for (int k = FV_PCIE_TX; k <= FV_PCIE_RX && pcie_due; k++) {
		enum nvml_metric m = metric[k];

		if (!_want(g, m) || !(g->fv_unsupported & (1u << k)))
			continue;
		if (!n->f.pcie_throughput) {
			_unavailable(n, g, m, "no PCIe counter field, no nvmlDeviceGetPcieThroughput");
			continue;
		}
		if (_check(n, g, m, CALL(n, NVML_Q_PCIE_THROUGHPUT,
					 n->f.pcie_throughput(g->dev, k == FV_PCIE_TX ?
							      NVML_PCIE_UTIL_TX_BYTES :
							      NVML_PCIE_UTIL_RX_BYTES, &v)))) {
			g->pcie[k].rate = v * 1024.0;
			g->pcie[k].have_rate = true;
		}
	}
	/* The last rates, every round, like energy below. */
	for (int k = FV_PCIE_TX; k <= FV_PCIE_RX; k++)
		if (_want(g, metric[k]) && g->pcie[k].have_rate)
			_point(r, r->gpu_series, metric[k], r->now_ns, g->pcie[k].rate);
	if (_want(g, NVML_M_ENERGY) && (g->fv_unsupported & (1u << FV_ENERGY)) && energy_due) {
		if (!n->f.energy) {
			_unavailable(n, g, NVML_M_ENERGY, "no energy field, no nvmlDeviceGetTotalEnergyConsumption");
		} else if (_check(n, g, NVML_M_ENERGY,
				  CALL(n, NVML_Q_ENERGY, n->f.energy(g->dev, &ull)))) {
			g->energy_j = ull / 1000.0;
			g->have_energy = true;
		}
	}
	/* The last reading, every round: a series that skipped rounds would expire on scrapes. */
	if (_want(g, NVML_M_ENERGY) && g->have_energy)
		_point(r, r->gpu_series, NVML_M_ENERGY, r->now_ns, g->energy_j);
}

static void _device(struct round *r, struct gpu *g)
{
	struct nvml *n = r->n;
	unsigned int v;
	unsigned long long ull;

	_statics(r, g);
	_utilization(r, g);
	if (_want(g, NVML_M_MEM_USED) || _want(g, NVML_M_MEM_TOTAL)) {
		nvmlMemory_t mem;
		nvmlMemory_v2_t m2 = { .version = nvmlMemory_v2 };
		nvmlReturn_t ret = NVML_ERROR_NOT_SUPPORTED;

		/*
		 * v2 leaves the driver's reserved memory out of used, as
		 * nvidia-smi does; v1's used includes it.
		 */
		if (n->f.memory_info_v2 &&
		    CALL(n, NVML_Q_MEMORY, n->f.memory_info_v2(g->dev, &m2)) == NVML_SUCCESS &&
		    m2.total && m2.used <= m2.total) {
			mem.total = m2.total;
			mem.used = m2.used;
			ret = NVML_SUCCESS;
		} else if (n->f.memory_info) {
			ret = CALL(n, NVML_Q_MEMORY, n->f.memory_info(g->dev, &mem));
		}

		if (_want(g, NVML_M_MEM_USED) && _check(n, g, NVML_M_MEM_USED, ret))
			_point(r, r->gpu_series, NVML_M_MEM_USED, r->now_ns, (double)mem.used);
		if (_want(g, NVML_M_MEM_TOTAL) && _check(n, g, NVML_M_MEM_TOTAL, ret))
			_point(r, r->gpu_series, NVML_M_MEM_TOTAL, r->now_ns, (double)mem.total);
	}
	if (_want(g, NVML_M_SM_CLOCK) &&
	    _check(n, g, NVML_M_SM_CLOCK,
		   CALL(n, NVML_Q_CLOCK, n->f.clock_info(g->dev, NVML_CLOCK_SM, &v))))
		_point(r, r->gpu_series, NVML_M_SM_CLOCK, r->now_ns, v * 1e6);
	if (_want(g, NVML_M_MEM_CLOCK) &&
	    _check(n, g, NVML_M_MEM_CLOCK,
		   CALL(n, NVML_Q_CLOCK, n->f.clock_info(g->dev, NVML_CLOCK_MEM, &v))))
		_point(r, r->gpu_series, NVML_M_MEM_CLOCK, r->now_ns, v * 1e6);
	if (_want(g, NVML_M_POWER) &&
	    _check(n, g, NVML_M_POWER, CALL(n, NVML_Q_POWER, n->f.power_usage(g->dev, &v))))
		_point(r, r->gpu_series, NVML_M_POWER, r->now_ns, v / 1000.0);
	if (_want(g, NVML_M_TEMP) &&
	    _check(n, g, NVML_M_TEMP,
		   CALL(n, NVML_Q_TEMPERATURE,
			n->f.temperature(g->dev, NVML_TEMPERATURE_GPU, &v))))
		_point(r, r->gpu_series, NVML_M_TEMP, r->now_ns, v);
	if (_want(g, NVML_M_THROTTLE) &&
	    _check(n, g, NVML_M_THROTTLE,
		   CALL(n, NVML_Q_CLOCK_REASONS, n->f.clock_reasons(g->dev, &ull))))
		_point(r, r->gpu_series, NVML_M_THROTTLE, r->now_ns, (double)ull);
	_counters(r, g);
}

static void _read_small(const char *path, char *buf, size_t len)
{
	if (safe_open__read_proc(AT_FDCWD, path, buf, len) < 0)
		buf[0] = '\0';
}

static struct proc_info *_proc(struct nvml *n, unsigned int pid, uint64_t round)
{
	char path[64], text[4096];
	struct proc_info *p;

	for (size_t i = 0; i < n->nprocs; i++) {
		if (n->procs[i].pid == pid) {
			n->procs[i].seen = round;
			return &n->procs[i];
		}
	}
	if (n->nprocs == n->cap_procs) {
		size_t cap = n->cap_procs ? 2 * n->cap_procs : 16;

		p = realloc(n->procs, cap * sizeof(*p));
		if (!p)
			return NULL;
		n->procs = p;
		n->cap_procs = cap;
	}
	p = &n->procs[n->nprocs++];
	memset(p, 0, sizeof(*p));
	p->pid = pid;
	p->seen = round;
	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	_read_small(path, p->comm, sizeof(p->comm));
	p->comm[strcspn(p->comm, "\n")] = '\0';
	snprintf(path, sizeof(path), "/proc/%u/cgroup", pid);
	_read_small(path, text, sizeof(text));
	cgroup__parse(text, p->container, sizeof(p->container), p->pod, sizeof(p->pod));
	return p;
}

static int64_t _proc_series(struct round *r, struct gpu *g, unsigned int pid)
{
	const char *names[7] = { "gpu", "uuid", "name", "pid", "comm" };
	const char *values[7] = { g->index, g->uuid, g->name };
	struct proc_info *p = _proc(r->n, pid, r->n->stats.rounds);
	char pidtxt[12];
	size_t nl = 5;
	int64_t id;

	if (!p) {
		r->err = -ENOMEM;
		return -ENOMEM;
	}
	snprintf(pidtxt, sizeof(pidtxt), "%u", pid);
	values[3] = pidtxt;
	values[4] = p->comm;
	if (p->container[0]) {
		names[nl] = "container";
		values[nl++] = p->container;
	}
	if (p->pod[0]) {
		names[nl] = "pod";
		values[nl++] = p->pod;
	}
	id = batch__intern_series(r->b, names, values, nl);
	if (id < 0)
		r->err = (int)id;
	return id;
}

/* Used memory of each process on the GPU: the compute and graphics lists. */
static void _proc_memory(struct round *r, struct gpu *g)
{
	struct nvml *n = r->n;
	nvmlDeviceGetRunningProcesses_fn fns[2] = { n->f.compute_procs, n->f.graphics_procs };
	unsigned int total = 0;
	bool any_ok = false;

	for (int k = 0; k < 2; k++) {
		unsigned int cnt;
		nvmlReturn_t ret;

		if (!fns[k])
			continue;
		/* The list can grow between the two calls: retry a few times. */
		for (int tries = 0; tries < 3; tries++) {
			cnt = n->cap_pinfo - total;
			ret = CALL(n, NVML_Q_RUNNING_PROCESSES, fns[k](g->dev, &cnt, n->pinfo + total));
			if (ret != NVML_ERROR_INSUFFICIENT_SIZE)
				break;
			{
				unsigned int cap = total + cnt + 16;
				nvmlProcessInfo_t *a = realloc(n->pinfo, cap * sizeof(*a));

				if (!a) {
					r->err = -ENOMEM;
					return;
				}
				n->pinfo = a;
				n->cap_pinfo = cap;
			}
		}
		if (ret == NVML_SUCCESS) {
			any_ok = true;
			total += cnt;
		} else if (ret == NVML_ERROR_NOT_SUPPORTED || ret == NVML_ERROR_NO_PERMISSION) {
			if (k == 0)
				n->f.compute_procs = NULL;
			else
				n->f.graphics_procs = NULL;
			pr_info("nvml: GPU %s: %s running processes: %s\n", g->index,
				k ? "graphics" : "compute", _err(n, ret));
		}
	}
	if (!n->f.compute_procs && !n->f.graphics_procs && !any_ok) {
		_unavailable(n, g, NVML_M_PROC_MEM_USED, "no running-process list");
		return;
	}
	if (any_ok && total == 0)
		g->empty_lists++;
	else
		g->empty_lists = 0;
	{
		unsigned int sole = any_ok && total ? n->pinfo[0].pid : 0;

		for (unsigned int i = 1; i < total && sole; i++)
			if (n->pinfo[i].pid != sole)
				sole = 0;
		if (sole != g->sole_pid)
			g->sole_util_ns = 0;	/* a new process gets the current sample too */
		g->sole_pid = sole;
		g->lists_ns = r->now_ns;
	}
	/* A process in both lists uses one address space: its larger figure. */
	for (unsigned int i = 0; i < total; i++) {
		unsigned int pid = n->pinfo[i].pid;
		unsigned long long used = 0;
		bool first = true, known = false;
		int64_t series;

		for (unsigned int j = 0; j < total && first; j++) {
			if (n->pinfo[j].pid != pid)
				continue;
			if (j < i)
				first = false;
			else if (n->pinfo[j].usedGpuMemory != NVML_VALUE_NOT_AVAILABLE) {
				known = true;
				if (n->pinfo[j].usedGpuMemory > used)
					used = n->pinfo[j].usedGpuMemory;
			}
		}
		if (!first || !known)
			continue;
		series = _proc_series(r, g, pid);
		if (series < 0)
			return;
		_point(r, series, NVML_M_PROC_MEM_USED, r->now_ns, (double)used);
	}
}

/*
 * Per-process utilisation: one call per device with the last time seen;
 * each sample names its own pid (a process absent from the running lists
 * may still have samples, and vice versa).
 */
static void _proc_util(struct round *r, struct gpu *g)
{
	struct nvml *n = r->n;
	unsigned long long last = g->last_proc_us, newest;
	unsigned int cnt = 0;
	nvmlReturn_t ret;

	/* First round: only what ran since the previous second, not the whole buffer. */
	if (!last)
		last = (unsigned long long)(r->now_ns / 1000) - 1000000ULL;
	/*
	 * One call a round into the buffer kept from the last: a bigger one
	 * only when the driver answers INSUFFICIENT_SIZE (more processes).
	 */
	for (int tries = 0; tries < 3; tries++) {
		if (n->cap_putil < 16 || cnt > n->cap_putil) {
			unsigned int cap = cnt > 16 ? cnt + 16 : 16;
			nvmlProcessUtilizationSample_t *a = realloc(n->putil, cap * sizeof(*a));

			if (!a) {
				r->err = -ENOMEM;
				return;
			}
			n->putil = a;
			n->cap_putil = cap;
		}
		cnt = n->cap_putil;
		ret = CALL(n, NVML_Q_PROCESS_UTILIZATION,
			   n->f.process_utilization(g->dev, n->putil, &cnt, last));
		if (ret != NVML_ERROR_INSUFFICIENT_SIZE)
			break;
		if (cnt <= n->cap_putil)
			cnt = 2 * n->cap_putil;
	}
	if (ret == NVML_ERROR_NOT_FOUND)
		goto none;	/* no sample newer than last */
	if (ret != NVML_SUCCESS) {
		_check(n, g, NVML_M_PROC_UTIL, ret);
		if (!_want(g, NVML_M_PROC_UTIL))
			_unavailable(n, g, NVML_M_PROC_MEM_UTIL, _err(n, ret));
		return;
	}
	if (cnt > n->cap_putil)
		cnt = n->cap_putil;
	newest = last;
	for (unsigned int i = 0; i < cnt; i++) {
		const nvmlProcessUtilizationSample_t *s = &n->putil[i];
		int64_t series, ts;

		if (s->timeStamp <= last && g->last_proc_us)
			continue;
		series = _proc_series(r, g, s->pid);
		if (series < 0)
			return;
		ts = _sample_ns(r, s->timeStamp);
		_point(r, series, NVML_M_PROC_UTIL, ts, s->smUtil);
		_point(r, series, NVML_M_PROC_MEM_UTIL, ts, s->memUtil);
		if (s->timeStamp > newest)
			newest = s->timeStamp;
	}
	g->last_proc_us = newest;
	return;
none:
	if (!g->last_proc_us)
		g->last_proc_us = last;
}

/*
 * A process alone on the GPU: its utilisation is the GPU's, which this
 * round read, so the driver's costly per-process query is not made (see
 * nvml.c). Needs the lists read this second to name that one process, and
 * a GPU sample of the last two seconds not yet given to it. Returns false
 * when the driver must be asked.
 */
static bool _sole_process_util(struct round *r, struct gpu *g)
{
	int64_t series, fresh = r->now_ns - 2 * (int64_t)SECOND_NS;

	if (r->n->process_query_always || !g->sole_pid ||
	    r->now_ns - g->lists_ns > (int64_t)(SECOND_NS + r->n->interval_ns) ||
	    !_want(g, NVML_M_UTIL) || g->util_ns < fresh)
		return false;
	r->n->stats.sole_process_reads++;
	if (g->util_ns == g->sole_util_ns)
		return true;	/* no GPU sample since the last round */
	series = _proc_series(r, g, g->sole_pid);
	if (series < 0)
		return true;
	g->sole_util_ns = g->util_ns;
	_point(r, series, NVML_M_PROC_UTIL, g->util_ns, g->util);
	if (_want(g, NVML_M_MEM_UTIL) && g->mem_util_ns >= fresh)
		_point(r, series, NVML_M_PROC_MEM_UTIL, g->mem_util_ns, g->mem_util);
	return true;
}

int nvml__collect(struct nvml *n, struct batch *b, int64_t now_ns)
{
	struct round r = { .n = n, .b = b, .now_ns = now_ns };
	uint64_t t0 = _thread_cpu_ns(), w0 = clock__mono_ns(), w, c;
	size_t k = 0;

	if (!n || !b)
		return -EINVAL;
	memset(r.names, 0xff, sizeof(r.names));
	r.each_second = n->stats.rounds % n->every_second == 0;
	n->stats.rounds++;
	for (unsigned int i = 0; i < n->ngpus && !r.err; i++) {
		struct gpu *g = &n->gpus[i];
		const char *names[3] = { "gpu", "uuid", "name" };
		const char *values[3] = { g->index, g->uuid, g->name };

		r.gpu_series = batch__intern_series(b, names, values, 3);
		if (r.gpu_series < 0) {
			r.err = (int)r.gpu_series;
			break;
		}
		_device(&r, g);
		/* The lists first: they tell whether any process is there to sample. */
		if (r.each_second && _want(g, NVML_M_PROC_MEM_USED))
			_proc_memory(&r, g);
		if (_want(g, NVML_M_PROC_UTIL) && g->empty_lists < 2 &&
		    _due(&r, &g->proc_util_due_ns, n->process_interval_ns) &&
		    !_sole_process_util(&r, g))
			_proc_util(&r, g);
	}
	/* Forget processes that were on no GPU this time. */
	for (size_t i = 0; i < n->nprocs && r.each_second; i++)
		if (n->procs[i].seen == n->stats.rounds)
			n->procs[k++] = n->procs[i];
	if (r.each_second)
		n->nprocs = k;
	n->stats.points += r.added;
	c = _thread_cpu_ns() - t0;
	n->stats.cpu_ns += c;
	if (c > n->stats.max_cpu_ns)
		n->stats.max_cpu_ns = c;
	w = clock__mono_ns() - w0;
	n->stats.wall_ns += w;
	if (w > n->stats.max_wall_ns)
		n->stats.max_wall_ns = w;
	return r.err ? r.err : r.added;
}
