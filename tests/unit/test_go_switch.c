// SPDX-License-Identifier: Apache-2.0
/*
 * The Go stack switch rows (UNWIND_GO_*) are checked against
 * binutils' objdump, an independent disassembler: every `call *%rax` in
 * runtime.asmcgocall must get a row of its own, whose offsets are the
 * displacements of the two stores to (%rsp) before it. The Go programs are
 * the cgo and pure-Go workloads, built with Debian's go at test time, with
 * and without symbols and DWARF (-ldflags=-s -w).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unwind/unwind_table.h"
#include "testutil.h"

#define CGO_SRC FW_TEST_DATA "/workloads/cgo_hot.go"
#define GO_SRC FW_TEST_DATA "/workloads/hot_go.go"
#define LIBC "/lib/x86_64-linux-gnu/libc.so.6"

static bool have_go;

/* Builds src into tmpdir/out with extra go build flags; GOCACHE as make keeps it. */
static int go_build(const char *src, const char *out, const char *flags)
{
	const char *cache = getenv("GOCACHE");
	char cwd[512];

	if (!cache) {
		if (!getcwd(cwd, sizeof(cwd)))
			return -1;
		return run("cd %s && GOCACHE='%s/build/gocache' GOFLAGS=-mod=mod go build %s -o %s %s/%s",
			   tmpdir, cwd, flags, out, cwd, src);
	}
	return run("cd %s && GOFLAGS=-mod=mod go build %s -o %s %s/%s", tmpdir, flags, out,
		   getcwd(cwd, sizeof(cwd)) ? cwd : ".", src);
}

/*
 * cgo:          the cgo workload
 * cgo-stripped: the same, -ldflags='-s -w': no .symtab, no .debug_frame
 * go-stripped:  the pure-Go workload, -s -w: no CFI at all
 */
static int group_setup(void **state)
{
	if (!tmpdir_make(tmpdir, sizeof(tmpdir), "goswitch"))
		return -1;
	have_go = run("command -v go >/dev/null") == 0;
	if (!have_go)
		return 0;
	if (go_build(CGO_SRC, "cgo", "") ||
	    go_build(CGO_SRC, "cgo-stripped", "-ldflags='-s -w'") ||
	    go_build(GO_SRC, "go-stripped", "-ldflags='-s -w'")) {
		fprintf(stderr, "building the Go programs in %s failed\n", tmpdir);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	tmpdir_remove(tmpdir);
	return 0;
}

struct collected {
	struct unwind_row *rows;
	size_t n;
};

static int collect(void *ctx, const struct unwind_row *rows, size_t n)
{
	struct collected *c = ctx;

	c->rows = realloc(c->rows, (c->n + n) * sizeof(*rows));
	assert_non_null(c->rows);
	memcpy(c->rows + c->n, rows, n * sizeof(*rows));
	c->n += n;
	return 0;
}

/* Builds the table, and checks that streaming it gives the same rows
 * (a Go binary's are kept whole for the splices, then handed over). */
static int build(const char *path, struct unwind_row **rows, size_t *n,
		 struct unwind_table_stats *st)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), err;
	struct collected c = { 0 };
	size_t sn;

	if (fd < 0)
		return -errno;
	err = unwind_table__build(fd, -1, rows, n, st);
	if (!err) {
		assert_int_equal(unwind_table__stream(fd, -1, collect, &c, &sn, NULL), 0);
		assert_int_equal(sn, *n);
		assert_int_equal(c.n, *n);
		assert_memory_equal(c.rows, *rows, *n * sizeof(**rows));
		free(c.rows);
	}
	close(fd);
	return err;
}

static void check_sorted(const struct unwind_row *rows, size_t n)
{
	for (size_t i = 1; i < n; i++) {
		if (rows[i - 1].pc >= rows[i].pc)
			fail_msg("rows %zu and %zu: pc %#x then %#x", i - 1, i, rows[i - 1].pc,
				 rows[i].pc);
		if (!memcmp(&rows[i - 1].cfa_offset, &rows[i].cfa_offset, 4))
			fail_msg("rows %zu and %zu are identical and not merged", i - 1, i);
	}
}

struct call {
	uint64_t pc;
	unsigned int g_off, depth_off;
};

/*
 * The `call *%rax` instructions of runtime.asmcgocall.abi0 in objdump's
 * disassembly, each with the displacements of the last two stores to
 * N(%rsp) (or (%rsp)) before it: the g slot, then the depth slot.
 */
static size_t objdump_calls(const char *path, struct call *out, size_t max)
{
	unsigned int disp[2] = { 0, 0 };
	char line[512];
	bool in = false;
	size_t n = 0;
	FILE *f;

	snprintf(line, sizeof(line), "objdump -d --no-show-raw-insn %s", path);
	f = popen(line, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		const char *s;
		unsigned int d = 0;

		if (strstr(line, "<runtime.asmcgocall.abi0>:")) {
			in = true;
			continue;
		}
		if (!in)
			continue;
		if (line[0] == '\n')
			break;
		/* A store: the destination, the last operand, is N(%rsp) or (%rsp). */
		s = strrchr(line, ',');
		if (strstr(line, "mov") && s && !strcmp(s + 1 + strcspn(s + 1, "("), "(%rsp)\n")) {
			if (s[1] == '0' && s[2] == 'x')
				d = (unsigned int)strtoul(s + 1, NULL, 16);
			disp[0] = disp[1];
			disp[1] = d;
			continue;
		}
		if (strstr(line, "call") && strstr(line, "*%rax") && n < max) {
			out[n].pc = strtoull(line, NULL, 16);
			out[n].g_off = disp[0];
			out[n].depth_off = disp[1];
			n++;
		}
	}
	pclose(f);
	return n;
}

static void test_cgo_rows_match_objdump(void **state)
{
	struct unwind_table_stats st;
	struct unwind_row *rows;
	struct call calls[8];
	size_t n, ncalls;

	if (!have_go)
		skip();
	ncalls = objdump_calls(tmp_path("cgo"), calls, 8);
	/* From a goroutine and already on g0. */
	assert_int_equal(ncalls, 2);
	assert_int_equal(build(tmp_path("cgo"), &rows, &n, &st), 0);
	check_sorted(rows, n);
	assert_int_equal(st.go_rows, 4);	/* and systemstack's, cgocallback's */
	for (size_t i = 0; i < ncalls; i++) {
		const struct unwind_row *at = unwind_table__find(rows, n, calls[i].pc);
		const struct unwind_row *end = unwind_table__find(rows, n, calls[i].pc + 1);
		const struct unwind_row *before = unwind_table__find(rows, n, calls[i].pc - 1);
		const struct unwind_row *after = unwind_table__find(rows, n, calls[i].pc + 2);

		print_message("call *%%rax at %#" PRIx64 ": g at rsp+%#x, depth at rsp+%#x\n",
			      calls[i].pc, calls[i].g_off, calls[i].depth_off);
		assert_non_null(at);
		assert_int_equal(at->pc, calls[i].pc);
		assert_int_equal(at->cfa_type, UNWIND_GO_ASMCGOCALL);
		assert_int_equal(at->cfa_offset, calls[i].g_off);
		assert_int_equal(at->rbp_slot, calls[i].depth_off);
		assert_ptr_equal(end, at);
		/* asmcgocall's own rule (a frame of size 0) holds on both sides. */
		assert_int_equal(after->pc, calls[i].pc + 2);
		assert_int_equal(after->cfa_type, before->cfa_type);
		assert_int_equal(after->cfa_offset, before->cfa_offset);
		assert_int_equal(after->rbp_slot, before->rbp_slot);
	}
	free(rows);
}

/* Without .symtab, asmcgocall is found through .gopclntab: the same rows. */
static void test_stripped_cgo_same_rows(void **state)
{
	struct unwind_row *rows, *srows;
	size_t n, sn, k = 0;

	if (!have_go)
		skip();
	assert_int_equal(build(tmp_path("cgo"), &rows, &n, NULL), 0);
	assert_int_equal(build(tmp_path("cgo-stripped"), &srows, &sn, NULL), 0);
	check_sorted(srows, sn);
	for (size_t i = 0; i < n; i++) {
		if (rows[i].cfa_type < UNWIND_GO_ASMCGOCALL)
			continue;
		while (k < sn && srows[k].cfa_type < UNWIND_GO_ASMCGOCALL)
			k++;
		assert_true(k < sn);
		assert_memory_equal(&rows[i], &srows[k], sizeof(rows[i]));
		k++;
	}
	assert_true(k > 0);
	free(rows);
	free(srows);
}

/* No CFI at all: the table is the Go rows between rows that say "frame pointers". */
static void test_no_cfi_go_rows_only(void **state)
{
	struct unwind_table_stats st;
	struct unwind_row *rows;
	size_t n, nsys = 0, ncb = 0;

	if (!have_go)
		skip();
	assert_int_equal(build(tmp_path("go-stripped"), &rows, &n, &st), 0);
	check_sorted(rows, n);
	/* A program without cgo has no cgocallback: the linker dropped it. */
	assert_int_equal(st.go_rows, 3);
	assert_int_equal(n, 7);
	assert_int_equal(rows[0].pc, 0);
	for (size_t i = 0; i < n; i++) {
		if (i % 2 == 0) {
			assert_int_equal(rows[i].cfa_type, UNWIND_NO_CFI);
			continue;
		}
		assert_true(rows[i].cfa_type >= UNWIND_GO_ASMCGOCALL &&
			    rows[i].cfa_type <= UNWIND_GO_CGOCALLBACK);
		nsys += rows[i].cfa_type == UNWIND_GO_SYSTEMSTACK;
		ncb += rows[i].cfa_type == UNWIND_GO_CGOCALLBACK;
		assert_int_equal(rows[i + 1].pc, rows[i].pc + 2);
	}
	assert_int_equal(nsys, 1);
	assert_int_equal(ncb, 0);
	free(rows);
}

/*
 * systemstack's `call *%rdi`, and the offset of m.curg in the
 * `mov N(%rbx),%rax` that follows it, from objdump.
 */
static void test_systemstack_row_matches_objdump(void **state)
{
	uint64_t call = 0, curg = 0;
	struct unwind_row *rows;
	const struct unwind_row *r;
	char line[512];
	bool in = false, after = false;
	size_t n;
	FILE *f;

	if (!have_go)
		skip();
	snprintf(line, sizeof(line), "objdump -d --no-show-raw-insn %s", tmp_path("cgo"));
	f = popen(line, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		const char *s;

		if (strstr(line, "<runtime.systemstack.abi0>:")) {
			in = true;
			continue;
		}
		if (!in || line[0] == '\n') {
			if (in)
				break;
			continue;
		}
		if (!call && strstr(line, "call") && strstr(line, "*%rdi")) {
			call = strtoull(line, NULL, 16);
			after = true;
		} else if (after && (s = strstr(line, "(%rbx),%rax")) && strstr(line, "mov")) {
			const char *c = strrchr(line, '\t');

			curg = strtoull(c ? c + 1 + strcspn(c + 1, "0") : s, NULL, 16);
			after = false;
		}
	}
	pclose(f);
	print_message("systemstack: call *%%rdi at %#" PRIx64 ", m.curg at %#" PRIx64 "\n", call,
		      curg);
	assert_true(call && curg);
	assert_int_equal(build(tmp_path("cgo"), &rows, &n, NULL), 0);
	r = unwind_table__find(rows, n, call);
	assert_non_null(r);
	assert_int_equal(r->pc, call);
	assert_int_equal(r->cfa_type, UNWIND_GO_SYSTEMSTACK);
	assert_int_equal(r->cfa_offset, curg);
	assert_ptr_equal(unwind_table__find(rows, n, call + 1), r);
	assert_int_not_equal(unwind_table__find(rows, n, call + 2)->cfa_type, UNWIND_GO_SYSTEMSTACK);
	free(rows);
}

/*
 * cgocallback's call of cgocallbackg (the `call *%rax` after a `lea` of
 * runtime.cgocallbackg) has a row holding its frame's CFA offset: the
 * `sub $F,%rsp` at its entry, + 8. And Go's .debug_frame rows for frames
 * above 8 bytes get rbp at CFA - 16: crosscall2 (Go assembly with a frame).
 */
static void test_cgocallback_and_go_rbp(void **state)
{
	uint64_t call = 0, frame = 0, cc2 = 0;
	const struct unwind_row *r;
	struct unwind_row *rows;
	char line[512], prev[512] = "";
	bool in = false;
	size_t n;
	FILE *f;

	if (!have_go)
		skip();
	snprintf(line, sizeof(line), "objdump -d --no-show-raw-insn %s", tmp_path("cgo"));
	f = popen(line, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		const char *s;

		if (strstr(line, "<crosscall2>:"))
			cc2 = strtoull(line, NULL, 16);
		if (strstr(line, "<runtime.cgocallback.abi0>:")) {
			in = true;
			continue;
		}
		if (!in)
			continue;
		if (line[0] == '\n') {
			in = false;
			continue;
		}
		if (!frame && (s = strstr(line, "sub    $0x")) && strstr(line, ",%rsp"))
			frame = strtoull(s + 8, NULL, 16);
		if (!call && strstr(line, "call") && strstr(line, "*%rax") &&
		    strstr(prev, "<runtime.cgocallbackg.abi0>"))
			call = strtoull(line, NULL, 16);
		snprintf(prev, sizeof(prev), "%s", line);
	}
	pclose(f);
	print_message("cgocallback: call of cgocallbackg at %#" PRIx64 ", frame %#" PRIx64
		      "; crosscall2 at %#" PRIx64 "\n", call, frame, cc2);
	assert_true(call && frame && cc2);
	assert_int_equal(build(tmp_path("cgo"), &rows, &n, NULL), 0);
	r = unwind_table__find(rows, n, call);
	assert_int_equal(r->pc, call);
	assert_int_equal(r->cfa_type, UNWIND_GO_CGOCALLBACK);
	assert_int_equal(r->cfa_offset, frame + 8);
	/* crosscall2: rsp+8 at entry, then its frame, with rbp saved. */
	r = unwind_table__find(rows, n, cc2);
	assert_int_equal(r->cfa_type, UNWIND_CFA_RSP);
	assert_int_equal(r->cfa_offset, 8);
	assert_int_equal(r->rbp_slot, 0);
	r = unwind_table__find(rows, n, cc2 + 0x10);
	assert_int_equal(r->cfa_type, UNWIND_CFA_RSP);
	assert_true(r->cfa_offset > 8);
	assert_int_equal(r->rbp_slot, 2);
	free(rows);
}

/* A C library has no Go rows. */
static void test_not_go(void **state)
{
	struct unwind_table_stats st;
	struct unwind_row *rows;
	size_t n;

	assert_int_equal(build(LIBC, &rows, &n, &st), 0);
	assert_int_equal(st.go_rows, 0);
	for (size_t i = 0; i < n; i++)
		assert_true(rows[i].cfa_type < UNWIND_GO_ASMCGOCALL);
	free(rows);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cgo_rows_match_objdump),
		cmocka_unit_test(test_stripped_cgo_same_rows),
		cmocka_unit_test(test_no_cfi_go_rows_only),
		cmocka_unit_test(test_systemstack_row_matches_objdump),
		cmocka_unit_test(test_cgocallback_and_go_rbp),
		cmocka_unit_test(test_not_go),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
