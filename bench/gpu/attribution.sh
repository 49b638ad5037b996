#!/bin/sh
# Issue 32's check: is every GPU nanosecond under the CPU stack that caused
# it? For one or more builds side by side on one GPU machine:
#
#   OUT=/tmp/out sh bench/gpu/attribution.sh BUILD_DIR [BUILD_DIR ...]
#
# Each BUILD_DIR holds flamewatch and libflamewatch-cuda.so (make dist).
# For each build and each workload of bench/gpu/attribution_work.py
# (WORKLOADS, default "graph_copies mlp tiny", SECONDS each): a fresh
# `flamewatch run` (defaults), the workload under `flamewatch cuda` with no
# tuning, then bench/gpu/attribution.py: one JSON line each, in
# $OUT/attribution.jsonl. Needs root, an NVIDIA GPU and python3 with PyTorch.
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$(mktemp -d /tmp/fw-attrib.XXXXXX)}
WORKLOADS=${WORKLOADS:-graph_copies mlp tiny}
SECONDS_EACH=${SECONDS_EACH:-15}
PORT=${PORT:-7186}
mkdir -p "$OUT"
for W in $WORKLOADS; do
	for B in "$@"; do
		name=$(basename "$B")-$W
		rm -rf "$OUT/data-$name"
		"$B/flamewatch" run --listen "127.0.0.1:$PORT" --data "$OUT/data-$name" \
			> "$OUT/run-$name.log" 2>&1 &
		RUN=$!
		for _ in $(seq 1 100); do
			grep -q "profiling this host at" "$OUT/run-$name.log" && break
			sleep 0.3
		done
		timeout 300 "$B/flamewatch" cuda --lib "$B/libflamewatch-cuda.so" -- \
			python3 bench/gpu/attribution_work.py "$W" "$SECONDS_EACH" \
			"$OUT/work-$name.json" > "$OUT/work-$name.log" 2>&1
		sleep 12	# the agent's last batch (10 s) and the library's exit flush
		kill -TERM $RUN; wait $RUN	# the join's last counters, in the log
		# The same store, read by a server alone.
		"$B/flamewatch" server --listen "127.0.0.1:$PORT" --data "$OUT/data-$name" \
			> "$OUT/query-$name.log" 2>&1 &
		RUN=$!
		for _ in $(seq 1 100); do
			grep -q "listening on" "$OUT/query-$name.log" && break
			sleep 0.3
		done
		python3 bench/gpu/attribution.py "$PORT" "$OUT/work-$name.json" "$name" \
			"$OUT/run-$name.log" | tee -a "$OUT/attribution.jsonl"
		kill -TERM $RUN; wait $RUN
	done
done
