# flamewatch — plain Make. `make` builds build/flamewatch, `make test` runs
# every test, `make run` starts the main job. V=1 shows the commands.

.DELETE_ON_ERROR:
# Generated headers and BPF objects are products, not throwaway intermediates.
.SECONDARY:
.SUFFIXES:
.DEFAULT_GOAL := all

ifeq ($(V),1)
Q :=
msg :=
else
Q := @
msg = @printf '  %-8s %s\n' "$(1)" "$(2)";
endif

BUILD    := build
CC       ?= gcc
CLANG    ?= clang
BPFTOOL  ?= bpftool
PROTOC_C ?= protoc-c
ARCH     := $(shell uname -m | sed 's/x86_64/x86/;s/aarch64/arm64/')

# The dependency step runs before anything else is built; it is a no-op when
# every package is already installed.
DEPS_STAMP := $(BUILD)/.deps
$(DEPS_STAMP): scripts/install-deps.sh
	$(Q)mkdir -p $(BUILD)
	$(Q)./scripts/install-deps.sh
	$(Q)touch $@

WARN    := -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers
CFLAGS  ?= -O2 -g
# Frame pointers: the unwinder builds no table for flamewatch's own
# executable (see _describe_mapping in src/agent/unwinder.c), so our own
# samples are walked by them.
CFLAGS  += $(WARN) -fno-omit-frame-pointer -std=gnu11 -D_GNU_SOURCE -Isrc -I$(BUILD) -I$(BUILD)/gen -MMD -MP
LDFLAGS ?=

# Everything but glibc links statically so the binary runs unchanged on other
# distributions. Order matters for static archives: users before providers.
STATIC_LIBS := -lbpf -ldw -lelf -lprotobuf-c -liberty -levent_openssl -levent_extra -levent_core -lssl -lcrypto -lsqlite3 -lzstd -llzma -lbz2 -lz
LDLIBS := -Wl,-Bstatic $(STATIC_LIBS) -Wl,-Bdynamic -lpthread -ldl -lm
# The executables load libm only when SQL calls a maths function (see
# src/compat/libm_lazy.c): not at start, which cost the agent 0.3 MB of RSS.
EXE_LDLIBS := $(filter-out -lm,$(LDLIBS))
LIBM_LAZY := $(BUILD)/obj/compat/libm_lazy.o

# ---- BPF -------------------------------------------------------------------
BPF_SRCS  := $(wildcard src/agent/bpf/*.bpf.c)
BPF_OBJS  := $(patsubst src/agent/bpf/%.bpf.c,$(BUILD)/bpf/%.bpf.o,$(BPF_SRCS))
BPF_SKELS := $(patsubst src/agent/bpf/%.bpf.c,$(BUILD)/bpf/%.skel.h,$(BPF_SRCS))
BPF_CFLAGS := -g -O2 -target bpf -D__TARGET_ARCH_$(ARCH) -Wall -Werror \
	-I$(BUILD) -Isrc/agent/bpf -Isrc
# libbpf's usdt.bpf.h includes <linux/errno.h>, whose <asm/errno.h> lives in
# the multiarch directory that clang -target bpf does not search.
BPF_CFLAGS += -I/usr/include/$(shell $(CC) -dumpmachine)

$(BUILD)/vmlinux.h: | $(DEPS_STAMP)
	$(call msg,GEN,$@)
	$(Q)$(BPFTOOL) btf dump file /sys/kernel/btf/vmlinux format c > $@

$(BUILD)/bpf/%.bpf.o: src/agent/bpf/%.bpf.c $(BUILD)/vmlinux.h $(wildcard src/agent/bpf/*.h) src/unwind/unwind_table.h
	$(call msg,BPF,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(BPF_CFLAGS) -c $< -o $@.tmp
	$(Q)$(BPFTOOL) gen object $@ $@.tmp
	$(Q)rm -f $@.tmp

$(BUILD)/bpf/%.skel.h: $(BUILD)/bpf/%.bpf.o
	$(call msg,SKEL,$@)
	$(Q)$(BPFTOOL) gen skeleton $< name $(subst -,_,$*)_bpf > $@

# ---- protobuf --------------------------------------------------------------
PROTOS     := $(wildcard src/format/*.proto)
PROTO_SRCS := $(patsubst src/format/%.proto,$(BUILD)/gen/%.pb-c.c,$(PROTOS))
PROTO_HDRS := $(PROTO_SRCS:.c=.h)

$(BUILD)/gen/%.pb-c.c $(BUILD)/gen/%.pb-c.h: src/format/%.proto | $(DEPS_STAMP)
	$(call msg,PROTOC,$<)
	$(Q)mkdir -p $(BUILD)/gen
	$(Q)$(PROTOC_C) --proto_path=src/format --c_out=$(BUILD)/gen $<

# ---- C ---------------------------------------------------------------------
# src/cuda is a separate shared library loaded into other processes; it
# depends on nothing else in src/ and is built by its own rule.
LIB_SRCS := $(filter-out src/main.c src/cuda/% src/compat/%,$(shell find src -name '*.c' ! -name '*.bpf.c' | sort))
LIB_OBJS := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS)) \
	    $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(PROTO_SRCS))
GENERATED := $(BPF_SKELS) $(PROTO_HDRS)

$(BUILD)/obj/%.o: src/%.c | $(GENERATED) $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/obj/gen/%.o: $(BUILD)/gen/%.c
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(filter-out -Werror,$(CFLAGS)) -c $< -o $@

$(BUILD)/libflamewatch.a: $(LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

# DT_RELR (glibc >= 2.36, binutils >= 2.38; Debian 12 has both): the
# executable's ~22,000 relative relocations in 7 KB instead of 528 KB. The
# loader reads them all at start, and those pages stayed resident: 0.8 MB of
# the agent's RSS. dist/ (glibc >= 2.31) links without it.
RELR_LDFLAGS := $(shell echo 'int main(void) { return 0; }' | \
	$(CC) -x c - -Wl,-z,pack-relative-relocs -o /dev/null 2>/dev/null && \
	echo -Wl,-z,pack-relative-relocs)

$(BUILD)/flamewatch: $(BUILD)/obj/main.o $(BUILD)/libflamewatch.a $(LIBM_LAZY)
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) $(RELR_LDFLAGS) -o $@ $^ $(EXE_LDLIBS)

# ---- web UI ----------------------------------------------------------------
# ui/ is TypeScript bundled by esbuild (npm ci installs the pinned packages from
# ui/package-lock.json); ui/build.mjs writes the bundle as a C file, so the
# binary serves the UI with no files on disk. npm writes the hidden lockfile
# .package-lock.json on every install: it is the stamp.
UI_NPM  := ui/node_modules/.package-lock.json
UI_SRCS := $(wildcard ui/src/*.ts ui/src/*.css) ui/index.html ui/bench.html ui/favicon.svg ui/build.mjs

$(UI_NPM): ui/package.json ui/package-lock.json | $(DEPS_STAMP)
	$(call msg,NPM,ui)
	$(Q)cd ui && npm ci --no-audit --no-fund --loglevel=error
	$(Q)touch $@

$(BUILD)/gen/ui_assets.c: $(UI_SRCS) $(UI_NPM)
	$(call msg,UI,$@)
	$(Q)node ui/build.mjs $(BUILD)/ui $@

$(BUILD)/obj/gen/ui_assets.o: src/server/ui_assets.h
$(BUILD)/libflamewatch.a: $(BUILD)/obj/gen/ui_assets.o

ui: $(BUILD)/gen/ui_assets.c

# ---- libflamewatch-cuda.so -------------------------------------------------
# Loaded into CUDA applications (CUDA_INJECTION64_PATH): position independent,
# only InitializeInjection exported, nothing but glibc linked. CUPTI is
# dlopen'd at run time; its headers give only types and constants.
CUDA_INC  ?= /usr/local/cuda/include
CUDA_SRCS := $(wildcard src/cuda/*.c)
CUDA_OBJS := $(patsubst src/cuda/%.c,$(BUILD)/obj-cuda/%.o,$(CUDA_SRCS))
CUDA_LIB  := $(BUILD)/libflamewatch-cuda.so
CUDA_CFLAGS = $(filter-out -MMD -MP,$(CFLAGS)) -MMD -MP -fPIC -fvisibility=hidden -isystem $(CUDA_INC)

$(BUILD)/obj-cuda/%.o: src/cuda/%.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CUDA_CFLAGS) -c $< -o $@

# CUPTI's headers come with NVIDIA's CUDA toolkit, which Debian does not ship.
# Without them `make` and `make dist` build everything else and say so (set
# CUDA_INC to their directory); the tests of the library need them.
HAVE_CUPTI := $(wildcard $(CUDA_INC)/cupti.h)
# src/gpu/pm_busy.c (the PM sampling busy timeline, in the flamewatch binary)
# needs CUPTI's headers for types only, and src/gpu/cshim for the <string>
# that cupti_profiler_host.h includes; without the headers it builds as a
# stub whose command says so. Every build of it (make, san, fuzz) gets them.
PM_BUSY_CFLAGS := $(if $(HAVE_CUPTI),-DFW_HAVE_CUPTI=1 -isystem $(CUDA_INC) -Isrc/gpu/cshim)
$(BUILD)/obj/gpu/pm_busy.o $(BUILD)/san/obj/gpu/pm_busy.o: private CFLAGS += $(PM_BUSY_CFLAGS)
$(BUILD)/fuzz/obj/gpu/pm_busy.o: private FUZZ_CFLAGS += $(PM_BUSY_CFLAGS)
ifneq ($(HAVE_CUPTI),)
# Linked for glibc >= 2.31 (GLIBC_COMPAT_SO_LDFLAGS, below): the library runs
# inside the users' CUDA processes, whatever their distribution.
$(CUDA_LIB): $(CUDA_OBJS) src/cuda/libflamewatch-cuda.map $(BUILD)/obj/compat/glibc_231.pic.o
	$(call msg,LINK,$@)
	$(Q)$(CC) -shared -o $@ $(CUDA_OBJS) -Wl,--version-script=src/cuda/libflamewatch-cuda.map \
		-Wl,-z,defs -Wl,-soname,libflamewatch-cuda.so $(GLIBC_COMPAT_SO_LDFLAGS)
	$(Q)./scripts/check-glibc.sh $@ $(GLIBC_MAX)

all: $(CUDA_LIB)
else
$(CUDA_LIB):
	@echo "flamewatch: $@ needs CUPTI's headers: no $(CUDA_INC)/cupti.h (set CUDA_INC=DIR)" >&2
	@exit 1

all:
	@echo "  (no $(CUDA_INC)/cupti.h: libflamewatch-cuda.so not built; set CUDA_INC=DIR to build it)"
endif

all: $(BUILD)/flamewatch

# ---- release build -----------------------------------------------------------
# make dist: dist/flamewatch, the same objects linked for glibc >= 2.31 (see
# src/compat/glibc_231.c), stripped to its build id. Other shared objects that
# ship beside it are listed in DIST_LIBS (a rule elsewhere may append to it);
# $(BUILD)/libflamewatch-cuda.so is shipped whenever CUPTI's headers are there.
DIST       := dist
DIST_LIBS  ?=
CUDA_LIB   := $(BUILD)/libflamewatch-cuda.so
GLIBC_MAX  := 2.31
GLIBC_WRAP := stat stat64 lstat lstat64 fstat fstat64 fstatat fstatat64 arc4random arc4random_buf \
	dlopen dlclose dlerror dlsym pthread_create pthread_join pthread_mutex_trylock \
	pthread_mutexattr_destroy pthread_mutexattr_init pthread_mutexattr_settype \
	pthread_rwlock_destroy pthread_rwlock_init pthread_rwlock_rdlock \
	pthread_rwlock_tryrdlock pthread_rwlock_unlock pthread_rwlock_wrlock pthread_condattr_setclock \
	dladdr pthread_once pthread_key_create pthread_key_delete pthread_getspecific pthread_setspecific \
	pthread_attr_setstacksize pthread_sigmask pthread_mutex_timedlock pthread_setname_np
DIST_WRAP  := __libc_start_main $(GLIBC_WRAP)
# libdl.so.2 and libpthread.so.0 stay needed: on glibc < 2.34 dlopen and
# pthread_create live there (on newer glibc they are empty stubs).
GLIBC_OLD_LIBS := -Wl,--push-state,--no-as-needed -l:libdl.so.2 -l:libpthread.so.0 -Wl,--pop-state
DIST_LDLIBS := $(EXE_LDLIBS) $(GLIBC_OLD_LIBS)
# For a shared library shipped in dist/ (libflamewatch-cuda.so): add to its
# link line, and list $(GLIBC_COMPAT_SO) among its prerequisites.
GLIBC_COMPAT_SO := $(BUILD)/obj/compat/glibc_231.pic.o
GLIBC_COMPAT_SO_LDFLAGS = $(addprefix -Wl$(comma)--wrap=,$(GLIBC_WRAP)) $(GLIBC_COMPAT_SO) $(GLIBC_OLD_LIBS)

$(BUILD)/obj/compat/%.pic.o: src/compat/%.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -fPIC -fno-builtin -c $< -o $@

$(BUILD)/obj/compat/%.o: src/compat/%.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -fno-builtin -c $< -o $@

$(BUILD)/dist/flamewatch: $(BUILD)/obj/main.o $(BUILD)/libflamewatch.a $(BUILD)/obj/compat/glibc_231.o \
		$(BUILD)/obj/compat/glibc_231_start.o $(LIBM_LAZY)
	$(call msg,LINK,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(LDFLAGS) -Wl,--build-id=sha1 $(addprefix -Wl$(comma)--wrap=,$(DIST_WRAP)) \
		-o $@ $^ $(DIST_LDLIBS)
	$(Q)./scripts/check-glibc.sh $@ $(GLIBC_MAX)

comma := ,

# $(MAKE) -q answers 2 when there is no rule for the target.
dist: $(BUILD)/dist/flamewatch $(DIST_LIBS)
	$(call msg,DIST,$(DIST)/)
	$(Q)mkdir -p $(DIST)
	$(Q)strip --strip-all -o $(DIST)/flamewatch $(BUILD)/dist/flamewatch
	$(Q)set -e; if [ -n "$(HAVE_CUPTI)" ]; then $(MAKE) --no-print-directory $(CUDA_LIB); \
		strip --strip-unneeded -o $(DIST)/$(notdir $(CUDA_LIB)) $(CUDA_LIB); \
		./scripts/check-glibc.sh $(DIST)/$(notdir $(CUDA_LIB)) $(GLIBC_MAX); \
	else rm -f $(DIST)/$(notdir $(CUDA_LIB)); echo "  (no CUPTI headers: dist has no CUDA library)"; fi
	$(Q)set -e; for f in $(DIST_LIBS); do strip --strip-unneeded -o $(DIST)/$$(basename $$f) $$f; done
	$(Q)readelf -n $(DIST)/flamewatch | grep -q 'Build ID'

# ---- tests -----------------------------------------------------------------
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libflamewatch.a
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -Itests/unit -DFW_TEST_DATA='"tests"' -o $@ $< \
		$(BUILD)/libflamewatch.a -lcmocka $(LDLIBS)

# Linked as the executables are: libm_lazy.o, no -lm.
$(BUILD)/tests/test_libm_lazy: tests/unit/test_libm_lazy.c $(LIBM_LAZY)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -fno-builtin -o $@ $< $(LIBM_LAZY) -lcmocka -ldl

# Unit tests of libflamewatch-cuda.so's internals link its objects, not the
# agent's library (test_cuda_join tests the agent's side and links that).
CUDA_TEST_OBJS := $(filter-out $(BUILD)/obj-cuda/inject.o,$(CUDA_OBJS))
$(BUILD)/tests/test_cuda_records: tests/unit/test_cuda_records.c $(CUDA_TEST_OBJS)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -isystem $(CUDA_INC) -Itests/unit -o $@ $< $(CUDA_TEST_OBJS) -lcmocka -lpthread

# ---- unit tests under ASan and UBSan -----------------------------------------
# `make unit-san` (part of `make test`) builds the unit tests again, against
# their own sanitized copy of the library in build/san, and runs them: a
# memory error, a leak or undefined behaviour fails the test. UBSan's checks
# stay recoverable so that tests/unit/ubsan.supp can name the reported ones
# still waiting for a fix; halt_on_error stops at any other. The generated
# protobuf and UI objects are linked as built for `make`: generated code,
# not ours. test_libm_lazy is left out: it checks that libm is not loaded at
# start, and the sanitizer runtimes load it.
SAN           := $(BUILD)/san
SAN_FLAGS     := -fsanitize=address,undefined -fno-omit-frame-pointer
SAN_ENV       := UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:suppressions=tests/unit/ubsan.supp
# Without -Werror, and without -Warray-bounds, which fires on the paths that
# continue past cmocka's assertions: GCC warns falsely under the sanitizers
# (its manual advises against -Werror with them), and `make` already builds
# the same code with every warning an error.
SAN_CFLAGS     = $(filter-out -Werror,$(CFLAGS)) -Wno-array-bounds $(SAN_FLAGS)
SAN_LIB_OBJS  := $(patsubst src/%.c,$(SAN)/obj/%.o,$(LIB_SRCS)) \
		 $(patsubst $(BUILD)/gen/%.c,$(BUILD)/obj/gen/%.o,$(PROTO_SRCS)) $(BUILD)/obj/gen/ui_assets.o
SAN_CUDA_OBJS := $(patsubst $(BUILD)/obj-cuda/%.o,$(SAN)/obj-cuda/%.o,$(CUDA_TEST_OBJS))
SAN_UNIT_BINS := $(patsubst $(BUILD)/tests/%,$(SAN)/tests/%,$(filter-out %/test_libm_lazy,$(UNIT_BINS)))

$(SAN)/obj/%.o: src/%.c | $(GENERATED) $(DEPS_STAMP)
	$(call msg,SANCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(SAN_CFLAGS) -c $< -o $@

$(SAN)/obj-cuda/%.o: src/cuda/%.c | $(DEPS_STAMP)
	$(call msg,SANCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(filter-out -Werror,$(CUDA_CFLAGS)) $(SAN_FLAGS) -c $< -o $@

$(SAN)/libflamewatch.a: $(SAN_LIB_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

$(SAN)/tests/%: tests/unit/%.c $(SAN)/libflamewatch.a
	$(call msg,SANCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(SAN_CFLAGS) -Itests/unit -DFW_TEST_DATA='"tests"' -o $@ $< \
		$(SAN)/libflamewatch.a -lcmocka $(LDLIBS)

$(SAN)/tests/test_cuda_records: tests/unit/test_cuda_records.c $(SAN_CUDA_OBJS)
	$(call msg,SANCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(SAN_CFLAGS) -isystem $(CUDA_INC) -Itests/unit -o $@ $< $(SAN_CUDA_OBJS) -lcmocka -lpthread

# Quiet unless a test fails: its output is in build/san/tests/NAME.log.
unit-san: $(SAN_UNIT_BINS) tests/unit/ubsan.supp
	$(Q)set -e; for t in $(SAN_UNIT_BINS); do echo "== $$t"; \
		$(SAN_ENV) $$t > $$t.log 2>&1 || \
			{ tail -n 60 $$t.log; echo "unit-san: $$t failed (log: $$t.log)" >&2; exit 1; }; \
	done

# The fake CUPTI and the host program that drive the library in the tests.
include tests/fakes/fakes.mk

# Workload programs with known call chains, profiled by the system tests.
include tests/workloads/workloads.mk

# ---- fuzzing ---------------------------------------------------------------
# Every tests/fuzz/fuzz_NAME.c is a libFuzzer target built with clang, ASan
# and UBSan against its own sanitized copy of the library. `make fuzz` runs
# each for FUZZ_SECONDS, growing build/fuzz/corpus/NAME from the seeds in
# tests/fuzz/corpus/NAME and leaving crashers in build/fuzz/crash/NAME;
# `make fuzz-regress` (part of `make test`) replays the seeds and every
# crasher kept in tests/fuzz/crashers/NAME once.
FUZZ_SECONDS ?= 600
FUZZ_SRCS := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BINS := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRCS))
FUZZ_OBJS := $(patsubst src/%.c,$(BUILD)/fuzz/obj/%.o,$(LIB_SRCS)) \
	     $(patsubst $(BUILD)/gen/%.c,$(BUILD)/fuzz/obj/gen/%.o,$(PROTO_SRCS) $(BUILD)/gen/ui_assets.c)
FUZZ_CFLAGS := -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer -Wall -std=gnu11 -D_GNU_SOURCE -Isrc -I$(BUILD) -I$(BUILD)/gen -MMD -MP
FUZZ_LDLIBS := -lbpf -ldw -lelf -lprotobuf-c -Wl,-Bstatic -liberty -Wl,-Bdynamic \
	-levent_openssl -levent_extra -levent_core -lssl -lcrypto -lsqlite3 -lzstd -llzma -lbz2 -lz -lpthread -ldl -lm

$(BUILD)/fuzz/obj/%.o: src/%.c | $(GENERATED) $(DEPS_STAMP)
	$(call msg,FUZZCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c $< -o $@

$(BUILD)/fuzz/obj/gen/%.o: $(BUILD)/gen/%.c
	$(call msg,FUZZCC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) -c $< -o $@

$(BUILD)/fuzz/libflamewatch.a: $(FUZZ_OBJS)
	$(call msg,AR,$@)
	$(Q)rm -f $@
	$(Q)ar rcs $@ $^

$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(BUILD)/fuzz/libflamewatch.a
	$(call msg,FUZZLD,$@)
	$(Q)$(CLANG) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(BUILD)/fuzz/libflamewatch.a $(FUZZ_LDLIBS)

fuzz-build: $(FUZZ_BINS)

fuzz: $(FUZZ_BINS)
	$(Q)set -e; for f in $(FUZZ_BINS); do n=$${f##*/fuzz_}; \
		mkdir -p $(BUILD)/fuzz/corpus/$$n $(BUILD)/fuzz/crash/$$n; \
		echo "== $$f for $(FUZZ_SECONDS) s"; \
		$$f -max_total_time=$(FUZZ_SECONDS) -timeout=10 -rss_limit_mb=2048 \
		    -artifact_prefix=$(BUILD)/fuzz/crash/$$n/ -print_final_stats=1 \
		    $(BUILD)/fuzz/corpus/$$n tests/fuzz/corpus/$$n > $(BUILD)/fuzz/$$n.fuzz.log 2>&1 || true; \
		grep -E '^(stat::|SUMMARY|artifact_prefix)' $(BUILD)/fuzz/$$n.fuzz.log || true; \
	done; \
	crashes=$$(find $(BUILD)/fuzz/crash -type f | wc -l); \
	echo "fuzz: $$crashes crasher(s) under $(BUILD)/fuzz/crash"; [ "$$crashes" = 0 ]

fuzz-regress: $(FUZZ_BINS)
	$(Q)set -e; for f in $(FUZZ_BINS); do n=$${f##*/fuzz_}; \
		inputs=$$(find tests/fuzz/corpus/$$n tests/fuzz/crashers/$$n -type f 2>/dev/null || true); \
		[ -n "$$inputs" ] || { echo "fuzz-regress: no inputs for $$n" >&2; exit 1; }; \
		echo "== $$f: $$(echo "$$inputs" | wc -l) inputs"; \
		$$f -timeout=30 $$inputs > $(BUILD)/fuzz/$$n.log 2>&1 || \
			{ tail -n 40 $(BUILD)/fuzz/$$n.log; exit 1; }; \
	done

unit: $(UNIT_BINS)
	$(Q)set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

system: $(BUILD)/flamewatch $(CUDA_LIB) workloads fakes
	$(Q)/usr/bin/python3 -m pytest -q tests/integration

# The web UI in headless Chromium against the real `flamewatch run` (root: BPF).
ui-test: $(BUILD)/flamewatch workloads fakes
	$(Q)node --test --test-concurrency=1 tests/ui/

# Not a test: flame graph render time for 100k nodes (tests/ui/bench.mjs).
ui-bench: $(BUILD)/flamewatch
	$(Q)node tests/ui/bench.mjs

test: unit unit-san fuzz-regress system ui-test

run: $(BUILD)/flamewatch
	$(BUILD)/flamewatch run

clean:
	rm -rf $(BUILD) $(DIST)

.PHONY: all unit unit-san system test run clean workloads fuzz fuzz-build fuzz-regress ui ui-test ui-bench dist

-include $(shell find $(BUILD)/obj $(BUILD)/obj-cuda $(BUILD)/tests $(BUILD)/fuzz/obj $(SAN) -name '*.d' 2>/dev/null)

# ---- style and static analysis ------------------------------------------------
# `make fmt` formats our C with clang-format (.clang-format: the kernel's
# style, tuned to the code as written); `make fmt-check` only says which files
# it would change, and by how many lines. Generated C is under build/, and
# nothing in src/ or tests/unit is vendored, so every C file there is ours.
CLANG_FORMAT ?= clang-format
FMT_SRCS := $(shell find src tests/unit -name '*.[ch]' | sort)

fmt: | $(DEPS_STAMP)
	$(Q)$(CLANG_FORMAT) -i $(FMT_SRCS)

# Informational: exits 0 whatever it finds.
fmt-check: | $(DEPS_STAMP)
	$(Q)n=0; for f in $(FMT_SRCS); do \
		d=$$($(CLANG_FORMAT) $$f | diff $$f - | grep -c '^[<>]'); \
		[ "$$d" = 0 ] || { echo "  $$f: $$d lines"; n=$$((n + 1)); }; \
	done; echo "fmt-check: make fmt would change $$n of $(words $(FMT_SRCS)) files"

# `make lint`: cppcheck over the user-space C in src/ (not the BPF programs,
# which only clang -target bpf understands), with the project's include
# paths; fails on any finding not in .cppcheck-suppressions. cppcheck reads
# no system headers: .cppcheck-libs.cfg declares the library macros it must
# expand, and the generated protobuf headers need protobuf-c's version (they
# #error without it). One configuration is checked, this machine's; results
# are cached in build/cppcheck.
CPPCHECK   ?= cppcheck
LINT_JOBS  ?= $(shell nproc)
LINT_SRCS  := $(shell find src -name '*.c' ! -name '*.bpf.c' | sort)
LINT_FLAGS := --quiet --error-exitcode=1 --std=c11 --enable=warning,style,performance,portability \
	--library=posix --library=gnu --library=.cppcheck-libs.cfg \
	--suppressions-list=.cppcheck-suppressions \
	-D_GNU_SOURCE $(if $(filter arm64,$(ARCH)),-D__aarch64__,-D__x86_64__) \
	-DPROTOBUF_C_VERSION_NUMBER=1004001 -Isrc -I$(BUILD) -I$(BUILD)/gen \
	--cppcheck-build-dir=$(BUILD)/cppcheck -j $(LINT_JOBS) \
	--template='{file}:{line}: {severity}: {id}: {message}'

lint: .cppcheck-suppressions .cppcheck-libs.cfg | $(GENERATED) $(DEPS_STAMP)
	$(call msg,CPPCHECK,src)
	$(Q)mkdir -p $(BUILD)/cppcheck
	$(Q)$(CPPCHECK) $(LINT_FLAGS) $(LINT_SRCS)

help:
	@echo 'flamewatch: make [TARGET] [V=1]'
	@echo '  all           (default) build/flamewatch, and libflamewatch-cuda.so with CUPTI headers'
	@echo '  run           install missing Debian packages, build, start `flamewatch run`'
	@echo '  test          the whole suite: unit, unit-san, fuzz-regress, system, ui-test'
	@echo '  unit          build and run the cmocka unit tests (tests/unit)'
	@echo '  unit-san      the unit tests under ASan and UBSan, built in build/san'
	@echo '  system        the pytest system tests with real BPF (tests/integration; root)'
	@echo '  ui-test       the web UI in headless Chromium against `flamewatch run` (root)'
	@echo '  ui-bench      time the flame graph for 100k nodes; not a test'
	@echo '  fuzz          run each libFuzzer target for FUZZ_SECONDS (default 600)'
	@echo '  fuzz-regress  replay the fuzz seeds and kept crashers once'
	@echo '  dist          release build in dist/ (glibc 2.31+, stripped)'
	@echo '  lint          cppcheck over src/; fails on findings not in .cppcheck-suppressions'
	@echo '  fmt           clang-format src/ and tests/unit in place (.clang-format)'
	@echo '  fmt-check     list the files `make fmt` would change; always exits 0'
	@echo '  clean         remove build/ and dist/'
	@echo 'Variables: V=1 shows commands; CUDA_INC=DIR finds CUPTI'"'"'s headers (default /usr/local/cuda/include).'

.PHONY: fmt fmt-check lint help

# ---- fake NVML (tests/fakes/fake_nvml.c) -------------------------------------
# Stands in for libnvidia-ml.so.1 on machines without a GPU; tests load it
# through LD_LIBRARY_PATH (build/fakes) or by path (the no-samples variant).
FAKE_NVML := $(BUILD)/fakes/libnvidia-ml.so.1 $(BUILD)/fakes/olddriver/libnvidia-ml.so.1

$(BUILD)/fakes/libnvidia-ml.so.1: tests/fakes/fake_nvml.c src/gpu/nvml_api.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -fPIC -shared \
		-fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

$(BUILD)/fakes/olddriver/libnvidia-ml.so.1: tests/fakes/fake_nvml.c src/gpu/nvml_api.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -fPIC -shared \
		-fvisibility=hidden -DFAKE_OLD_DRIVER -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

fakes: $(FAKE_NVML)
unit unit-san system: fakes
.PHONY: fakes
