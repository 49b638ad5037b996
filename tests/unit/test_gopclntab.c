// SPDX-License-Identifier: Apache-2.0
/*
 * Names of stripped Go binaries come from .gopclntab. The oracle is nm(1)
 * on the same program linked with its .symtab: Go's linker lays out the
 * text identically with and without -ldflags='-s -w', so every function
 * nm lists must resolve, in the stripped binary, to the same name (the
 * .symtab spells ABI0 assembly functions with a ".abi0" suffix that
 * .gopclntab does not have) and the same offset.
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

#include "symbolize/elf_file.h"
#include "testutil.h"

#define GO_SRC FW_TEST_DATA "/workloads/cgo_hot.go"
#define MAX_FUNCS 8192

static bool have_go;

static int group_setup(void **state)
{
	const char *cache = getenv("GOCACHE");
	char cwd[512];

	if (!tmpdir_make(tmpdir, sizeof(tmpdir), "gopclntab") || !getcwd(cwd, sizeof(cwd)))
		return -1;
	have_go = run("command -v go >/dev/null") == 0;
	if (!have_go)
		return 0;
	if (run("cd %s && GOCACHE='%s%s' GOFLAGS=-mod=mod go build -o full %s/%s && "
		"GOCACHE='%s%s' GOFLAGS=-mod=mod go build -ldflags='-s -w' -o stripped %s/%s",
		tmpdir, cache ? "" : cwd, cache ? cache : "/build/gocache", cwd, GO_SRC,
		cache ? "" : cwd, cache ? cache : "/build/gocache", cwd, GO_SRC)) {
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

struct func {
	uint64_t addr;
	char name[256];
};

struct answers {
	char name[MAX_FUNCS][256];
	uint64_t off[MAX_FUNCS];
	bool got[MAX_FUNCS];
};

static void collect(void *ctx, size_t index, const char *name, uint64_t off)
{
	struct answers *a = ctx;

	a->got[index] = true;
	a->off[index] = off;
	snprintf(a->name[index], sizeof(a->name[index]), "%s", name ? name : "");
}

/* The text symbols of path that Go's own code defines, from nm. */
static size_t nm_funcs(const char *path, struct func *out, size_t max)
{
	char line[512], cmd[512];
	size_t n = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "nm %s", path);
	f = popen(cmd, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f) && n < max) {
		char type, name[256];
		unsigned long long addr;
		char *abi;

		if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 ||
		    (type != 'T' && type != 't'))
			continue;
		/* Go's functions; the C code cgo links in has no pclntab entry. */
		if (strncmp(name, "runtime.", 8) && strncmp(name, "main.", 5))
			continue;
		abi = strstr(name, ".abi0");
		if (abi && !abi[5])
			*abi = '\0';
		out[n].addr = addr;
		snprintf(out[n].name, sizeof(out[n].name), "%s", name);
		n++;
	}
	pclose(f);
	return n;
}

static struct elf_file *open_elf(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct elf_file *f;

	assert_true(fd >= 0);
	f = elf_file__open(fd, "");
	close(fd);
	assert_non_null(f);
	return f;
}

static void test_stripped_names_match_nm(void **state)
{
	static struct func funcs[MAX_FUNCS];
	static struct answers a;
	static uint64_t vaddrs[MAX_FUNCS];
	struct elf_file *f;
	size_t n, bad = 0;

	if (!have_go)
		skip();
	n = nm_funcs(tmp_path("full"), funcs, MAX_FUNCS);
	print_message("%zu Go functions in nm's listing\n", n);
	assert_true(n > 500);
	/* Entry + 1 for odd indexes: the offset must come back too. */
	for (size_t i = 0; i < n; i++)
		vaddrs[i] = funcs[i].addr + (i & 1);
	memset(&a, 0, sizeof(a));
	f = open_elf(tmp_path("stripped"));
	assert_int_equal(elf_file__resolve(f, vaddrs, n, collect, &a), 0);
	elf_file__close(f);
	for (size_t i = 0; i < n; i++) {
		assert_true(a.got[i]);
		if (strcmp(a.name[i], funcs[i].name) || a.off[i] != (i & 1)) {
			if (bad++ < 10)
				print_message("%#" PRIx64 ": nm says %s, got '%s'+%" PRIu64 "\n",
					      vaddrs[i], funcs[i].name, a.name[i], a.off[i]);
		}
	}
	/*
	 * nm lists a few symbols pclntab does not (a label inside another
	 * function, e.g. runtime.etext); every real function must match.
	 */
	print_message("%zu of %zu differ\n", bad, n);
	assert_true(bad <= 5);
}

/* Addresses outside every function (a data address, 0) stay unresolved. */
static void test_outside_text(void **state)
{
	static struct answers a;
	uint64_t vaddrs[2] = { 0, 0x7fffffffffff };
	struct elf_file *f;

	if (!have_go)
		skip();
	memset(&a, 0, sizeof(a));
	f = open_elf(tmp_path("stripped"));
	assert_int_equal(elf_file__resolve(f, vaddrs, 2, collect, &a), 0);
	elf_file__close(f);
	assert_true(a.got[0] && a.got[1]);
	assert_string_equal(a.name[0], "");
	assert_string_equal(a.name[1], "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stripped_names_match_nm),
		cmocka_unit_test(test_outside_text),
	};

	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
