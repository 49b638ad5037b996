#!/bin/bash
# Steady-state cost of profiling Python-heavy processes: LOAD copies of
# tests/workloads/python/chain.py (default: one per CPU) under
# `flamewatch record -p PIDS -F HZ`, with the Python walk in BPF.
#
#   sudo bench/python_overhead.sh [SECONDS]       # default 60
#
# Environment: HZ (default 19), LOAD, PYTHON (interpreter, default the
# newest pyenv 3.12), FLAMEWATCH (default build/flamewatch).
# Reports flamewatch's own CPU between t=10 s and the end (from
# /proc/PID/stat, so start-up table building is left out), and the BPF
# program's run time per sample (kernel.bpf_stats_enabled), which is
# charged to the sampled tasks.
set -euo pipefail

cd "$(dirname "$0")/.."
DUR=${1:-60}
HZ=${HZ:-19}
NLOAD=${LOAD:-$(nproc)}
FW=${FLAMEWATCH:-build/flamewatch}
if [ -z "${PYTHON:-}" ]; then
	root=$(pyenv root 2>/dev/null || echo "${PYENV_ROOT:-}")
	PYTHON=$(ls -d "$root"/versions/3.12.*/bin/python3.12 2>/dev/null | sort -V | tail -1)
fi
[ -x "${PYTHON:-}" ] || { echo "python_overhead: no interpreter (set PYTHON)" >&2; exit 1; }
[ "$DUR" -ge 20 ] || { echo "python_overhead: SECONDS must be >= 20" >&2; exit 1; }

OUT=$(mktemp -d /tmp/fw-pybench.XXXXXX)
OLD_STATS=$(cat /proc/sys/kernel/bpf_stats_enabled)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	sysctl -q -w kernel.bpf_stats_enabled="$OLD_STATS" >/dev/null || true
	rm -rf "$OUT"
}
trap cleanup EXIT

for _ in $(seq "$NLOAD"); do
	"$PYTHON" tests/workloads/python/chain.py chain $((DUR + 30)) &
	PIDS+=($!)
done
sleep 1
sysctl -q -w kernel.bpf_stats_enabled=1
pidlist=$(IFS=,; echo "${PIDS[*]}")
"$FW" record -q -v -F "$HZ" -d "$DUR" -p "$pidlist" -o "$OUT/out.folded" 2>"$OUT/log" &
FWPID=$!
ticks() { awk '{print $14 + $15}' "/proc/$FWPID/stat"; }
sleep 10
t0=$(ticks); s0=$(date +%s.%N)
prog_stats() { bpftool prog show --json | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name") == "on_cpu_sample":
        print(p.get("run_time_ns", 0), p.get("run_cnt", 0)); break
else:
    print(0, 0)'; }
read -r ns0 cnt0 < <(prog_stats)
sleep $((DUR - 13))
t1=$(ticks); s1=$(date +%s.%N)
read -r ns1 cnt1 < <(prog_stats)
wait "$FWPID"
hz=$(getconf CLK_TCK)
nsamples=$(sed -n 's/^flamewatch: debug: bpf stat samples = //p' "$OUT/log")
python3 - "$t0" "$t1" "$s0" "$s1" "$hz" "$ns0" "$ns1" "$cnt0" "$cnt1" "${nsamples:-0}" "$DUR" <<'PY'
import sys
t0, t1, s0, s1, hz, ns0, ns1, c0, c1, ns_total, dur = map(float, sys.argv[1:])
cpu = (t1 - t0) / hz
wall = s1 - s0
print(f"flamewatch CPU {cpu:.2f} s ({t1 - t0:.0f} ticks of 1/{hz:.0f} s) over {wall:.1f} s"
      f" = {100 * cpu / wall:.3f} % of one core (steady state; one tick = {100 / hz / wall:.3f} %)")
if c1 > c0:
    per = (ns1 - ns0) / (c1 - c0)
    print(f"BPF on_cpu_sample: {per / 1000:.1f} us per run, {c1 - c0:.0f} runs"
          f" = {100 * (ns1 - ns0) / 1e9 / wall:.3f} % of one core (charged to the sampled tasks)")
    if ns_total:
        # Samples of unfollowed tasks return at once; nearly all the time is the followed ones'.
        print(f"  about {(ns1 - ns0) / (ns_total * wall / dur) / 1000:.1f} us per emitted sample")
PY
grep -E "python_(samples|frames|faults|no_thread|truncated) |^flamewatch: debug: bpf stat samples " "$OUT/log" | sed 's/flamewatch: debug: bpf stat //'
awk '{n += $NF} /;main;outer;middle;inner;(hot_70|cold_30)/ {c += $NF} END {printf "full chain in %.1f %% of %d samples\n", 100 * c / n, n}' "$OUT/out.folded"
