#!/bin/sh
# Issue 25's check that the busy timeline stays complete where the CUDA
# library duty-cycles its records (the tiny-kernel and MLP loops): for each
# workload of bench/gpu/attribution_work.py (WORKLOADS, default "tiny mlp",
# SECONDS each), two runs under one build on one GPU machine:
#
#   OUT=/tmp/out sh bench/gpu/busy_complete.sh BUILD_DIR
#
#   default  `flamewatch run` and `flamewatch cuda` with no tuning: above
#            the library's exact rate its records are duty-cycled and the
#            timeline is the GPU monitors' (`flamewatch gpu-busy`)
#   both     every record collected (FLAMEWATCH_CUDA_EXACT_MAX_RATE at its
#            maximum) and the monitors on: the same span's busy fraction
#            from the records alone (the reference) and from the monitors
#            alone (/api/v1/gpu/idle?timeline_from=)
#
# then bench/gpu/busy_fraction.py: one JSON line per run and source with
# the busy fraction of the workload's span, the timeline's sources and
# coverage. Target: the monitors' busy fraction within 2 points of the
# records' over the same run. Needs root, an NVIDIA GPU and python3 with
# PyTorch.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${1:?BUILD_DIR}
OUT=${OUT:-$(mktemp -d /tmp/fw-busy.XXXXXX)}
WORKLOADS=${WORKLOADS:-tiny mlp}
SECONDS_EACH=${SECONDS_EACH:-10}
PORT=${PORT:-7187}
mkdir -p "$OUT"
for W in $WORKLOADS; do
	for MODE in default both; do
		name=$W-$MODE
		rm -rf "$OUT/data-$name"
		EXACT=
		[ $MODE = both ] && EXACT=4294967295
		"$B/flamewatch" run --listen "127.0.0.1:$PORT" --data "$OUT/data-$name" \
			> "$OUT/run-$name.log" 2>&1 &
		RUN=$!
		for _ in $(seq 1 100); do
			grep -q "profiling this host at" "$OUT/run-$name.log" && break
			sleep 0.3
		done
		sleep 2		# the monitors' child starts sampling
		env ${EXACT:+FLAMEWATCH_CUDA_EXACT_MAX_RATE=$EXACT FLAMEWATCH_CUDA_MAX_COST_PPM=1000000} \
			FLAMEWATCH_CUDA_SUMMARY="$OUT/summary-$name.json" \
			timeout 300 "$B/flamewatch" cuda --lib "$B/libflamewatch-cuda.so" -- \
			python3 bench/gpu/attribution_work.py "$W" "$SECONDS_EACH" \
			"$OUT/work-$name.json" > "$OUT/work-$name.log" 2>&1
		sleep 12	# the agent's last batch (10 s)
		for FROM in both records gpu_monitors; do
			[ $MODE = default ] && [ $FROM != both ] && continue
			python3 bench/gpu/busy_fraction.py "$PORT" "$OUT/work-$name.json" \
				"$name-$FROM" "$FROM" | tee -a "$OUT/busy_complete.jsonl"
		done
		kill -TERM $RUN; wait $RUN
	done
done
