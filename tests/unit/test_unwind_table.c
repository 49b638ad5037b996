// SPDX-License-Identifier: Apache-2.0
/*
 * Unwind tables are checked against binutils' readelf, an independent CFI
 * interpreter: every row `readelf --debug-dump=frames-interp` prints (LOC,
 * CFA, rbp, ra) must be what unwind_table__find() gives at LOC. Fixtures are
 * compiled from tests/fixtures/unwind/ at test time; Debian's libc and, when
 * installed, libLLVM are checked the same way and their sizes reported.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "unwind/unwind_table.h"
#include "testutil.h"

#define FIXTURE_SRC FW_TEST_DATA "/fixtures/unwind/prog.c"
#define LIBC "/lib/x86_64-linux-gnu/libc.so.6"

static const char *const big_binaries[] = {
	"/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1",
	"/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1",
	"/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1",
};

static bool exists(const char *path)
{
	return access(path, R_OK) == 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * prog:          -O2 -fomit-frame-pointer -fasynchronous-unwind-tables
 * prog-noplt:    the same, linked without ld's .plt FDE
 * prog-dbg:      -g -fno-asynchronous-unwind-tables: functions are described
 *                in .debug_frame only (.eh_frame has crt1's _start and .plt)
 * prog-stripped: prog-dbg without .debug_*; its CFI is in prog-dbg.debug
 *                (and, compressed, prog-dbg.zdebug)
 * prog-nocfi:    prog without .eh_frame
 */
static int group_setup(void **state)
{
	const char *cflags = "-O2 -fomit-frame-pointer";

	if (!tmpdir_make(tmpdir, sizeof(tmpdir), "unwind"))
		return -1;
	if (run("gcc %s -fasynchronous-unwind-tables %s -o %s", cflags, FIXTURE_SRC,
		tmp_path("prog")) ||
	    run("gcc %s -fasynchronous-unwind-tables -Wl,--no-ld-generated-unwind-info %s -o %s",
		cflags, FIXTURE_SRC, tmp_path("prog-noplt")) ||
	    run("gcc %s -g -fno-asynchronous-unwind-tables %s -o %s", cflags, FIXTURE_SRC,
		tmp_path("prog-dbg")) ||
	    run("objcopy --only-keep-debug %s %s", tmp_path("prog-dbg"),
		tmp_path("prog-dbg.debug")) ||
	    run("objcopy --compress-debug-sections=zlib %s %s", tmp_path("prog-dbg.debug"),
		tmp_path("prog-dbg.zdebug")) ||
	    run("strip -g %s -o %s", tmp_path("prog-dbg"), tmp_path("prog-stripped")) ||
	    run("objcopy --remove-section=.eh_frame --remove-section=.eh_frame_hdr %s %s",
		tmp_path("prog"), tmp_path("prog-nocfi"))) {
		fprintf(stderr, "building the fixtures in %s failed\n", tmpdir);
		return -1;
	}
	return 0;
}

static int group_teardown(void **state)
{
	tmpdir_remove(tmpdir);
	return 0;
}

static int build(const char *path, const char *debug_path, struct unwind_row **rows,
		 size_t *n, struct unwind_table_stats *st)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), dfd = -1, err;

	if (fd < 0)
		return -errno;
	if (debug_path) {
		dfd = open(debug_path, O_RDONLY | O_CLOEXEC);
		if (dfd < 0) {
			close(fd);
			return -errno;
		}
	}
	err = unwind_table__build(fd, dfd, rows, n, st);
	close(fd);
	if (dfd >= 0)
		close(dfd);
	return err;
}

/* What the header promises about every table. */
static void check_invariants(const struct unwind_row *rows, size_t n,
			     const struct unwind_table_stats *st)
{
	assert_non_null(rows);
	assert_true(n >= 2);
	assert_int_equal(st->rows, n);
	assert_true(st->rows_raw >= n);
	for (size_t i = 0; i < n; i++) {
		const struct unwind_row *r = &rows[i];

		assert_true(r->cfa_type >= UNWIND_CFA_RSP && r->cfa_type <= UNWIND_END);
		if (r->cfa_type != UNWIND_CFA_RSP && r->cfa_type != UNWIND_CFA_RBP) {
			assert_int_equal(r->cfa_offset, 0);
			assert_int_equal(r->rbp_slot, 0);
		}
		if (i == 0)
			continue;
		if (rows[i - 1].pc >= r->pc)
			fail_msg("rows %zu and %zu: pc %#x then %#x", i - 1, i, rows[i - 1].pc, r->pc);
		if (rows[i - 1].cfa_type == r->cfa_type && rows[i - 1].cfa_offset == r->cfa_offset &&
		    rows[i - 1].rbp_slot == r->rbp_slot)
			fail_msg("rows %zu and %zu are identical and not merged", i - 1, i);
	}
	assert_int_equal(rows[n - 1].cfa_type, UNWIND_NO_CFI);
}

static void assert_same_table(const struct unwind_row *a, size_t na, const struct unwind_row *b,
			      size_t nb)
{
	assert_int_equal(na, nb);
	for (size_t i = 0; i < na; i++) {
		if (memcmp(&a[i], &b[i], sizeof(a[i])))
			fail_msg("row %zu differs: %#x %s%+d/%u vs %#x %s%+d/%u", i, a[i].pc,
				 unwind_cfa_type__name(a[i].cfa_type), a[i].cfa_offset, a[i].rbp_slot,
				 b[i].pc, unwind_cfa_type__name(b[i].cfa_type), b[i].cfa_offset,
				 b[i].rbp_slot);
	}
}

/* ---- readelf ---------------------------------------------------------------- */

struct re_row {
	uint64_t loc;
	char cfa[32], rbp[32], ra[32];
};

struct re_cie {
	uint64_t off;
	bool signal;
	bool have_row;
	struct re_row row;
};

struct re_state {
	struct re_cie *cies;
	size_t ncies, cap_cies;
	struct re_row *rows;
	size_t nrows, cap_rows;
	int col_cfa, col_rbp, col_ra;	/* token index, -1 when absent */
	bool in_fde, in_cie, fde_signal;
	uint64_t fde_cie, fde_lo, fde_hi;
};

struct cmp_result {
	size_t rows;		/* readelf rows checked */
	size_t agree;
	size_t simple_wrong;	/* we say RSP/RBP and readelf disagrees */
	size_t simple_missed;	/* readelf gives a simple rule we do not use */
	size_t other_bad;	/* other kinds that do not match */
	size_t by_type[UNWIND_END + 1];
	size_t printed;
};

struct expect {
	int type;		/* -1: PLT or NO_CFI (a CFA expression) */
	int off, slot;
};

/* readelf's verdict on one row, in our terms. */
static void classify(const struct re_row *r, bool signal, struct expect *e)
{
	int v;
	char reg[8];

	memset(e, 0, sizeof(*e));
	if (signal) {
		e->type = UNWIND_CFA_SIGNAL;
		return;
	}
	if (!strcmp(r->ra, "u")) {
		e->type = UNWIND_END;
		return;
	}
	e->type = UNWIND_NO_CFI;
	if (strcmp(r->ra, "c-8"))
		return;
	if (!strcmp(r->cfa, "exp")) {
		e->type = -1;
	} else if (sscanf(r->cfa, "%3[a-z0-9]+%d", reg, &v) == 2 &&
		   (!strcmp(reg, "rsp") || !strcmp(reg, "rbp")) && v >= INT16_MIN && v <= INT16_MAX) {
		e->type = !strcmp(reg, "rsp") ? UNWIND_CFA_RSP : UNWIND_CFA_RBP;
		e->off = v;
	} else {
		return;
	}
	if (!r->rbp[0] || !strcmp(r->rbp, "u") || !strcmp(r->rbp, "s"))
		return;
	if (sscanf(r->rbp, "c-%d", &v) == 1 && v > 0 && v % 8 == 0 && v / 8 <= 255) {
		if (e->type == -1)
			e->type = UNWIND_NO_CFI;	/* a PLT row never saves rbp */
		e->slot = v / 8;
		return;
	}
	e->type = UNWIND_NO_CFI;
	e->off = 0;
}

static void compare_row(const struct re_row *r, bool signal, const struct unwind_row *rows,
			size_t n, struct cmp_result *res)
{
	const struct unwind_row *got = unwind_table__find(rows, n, r->loc);
	bool simple_got, simple_want, ok;
	struct expect e;

	classify(r, signal, &e);
	res->rows++;
	if (!got) {
		res->other_bad++;
		if (res->printed++ < 20)
			printf("  %#" PRIx64 ": no row\n", r->loc);
		return;
	}
	res->by_type[got->cfa_type]++;
	simple_got = got->cfa_type == UNWIND_CFA_RSP || got->cfa_type == UNWIND_CFA_RBP;
	simple_want = e.type == UNWIND_CFA_RSP || e.type == UNWIND_CFA_RBP;
	if (e.type == -1)
		ok = got->cfa_type == UNWIND_CFA_PLT || got->cfa_type == UNWIND_NO_CFI;
	else
		ok = got->cfa_type == e.type && got->cfa_offset == e.off && got->rbp_slot == e.slot;
	if (ok) {
		res->agree++;
		return;
	}
	if (simple_got)
		res->simple_wrong++;
	else if (simple_want)
		res->simple_missed++;
	else
		res->other_bad++;
	if (res->printed++ < 20)
		printf("  %#" PRIx64 ": readelf CFA %s rbp %s ra %s, table %s%+d rbp slot %u (row at %#x)\n",
		       r->loc, r->cfa, r->rbp[0] ? r->rbp : "-", r->ra,
		       unwind_cfa_type__name(got->cfa_type), got->cfa_offset, got->rbp_slot, got->pc);
}

static void finish_entry(struct re_state *s, const struct unwind_row *rows, size_t n,
			 struct cmp_result *res)
{
	if (s->in_cie) {
		struct re_cie *c = &s->cies[s->ncies - 1];

		if (s->nrows) {
			c->row = s->rows[0];
			c->have_row = true;
		}
	} else if (s->in_fde) {
		struct re_row implicit;

		if (s->fde_lo == 0 || s->fde_hi <= s->fde_lo)
			goto out;
		if (!s->nrows) {
			/* An FDE without instructions uses its CIE's initial row. */
			for (size_t i = 0; i < s->ncies; i++) {
				if (s->cies[i].off == s->fde_cie && s->cies[i].have_row) {
					implicit = s->cies[i].row;
					implicit.loc = s->fde_lo;
					compare_row(&implicit, s->fde_signal, rows, n, res);
				}
			}
			goto out;
		}
		for (size_t i = 0; i < s->nrows; i++) {
			/* When readelf repeats a LOC, the last of its rows is the one that holds. */
			if (i + 1 < s->nrows && s->rows[i + 1].loc == s->rows[i].loc)
				continue;
			if (s->rows[i].loc >= s->fde_hi)
				continue;
			compare_row(&s->rows[i], s->fde_signal, rows, n, res);
		}
	}
out:
	s->in_cie = s->in_fde = false;
	s->nrows = 0;
}

/* Splits a readelf table line; "r9 (r9)" is one value. Returns the count. */
static int split(char *line, char **tok, int max)
{
	int n = 0;

	for (char *p = strtok(line, " \t\n"); p; p = strtok(NULL, " \t\n")) {
		if (p[0] == '(' && n > 0) {
			p[-1] = ' ';	/* glue to the previous token */
			continue;
		}
		if (n < max)
			tok[n++] = p;
	}
	return n;
}

static void compare_with_readelf(const char *path, const struct unwind_row *rows, size_t n,
				 struct cmp_result *res)
{
	struct re_state s = { .col_cfa = -1, .col_rbp = -1, .col_ra = -1 };
	char cmd[512], *line = NULL;
	size_t cap = 0;
	FILE *f;

	memset(res, 0, sizeof(*res));
	snprintf(cmd, sizeof(cmd), "readelf --debug-dump=frames-interp '%s' 2>/dev/null", path);
	f = popen(cmd, "r");
	assert_non_null(f);
	while (getline(&line, &cap, f) > 0) {
		char *tok[64], copy[1024];
		unsigned long long off, lo, hi, cie;
		int nt;

		if (!strncmp(line, "Contents of the ", 16)) {
			/* CIE offsets are per section. */
			finish_entry(&s, rows, n, res);
			s.ncies = 0;
			continue;
		}
		if (line[0] == '\n') {
			finish_entry(&s, rows, n, res);
			continue;
		}
		if (strstr(line, " CIE ") && sscanf(line, "%llx", &off) == 1) {
			char *q = strchr(line, '"'), *q2 = q ? strchr(q + 1, '"') : NULL;

			finish_entry(&s, rows, n, res);
			if (s.ncies == s.cap_cies) {
				s.cap_cies = s.cap_cies ? 2 * s.cap_cies : 16;
				s.cies = realloc(s.cies, s.cap_cies * sizeof(*s.cies));
				assert_non_null(s.cies);
			}
			s.cies[s.ncies] = (struct re_cie){ .off = off };
			s.cies[s.ncies].signal = q && q2 && memchr(q, 'S', q2 - q);
			s.ncies++;
			s.in_cie = true;
			continue;
		}
		if (strstr(line, " FDE ") &&
		    sscanf(line, "%llx %*s %*s FDE cie=%llx pc=%llx..%llx", &off, &cie, &lo, &hi) == 4) {
			finish_entry(&s, rows, n, res);
			s.in_fde = true;
			s.fde_cie = cie;
			s.fde_lo = lo;
			s.fde_hi = hi;
			s.fde_signal = false;
			for (size_t i = 0; i < s.ncies; i++)
				if (s.cies[i].off == cie)
					s.fde_signal = s.cies[i].signal;
			continue;
		}
		if (!s.in_fde && !s.in_cie)
			continue;
		snprintf(copy, sizeof(copy), "%s", line);
		nt = split(copy, tok, 64);
		if (nt > 0 && !strcmp(tok[0], "LOC")) {
			s.col_cfa = s.col_rbp = s.col_ra = -1;
			for (int i = 0; i < nt; i++) {
				if (!strcmp(tok[i], "CFA"))
					s.col_cfa = i;
				else if (!strcmp(tok[i], "rbp"))
					s.col_rbp = i;
				else if (!strcmp(tok[i], "ra"))
					s.col_ra = i;
			}
			continue;
		}
		if (nt > 0 && s.col_cfa > 0 && s.col_ra > 0 && nt > s.col_ra &&
		    sscanf(tok[0], "%llx", &lo) == 1) {
			struct re_row *r;

			if (s.nrows == s.cap_rows) {
				s.cap_rows = s.cap_rows ? 2 * s.cap_rows : 64;
				s.rows = realloc(s.rows, s.cap_rows * sizeof(*s.rows));
				assert_non_null(s.rows);
			}
			r = &s.rows[s.nrows++];
			memset(r, 0, sizeof(*r));
			r->loc = lo;
			snprintf(r->cfa, sizeof(r->cfa), "%s", tok[s.col_cfa]);
			snprintf(r->ra, sizeof(r->ra), "%s", tok[s.col_ra]);
			if (s.col_rbp > 0)
				snprintf(r->rbp, sizeof(r->rbp), "%s", tok[s.col_rbp]);
		}
	}
	finish_entry(&s, rows, n, res);
	free(line);
	free(s.cies);
	free(s.rows);
	/* readelf exits 1 on libc ("Unable to find program interpreter name"). */
	pclose(f);
}

static void report_comparison(const char *what, const struct cmp_result *res)
{
	printf("%s: %zu of %zu readelf rows agree (%.3f%%); there the table says "
	       "rsp %zu, rbp %zu, plt %zu, signal %zu, end %zu, no-cfi %zu\n",
	       what, res->agree, res->rows, res->rows ? 100.0 * res->agree / res->rows : 0.0,
	       res->by_type[UNWIND_CFA_RSP], res->by_type[UNWIND_CFA_RBP],
	       res->by_type[UNWIND_CFA_PLT], res->by_type[UNWIND_CFA_SIGNAL],
	       res->by_type[UNWIND_END], res->by_type[UNWIND_NO_CFI]);
}

/* Every RSP/RBP row must be exactly readelf's, and no simple readelf row may be lost. */
static void assert_comparison(const struct cmp_result *res)
{
	assert_true(res->rows > 0);
	assert_int_equal(res->simple_wrong, 0);
	assert_int_equal(res->simple_missed, 0);
	assert_int_equal(res->other_bad, 0);
	assert_int_equal(res->agree, res->rows);
}

/* ---- helpers reading the fixtures with binutils ------------------------------ */

static bool symbol_address(const char *cmd_fmt, const char *path, const char *name, uint64_t *addr)
{
	char cmd[512], *line = NULL;
	size_t cap = 0;
	bool found = false;
	FILE *f;

	snprintf(cmd, sizeof(cmd), cmd_fmt, path);
	f = popen(cmd, "r");
	if (!f)
		return false;
	while (!found && getline(&line, &cap, f) > 0) {
		char *tok[16];
		int nt = split(line, tok, 16);

		/* nm: "ADDR T name"; readelf -s: "N: ADDR SIZE TYPE ... name" */
		if (nt >= 3 && !strcmp(tok[nt - 1], name))
			found = sscanf(tok[strchr(tok[0], ':') ? 1 : 0], "%" SCNx64, addr) == 1;
	}
	free(line);
	pclose(f);
	return found;
}

static bool section_range(const char *path, const char *name, uint64_t *addr, uint64_t *size)
{
	char cmd[512], *line = NULL;
	size_t cap = 0;
	bool found = false;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "readelf -SW '%s' 2>/dev/null", path);
	f = popen(cmd, "r");
	if (!f)
		return false;
	while (!found && getline(&line, &cap, f) > 0) {
		char *p = strchr(line, ']'), sname[64], type[32];
		uint64_t off;

		if (p && sscanf(p + 1, " %63s %31s %" SCNx64 " %" SCNx64 " %" SCNx64, sname, type,
				addr, &off, size) == 5 && !strcmp(sname, name))
			found = true;
	}
	free(line);
	pclose(f);
	return found;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_row_layout(void **state)
{
	assert_int_equal(sizeof(struct unwind_row), 8);
	assert_int_equal(offsetof(struct unwind_row, pc), 0);
	assert_int_equal(offsetof(struct unwind_row, cfa_offset), 4);
	assert_int_equal(offsetof(struct unwind_row, cfa_type), 6);
	assert_int_equal(offsetof(struct unwind_row, rbp_slot), 7);
}

static void test_find(void **state)
{
	const struct unwind_row rows[] = {
		{ .pc = 0x1000, .cfa_type = UNWIND_CFA_RSP, .cfa_offset = 8 },
		{ .pc = 0x1004, .cfa_type = UNWIND_CFA_RSP, .cfa_offset = 16 },
		{ .pc = 0x1010, .cfa_type = UNWIND_NO_CFI },
		{ .pc = 0x2000, .cfa_type = UNWIND_CFA_RBP, .cfa_offset = 16, .rbp_slot = 2 },
		{ .pc = 0x2100, .cfa_type = UNWIND_NO_CFI },
	};
	size_t n = sizeof(rows) / sizeof(rows[0]);

	assert_null(unwind_table__find(rows, 0, 0x1000));
	assert_null(unwind_table__find(rows, n, 0));
	assert_null(unwind_table__find(rows, n, 0xfff));
	assert_ptr_equal(unwind_table__find(rows, n, 0x1000), &rows[0]);
	assert_ptr_equal(unwind_table__find(rows, n, 0x1003), &rows[0]);
	assert_ptr_equal(unwind_table__find(rows, n, 0x1004), &rows[1]);
	assert_ptr_equal(unwind_table__find(rows, n, 0x1fff), &rows[2]);
	assert_ptr_equal(unwind_table__find(rows, n, 0x20ff), &rows[3]);
	assert_ptr_equal(unwind_table__find(rows, n, 0x2100), &rows[4]);
	assert_ptr_equal(unwind_table__find(rows, n, UINT64_MAX), &rows[4]);
	assert_ptr_equal(unwind_table__find(rows, 1, 0x5000), &rows[0]);
}

static void test_prog_matches_readelf(void **state)
{
	struct unwind_table_stats st;
	struct unwind_row *rows;
	struct cmp_result res;
	size_t n;

	assert_int_equal(build(tmp_path("prog"), NULL, &rows, &n, &st), 0);
	check_invariants(rows, n, &st);
	compare_with_readelf(tmp_path("prog"), rows, n, &res);
	report_comparison("prog", &res);
	assert_comparison(&res);
	/* The fixture has both kinds of CFA and a saved rbp. */
	assert_true(res.by_type[UNWIND_CFA_RSP] > 0);
	assert_true(res.by_type[UNWIND_CFA_RBP] > 0);
	assert_int_equal(st.unsupported_rows, 0);
	free(rows);
}

static void test_prog_start_is_end(void **state)
{
	const struct unwind_row *r;
	struct unwind_table_stats st;
	struct unwind_row *rows;
	uint64_t start, main_addr;
	size_t n;

	assert_int_equal(build(tmp_path("prog"), NULL, &rows, &n, &st), 0);
	assert_true(symbol_address("nm '%s'", tmp_path("prog"), "_start", &start));
	/* Debian's crt1.o marks the return address of _start undefined. */
	r = unwind_table__find(rows, n, start);
	assert_non_null(r);
	assert_int_equal(r->cfa_type, UNWIND_END);
	assert_true(symbol_address("nm '%s'", tmp_path("prog"), "main", &main_addr));
	r = unwind_table__find(rows, n, main_addr);
	assert_non_null(r);
	assert_int_equal(r->cfa_type, UNWIND_CFA_RSP);
	assert_int_equal(r->cfa_offset, 8);
	assert_int_equal(r->rbp_slot, 0);
	free(rows);
}

static void check_plt(const struct unwind_row *rows, size_t n, uint64_t plt, uint64_t size)
{
	const struct unwind_row *r;

	/* PLT0 is entered with the relocation index pushed, and pushes once more. */
	r = unwind_table__find(rows, n, plt);
	assert_int_equal(r->cfa_type, UNWIND_CFA_RSP);
	assert_int_equal(r->cfa_offset, 16);
	r = unwind_table__find(rows, n, plt + 6);
	assert_int_equal(r->cfa_type, UNWIND_CFA_RSP);
	assert_int_equal(r->cfa_offset, 24);
	for (uint64_t a = plt + 16; a < plt + size; a += 5) {
		r = unwind_table__find(rows, n, a);
		assert_int_equal(r->cfa_type, UNWIND_CFA_PLT);
	}
	r = unwind_table__find(rows, n, plt + size);
	assert_int_not_equal(r->cfa_type, UNWIND_CFA_PLT);
}

static void test_prog_plt(void **state)
{
	struct unwind_table_stats st, st2;
	struct unwind_row *rows, *rows2;
	uint64_t plt, size, got, got_size;
	const struct unwind_row *r;
	size_t n, n2;

	assert_true(section_range(tmp_path("prog"), ".plt", &plt, &size));
	assert_true(size > 16);
	assert_int_equal(build(tmp_path("prog"), NULL, &rows, &n, &st), 0);
	check_plt(rows, n, plt, size);
	assert_true(st.plt_rows >= 1);

	/*
	 * Without ld's FDE for .plt (as with lld), the rows are synthesized:
	 * they must come out identical to what ld's FDE gives.
	 */
	assert_int_equal(build(tmp_path("prog-noplt"), NULL, &rows2, &n2, &st2), 0);
	check_invariants(rows2, n2, &st2);
	check_plt(rows2, n2, plt, size);
	if (section_range(tmp_path("prog-noplt"), ".plt.got", &got, &got_size)) {
		r = unwind_table__find(rows2, n2, got);
		assert_int_equal(r->cfa_type, UNWIND_CFA_RSP);
		assert_int_equal(r->cfa_offset, 8);
	}
	assert_same_table(rows, n, rows2, n2);
	assert_true(st2.fdes >= 1);
	free(rows);
	free(rows2);
}

static void test_debug_frame_and_debug_file(void **state)
{
	struct unwind_row *full, *stripped, *merged, *zmerged;
	size_t nfull, nstripped, nmerged, nzmerged;
	struct unwind_table_stats st;
	const struct unwind_row *r;
	struct cmp_result res;
	uint64_t main_addr;

	assert_true(symbol_address("nm '%s'", tmp_path("prog-dbg"), "main", &main_addr));

	/* .eh_frame holds crt1's _start and .plt; .debug_frame everything else. */
	assert_int_equal(build(tmp_path("prog-dbg"), NULL, &full, &nfull, &st), 0);
	check_invariants(full, nfull, &st);
	r = unwind_table__find(full, nfull, main_addr);
	assert_int_equal(r->cfa_type, UNWIND_CFA_RSP);
	compare_with_readelf(tmp_path("prog-dbg"), full, nfull, &res);
	report_comparison("prog-dbg (.eh_frame + .debug_frame)", &res);
	assert_comparison(&res);

	assert_int_equal(build(tmp_path("prog-stripped"), NULL, &stripped, &nstripped, &st), 0);
	r = unwind_table__find(stripped, nstripped, main_addr);
	assert_int_equal(r->cfa_type, UNWIND_NO_CFI);

	assert_int_equal(build(tmp_path("prog-stripped"), tmp_path("prog-dbg.debug"), &merged,
			       &nmerged, &st), 0);
	check_invariants(merged, nmerged, &st);
	assert_same_table(full, nfull, merged, nmerged);

	assert_int_equal(build(tmp_path("prog-stripped"), tmp_path("prog-dbg.zdebug"), &zmerged,
			       &nzmerged, &st), 0);
	assert_same_table(full, nfull, zmerged, nzmerged);

	free(full);
	free(stripped);
	free(merged);
	free(zmerged);
}

static void test_libc_matches_readelf(void **state)
{
	struct unwind_table_stats st;
	struct unwind_row *rows;
	struct cmp_result res;
	size_t n;

	if (!exists(LIBC))
		skip();
	assert_int_equal(build(LIBC, NULL, &rows, &n, &st), 0);
	check_invariants(rows, n, &st);
	compare_with_readelf(LIBC, rows, n, &res);
	report_comparison("libc.so.6", &res);
	assert_comparison(&res);
	assert_true(res.by_type[UNWIND_CFA_RSP] > res.rows / 2);
	free(rows);
}

static void test_libc_signal_trampoline(void **state)
{
	char cmd[256], *line = NULL, debug[256] = "";
	struct unwind_row *rows, *rows2;
	struct unwind_table_stats st;
	const struct unwind_row *r;
	uint64_t restore_rt;
	size_t n, n2, cap = 0;
	FILE *f;

	if (!exists(LIBC))
		skip();
	assert_int_equal(build(LIBC, NULL, &rows, &n, &st), 0);
	assert_true(st.signal_rows >= 1);

	snprintf(cmd, sizeof(cmd), "readelf -n '%s' 2>/dev/null", LIBC);
	f = popen(cmd, "r");
	assert_non_null(f);
	while (getline(&line, &cap, f) > 0) {
		char *p = strstr(line, "Build ID: ");

		if (p && strlen(p + 10) > 3) {
			p += 10;
			p[strcspn(p, "\n")] = '\0';
			snprintf(debug, sizeof(debug), "/usr/lib/debug/.build-id/%.2s/%s.debug", p,
				 p + 2);
		}
	}
	free(line);
	pclose(f);

	if (!debug[0] || !exists(debug)) {
		printf("libc debug file not installed: only checked that a signal row exists\n");
		free(rows);
		return;
	}
	/* __restore_rt is local: only the debug file's .symtab has it. */
	assert_true(symbol_address("readelf -sW '%s' 2>/dev/null", debug, "__restore_rt", &restore_rt));
	r = unwind_table__find(rows, n, restore_rt);
	assert_non_null(r);
	assert_int_equal(r->cfa_type, UNWIND_CFA_SIGNAL);
	/* Unwinders look up return addresses at pc - 1; the FDE starts there too. */
	r = unwind_table__find(rows, n, restore_rt - 1);
	assert_int_equal(r->cfa_type, UNWIND_CFA_SIGNAL);

	/* The debug file has no CFI of its own (.eh_frame is NOBITS): same table. */
	assert_int_equal(build(LIBC, debug, &rows2, &n2, &st), 0);
	assert_same_table(rows, n, rows2, n2);
	free(rows);
	free(rows2);
}

static void report_size(const char *path)
{
	struct unwind_table_stats st;
	struct unwind_row *rows;
	double t0, t1;
	struct stat sb;
	size_t n;

	assert_int_equal(stat(path, &sb), 0);
	t0 = now();
	assert_int_equal(build(path, NULL, &rows, &n, &st), 0);
	t1 = now();
	check_invariants(rows, n, &st);
	printf("%s (%.1f MB): %zu rows = %zu bytes (%zu B/row; %zu before merging), %zu FDEs, "
	       "no-cfi %zu (unsupported %zu), plt %zu, signal %zu; built in %.1f ms\n",
	       path, sb.st_size / 1e6, st.rows, st.rows * sizeof(*rows), sizeof(*rows),
	       st.rows_raw, st.fdes, st.no_cfi_rows, st.unsupported_rows, st.plt_rows,
	       st.signal_rows, (t1 - t0) * 1e3);
	free(rows);
}

static void test_size_stats(void **state)
{
	bool big = false;

	if (exists(LIBC))
		report_size(LIBC);
	for (size_t i = 0; i < sizeof(big_binaries) / sizeof(big_binaries[0]) && !big; i++) {
		if (exists(big_binaries[i])) {
			report_size(big_binaries[i]);
			big = true;
		}
	}
	if (!big)
		printf("no big binary (libLLVM) installed: size of a big binary not reported\n");
}

/* A large C++ library; its .eh_frame is typed SHT_X86_64_UNWIND. */
static void test_big_binary_matches_readelf(void **state)
{
	struct unwind_table_stats st;
	struct unwind_row *rows;
	struct cmp_result res;
	const char *path = NULL;
	uint64_t plt, size;
	size_t n;

	for (size_t i = 0; i < sizeof(big_binaries) / sizeof(big_binaries[0]) && !path; i++)
		if (exists(big_binaries[i]))
			path = big_binaries[i];
	if (!path)
		skip();
	assert_int_equal(build(path, NULL, &rows, &n, &st), 0);
	compare_with_readelf(path, rows, n, &res);
	report_comparison(path, &res);
	assert_comparison(&res);
	if (section_range(path, ".plt", &plt, &size) && size > 16)
		assert_int_equal(unwind_table__find(rows, n, plt + 16)->cfa_type, UNWIND_CFA_PLT);
	free(rows);
}

struct stream_sink {
	struct unwind_row *rows;
	size_t n, cap, calls, max_piece;
	size_t fail_after;	/* rows; 0: never */
};

static int stream_collect(void *ctx, const struct unwind_row *rows, size_t n)
{
	struct stream_sink *k = ctx;

	if (k->fail_after && k->n + n > k->fail_after)
		return -ECANCELED;
	if (k->n + n > k->cap) {
		k->cap = (k->n + n) * 2;
		k->rows = realloc(k->rows, k->cap * sizeof(*k->rows));
		assert_non_null(k->rows);
	}
	memcpy(k->rows + k->n, rows, n * sizeof(*rows));
	k->n += n;
	k->calls++;
	if (n > k->max_piece)
		k->max_piece = n;
	return 0;
}

/* A streamed table is the built one, row for row, in pieces; fn can stop it. */
static void test_stream_matches_build(void **state)
{
	const char *paths[] = { LIBC, "/proc/self/exe", big_binaries[0] };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		struct unwind_table_stats st, sst;
		struct stream_sink k = { 0 };
		struct unwind_row *rows;
		size_t n, sn;
		int fd;

		if (!exists(paths[i]))
			continue;
		assert_int_equal(build(paths[i], NULL, &rows, &n, &st), 0);
		fd = open(paths[i], O_RDONLY | O_CLOEXEC);
		assert_true(fd >= 0);
		assert_int_equal(unwind_table__stream(fd, -1, stream_collect, &k, &sn, &sst), 0);
		assert_int_equal(sn, n);
		assert_int_equal(k.n, n);
		assert_memory_equal(k.rows, rows, n * sizeof(*rows));
		assert_int_equal(sst.rows, st.rows);
		assert_int_equal(sst.rows_raw, st.rows_raw);
		assert_int_equal(sst.fdes, st.fdes);
		assert_int_equal(sst.no_cfi_rows, st.no_cfi_rows);
		assert_int_equal(sst.plt_rows, st.plt_rows);
		assert_int_equal(sst.signal_rows, st.signal_rows);
		if (n > 5000)
			assert_true(k.calls > 1 && k.max_piece <= 1024);

		free(k.rows);
		memset(&k, 0, sizeof(k));
		k.fail_after = n / 2;
		if (k.fail_after > 2048)
			assert_int_equal(unwind_table__stream(fd, -1, stream_collect, &k, &sn, NULL),
					 -ECANCELED);
		free(k.rows);
		free(rows);
		close(fd);
	}
}

/*
 * Checks one range build against the whole table: the same rule at every
 * pc of [lo, hi) where either table changes rule, and no row outside.
 */
static void check_range(const char *path, const char *debug_path, const struct unwind_row *rows,
			size_t n, uint64_t lo, uint64_t hi)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), dfd = -1;
	struct unwind_table_stats st;
	struct unwind_row *part;
	size_t np;

	assert_true(fd >= 0);
	if (debug_path) {
		dfd = open(debug_path, O_RDONLY | O_CLOEXEC);
		assert_true(dfd >= 0);
	}
	assert_int_equal(unwind_table__build_range(fd, dfd, lo, hi, &part, &np, &st), 0);
	close(fd);
	if (dfd >= 0)
		close(dfd);
	assert_true(np >= 1);
	assert_int_equal(st.rows, np);
	assert_int_equal(part[0].pc, lo);
	for (size_t i = 0; i < np; i++) {
		const struct unwind_row *w = unwind_table__find(rows, n, part[i].pc);

		assert_true(part[i].pc >= lo && part[i].pc < hi);
		if (i)
			assert_true(part[i - 1].pc < part[i].pc);
		if (!w)
			assert_int_equal(part[i].cfa_type, UNWIND_NO_CFI);
		else if (w->cfa_type != part[i].cfa_type || w->cfa_offset != part[i].cfa_offset ||
			 w->rbp_slot != part[i].rbp_slot)
			fail_msg("%s [%#" PRIx64 ", %#" PRIx64 "): at %#x the range says %s%+d, the "
				 "table %s%+d", path, lo, hi, part[i].pc,
				 unwind_cfa_type__name(part[i].cfa_type), part[i].cfa_offset,
				 unwind_cfa_type__name(w->cfa_type), w->cfa_offset);
	}
	/* And where the whole table changes rule inside the range, the range does too. */
	for (const struct unwind_row *w = unwind_table__find(rows, n, lo); w && w < rows + n && w->pc < hi;
	     w++) {
		const struct unwind_row *r = unwind_table__find(part, np, w->pc > lo ? w->pc : lo);

		assert_non_null(r);
		assert_int_equal(r->cfa_type, w->cfa_type);
		assert_int_equal(r->cfa_offset, w->cfa_offset);
		assert_int_equal(r->rbp_slot, w->rbp_slot);
	}
	free(part);
}

/*
 * A range build (the agent's chunks of a large file) gives the whole
 * table's rule at every pc of the range: 4 KiB and 64 KiB chunks over the
 * whole of libc, the fixture (through .debug_frame, no .eh_frame_hdr
 * there) and every 37th 64 KiB chunk of libLLVM, plus ranges that start
 * or end in the middle of a function and ranges past the code.
 */
static void test_range_matches_table(void **state)
{
	const char *paths[] = { LIBC, "/proc/self/exe", "prog-dbg", big_binaries[0] };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		const char *path = paths[i][0] == '/' ? paths[i] : tmp_path(paths[i]);
		struct unwind_table_stats st;
		struct unwind_row *rows;
		uint64_t end, step = i == 3 ? 37 * 65536 : 65536;
		size_t n, ranges = 0;
		double t0;
		int fd, err;

		if (!exists(path))
			continue;
		assert_int_equal(build(path, NULL, &rows, &n, &st), 0);
		end = rows[n - 1].pc;
		t0 = now();
		for (uint64_t lo = rows[0].pc & ~(uint64_t)0xffff; lo < end + 65536; lo += step) {
			check_range(path, NULL, rows, n, lo, lo + 65536);
			ranges++;
			if (i == 0 && lo < 0x40000) {
				for (uint64_t sub = lo; sub < lo + 65536; sub += 4096)
					check_range(path, NULL, rows, n, sub, sub + 4096);
			}
		}
		for (size_t k = 1; k + 1 < n; k += n / 50 + 1) {
			check_range(path, NULL, rows, n, rows[k].pc + 1, rows[k + 1].pc + 3);
			check_range(path, NULL, rows, n, rows[k].pc, rows[k].pc + 1);
		}
		printf("%s: %zu rows; %zu 64-KiB ranges built in %.1f ms each\n", path, n, ranges,
		       (now() - t0) * 1e3 / (double)ranges);
		free(rows);

		fd = open(path, O_RDONLY | O_CLOEXEC);
		err = unwind_table__build_range(fd, -1, 0x1000, 0x1000, &rows, &n, NULL);
		assert_int_equal(err, -EINVAL);
		assert_null(rows);
		close(fd);
	}
	/* .debug_frame of a separate debug file counts in a range as in the table. */
	{
		struct unwind_table_stats st;
		struct unwind_row *rows;
		size_t n;

		assert_int_equal(build(tmp_path("prog-stripped"), tmp_path("prog-dbg.debug"), &rows, &n,
				       &st), 0);
		for (size_t k = 0; k + 1 < n; k++)
			check_range(tmp_path("prog-stripped"), tmp_path("prog-dbg.debug"), rows, n,
				    rows[k].pc, rows[k + 1].pc + 16);
		free(rows);
	}
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	close(fd);
}

static uint8_t *read_whole(const char *path, size_t *len)
{
	struct stat sb;
	uint8_t *buf;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &sb), 0);
	buf = malloc(sb.st_size);
	assert_non_null(buf);
	assert_int_equal(read(fd, buf, sb.st_size), sb.st_size);
	close(fd);
	*len = sb.st_size;
	return buf;
}

/* The section called name in an ELF64 image: its file offset, address and size. */
static bool image_section(const uint8_t *img, size_t len, const char *name, size_t *off,
			  uint64_t *addr, size_t *size)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);
	const char *names;

	assert_true(eh->e_shoff + (size_t)eh->e_shnum * sizeof(*sh) <= len);
	names = (const char *)img + sh[eh->e_shstrndx].sh_offset;
	for (unsigned int i = 0; i < eh->e_shnum; i++) {
		if (strcmp(names + sh[i].sh_name, name))
			continue;
		*off = sh[i].sh_offset;
		*addr = sh[i].sh_addr;
		*size = sh[i].sh_size;
		return true;
	}
	return false;
}

static int32_t get_s32(const uint8_t *p)
{
	int32_t v;

	memcpy(&v, p, 4);
	return v;
}

static void put_s32(uint8_t *p, int32_t v)
{
	memcpy(p, &v, 4);
}

/* Builds the table of an image written to a file of its own. */
static int build_image(const char *name, const uint8_t *img, size_t len,
		       struct unwind_row **rows, size_t *n, struct unwind_table_stats *st)
{
	write_file(tmp_path(name), img, len);
	return build(tmp_path(name), NULL, rows, n, st);
}

/*
 * .eh_frame_hdr's table, walked in place, gives the table the FDE list
 * gives: a header we do not take (another version) or a table that is not
 * sorted make the build list the FDEs itself, with the same rows. Entries
 * that point at a CIE or outside .eh_frame are skipped, the rest stand.
 */
static void test_eh_frame_hdr(void **state)
{
	const char *paths[] = { tmp_path("prog"), LIBC, "/proc/self/exe" };

	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		struct unwind_table_stats st, vst;
		struct unwind_row *rows, *vrows;
		size_t len, hoff, hsize, eoff, esize, n, vn;
		uint64_t haddr, eaddr;
		uint8_t *img, *tab;
		size_t k, count;

		if (!exists(paths[i]))
			continue;
		img = read_whole(paths[i], &len);
		assert_true(image_section(img, len, ".eh_frame_hdr", &hoff, &haddr, &hsize));
		assert_true(image_section(img, len, ".eh_frame", &eoff, &eaddr, &esize));
		/* What ld writes: pcrel sdata4 eh_frame_ptr, udata4 count, datarel sdata4 pairs. */
		assert_int_equal(img[hoff], 1);
		assert_int_equal(img[hoff + 1], 0x1b);
		assert_int_equal(img[hoff + 2], 0x03);
		assert_int_equal(img[hoff + 3], 0x3b);
		count = (uint32_t)get_s32(img + hoff + 8);
		tab = img + hoff + 12;
		assert_true(count >= 4);

		assert_int_equal(build(paths[i], NULL, &rows, &n, &st), 0);
		check_invariants(rows, n, &st);
		assert_true(st.hdr_fdes > 0 && st.hdr_fdes <= count && st.hdr_fdes <= st.fdes);

		/* Version 2: not ours to read; the FDEs are listed. */
		img[hoff] = 2;
		assert_int_equal(build_image("hdr-v2", img, len, &vrows, &vn, &vst), 0);
		img[hoff] = 1;
		assert_int_equal(vst.hdr_fdes, 0);
		assert_int_equal(vst.fdes, st.fdes);
		assert_same_table(rows, n, vrows, vn);
		free(vrows);

		/* Two entries out of order: the table is not trusted. */
		k = count / 2;
		{
			uint8_t tmp[8];

			memcpy(tmp, tab + 8 * k, 8);
			memcpy(tab + 8 * k, tab + 8 * (k + 1), 8);
			memcpy(tab + 8 * (k + 1), tmp, 8);
			assert_int_equal(build_image("hdr-unsorted", img, len, &vrows, &vn, &vst), 0);
			memcpy(tab + 8 * (k + 1), tab + 8 * k, 8);
			memcpy(tab + 8 * k, tmp, 8);
		}
		assert_int_equal(vst.hdr_fdes, 0);
		assert_same_table(rows, n, vrows, vn);
		free(vrows);

		/*
		 * Entry k points at .eh_frame's first entry (a CIE), entry k + 1
		 * past its end: both are skipped, their code has no CFI.
		 */
		{
			uint64_t loc = haddr + get_s32(tab + 8 * k);
			const struct unwind_row *r;

			put_s32(tab + 8 * k + 4, (int32_t)(eaddr - haddr));
			put_s32(tab + 8 * (k + 1) + 4, (int32_t)(eaddr + esize + 64 - haddr));
			assert_int_equal(build_image("hdr-hostile", img, len, &vrows, &vn, &vst), 0);
			check_invariants(vrows, vn, &vst);
			assert_int_equal(vst.hdr_fdes, st.hdr_fdes - 2);
			r = unwind_table__find(vrows, vn, loc);
			assert_non_null(r);
			assert_int_equal(r->cfa_type, UNWIND_NO_CFI);
			r = unwind_table__find(rows, n, loc);
			assert_non_null(r);
			assert_int_not_equal(r->cfa_type, UNWIND_NO_CFI);
			free(vrows);
		}
		free(rows);
		free(img);
	}
}

static void test_errors(void **state)
{
	struct unwind_row *rows = (struct unwind_row *)&rows;
	struct unwind_table_stats st;
	struct {
		Elf64_Ehdr eh;
		Elf64_Phdr ph;
	} img;
	size_t n = 99;

	assert_int_equal(unwind_table__build(-1, -1, &rows, &n, &st), -EBADF);
	assert_null(rows);
	assert_int_equal(n, 0);

	/* Not ELF: a C source file, an empty file. */
	assert_int_equal(build(FIXTURE_SRC, NULL, &rows, &n, NULL), -ENOEXEC);
	write_file(tmp_path("empty"), "", 0);
	assert_int_equal(build(tmp_path("empty"), NULL, &rows, &n, NULL), -ENOEXEC);

	/* ELF without any CFI; PLT sections alone do not make a table. */
	assert_int_equal(build(tmp_path("prog-nocfi"), NULL, &rows, &n, &st), -ENOENT);
	assert_null(rows);
	assert_int_equal(n, 0);

	/* ELF for another machine. */
	memset(&img, 0, sizeof(img));
	memcpy(img.eh.e_ident, ELFMAG, SELFMAG);
	img.eh.e_ident[EI_CLASS] = ELFCLASS64;
	img.eh.e_ident[EI_DATA] = ELFDATA2LSB;
	img.eh.e_ident[EI_VERSION] = EV_CURRENT;
	img.eh.e_type = ET_DYN;
	img.eh.e_machine = EM_AARCH64;
	img.eh.e_version = EV_CURRENT;
	img.eh.e_ehsize = sizeof(img.eh);
	write_file(tmp_path("arm64"), &img.eh, sizeof(img.eh));
	assert_int_equal(build(tmp_path("arm64"), NULL, &rows, &n, NULL), -ENOTSUP);

	/* Addresses beyond 4 GiB do not fit the rows' u32 pc. */
	img.eh.e_machine = EM_X86_64;
	img.eh.e_phoff = sizeof(img.eh);
	img.eh.e_phentsize = sizeof(img.ph);
	img.eh.e_phnum = 1;
	img.ph.p_type = PT_LOAD;
	img.ph.p_vaddr = 0x100000000ull;
	img.ph.p_memsz = 0x1000;
	write_file(tmp_path("high"), &img, sizeof(img));
	assert_int_equal(build(tmp_path("high"), NULL, &rows, &n, NULL), -E2BIG);

	/* A debug file that is not ELF is ignored, not fatal. */
	assert_int_equal(build(tmp_path("prog"), FIXTURE_SRC, &rows, &n, &st), 0);
	free(rows);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_row_layout),
		cmocka_unit_test(test_find),
		cmocka_unit_test(test_prog_matches_readelf),
		cmocka_unit_test(test_prog_start_is_end),
		cmocka_unit_test(test_prog_plt),
		cmocka_unit_test(test_debug_frame_and_debug_file),
		cmocka_unit_test(test_libc_matches_readelf),
		cmocka_unit_test(test_libc_signal_trampoline),
		cmocka_unit_test(test_big_binary_matches_readelf),
		cmocka_unit_test(test_stream_matches_build),
		cmocka_unit_test(test_range_matches_table),
		cmocka_unit_test(test_eh_frame_hdr),
		cmocka_unit_test(test_size_stats),
		cmocka_unit_test(test_errors),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
