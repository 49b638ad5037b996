// SPDX-License-Identifier: Apache-2.0
/*
 * Metric points in the SQLite store: written under the node, read back
 * raw and bucketed (mean and max), selected by labels and by __name__,
 * the newest point per series for /metrics, idempotent rewrites, bad
 * batches refused whole, retention, and persistence across reopen.
 */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/batch.h"
#include "common/profile.h"
#include "store/selector.h"
#include "store/store.h"
#include "testutil.h"

#define S 1000000000LL
#define T0 (1700000000LL * S)

static char _dir[64];

static int _setup(void **state)
{
	assert_non_null(tmpdir_make(_dir, sizeof(_dir), "store-metrics"));
	return 0;
}

static int _teardown(void **state)
{
	tmpdir_remove(_dir);
	return 0;
}

static void _add(struct batch *b, const char *gpu, const char *pid, const char *name,
		 int64_t ts, double v)
{
	const char *n[] = { "gpu", "uuid", "pid", "comm" };
	const char *val[] = { gpu, gpu[0] == '0' ? "GPU-a" : "GPU-b", pid, "python3" };
	int64_t series = batch__intern_series(b, n, val, pid ? 4 : 2);
	int64_t id = profile__intern_string(b->dict, name);
	struct batch_metric m = { .ts_ns = ts, .value = v };

	assert_true(series >= 0 && id >= 0);
	m.series = (uint32_t)series;
	m.name = (uint32_t)id;
	assert_int_equal(batch__add_metric(b, &m), 0);
}

/* Ten seconds of power on two GPUs and utilisation of one process. */
static struct batch *_batch(void)
{
	struct batch *b = batch__new(1);

	for (int i = 0; i < 10; i++) {
		_add(b, "0", NULL, "flamewatch_gpu_power_watts", T0 + i * S, 100 + i);
		_add(b, "1", NULL, "flamewatch_gpu_power_watts", T0 + i * S + S / 2, 200.5);
		_add(b, "0", "42", "flamewatch_gpu_process_utilization_percent", T0 + i * S, i * 10);
	}
	return b;
}

struct rec {
	char text[8192];
	size_t len;
	int nseries, npoints;
};

static int _r_series(void *ctx, const char *name, const char *const *ln, const char *const *lv,
		     size_t n)
{
	struct rec *r = ctx;

	r->len += snprintf(r->text + r->len, sizeof(r->text) - r->len, "%s%s{", r->nseries ? "\n" : "", name);
	for (size_t i = 0; i < n; i++)
		r->len += snprintf(r->text + r->len, sizeof(r->text) - r->len, "%s=%s,", ln[i], lv[i]);
	r->len += snprintf(r->text + r->len, sizeof(r->text) - r->len, "}");
	r->nseries++;
	return 0;
}

static int _r_point(void *ctx, int64_t ts, double avg, double max, uint32_t count)
{
	struct rec *r = ctx;

	r->len += snprintf(r->text + r->len, sizeof(r->text) - r->len, " %lld:%g/%g/%u",
			   (long long)((ts - T0) / (S / 10)), avg, max, count);
	r->npoints++;
	return 0;
}

static void _query(struct store *s, int64_t from, int64_t to, int64_t step, const char *sel_text,
		   struct rec *r)
{
	struct selector *sel = NULL;
	struct store_metric_visitor v = { _r_series, _r_point, r };
	char err[128];

	memset(r, 0, sizeof(*r));
	if (sel_text) {
		sel = selector__parse(sel_text, err, sizeof(err));
		assert_non_null(sel);
	}
	assert_int_equal(store__metrics(s, from, to, step, sel, &v), 0);
	selector__free(sel);
}

static void test_write_and_query(void **state)
{
	struct store *s = store_open_or_fail(_dir);
	struct batch *b = _batch();
	struct rec r;

	assert_int_equal(store__write_metrics(s, "n1", b), 0);
	/* Written twice (an agent resending): each point stays once. */
	assert_int_equal(store__write_metrics(s, "n1", b), 0);

	_query(s, T0, T0 + 10 * S, 5 * S, "{__name__=\"flamewatch_gpu_power_watts\"}", &r);
	assert_string_equal(r.text,
		"flamewatch_gpu_power_watts{gpu=0,node=n1,uuid=GPU-a,} 0:102/104/5 50:107/109/5\n"
		"flamewatch_gpu_power_watts{gpu=1,node=n1,uuid=GPU-b,} 0:200.5/200.5/5 50:200.5/200.5/5");

	_query(s, T0 + 2 * S, T0 + 4 * S, 0, "{pid=\"42\"}", &r);
	assert_string_equal(r.text,
		"flamewatch_gpu_process_utilization_percent{comm=python3,gpu=0,node=n1,pid=42,uuid=GPU-a,}"
		" 20:20/20/1 30:30/30/1");

	_query(s, T0, T0 + 100 * S, 0, "{gpu=\"1\",node=\"n1\"}", &r);
	assert_int_equal(r.nseries, 1);
	assert_int_equal(r.npoints, 10);
	_query(s, T0, T0 + 100 * S, 0, "{node=\"other\"}", &r);
	assert_int_equal(r.nseries, 0);
	_query(s, T0 + 100 * S, T0 + 200 * S, 0, NULL, &r);
	assert_int_equal(r.nseries, 0);
	batch__free(b);
	store__close(s);
}

struct latest {
	char text[2048];
	size_t len;
};

static int _latest_cb(void *ctx, const char *name, const char *const *ln, const char *const *lv,
		      size_t n, int64_t ts, double value)
{
	struct latest *l = ctx;
	const char *gpu = "";

	for (size_t i = 0; i < n; i++)
		if (!strcmp(ln[i], "gpu"))
			gpu = lv[i];
	l->len += snprintf(l->text + l->len, sizeof(l->text) - l->len, "%s/%s@%lld=%g\n", name,
			   gpu, (long long)((ts - T0) / S), value);
	return 0;
}

static void test_latest_and_reopen(void **state)
{
	struct store *s = store_open_or_fail(_dir);
	struct batch *b = batch__new(1);
	struct latest l = { 0 };

	/* An older point written later must not replace the newest. */
	_add(b, "0", NULL, "flamewatch_gpu_temperature_celsius", T0 + 20 * S, 61);
	_add(b, "0", NULL, "flamewatch_gpu_temperature_celsius", T0 + 15 * S, 59);
	assert_int_equal(store__write_metrics(s, "n1", b), 0);
	store__close(s);

	s = store_open_or_fail(_dir);
	assert_int_equal(store__metrics_latest(s, T0 + 9 * S, _latest_cb, &l), 0);
	assert_string_equal(l.text,
		"flamewatch_gpu_power_watts/0@9=109\n"
		"flamewatch_gpu_power_watts/1@9=200.5\n"
		"flamewatch_gpu_process_utilization_percent/0@9=90\n"
		"flamewatch_gpu_temperature_celsius/0@20=61\n");
	batch__free(b);
	store__close(s);
}

static void test_invalid_batch(void **state)
{
	struct store *s = store_open_or_fail(_dir);
	struct batch *b = batch__new(1);
	struct rec r;

	_add(b, "0", NULL, "flamewatch_gpu_sm_clock_hertz", T0 + 50 * S, 1.5e9);
	_add(b, "0", NULL, "flamewatch_gpu_sm_clock_hertz", T0 + 51 * S, NAN);
	assert_int_equal(store__write_metrics(s, "n1", b), -EINVAL);
	b->metrics[1].value = 1;
	b->metrics[1].series = 999;
	assert_int_equal(store__write_metrics(s, "n1", b), -EINVAL);
	assert_int_equal(store__write_metrics(s, "", b), -EINVAL);
	_query(s, T0, T0 + 100 * S, 0, "{__name__=\"flamewatch_gpu_sm_clock_hertz\"}", &r);
	assert_int_equal(r.nseries, 0);
	batch__free(b);
	store__close(s);
}

static void test_retention(void **state)
{
	struct store *s = store_open_or_fail(_dir);
	struct latest l = { 0 };
	struct rec r;

	assert_int_equal(store__retain(s, T0 + 5 * S), 0);
	_query(s, 0, T0 + 100 * S, 0, "{__name__=\"flamewatch_gpu_power_watts\",gpu=\"0\"}", &r);
	assert_int_equal(r.npoints, 5);
	assert_string_equal(r.text,
		"flamewatch_gpu_power_watts{gpu=0,node=n1,uuid=GPU-a,} 50:105/105/1 60:106/106/1"
		" 70:107/107/1 80:108/108/1 90:109/109/1");
	assert_int_equal(store__retain(s, T0 + 16 * S), 0);
	assert_int_equal(store__metrics_latest(s, 0, _latest_cb, &l), 0);
	assert_string_equal(l.text, "flamewatch_gpu_temperature_celsius/0@20=61\n");
	store__close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_write_and_query),
		cmocka_unit_test(test_latest_and_reopen),
		cmocka_unit_test(test_invalid_batch),
		cmocka_unit_test(test_retention),
	};

	return cmocka_run_group_tests(tests, _setup, _teardown);
}
