// SPDX-License-Identifier: Apache-2.0
/*
 * The server's side of the wire format: wire__decode() checks a batch
 * against the limits and its session, and only once every check passed
 * builds the batch it hands out. Dictionary entries go into the session's
 * shared dictionary as they are checked (session.c keeps only their ids
 * there): an entry the batch then fails on stays in it, unreferenced.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/batch.h"
#include "common/profile.h"
#include "common/decompress.h"
#include "format/pb_alloc.h"
#include "format/wire.h"
#include "format/wire/wire_int.h"
#include "wire.pb-c.h"

static const char *const kind_names[K_MAX] = {
	"string", "mapping", "frame", "stack", "series",
};

/* 2000-01-01T00:00:00Z: anything earlier is a clock that was never set. */
#define MIN_TS_NS 946684800000000000LL

struct wire_limits wire_limits__default(void)
{
	return (struct wire_limits){
		.max_body = 8u << 20,
		.max_decompressed = 32u << 20,
		.max_unpacked = 128u << 20,
		.max_samples = 1000000,
		.max_stack_depth = 1024,
		.max_labels = 64,
		.max_string = 16 << 10,
		.max_future_ns = 86400LL * 1000000000LL,
	};
}

__attribute__((format(printf, 4, 5)))
static int _fail(char *err, size_t err_len, int code, const char *fmt, ...)
{
	va_list ap;

	if (err && err_len) {
		va_start(ap, fmt);
		vsnprintf(err, err_len, fmt, ap);
		va_end(ap);
	}
	return code;
}

/* Entries of kind k the session holds. */
static inline uint32_t _held(const struct dec *d, int k)
{
	return d->s->om[k].n;
}

/*
 * Keeps entry gid of kind k, id in the shared dictionary (or -errno from
 * putting it there). Entries below what the session holds are repeats of
 * ones it accepted (an old batch sent again): they must be the same entry,
 * which the shared dictionary, deduplicating, says by the id. Every other
 * entry is appended.
 */
static int _d_keep(struct dec *d, int k, uint32_t gid, int64_t id)
{
	struct dict_ids *om = &d->s->om[k];

	if (id < 0)
		return _fail(d->err, d->err_len, (int)id, "cannot grow the %s table",
			     kind_names[k]);
	if (gid < om->n) {
		if (om->ids[gid] != (uint32_t)id)
			return _fail(d->err, d->err_len, -EINVAL,
				     "%s %u differs from the one the session holds",
				     kind_names[k], gid);
		return 0;
	}
	if (om->n == UINT32_MAX - 1)
		return _fail(d->err, d->err_len, -E2BIG, "cannot grow the %s table",
			     kind_names[k]);
	if (dict_ids__grow(om, om->n + 1))
		return _fail(d->err, d->err_len, -ENOMEM, "cannot grow the %s table",
			     kind_names[k]);
	om->ids[om->n - 1] = (uint32_t)id;
	return 0;
}

static int _d_strings(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_strings; i++) {
		const char *s = d->m->strings[i] ? d->m->strings[i] : "";
		size_t len = strlen(s);
		int rc;

		if (len > d->lim->max_string)
			return _fail(d->err, d->err_len, -EINVAL,
				     "string %zu is %zu bytes long, more than %zu",
				     base + i, len, d->lim->max_string);
		rc = _d_keep(d, K_STRING, base + i, profile__intern_string(d->out->dict, s));
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_string_id(struct dec *d, const char *kind, size_t gid, const char *field, uint32_t id)
{
	if (id < _held(d, K_STRING))
		return 0;
	return _fail(d->err, d->err_len, -EINVAL, "%s %zu: %s string id %u out of range (%u strings)",
		     kind, gid, field, id, _held(d, K_STRING));
}

static int _d_mappings(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_mappings; i++) {
		const Flamewatch__Wire__Mapping *wm = d->m->mappings[i];
		int rc;

		rc = _d_string_id(d, "mapping", base + i, "path", wm->path);
		if (!rc)
			rc = _d_string_id(d, "mapping", base + i, "build_id", wm->build_id);
		if (!rc)
			rc = _d_keep(d, K_MAPPING, base + i,
				     profile__intern_mapping(d->out->dict, _d_string(d, wm->path),
							     _d_string(d, wm->build_id)));
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_frames(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_frames; i++) {
		const Flamewatch__Wire__Frame *wf = d->m->frames[i];
		int rc;

		if (wf->kind >= FRAME_KIND_MAX)
			return _fail(d->err, d->err_len, -EINVAL, "frame %zu: unknown kind %u",
				     base + i, wf->kind);
		if (wf->mapping > _held(d, K_MAPPING))
			return _fail(d->err, d->err_len, -EINVAL,
				     "frame %zu: mapping id %u out of range (%u mappings)",
				     base + i, wf->mapping - 1, _held(d, K_MAPPING));
		rc = _d_string_id(d, "frame", base + i, "function", wf->function);
		if (!rc)
			rc = _d_string_id(d, "frame", base + i, "file", wf->file);
		if (!rc)
			rc = _d_keep(d, K_FRAME, base + i, profile__intern_frame_ids(
				d->out->dict, wf->kind, wf->mapping ?
				d->s->om[K_MAPPING].ids[wf->mapping - 1] : PROFILE_NO_MAPPING,
				wf->addr, _d_om_string(d, wf->function), _d_om_string(d, wf->file),
				wf->line));
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_stacks(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_stacks; i++) {
		const Flamewatch__Wire__Stack *ws = d->m->stacks[i];
		int rc;

		for (size_t j = 0; j < ws->n_frames; j++)
			if (ws->frames[j] >= _held(d, K_FRAME))
				return _fail(d->err, d->err_len, -EINVAL,
					     "stack %zu: frame id %u out of range (%u frames)",
					     base + i, ws->frames[j], _held(d, K_FRAME));
		rc = _d_keep(d, K_STACK, base + i, wire_out__stack(d, ws->frames, ws->n_frames));
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_series(struct dec *d, uint32_t base)
{
	for (size_t i = 0; i < d->m->n_series; i++) {
		const Flamewatch__Wire__Series *ws = d->m->series[i];
		size_t n = ws->n_labels / 2;
		int rc;

		if (ws->n_labels % 2)
			return _fail(d->err, d->err_len, -EINVAL,
				     "series %zu: odd number of label ids", base + i);
		if (n > d->lim->max_labels)
			return _fail(d->err, d->err_len, -EINVAL,
				     "series %zu has %zu labels, more than %zu",
				     base + i, n, d->lim->max_labels);
		for (size_t j = 0; j < ws->n_labels; j++) {
			rc = _d_string_id(d, "series", base + i, j % 2 ? "value" : "name",
					  ws->labels[j]);
			if (rc)
				return rc;
		}
		for (size_t j = 0; j < n; j++) {
			const char *name = _d_string(d, ws->labels[2 * j]);

			if (!name[0])
				return _fail(d->err, d->err_len, -EINVAL,
					     "series %zu: empty label name", base + i);
			for (size_t l = 0; l < j; l++)
				if (!strcmp(name, _d_string(d, ws->labels[2 * l])))
					return _fail(d->err, d->err_len, -EINVAL,
						     "series %zu: label %s appears twice",
						     base + i, name);
		}
		rc = _d_keep(d, K_SERIES, base + i, wire_out__series(d, ws->labels, n));
		if (rc)
			return rc;
	}
	return 0;
}

static int _d_samples(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	const struct wire_limits *lim = d->lim;
	size_t n = m->n_ts_delta;
	struct timespec now;
	int64_t ts = 0, max_ts;

	if (n > lim->max_samples)
		return _fail(d->err, d->err_len, -E2BIG, "%zu samples, more than %zu",
			     n, lim->max_samples);
	if (m->n_sample_stack != n || m->n_sample_series != n || m->n_sample_tid != n ||
	    m->n_sample_cpu != n || (m->n_sample_type && m->n_sample_type != n) ||
	    (m->n_sample_value && m->n_sample_value != n))
		return _fail(d->err, d->err_len, -EINVAL,
			     "sample columns differ in length (%zu timestamps)", n);
	clock_gettime(CLOCK_REALTIME, &now);
	max_ts = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	max_ts = lim->max_future_ns > INT64_MAX - max_ts ? INT64_MAX : max_ts + lim->max_future_ns;

	for (size_t i = 0; i < n; i++) {
		uint32_t type = m->n_sample_type ? m->sample_type[i] : SAMPLE_CPU;
		int64_t value = m->n_sample_value ? m->sample_value[i] : 1;

		if (__builtin_add_overflow(ts, m->ts_delta[i], &ts) || ts < MIN_TS_NS ||
		    ts > max_ts)
			return _fail(d->err, d->err_len, -EINVAL,
				     "sample %zu: timestamp out of range", i);
		if (m->sample_stack[i] >= _held(d, K_STACK))
			return _fail(d->err, d->err_len, -EINVAL,
				     "sample %zu: stack id %u out of range (%u stacks)",
				     i, m->sample_stack[i], _held(d, K_STACK));
		if (m->sample_series[i] >= _held(d, K_SERIES))
			return _fail(d->err, d->err_len, -EINVAL,
				     "sample %zu: series id %u out of range (%u series)",
				     i, m->sample_series[i], _held(d, K_SERIES));
		if (type >= SAMPLE_TYPE_MAX)
			return _fail(d->err, d->err_len, -EINVAL, "sample %zu: unknown type %u",
				     i, type);
		if (value < 0)
			return _fail(d->err, d->err_len, -EINVAL, "sample %zu: negative value", i);
	}
	return 0;
}

/* Checks the GPU interval columns against the limits and the session's tables. */
static int _d_gpu_check(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	size_t n = m->n_gpu_start_delta;
	struct timespec now;
	int64_t ts = 0, max_ts;

	if (n > d->lim->max_samples)
		return _fail(d->err, d->err_len, -E2BIG, "%zu GPU intervals, more than %zu",
			     n, d->lim->max_samples);
	if (m->n_gpu_duration != n || m->n_gpu_series != n || m->n_gpu_device != n ||
	    m->n_gpu_stream != n || m->n_gpu_kind != n || m->n_gpu_name != n ||
	    m->n_gpu_stack != n || m->n_gpu_bytes != n || (m->n_gpu_weight && m->n_gpu_weight != n) ||
	    (m->n_gpu_busy_idle && m->n_gpu_busy_idle != n))
		return _fail(d->err, d->err_len, -EINVAL,
			     "GPU interval columns differ in length (%zu starts)", n);
	clock_gettime(CLOCK_REALTIME, &now);
	max_ts = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	max_ts = d->lim->max_future_ns > INT64_MAX - max_ts ? INT64_MAX :
		 max_ts + d->lim->max_future_ns;
	for (size_t i = 0; i < n; i++) {
		int64_t end;

		if (__builtin_add_overflow(ts, m->gpu_start_delta[i], &ts) || ts < MIN_TS_NS ||
		    ts > max_ts || m->gpu_duration[i] > (uint64_t)INT64_MAX ||
		    __builtin_add_overflow(ts, (int64_t)m->gpu_duration[i], &end))
			return _fail(d->err, d->err_len, -EINVAL,
				     "GPU interval %zu: start or duration out of range", i);
		if (m->gpu_series[i] >= _held(d, K_SERIES))
			return _fail(d->err, d->err_len, -EINVAL,
				     "GPU interval %zu: series id %u out of range (%u series)",
				     i, m->gpu_series[i], _held(d, K_SERIES));
		if (m->gpu_name[i] >= _held(d, K_STRING))
			return _fail(d->err, d->err_len, -EINVAL,
				     "GPU interval %zu: name string id %u out of range (%u strings)",
				     i, m->gpu_name[i], _held(d, K_STRING));
		if (m->gpu_stack[i] > _held(d, K_STACK))
			return _fail(d->err, d->err_len, -EINVAL,
				     "GPU interval %zu: stack id %u out of range (%u stacks)",
				     i, m->gpu_stack[i] - 1, _held(d, K_STACK));
		if (m->gpu_kind[i] >= GPU_ACTIVITY_KIND_MAX)
			return _fail(d->err, d->err_len, -EINVAL, "GPU interval %zu: unknown kind %u",
				     i, m->gpu_kind[i]);
		if (m->n_gpu_weight && !m->gpu_weight[i])
			return _fail(d->err, d->err_len, -EINVAL, "GPU interval %zu: weight 0", i);
		if (m->n_gpu_busy_idle && m->gpu_busy_idle[i] &&
		    (m->gpu_kind[i] != GPU_BUSY || m->gpu_busy_idle[i] > m->gpu_duration[i]))
			return _fail(d->err, d->err_len, -EINVAL,
				     "GPU interval %zu: idle time %llu inside a %s of %llu ns", i,
				     (unsigned long long)m->gpu_busy_idle[i],
				     m->gpu_kind[i] == GPU_BUSY ? "busy span" : "non-busy interval",
				     (unsigned long long)m->gpu_duration[i]);
	}
	return 0;
}

/* Adds the checked GPU intervals to the batch being built. */
static int _d_gpu_build(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	int64_t ts = 0;

	for (size_t i = 0; i < m->n_gpu_start_delta; i++) {
		struct batch_gpu_interval g = { 0 };
		int64_t series = _d_om(d, K_SERIES, m->gpu_series[i]);
		int64_t name, stack = BATCH_NO_STACK;
		int rc;

		if (series < 0)
			return series;
		name = _d_om_string(d, m->gpu_name[i]);
		if (m->gpu_stack[i]) {
			stack = _d_om(d, K_STACK, m->gpu_stack[i] - 1);
			if (stack < 0)
				return stack;
		}
		ts += m->gpu_start_delta[i];
		g.start_ns = ts;
		g.end_ns = ts + (int64_t)m->gpu_duration[i];
		g.series = series;
		g.device = m->gpu_device[i];
		g.stream = m->gpu_stream[i];
		g.kind = m->gpu_kind[i];
		g.name = name;
		g.stack = stack;
		g.bytes = m->gpu_bytes[i];
		g.weight = m->n_gpu_weight ? m->gpu_weight[i] : 1;
		g.correlation = m->n_gpu_busy_idle ? m->gpu_busy_idle[i] : 0;
		rc = batch__add_gpu_interval(d->out, &g);
		if (rc)
			return rc;
	}
	return 0;
}

/*
 * The batch handed out, on the session's shared dictionary, which the
 * dictionary entries go into as they are checked.
 */
static int _d_begin(struct dec *d)
{
	if (!d->s->sd && !(d->s->sd = wire_sdict__new()))
		return _fail(d->err, d->err_len, -ENOMEM, "out of memory");
	d->out = batch__new_shared(d->m->period_ns, d->s->sd->b->dict, d->s->sd->b->series,
				   d->s->sd->id, wire_sdict__unref, d->s->sd);
	if (!d->out)
		return _fail(d->err, d->err_len, -ENOMEM, "out of memory");
	__atomic_add_fetch(&d->s->sd->refs, 1, __ATOMIC_ACQ_REL);
	return 0;
}

/* Fills the batch _d_begin() made with the now-validated samples. */
static int _d_build(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	int64_t ts = 0;
	int rc = -ENOMEM;

	if (m->n_ts_delta > d->out->cap_samples) {
		struct batch_sample *bs = malloc(m->n_ts_delta * sizeof(*bs));

		if (!bs)
			goto out;
		d->out->samples = bs;
		d->out->cap_samples = (uint32_t)m->n_ts_delta;
	}
	for (size_t i = 0; i < m->n_ts_delta; i++) {
		struct batch_sample s = { 0 };
		int64_t stack, series;

		stack = _d_om(d, K_STACK, m->sample_stack[i]);
		if (stack < 0) {
			rc = stack;
			goto out;
		}
		series = _d_om(d, K_SERIES, m->sample_series[i]);
		if (series < 0) {
			rc = series;
			goto out;
		}
		ts += m->ts_delta[i];
		s.ts_ns = ts;
		s.stack = stack;
		s.series = series;
		s.tid = m->sample_tid[i];
		s.cpu = m->sample_cpu[i];
		s.type = m->n_sample_type ? m->sample_type[i] : SAMPLE_CPU;
		s.value = m->n_sample_value ? m->sample_value[i] : 1;
		rc = batch__add_sample(d->out, &s);
		if (rc)
			goto out;
	}
	rc = _d_gpu_build(d);
out:
	if (rc)
		_fail(d->err, d->err_len, rc, rc == -ENOMEM ? "out of memory" :
		      "cannot build the batch: %s", strerror(-rc));
	return rc;
}

/* ---- metric points (fields 30-33) ---------------------------------------- */

static int _d_metrics(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	size_t n = m->n_metric_ts_delta;
	struct timespec now;
	int64_t ts = 0, max_ts;

	if (n > d->lim->max_samples)
		return _fail(d->err, d->err_len, -E2BIG, "%zu metric points, more than %zu",
			     n, d->lim->max_samples);
	if (m->n_metric_series != n || m->n_metric_name != n || m->n_metric_value != n)
		return _fail(d->err, d->err_len, -EINVAL,
			     "metric columns differ in length (%zu timestamps)", n);
	clock_gettime(CLOCK_REALTIME, &now);
	max_ts = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	max_ts = d->lim->max_future_ns > INT64_MAX - max_ts ? INT64_MAX :
		 max_ts + d->lim->max_future_ns;
	for (size_t i = 0; i < n; i++) {
		int rc;

		if (__builtin_add_overflow(ts, m->metric_ts_delta[i], &ts) || ts < MIN_TS_NS ||
		    ts > max_ts)
			return _fail(d->err, d->err_len, -EINVAL,
				     "metric point %zu: timestamp out of range", i);
		if (m->metric_series[i] >= _held(d, K_SERIES))
			return _fail(d->err, d->err_len, -EINVAL,
				     "metric point %zu: series id %u out of range (%u series)",
				     i, m->metric_series[i], _held(d, K_SERIES));
		rc = _d_string_id(d, "metric point", i, "name", m->metric_name[i]);
		if (rc)
			return rc;
		if (!_d_string(d, m->metric_name[i])[0])
			return _fail(d->err, d->err_len, -EINVAL, "metric point %zu: empty name", i);
		if (!isfinite(m->metric_value[i]))
			return _fail(d->err, d->err_len, -EINVAL,
				     "metric point %zu: value is not a finite number", i);
	}
	return 0;
}

/* Appends the validated points to the batch _d_build() made. */
static int _d_build_metrics(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	int64_t ts = 0;
	int rc = 0;

	for (size_t i = 0; i < m->n_metric_ts_delta && !rc; i++) {
		int64_t series = _d_om(d, K_SERIES, m->metric_series[i]);
		int64_t name = series < 0 ? series : _d_om_string(d, m->metric_name[i]);
		struct batch_metric bm;

		if (series < 0 || name < 0) {
			rc = (int)(series < 0 ? series : name);
			break;
		}
		ts += m->metric_ts_delta[i];
		bm = (struct batch_metric){ .ts_ns = ts, .series = (uint32_t)series,
					    .name = (uint32_t)name, .value = m->metric_value[i] };
		rc = batch__add_metric(d->out, &bm);
	}
	if (rc)
		_fail(d->err, d->err_len, rc, rc == -ENOMEM ? "out of memory" :
		      "cannot build the batch's metric points: %s", strerror(-rc));
	return rc;
}

/* Checks the CPU interval columns (fields 40-45) against the session. */
static int _d_cpu_intervals(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	size_t n = m->n_cpu_iv_cpu;
	struct timespec now;
	int64_t t = 0, end, max_ts;

	if (n > d->lim->max_samples)
		return _fail(d->err, d->err_len, -E2BIG, "%zu CPU intervals, more than %zu",
			     n, d->lim->max_samples);
	if (m->n_cpu_iv_start_delta != n || m->n_cpu_iv_duration != n ||
	    m->n_cpu_iv_series != n || m->n_cpu_iv_tid != n || m->n_cpu_iv_comm != n)
		return _fail(d->err, d->err_len, -EINVAL,
			     "CPU interval columns differ in length (%zu CPUs)", n);
	clock_gettime(CLOCK_REALTIME, &now);
	max_ts = (int64_t)now.tv_sec * 1000000000LL + now.tv_nsec;
	max_ts = d->lim->max_future_ns > INT64_MAX - max_ts ? INT64_MAX :
		 max_ts + d->lim->max_future_ns;
	for (size_t i = 0; i < n; i++) {
		if (__builtin_add_overflow(t, m->cpu_iv_start_delta[i], &t) || t < MIN_TS_NS ||
		    m->cpu_iv_duration[i] > (uint64_t)(max_ts - MIN_TS_NS) ||
		    __builtin_add_overflow(t, (int64_t)m->cpu_iv_duration[i], &end) || end > max_ts)
			return _fail(d->err, d->err_len, -EINVAL,
				     "CPU interval %zu: time out of range", i);
		if (m->cpu_iv_series[i] >= _held(d, K_SERIES))
			return _fail(d->err, d->err_len, -EINVAL,
				     "CPU interval %zu: series id %u out of range (%u series)",
				     i, m->cpu_iv_series[i], _held(d, K_SERIES));
		if (m->cpu_iv_comm[i] >= _held(d, K_STRING))
			return _fail(d->err, d->err_len, -EINVAL,
				     "CPU interval %zu: comm string id %u out of range (%u strings)",
				     i, m->cpu_iv_comm[i], _held(d, K_STRING));
		t = end;
	}
	return 0;
}

/* Adds the validated CPU intervals to the batch being built. */
static int _d_build_cpu_intervals(struct dec *d)
{
	const Flamewatch__Wire__Batch *m = d->m;
	int64_t t = 0;
	int rc = 0;

	for (size_t i = 0; i < m->n_cpu_iv_cpu; i++) {
		struct batch_cpu_interval iv = { 0 };
		int64_t series = _d_om(d, K_SERIES, m->cpu_iv_series[i]);
		int64_t comm = series < 0 ? series : _d_om_string(d, m->cpu_iv_comm[i]);

		if (comm < 0) {
			rc = (int)comm;
			break;
		}
		t += m->cpu_iv_start_delta[i];
		iv.start_ns = t;
		iv.end_ns = t + (int64_t)m->cpu_iv_duration[i];
		iv.series = series;
		iv.cpu = m->cpu_iv_cpu[i];
		iv.tid = m->cpu_iv_tid[i];
		iv.comm = comm;
		t = iv.end_ns;
		rc = batch__add_cpu_interval(d->out, &iv);
		if (rc)
			break;
	}
	if (rc)
		_fail(d->err, d->err_len, rc, rc == -ENOMEM ? "out of memory" :
		      "cannot build the CPU intervals: %s", strerror(-rc));
	return rc;
}

/*
 * Before unpacking: the columns hold at most max_samples rows each, and
 * the whole message fits in max_unpacked once unpacked. protobuf-c sizes
 * its arrays by what the message declares, so a few MB of one-byte varints
 * would otherwise take hundreds of MB before any count is seen.
 */
static int _precheck(const struct wire_limits *lim, size_t max_unpacked, const uint8_t *msg,
		     size_t len, char *err, size_t err_len)
{
	static const struct {
		unsigned first, last;
		const char *what;
	} cols[] = {
		{ 16, 22, "samples" },
		{ 30, 33, "metric points" },
		{ 40, 45, "CPU intervals" },
		{ 50, 59, "GPU intervals" },
	};
	struct pb_cap caps[40];
	size_t n = 0;
	char why[192];
	int rc;

	for (size_t i = 0; i < sizeof(cols) / sizeof(cols[0]); i++)
		for (unsigned f = cols[i].first; f <= cols[i].last && n < 40; f++)
			caps[n++] = (struct pb_cap){ &flamewatch__wire__batch__descriptor, f,
						     lim->max_samples, cols[i].what };
	rc = pb_capped_alloc__check(&flamewatch__wire__batch__descriptor, msg, len, max_unpacked,
				    caps, n, why, sizeof(why));
	if (rc == -E2BIG)
		return _fail(err, err_len, -E2BIG, "batch: %s", why);
	if (rc)
		return _fail(err, err_len, -EBADMSG, "not a valid protobuf batch (%s)", why);
	return 0;
}

int wire__decode(struct wire_session_table *t, const void *body, size_t len,
		 enum wire_compression c, const struct wire_limits *lim,
		 struct batch **out, char *node, size_t node_len, uint64_t *seq,
		 char *err, size_t err_len)
{
	struct wire_limits deflim = wire_limits__default();
	struct pb_capped_alloc ca = { 0 };
	ProtobufCAllocator pa = pb_capped_alloc__allocator(&ca);
	Flamewatch__Wire__Batch *m = NULL;
	struct dec d = { .err = err, .err_len = err_len };
	uint32_t base[K_MAX], saved[K_MAX] = { 0 };
	uint8_t *plain = NULL;
	const uint8_t *msg_bytes = body;
	size_t msg_len = len, node_strlen, max_decompressed;
	bool is_new = false;
	int rc;

	*out = NULL;
	if (err && err_len)
		err[0] = '\0';
	if (!lim)
		lim = &deflim;
	d.lim = lim;

	if (len > lim->max_body) {
		rc = _fail(err, err_len, -E2BIG, "body of %zu bytes exceeds %zu", len, lim->max_body);
		goto out;
	}
	/* The decompressors keep cap + 1 bytes; keep that from wrapping. */
	max_decompressed = lim->max_decompressed > SIZE_MAX / 4 ? SIZE_MAX / 4 :
			   lim->max_decompressed;
	switch (c) {
	case WIRE_NONE:
		if (len > lim->max_decompressed) {
			rc = _fail(err, err_len, -E2BIG, "body of %zu bytes exceeds %zu",
				   len, lim->max_decompressed);
			goto out;
		}
		break;
	case WIRE_GZIP:
		rc = decompress__gzip(body, len, max_decompressed, &plain, &msg_len, err, err_len);
		if (rc)
			goto out;
		msg_bytes = plain;
		break;
	case WIRE_ZSTD:
		rc = decompress__zstd(body, len, max_decompressed, &plain, &msg_len, err, err_len);
		if (rc)
			goto out;
		msg_bytes = plain;
		break;
	default:
		rc = _fail(err, err_len, -EINVAL, "unknown compression %d", (int)c);
		goto out;
	}

	ca.max = lim->max_unpacked > SIZE_MAX / 2 ? SIZE_MAX / 2 : lim->max_unpacked;
	rc = _precheck(lim, ca.max, msg_bytes, msg_len, err, err_len);
	if (rc)
		goto out;
	m = flamewatch__wire__batch__unpack(&pa, msg_len, msg_bytes);
	if (!m) {
		if (ca.over)
			rc = _fail(err, err_len, -E2BIG, "unpacked batch exceeds %zu bytes",
				   lim->max_unpacked);
		else
			rc = _fail(err, err_len, -EBADMSG, "not a valid protobuf batch");
		goto out;
	}
	d.m = m;
	if (m->version != WIRE_VERSION) {
		rc = _fail(err, err_len, -EPROTONOSUPPORT, "batch version %u, expected %u",
			   m->version, WIRE_VERSION);
		goto out;
	}
	node_strlen = strlen(m->node);
	if (!node_strlen || node_strlen > lim->max_string || (node && node_strlen >= node_len)) {
		rc = _fail(err, err_len, -EINVAL, "node name empty or too long (%zu bytes)",
			   node_strlen);
		goto out;
	}

	base[K_STRING] = m->dict_base_strings;
	base[K_MAPPING] = m->dict_base_mappings;
	base[K_FRAME] = m->dict_base_frames;
	base[K_STACK] = m->dict_base_stacks;
	base[K_SERIES] = m->dict_base_series;
	d.s = wire_sessions__find(t, m->session);
	if (d.s && strcmp(d.s->node, m->node)) {
		rc = _fail(err, err_len, -ESTALE, "session %016llx belongs to another node",
			   (unsigned long long)m->session);
		d.s = NULL;
		goto out;
	}
	if (!d.s) {
		for (int k = 0; k < K_MAX; k++) {
			if (base[k]) {
				rc = _fail(err, err_len, -ESTALE,
					   "unknown session %016llx with a dictionary base",
					   (unsigned long long)m->session);
				goto out;
			}
		}
		d.s = calloc(1, sizeof(*d.s));
		if (d.s) {
			is_new = true;
			d.s->id = m->session;
			d.s->node = strdup(m->node);
		}
		if (!d.s || !d.s->node) {
			rc = _fail(err, err_len, -ENOMEM, "out of memory");
			goto out;
		}
	}
	for (int k = 0; k < K_MAX; k++)
		saved[k] = d.s->om[k].n;

	{
		size_t nk[K_MAX] = { m->n_strings, m->n_mappings, m->n_frames, m->n_stacks,
				     m->n_series };

		for (int k = 0; k < K_MAX; k++) {
			if (base[k] > d.s->om[k].n) {
				rc = _fail(err, err_len, -ESTALE,
					   "session %016llx holds %u %s entries, batch builds on %u",
					   (unsigned long long)m->session, d.s->om[k].n,
					   kind_names[k], base[k]);
				goto out;
			}
			if (nk[k] > UINT32_MAX - base[k]) {
				rc = _fail(err, err_len, -EINVAL, "too many %s entries",
					   kind_names[k]);
				goto out;
			}
		}
	}

	rc = _d_begin(&d);
	if (!rc)
		rc = _d_strings(&d, base[K_STRING]);
	if (!rc)
		rc = _d_mappings(&d, base[K_MAPPING]);
	if (!rc)
		rc = _d_frames(&d, base[K_FRAME]);
	if (!rc)
		rc = _d_stacks(&d, base[K_STACK]);
	if (!rc)
		rc = _d_series(&d, base[K_SERIES]);
	if (!rc)
		rc = _d_samples(&d);
	if (!rc)
		rc = _d_gpu_check(&d);
	if (!rc)
		rc = _d_metrics(&d);
	if (!rc)
		rc = _d_cpu_intervals(&d);
	if (!rc)
		rc = _d_build(&d);
	if (!rc)
		rc = _d_build_metrics(&d);
	if (!rc)
		rc = _d_build_cpu_intervals(&d);
	if (rc)
		goto out;

	if (node)
		memcpy(node, m->node, node_strlen + 1);
	if (seq)
		*seq = m->seq;
	*out = d.out;
	d.out = NULL;
	/* First, so that what the agent gave up goes before anyone's session in use. */
	if (m->ends_session && m->ends_session != m->session)
		wire_sessions__end(t, m->ends_session, m->node);
	wire_sessions__commit(t, d.s, is_new);
	d.s = NULL;
	is_new = false;
out:
	if (rc && d.s) {
		/*
		 * The session forgets the entries of a batch it refused; the
		 * shared dictionary may keep what they added, unreferenced.
		 */
		for (int k = 0; k < K_MAX; k++)
			if (d.s->om[k].n > saved[k])
				d.s->om[k].n = saved[k];
	}
	if (is_new)
		wire_session__free(d.s);
	batch__free(d.out);
	free(d.scratch);
	free(d.names);
	free(d.values);
	if (m)
		flamewatch__wire__batch__free_unpacked(m, &pa);
	free(plain);
	return rc;
}
