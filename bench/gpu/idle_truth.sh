#!/bin/sh
# Issue 25's check of "why is the GPU idle?" in the default configuration,
# for one or more builds side by side on one GPU machine:
#
#   OUT=/tmp/out sh bench/gpu/idle_truth.sh BUILD_DIR [BUILD_DIR ...]
#
# Each BUILD_DIR holds flamewatch and libflamewatch-cuda.so. For each, in
# turn: `flamewatch run` (defaults), bench/gpu/stall_train.py under
# `flamewatch cuda` with no tuning (ROUNDS rounds of TRAIN s of matrix
# products ending in torch.cuda.synchronize(), then STALL s of Python data
# preparation in load_batch), then bench/gpu/idle_truth.py: one JSON line
# per build. STALL_KIND=read makes the stalls O_DIRECT file reads
# (issue 30: the off-CPU view of the idle gaps); RUN_ARGS are added to
# `flamewatch run` (e.g. --off-cpu). Needs root, an NVIDIA GPU and python3
# with PyTorch.
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-$(mktemp -d /tmp/fw-idle.XXXXXX)}
ROUNDS=${ROUNDS:-12} TRAIN=${TRAIN:-0.6} STALL=${STALL:-0.4} STALL_KIND=${STALL_KIND:-cpu}
RUN_ARGS=${RUN_ARGS:-}
PORT=${PORT:-7185}
mkdir -p "$OUT"
for B in "$@"; do
	name=$(basename "$B")
	rm -rf "$OUT/data-$name"
	# shellcheck disable=SC2086
	"$B/flamewatch" run --listen "127.0.0.1:$PORT" --data "$OUT/data-$name" $RUN_ARGS \
		> "$OUT/run-$name.log" 2>&1 &
	RUN=$!
	for _ in $(seq 1 100); do
		grep -q "profiling this host at" "$OUT/run-$name.log" && break
		sleep 0.3
	done
	timeout 180 "$B/flamewatch" cuda --lib "$B/libflamewatch-cuda.so" -- \
		python3 bench/gpu/stall_train.py --rounds "$ROUNDS" --train "$TRAIN" \
		--stall "$STALL" --stall-kind "$STALL_KIND" --log "$OUT/stalls-$name.json" \
		> "$OUT/train-$name.log" 2>&1
	sleep 12		# the agent's last batch (10 s) and the library's exit flush
	python3 bench/gpu/idle_truth.py "$PORT" "$OUT/stalls-$name.json" "$name" \
		| tee -a "$OUT/idle_truth.jsonl"
	kill -TERM $RUN; wait $RUN
done
