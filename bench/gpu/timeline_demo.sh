#!/bin/sh
# The timeline demo of issue 9 on a GPU machine (about 90 s):
#
#   OUT=/tmp/out sh bench/gpu/timeline_demo.sh BUILD_DIR
#
# BUILD_DIR holds flamewatch and libflamewatch-cuda.so (from `make`). Needs
# root (BPF), an NVIDIA GPU and python3 with PyTorch; installs nothing.
# Starts `flamewatch run` with its data under $OUT, runs
# bench/gpu/stall_train.py (GPU work alternating with a CPU-bound
# load_batch stall) under `flamewatch cuda` with every launch collected,
# and prints a table: the GPU-idle fraction and flame graph flamewatch
# reports for the process, and for each stall the kernel gap, the NVML
# utilisation dip and the process's CPU strip, against the stall's real
# times. Leaves $OUT/fwdata.tar.gz (the SQLite data dir plus demo.json,
# for bench/gpu/timeline_screenshot.mjs) and logs under $OUT.
set -u
cd "$(dirname "$0")/../.." || exit 1
B=${1:-build}
OUT=${OUT:-$(mktemp -d /tmp/fw-timeline.XXXXXX)}
mkdir -p "$OUT"
PORT=${PORT:-7183}
DATA="$OUT/fwdata"
rm -rf "$DATA"

# --gpu-interval 100ms: NVML's utilisation is a 1/6 s average on recent
# drivers, so the dip of a 1 s stall shows in several points.
"$B/flamewatch" run --listen "127.0.0.1:$PORT" --data "$DATA" -F 99 --interval 1s \
	--gpu-interval 100ms > "$OUT/run.log" 2>&1 &
RUN=$!
trap 'kill -INT $RUN 2>/dev/null; wait $RUN 2>/dev/null' EXIT
for _ in $(seq 1 100); do
	grep -q "profiling this host at" "$OUT/run.log" && break
	kill -0 $RUN 2>/dev/null || { echo "flamewatch run exited:"; tail -n 20 "$OUT/run.log"; exit 1; }
	sleep 0.3
done
sleep 2

# Every launch kept (no duty cycle, no launch budget): the kernel gaps are
# then exactly the idle time, which /api/v1/gpu/idle then reports from the
# kernels rather than from NVML.
echo "== stall_train.py under flamewatch cuda"
FLAMEWATCH_CUDA_DUTY_CYCLE=1 FLAMEWATCH_CUDA_LAUNCH_BUDGET=100000000 \
	timeout 120 "$B/flamewatch" cuda --lib "$B/libflamewatch-cuda.so" -- \
	python3 bench/gpu/stall_train.py --rounds 10 --train 1.5 --stall 1.0 \
	--log "$OUT/stalls.json" > "$OUT/train.log" 2>&1
echo "exit $?"
tail -n 3 "$OUT/train.log"
grep -i "GPU time profiling" "$OUT/run.log" | head -n 3
sleep 4		# the last batch of samples and intervals

timeout 60 python3 bench/gpu/timeline_report.py "$PORT" "$OUT"
echo "analysis exit $?"

kill -INT $RUN; wait $RUN
trap - EXIT
tar czf "$OUT/fwdata.tar.gz" -C "$OUT" fwdata
SIZE=$(stat -c %s "$OUT/fwdata.tar.gz")
echo "data: $OUT/fwdata.tar.gz, $SIZE bytes$( [ "$SIZE" -gt 16777216 ] && echo ' (over 16 MiB!)')"
echo "screenshot (on any machine with this repository built):"
echo "  node bench/gpu/timeline_screenshot.mjs $OUT/fwdata.tar.gz timeline-demo.png"
