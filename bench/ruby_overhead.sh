#!/bin/bash
# Steady-state cost of profiling Ruby-heavy processes: LOAD copies of
# tests/workloads/ruby/chain.rb (default: one per CPU) under
# `flamewatch record -p PIDS -F HZ`, with the Ruby walk in BPF; measured
# as bench/python_overhead.sh measures Python (bench/interp_overhead.sh).
#
#   sudo bench/ruby_overhead.sh [SECONDS]       # default 60
#
# Environment: HZ (default 19), LOAD, RUBY (interpreter, default `ruby`),
# FLAMEWATCH (default build/flamewatch), WARMUP (default 10 s).
set -euo pipefail

cd "$(dirname "$0")/.."
RUBY=${RUBY:-$(command -v ruby || true)}
[ -x "${RUBY:-}" ] || { echo "ruby_overhead: no interpreter (set RUBY)" >&2; exit 1; }
DUR=${1:-60} STATS=ruby CHAIN=';main;outer;middle;inner;(hot_70|cold_30);spin' \
	exec bench/interp_overhead.sh "$RUBY" tests/workloads/ruby/chain.rb chain
