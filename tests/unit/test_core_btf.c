// SPDX-License-Identifier: Apache-2.0
/*
 * core_btf: the kernel's BTF cut down to what our BPF objects use must
 * relocate them exactly as the whole BTF does. Runs on this machine's
 * /sys/kernel/btf/vmlinux; the loads need root (skipped without).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "agent/core_btf.h"
#include "bpf/libwatch.skel.h"
#include "bpf/sample.skel.h"
#include "bpf/strips.skel.h"

#define KERNEL_BTF "/sys/kernel/btf/vmlinux"

struct object {
	const char *name;
	const void *elf;
	size_t size;
};

static void objects(struct object o[3])
{
	o[0] = (struct object){ .name = "sample" };
	o[0].elf = sample_bpf__elf_bytes(&o[0].size);
	o[1] = (struct object){ .name = "strips" };
	o[1].elf = strips_bpf__elf_bytes(&o[1].size);
	o[2] = (struct object){ .name = "libwatch" };
	o[2].elf = libwatch_bpf__elf_bytes(&o[2].size);
}

/*
 * Every struct and union of the cut has the kernel's size and members
 * (names, bit offsets, bitfield sizes); every enum its values; and the
 * cut is a small fraction of the kernel's BTF.
 */
static void test_cut_matches_kernel(void **state)
{
	struct btf *full;
	struct object o[3];

	(void)state;
	if (access(KERNEL_BTF, R_OK))
		skip();
	full = btf__parse(KERNEL_BTF, NULL);
	assert_non_null(full);
	objects(o);
	for (int i = 0; i < 3; i++) {
		struct core_btf cb;
		struct btf *cut;
		uint32_t checked = 0;

		assert_int_equal(core_btf__open(&cb, o[i].elf, o[i].size), 0);
		assert_true(cb.path[0] && cb.fd >= 0);
		assert_true(cb.types > 20);
		assert_true(cb.bytes < 256 * 1024);
		cut = btf__parse(cb.path, NULL);
		assert_non_null(cut);
		assert_int_equal(btf__type_cnt(cut), cb.types + 1);
		assert_non_null(btf__find_by_name_kind(cut, "task_struct", BTF_KIND_STRUCT) > 0 ?
					"ok" : NULL);
		for (uint32_t id = 1; id < btf__type_cnt(cut); id++) {
			const struct btf_type *t = btf__type_by_id(cut, id);
			const char *name = btf__name_by_offset(cut, t->name_off);
			const struct btf_type *k;
			int kid;

			if (!name[0] || !(btf_is_composite(t) || btf_is_enum(t)))
				continue;
			kid = btf__find_by_name_kind(full, name, btf_kind(t));
			assert_true(kid > 0);
			k = btf__type_by_id(full, kid);
			assert_int_equal(t->size, k->size);
			assert_int_equal(btf_vlen(t), btf_vlen(k));
			for (int m = 0; btf_is_composite(t) && m < btf_vlen(t); m++) {
				assert_string_equal(btf__name_by_offset(cut, btf_members(t)[m].name_off),
						    btf__name_by_offset(full, btf_members(k)[m].name_off));
				assert_int_equal(btf_member_bit_offset(t, m), btf_member_bit_offset(k, m));
				assert_int_equal(btf_member_bitfield_size(t, m),
						 btf_member_bitfield_size(k, m));
			}
			for (int m = 0; btf_is_enum(t) && m < btf_vlen(t); m++)
				assert_int_equal(btf_enum(t)[m].val, btf_enum(k)[m].val);
			checked++;
		}
		assert_true(checked > 10);
		btf__free(cut);
		core_btf__close(&cb);
		assert_int_equal(cb.fd, -1);
	}
	btf__free(full);
}

/* libbpf's account of each relocation it applied: "patched insn" lines. */
static char *_log;
static size_t _log_len, _log_cap;

static int _capture(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char line[1024];
	int n;

	(void)level;
	n = vsnprintf(line, sizeof(line), fmt, ap);
	if (n <= 0 || !strstr(line, "patched insn"))
		return 0;
	if (_log_len + (size_t)n + 1 > _log_cap) {
		_log_cap = (_log_cap + n + 1) * 2;
		_log = realloc(_log, _log_cap);
		assert_non_null(_log);
	}
	memcpy(_log + _log_len, line, n + 1);
	_log_len += n;
	return 0;
}

/* Loads the object, with the cut or without; returns its relocation log. */
static char *_load(const struct object *o, const char *custom)
{
	LIBBPF_OPTS(bpf_object_open_opts, opts, .btf_custom_path = custom);
	struct bpf_object *obj = bpf_object__open_mem(o->elf, o->size, &opts);
	char *log;

	assert_non_null(obj);
	_log_len = 0;
	if (_log)
		_log[0] = '\0';
	libbpf_set_print(_capture);
	assert_int_equal(bpf_object__load(obj), 0);
	libbpf_set_print(NULL);
	bpf_object__close(obj);
	log = strdup(_log ? _log : "");
	assert_non_null(log);
	return log;
}

/* The same instructions patched the same way, object by object. */
static void test_relocations_equal(void **state)
{
	struct object o[3];

	(void)state;
	if (geteuid() != 0 || access(KERNEL_BTF, R_OK))
		skip();
	objects(o);
	for (int i = 0; i < 3; i++) {
		struct core_btf cb;
		char *with_full, *with_cut;

		assert_int_equal(core_btf__open(&cb, o[i].elf, o[i].size), 0);
		with_full = _load(&o[i], NULL);
		with_cut = _load(&o[i], cb.path);
		core_btf__close(&cb);
		if (strcmp(with_full, with_cut))
			fail_msg("%s: relocations differ\n-- full BTF:\n%s\n-- cut:\n%s", o[i].name,
				 with_full, with_cut);
		/* Not vacuous: every object reads kernel structs. */
		assert_non_null(strstr(with_cut, "patched insn"));
		free(with_full);
		free(with_cut);
	}
	free(_log);
	_log = NULL;
	_log_cap = 0;
}

/* Bad input: no .BTF in the "object", or a kernel BTF that is not BTF. */
static void test_bad_input(void **state)
{
	static const char not_elf[] = "not an ELF file";
	char path[] = "/tmp/fw-btf-XXXXXX";
	struct object o[3];
	struct core_btf cb;
	int fd = mkstemp(path);

	(void)state;
	assert_true(fd >= 0);
	assert_int_equal(write(fd, not_elf, sizeof(not_elf)), (int)sizeof(not_elf));
	close(fd);
	assert_true(core_btf__open(&cb, not_elf, sizeof(not_elf)) < 0);
	assert_string_equal(cb.path, "");
	assert_int_equal(cb.fd, -1);
	objects(o);
	assert_int_equal(core_btf__open_from(&cb, path, o[0].elf, o[0].size), -EINVAL);
	assert_string_equal(cb.path, "");
	assert_int_equal(core_btf__open_from(&cb, "/nonexistent/btf", o[0].elf, o[0].size), -ENOENT);
	unlink(path);
}

static void test_kernel_has(void **state)
{
	(void)state;
	if (access(KERNEL_BTF, R_OK))
		skip();
	assert_int_equal(core_btf__kernel_has("task_struct", BTF_KIND_STRUCT), 1);
	assert_int_equal(core_btf__kernel_has("btf_trace_sched_switch", BTF_KIND_TYPEDEF), 1);
	assert_int_equal(core_btf__kernel_has("task_struct", BTF_KIND_UNION), 0);
	assert_int_equal(core_btf__kernel_has("no_such_type_in_any_kernel", BTF_KIND_STRUCT), 0);
	/* What off-CPU block times need (sampler__offcpu_missing). */
	assert_int_equal(core_btf__kernel_has_member("task_struct", "sched_info"), 1);
	assert_int_equal(core_btf__kernel_has_member("sched_entity", "cfs_rq"), 1);
	assert_int_equal(core_btf__kernel_has_member("task_struct", "no_such_member"), 0);
	assert_int_equal(core_btf__kernel_has_member("no_such_type_in_any_kernel", "pid"), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cut_matches_kernel),
		cmocka_unit_test(test_relocations_equal),
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_kernel_has),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
