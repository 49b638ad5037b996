// SPDX-License-Identifier: Apache-2.0
/*
 * elf_file against real binaries: the test executable itself (built with -g,
 * not stripped), libc, and copies made with objcopy and cc in a temporary
 * directory to exercise debug-file lookup and the .dynsym fallback.
 */
#include <ctype.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "symbolize/elf_file.h"

/* ---- functions to find -------------------------------------------------- */

/*
 * noipa keeps GCC from inlining, cloning (.constprop, .isra) or merging them,
 * so each is one symbol with its own name; the loops make them long enough
 * for an offset inside. clang has no noipa and does not clone by default.
 */
#ifdef __clang__
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))
#endif
NOIPA int fw_test_alpha(int x)
{
	int s = 0;

	for (int i = 0; i < x; i++)
		s += (i * i) ^ x;
	return s;
}

NOIPA static int fw_test_static(int x)
{
	int s = 1;

	for (int i = 0; i < x; i++)
		s = s * 31 + i;
	return s;
}

/* A C function under a C++ mangled name shows the demangler is applied. */
int fw_test_mangled(int x) __asm__("_ZN2fw4test4spinEi");
NOIPA int fw_test_mangled(int x)
{
	int s = 7;

	for (int i = 0; i < x; i++)
		s ^= s << 3 | i;
	return s;
}

int main(void);

/* ---- helpers ------------------------------------------------------------- */

#include "symbol_results.h"
#include "testutil.h"

static void expect_name(const struct results *r, size_t i, const char *want, uint64_t off)
{
	if (!r->name[i])
		fail_msg("index %zu: unresolved, want %s+%#llx", i, want,
			 (unsigned long long)off);
	assert_string_equal(r->name[i], want);
	assert_int_equal(r->off[i], off);
}

/* Link-time address of code at run time: address minus the load bias. */
static uint64_t link_vaddr(const void *p)
{
	struct link_map *lm = NULL;
	Dl_info info;

	assert_int_not_equal(dladdr1(p, &info, (void **)&lm, RTLD_DL_LINKMAP), 0);
	assert_non_null(lm);
	return (uintptr_t)p - lm->l_addr;
}

/* Finds the mapping holding addr: its file and the file offset of addr. */
static void map_lookup(const void *p, char *path, size_t len, uint64_t *file_off)
{
	uintptr_t addr = (uintptr_t)p;
	char line[PATH_MAX + 256];
	FILE *fp = fopen("/proc/self/maps", "r");
	bool found = false;

	assert_non_null(fp);
	while (!found && fgets(line, sizeof(line), fp)) {
		unsigned long start, end, off;
		int pos = 0;

		if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %n", &start, &end, &off, &pos) < 3 ||
		    !pos || addr < start || addr >= end)
			continue;
		line[strcspn(line, "\n")] = '\0';
		snprintf(path, len, "%s", line + pos);
		*file_off = addr - start + off;
		found = true;
	}
	fclose(fp);
	assert_true(found);
}

static struct elf_file *open_path(const char *path, const char *root)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct elf_file *f;

	if (fd < 0)
		fail_msg("open %s: %s", path, strerror(errno));
	f = elf_file__open(fd, root);
	if (!f)
		fail_msg("elf_file__open(%s): %s", path, strerror(errno));
	close(fd);	/* elf_file__open dup()ed it */
	return f;
}

static bool is_hex(const char *s, size_t len)
{
	if (strlen(s) != len)
		return false;
	for (size_t i = 0; i < len; i++) {
		if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
			return false;
	}
	return true;
}

/* Formats a path into buf (PATH_MAX bytes), failing the test on overflow. */
__attribute__((format(printf, 2, 3)))
static char *pathf(char *buf, const char *fmt, ...)
{
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(buf, PATH_MAX, fmt, ap);
	va_end(ap);
	assert_true(len > 0 && len < PATH_MAX);
	return buf;
}

/* Runs a formatted shell command; returns its status. */
__attribute__((format(printf, 1, 2)))
static int sh(const char *fmt, ...)
{
	char *cmd;
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = vasprintf(&cmd, fmt, ap);
	va_end(ap);
	assert_true(rc > 0);
	rc = system(cmd);
	if (rc != 0)
		print_message("command failed (%d): %s\n", rc, cmd);
	free(cmd);
	return rc;
}

/* ---- tests --------------------------------------------------------------- */

static void test_self_facts(void **state)
{
	struct elf_file *f = open_path("/proc/self/exe", "");
	int type = elf_file__type(f);

	if (!is_hex(elf_file__build_id(f), 40))
		fail_msg("build id \"%s\" is not 40 hex digits", elf_file__build_id(f));
	assert_true(type == ET_DYN || type == ET_EXEC);
	elf_file__close(f);
	elf_file__close(NULL);
}

static void test_self_functions(void **state)
{
	const void *fns[] = {
		(const void *)(uintptr_t)fw_test_alpha,
		(const void *)(uintptr_t)fw_test_static,
		(const void *)(uintptr_t)fw_test_mangled,
	};
	struct elf_file *f = open_path("/proc/self/exe", "");
	struct results r = { 0 };
	uint64_t vaddrs[8];
	char path[PATH_MAX];

	/* Both routes to a link-time address must agree. */
	for (size_t i = 0; i < 3; i++) {
		uint64_t off, via_maps;

		map_lookup(fns[i], path, sizeof(path), &off);
		assert_int_equal(elf_file__offset_to_vaddr(f, off, &via_maps), 0);
		assert_int_equal(via_maps, link_vaddr(fns[i]));
	}
	/* Unsorted, with a duplicate, and offsets inside the functions. */
	vaddrs[0] = link_vaddr(fns[2]) + 5;
	vaddrs[1] = link_vaddr(fns[0]);
	vaddrs[2] = link_vaddr(fns[1]) + 3;
	vaddrs[3] = link_vaddr(fns[0]) + 2;
	vaddrs[4] = link_vaddr(fns[0]);
	vaddrs[5] = 0x10;			/* below every symbol */
	vaddrs[6] = 0x7fffffffff00ull;		/* above every section */
	vaddrs[7] = link_vaddr((const void *)(uintptr_t)main) + 1;
	assert_int_equal(elf_file__resolve(f, vaddrs, 8, collect, &r), 0);
	results_check_once(&r, 8);
	expect_name(&r, 0, "fw::test::spin(int)", 5);
	expect_name(&r, 1, "fw_test_alpha", 0);
	expect_name(&r, 2, "fw_test_static", 3);
	expect_name(&r, 3, "fw_test_alpha", 2);
	expect_name(&r, 4, "fw_test_alpha", 0);
	assert_null(r.name[5]);
	assert_int_equal(r.off[5], 0);
	assert_null(r.name[6]);
	expect_name(&r, 7, "main", 1);
	results_free(&r);

	assert_int_equal(elf_file__resolve(f, vaddrs, 0, collect, &r), 0);
	results_check_once(&r, 0);
	assert_int_equal(elf_file__resolve(f, vaddrs, 1, NULL, &r), -EINVAL);
	assert_int_equal(elf_file__resolve(f, NULL, 1, collect, &r), -EINVAL);
	results_check_once(&r, 0);
	elf_file__close(f);
}

/* What elf_file__resolve_ranges() says, per index. */
struct ranges {
	char *name[8];
	uint64_t start[8], end[8];
	int calls[8];
};

static void collect_range(void *ctx, size_t i, const char *name, uint64_t start, uint64_t end)
{
	struct ranges *r = ctx;

	assert_true(i < 8);
	r->calls[i]++;
	r->name[i] = name ? strdup(name) : NULL;
	r->start[i] = start;
	r->end[i] = end;
}

/*
 * A function's extent: its start and its symbol's size, so that every
 * address below the end names it, and the address at the end does not.
 */
static void test_self_ranges(void **state)
{
	struct elf_file *f = open_path("/proc/self/exe", "");
	uint64_t alpha = link_vaddr((const void *)(uintptr_t)fw_test_alpha);
	uint64_t vaddrs[3] = { alpha + 2, 0x10, 0 };
	struct ranges r = { 0 }, last = { 0 };

	(void)state;
	assert_int_equal(elf_file__resolve_ranges(f, vaddrs, 2, collect_range, &r), 0);
	assert_int_equal(r.calls[0], 1);
	assert_int_equal(r.calls[1], 1);
	assert_string_equal(r.name[0], "fw_test_alpha");
	assert_int_equal(r.start[0], alpha);
	assert_true(r.end[0] > alpha + 2 && r.end[0] - alpha < 4096);
	/* Unresolved: no name, and the gap around it that no symbol names. */
	assert_null(r.name[1]);
	assert_true(r.start[1] <= 0x10 && 0x10 < r.end[1] && r.end[1] <= alpha);

	vaddrs[0] = r.end[0] - 1;
	vaddrs[1] = r.end[0];
	vaddrs[2] = r.end[1] - 1;	/* the gap's last address: no name either */
	assert_int_equal(elf_file__resolve_ranges(f, vaddrs, 3, collect_range, &last), 0);
	assert_string_equal(last.name[0], "fw_test_alpha");
	assert_int_equal(last.start[0], alpha);
	assert_true(!last.name[1] || strcmp(last.name[1], "fw_test_alpha"));
	assert_null(last.name[2]);
	assert_int_equal(last.start[2], r.start[1]);
	assert_int_equal(last.end[2], r.end[1]);
	assert_int_equal(elf_file__resolve_ranges(f, vaddrs, 1, NULL, &r), -EINVAL);
	for (int i = 0; i < 8; i++) {
		free(r.name[i]);
		free(last.name[i]);
	}
	elf_file__close(f);
}

static void test_offset_outside_segments(void **state)
{
	struct elf_file *f = open_path("/proc/self/exe", "");
	uint64_t v = 42;

	assert_int_equal(elf_file__offset_to_vaddr(f, 1ull << 40, &v), -ENOENT);
	assert_int_equal(v, 42);
	elf_file__close(f);
}

/*
 * libc: symbols come from libc6-dbg's build-id file when it is installed and
 * from .dynsym otherwise; either way aliases must give the public name.
 * dlsym() on libc's own handle avoids sanitizer interceptors of the same name.
 */
static void test_libc(void **state)
{
	/* clock_gettime is versioned in the debug file's .symtab: "clock_gettime@@GLIBC_2.17". */
	static const char *const names[] = { "qsort", "malloc", "puts", "clock_gettime" };
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	struct results r = { 0 };
	char path[PATH_MAX], first[PATH_MAX];
	uint64_t vaddrs[4];
	struct elf_file *f = NULL;

	assert_non_null(libc);
	for (size_t i = 0; i < 4; i++) {
		void *p = dlsym(libc, names[i]);
		uint64_t off;

		assert_non_null(p);
		map_lookup(p, path, sizeof(path), &off);
		if (!f) {
			f = open_path(path, "");
			snprintf(first, sizeof(first), "%s", path);
		}
		assert_string_equal(path, first);
		assert_int_equal(elf_file__offset_to_vaddr(f, off + 1, &vaddrs[i]), 0);
		assert_int_equal(vaddrs[i], link_vaddr(p) + 1);
	}
	assert_true(is_hex(elf_file__build_id(f), 40));
	assert_int_equal(elf_file__resolve(f, vaddrs, 4, collect, &r), 0);
	results_check_once(&r, 4);
	for (size_t i = 0; i < 4; i++)
		expect_name(&r, i, names[i], 1);
	results_free(&r);
	elf_file__close(f);

	/* A root without debug files forces Debian's stripped libc's .dynsym. */
	f = open_path(first, "/nonexistent-fw-root");
	assert_int_equal(elf_file__resolve(f, vaddrs, 3, collect, &r), 0);
	results_check_once(&r, 3);
	for (size_t i = 0; i < 3; i++)
		expect_name(&r, i, names[i], 1);
	results_free(&r);
	elf_file__close(f);
	dlclose(libc);
}

/* Names of a batch of addresses, by elf_file__resolve(), for comparing. */
struct named {
	char **name;
};

static void collect_named(void *ctx, size_t i, const char *name, uint64_t off)
{
	struct named *n = ctx;

	(void)off;
	n->name[i] = name ? strdup(name) : NULL;
}

struct extents {
	char **name;
	uint64_t *start, *end;
};

static void collect_extent(void *ctx, size_t i, const char *name, uint64_t start, uint64_t end)
{
	struct extents *x = ctx;

	x->name[i] = name ? strdup(name) : NULL;
	x->start[i] = start;
	x->end[i] = end;
}

/*
 * What elf_file__resolve_ranges() says an extent or a gap covers, every
 * address in it resolves to by itself: 400 addresses across libc, with
 * its debug file and with .dynsym alone (where most of libc is gaps).
 */
static void test_ranges_agree_with_points(void **state)
{
	enum { N = 400, PROBES = 3 };
	void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	const char *roots[] = { "", "/nonexistent-fw-root" };
	char path[PATH_MAX];
	uint64_t off, base, *v = calloc(N, sizeof(*v)), *probe = calloc(N * PROBES, sizeof(*probe));
	struct extents x = { calloc(N, sizeof(char *)), calloc(N, sizeof(uint64_t)),
			     calloc(N, sizeof(uint64_t)) };
	struct named pn = { calloc(N * PROBES, sizeof(char *)) };
	size_t gaps = 0, extents = 0;

	(void)state;
	assert_non_null(libc);
	assert_true(v && probe && x.name && x.start && x.end && pn.name);
	map_lookup(dlsym(libc, "qsort"), path, sizeof(path), &off);
	base = link_vaddr(dlsym(libc, "qsort"));
	for (size_t k = 0; k < 2; k++) {
		struct elf_file *f = open_path(path, roots[k]);

		for (size_t i = 0; i < N; i++)
			v[i] = base - (512u << 10) + i * 2621 + (i * i) % 97;
		assert_int_equal(elf_file__resolve_ranges(f, v, N, collect_extent, &x), 0);
		for (size_t i = 0; i < N; i++) {
			uint64_t lo = x.start[i], hi = x.end[i];

			assert_true(lo <= v[i] && (v[i] < hi || lo == hi));
			if (hi == lo)
				hi = lo + 1;	/* a point: only itself */
			if (hi - lo > (1u << 20))
				hi = v[i] + (1u << 20) < v[i] ? UINT64_MAX : v[i] + (1u << 20);
			if (lo + (1u << 20) < v[i])
				lo = v[i] - (1u << 20);
			probe[i * PROBES] = lo;
			probe[i * PROBES + 1] = hi - 1;
			probe[i * PROBES + 2] = lo + (hi - lo) / 2;
			if (x.end[i] > x.start[i])
				x.name[i] ? extents++ : gaps++;
		}
		assert_int_equal(elf_file__resolve(f, probe, N * PROBES, collect_named, &pn), 0);
		for (size_t i = 0; i < N * PROBES; i++) {
			const char *want = x.name[i / PROBES], *got = pn.name[i];

			if (!want != !got || (want && strcmp(want, got)))
				fail_msg("%s root '%s': %#llx in [%#llx, %#llx) of %#llx is %s by itself, "
					 "%s by the range", path, roots[k], (unsigned long long)probe[i],
					 (unsigned long long)x.start[i / PROBES],
					 (unsigned long long)x.end[i / PROBES],
					 (unsigned long long)v[i / PROBES], got ? got : "unnamed",
					 want ? want : "unnamed");
			free(pn.name[i]);
			pn.name[i] = NULL;
		}
		for (size_t i = 0; i < N; i++) {
			free(x.name[i]);
			x.name[i] = NULL;
		}
		elf_file__close(f);
	}
	/* Both kinds were there to check. */
	assert_true(extents > 50);
	assert_true(gaps > 5);
	free(v);
	free(probe);
	free(x.name);
	free(x.start);
	free(x.end);
	free(pn.name);
	dlclose(libc);
}

static void test_not_elf(void **state)
{
	int fd = open(FW_TEST_DATA "/fixtures/perfmap_basic.map", O_RDONLY);

	assert_true(fd >= 0);
	errno = 0;
	assert_null(elf_file__open(fd, ""));
	assert_int_equal(errno, ENOEXEC);
	close(fd);

	fd = open("/dev/null", O_RDONLY);
	assert_true(fd >= 0);
	errno = 0;
	assert_null(elf_file__open(fd, ""));
	assert_int_equal(errno, ENOEXEC);
	close(fd);

	errno = 0;
	assert_null(elf_file__open(-1, ""));
	assert_int_equal(errno, EBADF);
}

/*
 * Separate debug files, with copies of this executable: the stripped copy
 * keeps only .dynsym (where a PIE's own functions are absent), so a static
 * function resolves only if the debug file is found and accepted.
 */
struct tmp {
	char dir[64];
	char self[PATH_MAX];
	char static_id[64];
};

static int tmp_setup(void **state)
{
	static struct tmp t;
	ssize_t n;

	if (system("command -v objcopy >/dev/null 2>&1 && command -v cc >/dev/null 2>&1") != 0) {
		*state = NULL;
		return 0;
	}
	if (!tmpdir_make(t.dir, sizeof(t.dir), "test-elf"))
		return -1;
	n = readlink("/proc/self/exe", t.self, sizeof(t.self) - 1);
	if (n <= 0)
		return -1;
	t.self[n] = '\0';
	*state = &t;
	return 0;
}

static int tmp_teardown(void **state)
{
	struct tmp *t = *state;

	if (t)
		tmpdir_remove(t->dir);
	return 0;
}

static void resolve_static(struct elf_file *f, struct results *r)
{
	uint64_t v[2] = {
		link_vaddr((const void *)(uintptr_t)fw_test_static) + 4,
		link_vaddr((const void *)(uintptr_t)fw_test_alpha),
	};

	results_free(r);
	assert_int_equal(elf_file__resolve(f, v, 2, collect, r), 0);
	results_check_once(r, 2);
}

static void test_debug_by_build_id(void **state)
{
	struct tmp *t = *state;
	struct results r = { 0 };
	struct elf_file *f;
	char stripped[PATH_MAX], root[PATH_MAX], id[41];

	if (!t)
		skip();
	pathf(stripped, "%s/stripped", t->dir);
	assert_int_equal(sh("objcopy --strip-all '%s' '%s'", t->self, stripped), 0);

	/* Without a debug file: unresolved, and the build id survives strip. */
	f = open_path(stripped, "");
	assert_true(is_hex(elf_file__build_id(f), 40));
	snprintf(id, sizeof(id), "%s", elf_file__build_id(f));
	resolve_static(f, &r);
	assert_null(r.name[0]);
	assert_null(r.name[1]);
	elf_file__close(f);

	pathf(root, "%s/root", t->dir);
	assert_int_equal(sh("mkdir -p '%s/usr/lib/debug/.build-id/%.2s' && "
			    "objcopy --only-keep-debug '%s' '%s/usr/lib/debug/.build-id/%.2s/%s.debug'",
			    root, id, t->self, root, id, id + 2), 0);
	f = open_path(stripped, root);
	resolve_static(f, &r);
	expect_name(&r, 0, "fw_test_static", 4);
	expect_name(&r, 1, "fw_test_alpha", 0);
	elf_file__close(f);
	results_free(&r);
}

static void test_debug_by_debuglink(void **state)
{
	struct tmp *t = *state;
	struct results r = { 0 };
	struct elf_file *f;
	char bin[PATH_MAX], root[PATH_MAX];

	if (!t)
		skip();
	/* Next to the binary, in .debug/: <dir>/.debug/<name>. */
	pathf(bin, "%s/bin/app", t->dir);
	assert_int_equal(sh("mkdir -p '%s/bin/.debug' && objcopy --only-keep-debug '%s' '%s/app.dbg' && "
			    "objcopy --strip-all --add-gnu-debuglink='%s/app.dbg' '%s' '%s' && "
			    "mv '%s/app.dbg' '%s/bin/.debug/app.dbg'",
			    t->dir, t->self, t->dir, t->dir, t->self, bin, t->dir, t->dir), 0);
	f = open_path(bin, "");
	assert_non_null(elf_file__debuglink(f));
	assert_string_equal(elf_file__debuglink(f), "app.dbg");
	/* Without the path only the build id can be tried. */
	resolve_static(f, &r);
	assert_null(r.name[0]);
	assert_int_equal(elf_file__set_path(f, "relative/path"), -EINVAL);
	assert_int_equal(elf_file__set_path(f, bin), 0);
	resolve_static(f, &r);
	expect_name(&r, 0, "fw_test_static", 4);
	elf_file__close(f);

	/* In a "container": <root>/usr/lib/debug/<dir>/<name>. */
	pathf(root, "%s/ctr", t->dir);
	assert_int_equal(sh("mkdir -p '%s/opt/app' '%s/usr/lib/debug/opt/app' && "
			    "cp '%s' '%s/opt/app/app' && cp '%s/bin/.debug/app.dbg' '%s/usr/lib/debug/opt/app/'",
			    root, root, bin, root, t->dir, root), 0);
	pathf(bin, "%s/opt/app/app", root);
	f = open_path(bin, root);
	assert_int_equal(elf_file__set_path(f, "/opt/app/app"), 0);
	resolve_static(f, &r);
	expect_name(&r, 0, "fw_test_static", 4);
	elf_file__close(f);
	results_free(&r);
}

/* A debug file with another build id describes another build: skip it. */
static void test_debug_wrong_build_id(void **state)
{
	static const uint8_t note[] = {
		4, 0, 0, 0, 20, 0, 0, 0, NT_GNU_BUILD_ID, 0, 0, 0, 'G', 'N', 'U', 0,
		0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
		0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
	};
	struct tmp *t = *state;
	struct results r = { 0 };
	struct elf_file *f;
	char bin[PATH_MAX], notefile[PATH_MAX];
	FILE *fp;

	if (!t)
		skip();
	pathf(notefile, "%s/note.bin", t->dir);
	fp = fopen(notefile, "wb");
	assert_non_null(fp);
	assert_int_equal(fwrite(note, 1, sizeof(note), fp), sizeof(note));
	fclose(fp);
	pathf(bin, "%s/wrong/app", t->dir);
	assert_int_equal(sh("mkdir -p '%s/wrong' && objcopy --only-keep-debug '%s' '%s/wrong/app.dbg' && "
			    "objcopy --strip-all --add-gnu-debuglink='%s/wrong/app.dbg' '%s' '%s' && "
			    "objcopy --update-section .note.gnu.build-id='%s' '%s/wrong/app.dbg'",
			    t->dir, t->self, t->dir, t->dir, t->self, bin, notefile, t->dir), 0);
	f = open_path(bin, "");
	assert_int_equal(elf_file__set_path(f, bin), 0);
	resolve_static(f, &r);
	assert_null(r.name[0]);
	elf_file__close(f);
	results_free(&r);
}

/*
 * A shared object whose .symtab lost an exported function (objcopy
 * --strip-symbol): that one must still resolve through .dynsym, while the
 * static function that only .symtab knows resolves too.
 */
static void test_dynsym_fallback(void **state)
{
	static const char src[] =
		"__attribute__((noinline, used)) static int hidden_fn(int x) { int s = 0; "
		"for (int i = 0; i < x; i++) s += i * x; return s; }\n"
		"__attribute__((noinline)) int exported_one(int x) { return hidden_fn(x) + 1; }\n"
		"__attribute__((noinline)) int exported_two(int x) { int s = 3; "
		"for (int i = 0; i < x; i++) s ^= s << 1 | i; return s; }\n";
	struct tmp *t = *state;
	struct results r = { 0 };
	struct elf_file *f;
	char cmd[PATH_MAX + 16], so[PATH_MAX], cfile[PATH_MAX], line[256];
	uint64_t v[3];
	void *h, *one, *two;
	FILE *fp;

	if (!t)
		skip();
	pathf(cfile, "%s/lib.c", t->dir);
	pathf(so, "%s/lib.so", t->dir);
	fp = fopen(cfile, "w");
	assert_non_null(fp);
	fputs(src, fp);
	fclose(fp);
	assert_int_equal(sh("cc -shared -fPIC -O1 -o '%s' '%s'", so, cfile), 0);

	h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(h);
	one = dlsym(h, "exported_one");
	two = dlsym(h, "exported_two");
	assert_non_null(one);
	assert_non_null(two);
	v[0] = link_vaddr(one) + 1;
	v[1] = link_vaddr(two) + 2;
	dlclose(h);

	assert_int_equal(sh("objcopy --strip-symbol=exported_two '%s'", so), 0);
	/* The static function is in .symtab only; nm tells where. */
	snprintf(cmd, sizeof(cmd), "nm '%s'", so);
	fp = popen(cmd, "r");
	assert_non_null(fp);
	v[2] = 0;
	while (fgets(line, sizeof(line), fp)) {
		unsigned long long a;
		char name[64];

		if (sscanf(line, "%llx t %63s", &a, name) == 2 && !strcmp(name, "hidden_fn"))
			v[2] = a + 3;
	}
	assert_int_equal(pclose(fp), 0);
	assert_int_not_equal(v[2], 0);

	f = open_path(so, "");
	assert_int_equal(elf_file__resolve(f, v, 3, collect, &r), 0);
	results_check_once(&r, 3);
	expect_name(&r, 0, "exported_one", 1);
	expect_name(&r, 1, "exported_two", 2);
	expect_name(&r, 2, "hidden_fn", 3);
	elf_file__close(f);
	results_free(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_self_facts),
		cmocka_unit_test(test_self_functions),
		cmocka_unit_test(test_self_ranges),
		cmocka_unit_test(test_offset_outside_segments),
		cmocka_unit_test(test_libc),
		cmocka_unit_test(test_ranges_agree_with_points),
		cmocka_unit_test(test_not_elf),
	};
	const struct CMUnitTest tool_tests[] = {
		cmocka_unit_test(test_debug_by_build_id),
		cmocka_unit_test(test_debug_by_debuglink),
		cmocka_unit_test(test_debug_wrong_build_id),
		cmocka_unit_test(test_dynsym_fallback),
	};
	int failed;

	/* fw_test_* are called once so nothing treats them as dead code. */
	if (fw_test_alpha(3) + fw_test_static(3) + fw_test_mangled(3) == 12345)
		puts("unlikely");
	failed = cmocka_run_group_tests(tests, NULL, NULL);
	failed += cmocka_run_group_tests_name("elf_file with objcopy and cc", tool_tests,
					      tmp_setup, tmp_teardown);
	return failed;
}
