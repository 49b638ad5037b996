# Workloads for the system tests: small programs whose call chains are known.
WL := $(BUILD)/workloads
WL_CFLAGS := -O1 -g -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer -fno-inline

$(WL)/%: tests/workloads/%.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(WL_CFLAGS) -o $@ $<

$(WL)/%: tests/workloads/%.cpp | $(DEPS_STAMP)
	$(call msg,CXX,$@)
	$(Q)mkdir -p $(@D)
	$(Q)g++ $(WL_CFLAGS) -o $@ $<

$(WL)/%: tests/workloads/%.go | $(DEPS_STAMP)
	$(call msg,GO,$@)
	$(Q)mkdir -p $(@D)
	$(Q)GOCACHE=$(abspath $(BUILD))/gocache GOFLAGS=-mod=mod go build -o $@ $<

RUSTC := $(shell command -v rustc 2>/dev/null || echo $(HOME)/.cargo/bin/rustc)
$(WL)/%: tests/workloads/%.rs | $(DEPS_STAMP)
	$(call msg,RUSTC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(RUSTC) -C opt-level=1 -C force-frame-pointers=yes -g -o $@ $<

WORKLOAD_SRCS := $(wildcard tests/workloads/*.c tests/workloads/*.cpp tests/workloads/*.go tests/workloads/*.rs)
WORKLOADS := $(addprefix $(WL)/,$(basename $(notdir $(WORKLOAD_SRCS))))

# The same program under other symbol names (replaced_bin.c says why).
$(WL)/replaced_bin_imposter: tests/workloads/replaced_bin.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(WL_CFLAGS) -DSPIN=spin_imposter -o $@ $<
WORKLOADS += $(WL)/replaced_bin_imposter

# Workloads built the way most binaries in the wild are: optimised, without
# frame pointers. Their stacks can only be complete through unwind tables.
NOFP_CFLAGS := -O2 -g -fomit-frame-pointer -fasynchronous-unwind-tables

$(WL)/nofp/%: tests/workloads/nofp/%.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(NOFP_CFLAGS) -o $@ $<

$(WL)/nofp/%: tests/workloads/nofp/%.cpp | $(DEPS_STAMP)
	$(call msg,CXX,$@)
	$(Q)mkdir -p $(@D)
	$(Q)g++ $(NOFP_CFLAGS) -o $@ $<

$(WL)/nofp/%: tests/workloads/nofp/%.rs | $(DEPS_STAMP)
	$(call msg,RUSTC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(RUSTC) -C opt-level=3 -C force-frame-pointers=no -g -o $@ $<

NOFP_SRCS := $(wildcard tests/workloads/nofp/*.c tests/workloads/nofp/*.cpp tests/workloads/nofp/*.rs)
WORKLOADS += $(addprefix $(WL)/nofp/,$(basename $(notdir $(NOFP_SRCS))))

# Libraries the nofp workloads load at run time (late_dlopen).
$(WL)/nofp/lib/%.so: tests/workloads/nofp/lib/%.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(NOFP_CFLAGS) -shared -fPIC -o $@ $<

WORKLOADS += $(patsubst tests/workloads/nofp/lib/%.c,$(WL)/nofp/lib/%.so,$(wildcard tests/workloads/nofp/lib/*.c))

# The Go workloads as most Go binaries ship (Docker images, releases):
# linked with -s -w, so without .symtab and .debug_frame. Stacks must stay
# complete through frame pointers, and names come from .gopclntab.
$(WL)/go_stripped/%: tests/workloads/%.go | $(DEPS_STAMP)
	$(call msg,GO,$@)
	$(Q)mkdir -p $(@D)
	$(Q)GOCACHE=$(abspath $(BUILD))/gocache GOFLAGS=-mod=mod go build -ldflags='-s -w' -o $@ $<
WORKLOADS += $(WL)/go_stripped/hot_go $(WL)/go_stripped/cgo_hot

# Go calling C calling Go: a package of its own (//export needs the C in a .c file).
$(WL)/cgo_callback: $(wildcard tests/workloads/cgo_callback/*) | $(DEPS_STAMP)
	$(call msg,GO,$@)
	$(Q)mkdir -p $(@D)
	$(Q)cd tests/workloads/cgo_callback && GOCACHE=$(abspath $(BUILD))/gocache GOFLAGS=-mod=mod \
		go build -o $(abspath $@) .
WORKLOADS += $(WL)/cgo_callback

# A Go program writing its own CPU profile with runtime/pprof.
$(WL)/go_pprof: tests/workloads/go_pprof/main.go | $(DEPS_STAMP)
	$(call msg,GO,$@)
	$(Q)mkdir -p $(@D)
	$(Q)GOCACHE=$(abspath $(BUILD))/gocache go build -o $@ $<
WORKLOADS += $(WL)/go_pprof

# GPU time without a GPU: a fake libflamewatch-cuda.so that fires the real
# USDT probes (src/cuda/probes.h), and a program with known call chains
# that drives it. The library keeps the real file name: the agent finds
# it by that name.
$(WL)/cuda/libflamewatch-cuda.so: tests/workloads/cuda/fake_cuda.c src/cuda/probes.h | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) $(WL_CFLAGS) -Isrc -shared -fPIC -o $@ $<

$(WL)/cuda/cuda_chain: tests/workloads/cuda/cuda_chain.c $(WL)/cuda/libflamewatch-cuda.so
	$(call msg,CC,$@)
	$(Q)$(CC) $(WL_CFLAGS) -Isrc -o $@ $< -L$(WL)/cuda -lflamewatch-cuda -pthread -Wl,-rpath,'$$ORIGIN'

WORKLOADS += $(WL)/cuda/libflamewatch-cuda.so $(WL)/cuda/cuda_chain

# Last, once every part of this file has added to the list.
workloads: $(WORKLOADS)
