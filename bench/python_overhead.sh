#!/bin/bash
# Steady-state cost of profiling Python-heavy processes: LOAD copies of
# tests/workloads/python/chain.py (default: one per CPU) under
# `flamewatch record -p PIDS -F HZ`, with the Python walk in BPF.
#
#   sudo bench/python_overhead.sh [SECONDS]       # default 60
#
# Environment: HZ (default 19), LOAD, PYTHON (interpreter, default the
# newest pyenv 3.12), FLAMEWATCH (default build/flamewatch), WARMUP (default 10 s).
# Measured by bench/interp_overhead.sh (shared with bench/ruby_overhead.sh).
set -euo pipefail

cd "$(dirname "$0")/.."
if [ -z "${PYTHON:-}" ]; then
	root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-}")
	PYTHON=$(ls -d "$root"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -1)
fi
[ -x "${PYTHON:-}" ] || { echo "python_overhead: no interpreter (set PYTHON)" >&2; exit 1; }

DUR=${1:-60} STATS=python CHAIN=';main;outer;middle;inner;(hot_70|cold_30)' \
	exec bench/interp_overhead.sh "$PYTHON" tests/workloads/python/chain.py chain
