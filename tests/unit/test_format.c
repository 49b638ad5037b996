// SPDX-License-Identifier: Apache-2.0
/*
 * Output formats against a small hand-built profile. The folded output is
 * compared with a golden file; FW_UPDATE_GOLDEN=1 rewrites it instead (as
 * FlameGraph's test.sh does), after which `git diff` shows what changed.
 * The pprof output is decoded again and checked field by field.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <zlib.h>

#include "common/profile.h"
#include "golden.h"
#include "format/folded.h"
#include "format/pprof.h"
#include "profile.pb-c.h"

#define GOLDEN_FOLDED FW_TEST_DATA "/golden/basic.folded"
#define PERIOD_NS 52631579ULL	/* 19 Hz */
#define START_NS 1700000000000000000ULL
#define DURATION_NS 10000000000ULL
#define KERNEL_ADDR 0xffffffff81000010ULL

/* Frame ids of the basic profile, for checks on the pprof side. */
struct basic {
	struct profile *p;
	uint32_t main, work, work2, semi, memcpy_, kern, unknown, newline;
	uint32_t s_kernel;	/* main;work;memcpy;do_syscall_64 */
};

static uint32_t _frame(struct profile *p, enum frame_kind kind, uint32_t mapping,
		       uint64_t addr, const char *name, const char *file, uint32_t line)
{
	int64_t id = profile__intern_frame(p, kind, mapping, addr);

	assert_true(id >= 0);
	if (name)
		assert_int_equal(profile__set_frame_name(p, id, name, file, line), 0);
	return id;
}

static uint32_t _stack(struct profile *p, const uint32_t *frames, uint32_t n)
{
	int64_t id = profile__intern_stack(p, frames, n);

	assert_true(id >= 0);
	return id;
}

static uint32_t _str(struct profile *p, const char *s)
{
	int64_t id = profile__intern_string(p, s);

	assert_true(id >= 0);
	return id;
}

/*
 * Two comms; a kernel leaf without a mapping; a name holding ';' and one
 * holding '\n'; an unnamed frame; one stack sampled in two pids; and two
 * frames of one function at different addresses, whose stacks print alike.
 */
static void _basic_build(struct basic *b)
{
	struct profile *p = profile__new(PERIOD_NS, START_NS);
	int64_t app, libc;
	uint32_t s_semi, s_kernel2, s_unknown, s_newline, c_app, c_worker;

	assert_non_null(p);
	p->duration_ns = DURATION_NS;
	app = profile__intern_mapping(p, "/usr/bin/app", "0123456789abcdef");
	libc = profile__intern_mapping(p, "/usr/lib/x86_64-linux-gnu/libc.so.6", NULL);
	assert_true(app >= 0 && libc >= 0);

	b->main = _frame(p, FRAME_NATIVE, app, 0x1000, "main", "app.c", 10);
	b->work = _frame(p, FRAME_NATIVE, app, 0x1100, "work", "app.c", 20);
	b->work2 = _frame(p, FRAME_NATIVE, app, 0x1104, "work", "app.c", 21);
	b->semi = _frame(p, FRAME_NATIVE, app, 0x1200, "std::map<a;b>::find", NULL, 0);
	b->memcpy_ = _frame(p, FRAME_NATIVE, libc, 0x2000, "memcpy", NULL, 0);
	b->kern = _frame(p, FRAME_KERNEL, PROFILE_NO_MAPPING, KERNEL_ADDR,
			 "do_syscall_64", NULL, 0);
	b->unknown = _frame(p, FRAME_NATIVE, app, 0x1300, NULL, NULL, 0);
	b->newline = _frame(p, FRAME_JIT, PROFILE_NO_MAPPING, 0x7f0000001000ULL,
			    "two\nlines", NULL, 0);

	b->s_kernel = _stack(p, (uint32_t[]){ b->main, b->work, b->memcpy_, b->kern }, 4);
	s_kernel2 = _stack(p, (uint32_t[]){ b->main, b->work2, b->memcpy_, b->kern }, 4);
	s_semi = _stack(p, (uint32_t[]){ b->main, b->work, b->semi }, 3);
	s_unknown = _stack(p, (uint32_t[]){ b->main, b->unknown }, 2);
	s_newline = _stack(p, (uint32_t[]){ b->main, b->newline }, 2);

	c_app = _str(p, "app");
	c_worker = _str(p, "worker");
	assert_int_equal(profile__add_sample(p, b->s_kernel, 100, 100, 0, c_app, 3), 0);
	assert_int_equal(profile__add_sample(p, b->s_kernel, 101, 102, 1, c_app, 2), 0);
	assert_int_equal(profile__add_sample(p, s_kernel2, 100, 101, 2, c_app, 2), 0);
	assert_int_equal(profile__add_sample(p, s_semi, 100, 100, 0, c_app, 1), 0);
	assert_int_equal(profile__add_sample(p, s_unknown, 200, 200, 3, c_worker, 4), 0);
	assert_int_equal(profile__add_sample(p, b->s_kernel, 200, 201, 3, c_worker, 1), 0);
	assert_int_equal(profile__add_sample(p, s_newline, 200, 200, 3, c_worker, 6), 0);
	b->p = p;
}

/* Returns the bytes a writer produced, NUL-terminated; *len gets their number. */
static char *_write_mem(int (*writer)(const struct profile *, FILE *),
			const struct profile *p, size_t *len)
{
	char *buf = NULL;
	FILE *f = open_memstream(&buf, len);

	assert_non_null(f);
	assert_int_equal(writer(p, f), 0);
	assert_int_equal(fclose(f), 0);
	return buf;
}

static void test_folded_basic(void **state)
{
	struct basic b;
	size_t len;
	char *out;

	_basic_build(&b);
	out = _write_mem(folded__write, b.p, &len);
	golden__check(GOLDEN_FOLDED, out, len);
	free(out);
	profile__free(b.p);
}

static void test_folded_empty(void **state)
{
	struct profile *p = profile__new(PERIOD_NS, START_NS);
	size_t len;
	char *out;

	assert_non_null(p);
	out = _write_mem(folded__write, p, &len);
	assert_int_equal(len, 0);
	free(out);
	profile__free(p);
}

/* Inflates a gzip stream into a malloc'd buffer. */
static uint8_t *_gunzip(const uint8_t *in, size_t in_len, size_t *out_len)
{
	z_stream zs = { 0 };
	size_t cap = 4096;
	uint8_t *out = malloc(cap);
	int rc;

	assert_non_null(out);
	assert_int_equal(inflateInit2(&zs, 15 + 16), Z_OK);
	zs.next_in = (Bytef *)in;
	zs.avail_in = in_len;
	do {
		if (zs.total_out == cap) {
			cap *= 2;
			out = realloc(out, cap);
			assert_non_null(out);
		}
		zs.next_out = out + zs.total_out;
		zs.avail_out = cap - zs.total_out;
		rc = inflate(&zs, Z_NO_FLUSH);
		assert_true(rc == Z_OK || rc == Z_STREAM_END);
	} while (rc != Z_STREAM_END);
	assert_int_equal(zs.avail_in, 0);	/* nothing after the gzip member */
	*out_len = zs.total_out;
	inflateEnd(&zs);
	return out;
}

/*
 * Writes p as pprof and decodes it again. Also checks the properties of the
 * bytes themselves: a gzip header without a timestamp, and a payload equal
 * to what packing the decoded Profile as one message gives.
 */
static Perftools__Profiles__Profile *_pprof_roundtrip(const struct profile *p)
{
	Perftools__Profiles__Profile *pb;
	uint8_t *raw, *repacked;
	size_t gz_len, raw_len;
	char *gz;

	gz = _write_mem(pprof__write, p, &gz_len);
	assert_true(gz_len > 10);
	assert_int_equal((uint8_t)gz[0], 0x1f);
	assert_int_equal((uint8_t)gz[1], 0x8b);
	assert_int_equal(gz[4] | gz[5] | gz[6] | gz[7], 0);	/* MTIME */

	raw = _gunzip((uint8_t *)gz, gz_len, &raw_len);
	pb = perftools__profiles__profile__unpack(NULL, raw_len, raw);
	assert_non_null(pb);

	repacked = malloc(raw_len ? raw_len : 1);
	assert_non_null(repacked);
	assert_int_equal(perftools__profiles__profile__get_packed_size(pb), raw_len);
	assert_int_equal(perftools__profiles__profile__pack(pb, repacked), raw_len);
	assert_memory_equal(repacked, raw, raw_len);

	free(repacked);
	free(raw);
	free(gz);
	return pb;
}

static const char *_s(const Perftools__Profiles__Profile *pb, int64_t i)
{
	assert_true(i >= 0 && (size_t)i < pb->n_string_table);
	return pb->string_table[i];
}

static void _check_header(const Perftools__Profiles__Profile *pb)
{
	assert_true(pb->n_string_table >= 1);
	assert_string_equal(pb->string_table[0], "");
	assert_int_equal(pb->n_sample_type, 2);
	assert_string_equal(_s(pb, pb->sample_type[0]->type), "samples");
	assert_string_equal(_s(pb, pb->sample_type[0]->unit), "count");
	assert_string_equal(_s(pb, pb->sample_type[1]->type), "cpu");
	assert_string_equal(_s(pb, pb->sample_type[1]->unit), "nanoseconds");
	assert_non_null(pb->period_type);
	assert_string_equal(_s(pb, pb->period_type->type), "cpu");
	assert_string_equal(_s(pb, pb->period_type->unit), "nanoseconds");
	assert_int_equal(pb->period, PERIOD_NS);
	assert_int_equal(pb->time_nanos, START_NS);
	assert_string_equal(_s(pb, pb->default_sample_type), "cpu");
}

static const char *_label_str(const Perftools__Profiles__Profile *pb,
			      const Perftools__Profiles__Sample *s, const char *key)
{
	for (size_t i = 0; i < s->n_label; i++)
		if (strcmp(_s(pb, s->label[i]->key), key) == 0)
			return _s(pb, s->label[i]->str);
	fail_msg("no label %s", key);
	return NULL;
}

static int64_t _label_num(const Perftools__Profiles__Profile *pb,
			  const Perftools__Profiles__Sample *s, const char *key)
{
	for (size_t i = 0; i < s->n_label; i++)
		if (strcmp(_s(pb, s->label[i]->key), key) == 0)
			return s->label[i]->num;
	fail_msg("no label %s", key);
	return -1;
}

/* The function name of the location with this id. */
static const char *_loc_name(const Perftools__Profiles__Profile *pb, uint64_t id)
{
	const Perftools__Profiles__Location *loc;
	uint64_t fn;

	assert_true(id >= 1 && id <= pb->n_location);
	loc = pb->location[id - 1];
	assert_int_equal(loc->id, id);
	assert_int_equal(loc->n_line, 1);
	fn = loc->line[0]->function_id;
	assert_true(fn >= 1 && fn <= pb->n_function);
	assert_int_equal(pb->function[fn - 1]->id, fn);
	return _s(pb, pb->function[fn - 1]->name);
}

static void test_pprof_basic(void **state)
{
	const Perftools__Profiles__Sample *s = NULL;
	const Perftools__Profiles__Mapping *km;
	const Perftools__Profiles__Location *kl;
	Perftools__Profiles__Profile *pb;
	uint64_t total = 0;
	struct basic b;

	_basic_build(&b);
	pb = _pprof_roundtrip(b.p);
	_check_header(pb);
	assert_int_equal(pb->duration_nanos, DURATION_NS);

	assert_int_equal(pb->n_sample, b.p->nsamples);
	assert_int_equal(pb->n_location, b.p->nframes);
	/* main, work (two frames), the ';' one, memcpy, the kernel one, [unknown], two\nlines */
	assert_int_equal(pb->n_function, 7);
	/* app, libc and the synthesised kernel mapping */
	assert_int_equal(pb->n_mapping, 3);
	for (size_t i = 0; i < pb->n_mapping; i++) {
		assert_int_equal(pb->mapping[i]->id, i + 1);
		assert_true(pb->mapping[i]->has_functions);
	}
	assert_string_equal(_s(pb, pb->mapping[0]->filename), "/usr/bin/app");
	assert_string_equal(_s(pb, pb->mapping[0]->build_id), "0123456789abcdef");
	assert_true(pb->mapping[0]->memory_limit > 0x1300);

	kl = pb->location[b.kern];
	assert_int_equal(kl->address, KERNEL_ADDR);
	assert_int_equal(kl->mapping_id, 3);
	km = pb->mapping[2];
	assert_string_equal(_s(pb, km->filename), "[kernel.kallsyms]");
	assert_true(km->memory_start <= KERNEL_ADDR && KERNEL_ADDR < km->memory_limit);
	assert_int_equal(pb->location[b.newline]->mapping_id, 0);
	assert_int_equal(pb->location[b.work2]->line[0]->line, 21);
	assert_string_equal(_loc_name(pb, b.unknown + 1), "[unknown]");
	assert_string_equal(_loc_name(pb, b.semi + 1), "std::map<a;b>::find");

	for (size_t i = 0; i < pb->n_sample; i++) {
		const Perftools__Profiles__Sample *si = pb->sample[i];

		assert_int_equal(si->n_value, 2);
		assert_int_equal(si->value[1], si->value[0] * (int64_t)PERIOD_NS);
		total += si->value[0];
		if (_label_num(pb, si, "pid") == 101)
			s = si;
	}
	assert_int_equal(total, profile__total(b.p));

	/* pid 101 ran main;work;memcpy;do_syscall_64: leaf first in pprof. */
	assert_non_null(s);
	assert_int_equal(s->n_location_id, 4);
	assert_int_equal(s->location_id[0], b.kern + 1);
	assert_int_equal(s->location_id[1], b.memcpy_ + 1);
	assert_int_equal(s->location_id[2], b.work + 1);
	assert_int_equal(s->location_id[3], b.main + 1);
	assert_string_equal(_loc_name(pb, s->location_id[0]), "do_syscall_64");
	assert_string_equal(_loc_name(pb, s->location_id[3]), "main");
	assert_int_equal(s->value[0], 2);
	assert_int_equal(_label_num(pb, s, "tid"), 102);
	assert_int_equal(_label_num(pb, s, "cpu"), 1);
	assert_string_equal(_label_str(pb, s, "comm"), "app");
	/* A unit keeps pprof from dropping labels whose value is 0. */
	for (size_t i = 0; i < s->n_label; i++)
		if (strcmp(_s(pb, s->label[i]->key), "comm") != 0)
			assert_string_equal(_s(pb, s->label[i]->num_unit), "count");

	perftools__profiles__profile__free_unpacked(pb, NULL);
	profile__free(b.p);
}

static void test_pprof_deterministic(void **state)
{
	struct basic b;
	size_t l1, l2;
	char *o1, *o2;

	_basic_build(&b);
	o1 = _write_mem(pprof__write, b.p, &l1);
	o2 = _write_mem(pprof__write, b.p, &l2);
	assert_int_equal(l1, l2);
	assert_memory_equal(o1, o2, l1);
	free(o1);
	free(o2);
	profile__free(b.p);
}

static void test_pprof_empty(void **state)
{
	struct profile *p = profile__new(PERIOD_NS, START_NS);
	Perftools__Profiles__Profile *pb;

	assert_non_null(p);
	pb = _pprof_roundtrip(p);
	_check_header(pb);
	assert_int_equal(pb->n_sample, 0);
	assert_int_equal(pb->n_location, 0);
	assert_int_equal(pb->n_function, 0);
	assert_int_equal(pb->n_mapping, 0);
	perftools__profiles__profile__free_unpacked(pb, NULL);
	profile__free(p);
}

/* /dev/full accepts the open and fails every write with ENOSPC. */
static void test_write_error_full(void **state)
{
	struct basic b;
	FILE *f;

	_basic_build(&b);
	f = fopen("/dev/full", "w");
	if (!f)
		skip();
	assert_int_equal(folded__write(b.p, f), -EIO);
	fclose(f);
	f = fopen("/dev/full", "w");
	assert_non_null(f);
	assert_int_equal(pprof__write(b.p, f), -EIO);
	fclose(f);
	profile__free(b.p);
}

static void test_write_error_readonly(void **state)
{
	struct basic b;
	FILE *f;

	_basic_build(&b);
	f = fopen("/dev/null", "r");
	assert_non_null(f);
	assert_true(folded__write(b.p, f) < 0);
	assert_true(pprof__write(b.p, f) < 0);
	fclose(f);
	profile__free(b.p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_folded_basic),
		cmocka_unit_test(test_folded_empty),
		cmocka_unit_test(test_pprof_basic),
		cmocka_unit_test(test_pprof_deterministic),
		cmocka_unit_test(test_pprof_empty),
		cmocka_unit_test(test_write_error_full),
		cmocka_unit_test(test_write_error_readonly),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
