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
CFLAGS  += $(WARN) -std=gnu11 -D_GNU_SOURCE -Isrc -I$(BUILD) -I$(BUILD)/gen -MMD -MP
LDFLAGS ?=

# Everything but glibc links statically so the binary runs unchanged on other
# distributions. Order matters for static archives: users before providers.
STATIC_LIBS := -lbpf -ldw -lelf -lprotobuf-c -liberty -levent_extra -levent_core -lsqlite3 -lzstd -llzma -lbz2 -lz
LDLIBS := -Wl,-Bstatic $(STATIC_LIBS) -Wl,-Bdynamic -lpthread -ldl -lm

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
LIB_SRCS := $(filter-out src/main.c src/cuda/%,$(shell find src -name '*.c' ! -name '*.bpf.c' | sort))
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

$(BUILD)/flamewatch: $(BUILD)/obj/main.o $(BUILD)/libflamewatch.a
	$(call msg,LINK,$@)
	$(Q)$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

all: $(BUILD)/flamewatch

# ---- tests -----------------------------------------------------------------
UNIT_SRCS := $(wildcard tests/unit/test_*.c)
UNIT_BINS := $(patsubst tests/unit/%.c,$(BUILD)/tests/%,$(UNIT_SRCS))

$(BUILD)/tests/%: tests/unit/%.c $(BUILD)/libflamewatch.a
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(CFLAGS) -Itests/unit -DFW_TEST_DATA='"tests"' -o $@ $< \
		$(BUILD)/libflamewatch.a -lcmocka $(LDLIBS)

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
	     $(patsubst $(BUILD)/gen/%.c,$(BUILD)/fuzz/obj/gen/%.o,$(PROTO_SRCS))
FUZZ_CFLAGS := -g -O1 -fsanitize=address,undefined -fno-sanitize-recover=all \
	-fno-omit-frame-pointer -Wall -std=gnu11 -D_GNU_SOURCE -Isrc -I$(BUILD) -I$(BUILD)/gen -MMD -MP
FUZZ_LDLIBS := -lbpf -ldw -lelf -lprotobuf-c -Wl,-Bstatic -liberty -Wl,-Bdynamic \
	-levent_extra -levent_core -lsqlite3 -lzstd -llzma -lbz2 -lz -lpthread -ldl -lm

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

system: $(BUILD)/flamewatch workloads
	$(Q)/usr/bin/python3 -m pytest -q tests/integration

test: unit fuzz-regress system

run: $(BUILD)/flamewatch
	$(BUILD)/flamewatch run

clean:
	rm -rf $(BUILD)

.PHONY: all unit system test run clean workloads fuzz fuzz-build fuzz-regress

-include $(shell find $(BUILD)/obj $(BUILD)/tests $(BUILD)/fuzz/obj -name '*.d' 2>/dev/null)

# ---- fake NVML (tests/fakes/fake_nvml.c) -------------------------------------
# Stands in for libnvidia-ml.so.1 on machines without a GPU; tests load it
# through LD_LIBRARY_PATH (build/fakes) or by path (the no-samples variant).
FAKE_NVML := $(BUILD)/fakes/libnvidia-ml.so.1 $(BUILD)/fakes/nosamples/libnvidia-ml.so.1

$(BUILD)/fakes/libnvidia-ml.so.1: tests/fakes/fake_nvml.c src/gpu/nvml_api.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -fPIC -shared \
		-fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

$(BUILD)/fakes/nosamples/libnvidia-ml.so.1: tests/fakes/fake_nvml.c src/gpu/nvml_api.h
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O2 -g -Wall -Wextra -Werror -Wno-unused-parameter -Isrc -fPIC -shared \
		-fvisibility=hidden -DFAKE_NO_SAMPLES -Wl,-soname,libnvidia-ml.so.1 -o $@ $<

fakes: $(FAKE_NVML)
unit system: fakes
.PHONY: fakes
