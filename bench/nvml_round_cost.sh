#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# What one NVML round costs per GPU, measured with the fake libnvidia-ml
# (no GPU needed), optionally side by side with another build:
#
#   make && make fakes
#   bench/nvml_round_cost.sh [BASE_FLAMEWATCH]
#
# For each build and each interval (1 s, the agent's default; 100 ms,
# where utilisation comes from nvmlDeviceGetSamples) it runs `flamewatch
# gpu` against build/fakes/libnvidia-ml.so.1 with two GPUs and one process
# on each, and prints per GPU per round: the NVML calls (counted by the
# fake), our CPU time (the thread's, from `flamewatch gpu`), and an
# estimate for an H200: the calls weighted by the CPU time each query took
# there (measured with pynvml, best of 5, under a PyTorch load; the
# per-process queries were not measured and count as 0 in the estimate).
# The fake answers in well under a microsecond, so "our CPU" is
# flamewatch's own work; on a real GPU the driver's dominates.
# Takes about 40 s per build.
set -u
FW=${FLAMEWATCH:-build/flamewatch}
BASE=${1:-}
FAKE=build/fakes/libnvidia-ml.so.1
TMP=$(mktemp -d /tmp/nvml_round_cost.XXXXXX)
trap 'kill "$SLEEPER" 2>/dev/null; rm -rf "$TMP"' EXIT

[ -x "$FW" ] || { echo "no $FW: run make"; exit 1; }
[ -e "$FAKE" ] || { echo "no $FAKE: run make fakes"; exit 1; }

sleep 600 &
SLEEPER=$!
printf 'proc 0 %s 60 10 1073741824\nproc 1 %s 20 5 268435456\n' "$SLEEPER" "$SLEEPER" > "$TMP/values"

# ms of CPU per call on the H200 (pynvml, best of 5); GetSamples is per call.
cat > "$TMP/h200_ms" <<'EOF'
nvmlDeviceGetUtilizationRates 0.003
nvmlDeviceGetMemoryInfo_v2 0.008
nvmlDeviceGetMemoryInfo 0.008
nvmlDeviceGetClockInfo 0.002
nvmlDeviceGetMaxClockInfo 1.12
nvmlDeviceGetPowerUsage 0.002
nvmlDeviceGetEnforcedPowerLimit 0.002
nvmlDeviceGetTemperature 0.002
nvmlDeviceGetTemperatureThreshold 0.003
nvmlDeviceGetPcieThroughput 0.665
nvmlDeviceGetCurrentClocksEventReasons 0.003
nvmlDeviceGetCurrentClocksThrottleReasons 0.003
nvmlDeviceGetTotalEnergyConsumption 2.42
nvmlDeviceGetMigMode 0.105
nvmlDeviceGetSamples 0.84
nvmlDeviceGetFieldValues 0.21
EOF

# run BUILD INTERVAL ROUNDS -> "calls_per_gpu_round cpu_us_per_gpu_round h200_ms_estimate"
run() {
	FAKE_NVML_VALUES="$TMP/values" FAKE_NVML_CALLS="$TMP/calls" \
		"$1" gpu --lib "$FAKE" --interval "$2" --rounds "$3" --quiet > "$TMP/out" 2> "$TMP/err" ||
		{ echo "failed: $(tail -2 "$TMP/err")" >&2; return 1; }
	cpu=$(sed -n 's/.*cpu_us_per_gpu_round \([0-9.]*\).*/\1/p' "$TMP/out")
	# Calls made in rounds: the log less nvmlInit's (UUID, name per GPU).
	awk -v rounds="$3" -v cpu="$cpu" -v ms="$TMP/h200_ms" '
		BEGIN { while ((getline l < ms) > 0) { split(l, f, " "); cost[f[1]] = f[2] } }
		$1 != "nvmlDeviceGetUUID" && $1 != "nvmlDeviceGetName" { n++; est += cost[$1] }
		END { g = 2 * rounds; printf "%8.2f %10.2f %12.3f\n", n / g, cpu, est / g }' "$TMP/calls"
}

printf '%-10s %-9s %8s %10s %12s\n' build interval calls us_cpu h200_ms_est
for b in "$FW" $BASE; do
	label=this
	[ "$b" = "$FW" ] || label=base
	for iv in "1s 30" "100ms 100"; do
		set -- $iv
		printf '%-10s %-9s %s\n' "$label" "$1" "$(run "$b" "$1" "$2")"
	done
done
echo "(per GPU per round; h200_ms_est leaves out the per-process queries: see bench/gpu/nvml_compare.sh)"
