#!/bin/bash
# Steady-state cost of profiling Java-heavy processes with the HotSpot
# unwinder (no JVM flags): LOAD JVMs (default: one per CPU) running
# tests/workloads/java/Chains.java under `flamewatch record -p PIDS -F HZ`,
# half of them compiled code (`jit`), half interpreted (`interp`).
#
#   sudo bench/java_overhead.sh [SECONDS]       # default 60
#
# Environment: HZ (default 19), LOAD, FLAMEWATCH (default build/flamewatch),
# FLAMEWATCH_BASE (a second agent, e.g. a build without the HotSpot walk,
# recording the same JVMs in the same run, side by side),
# WARMUP (seconds left out at the start, default 20: reading libjvm.so's
# unwind table and the JVMs' vmStructs is start-up, not steady state).
# Reports flamewatch's own CPU over the steady state (from /proc/PID/stat),
# the BPF program's run time per sample (kernel.bpf_stats_enabled), which
# is charged to the sampled tasks, and how many samples show the chain.
set -euo pipefail

cd "$(dirname "$0")/.."
DUR=${1:-60}
HZ=${HZ:-19}
NLOAD=${LOAD:-$(nproc)}
WARMUP=${WARMUP:-20}
FW=${FLAMEWATCH:-build/flamewatch}
[ "$DUR" -ge $((WARMUP + 10)) ] || { echo "java_overhead: SECONDS must be >= WARMUP + 10" >&2; exit 1; }
command -v javac >/dev/null || { echo "java_overhead: no javac" >&2; exit 1; }

OUT=$(mktemp -d /tmp/fw-javabench.XXXXXX)
OLD_STATS=$(cat /proc/sys/kernel/bpf_stats_enabled)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	sysctl -q -w kernel.bpf_stats_enabled="$OLD_STATS" >/dev/null || true
	rm -rf "$OUT"
}
trap cleanup EXIT

cp tests/workloads/java/Chains.java "$OUT/"
python3 tests/workloads/java/cold.py >"$OUT/Cold.java"
javac -d "$OUT/classes" "$OUT/Chains.java" "$OUT/Cold.java"
for i in $(seq "$NLOAD"); do
	mode=jit
	[ $((i % 2)) -eq 0 ] && mode=interp
	# exec: $! must be the JVM itself, not a subshell.
	bash -c 'exec java -cp "$1" Chains "$2" "$3" >/dev/null' _ "$OUT/classes" "$mode" $((DUR + 600)) &
	PIDS+=($!)
done
sleep 2
sysctl -q -w kernel.bpf_stats_enabled=1
pidlist=$(IFS=,; echo "${PIDS[*]}")
"$FW" record -q -v -F "$HZ" -d "$DUR" -p "$pidlist" -o "$OUT/out.folded" 2>"$OUT/log" &
FWPID=$!
BASEPID=
if [ -n "${FLAMEWATCH_BASE:-}" ]; then
	"$FLAMEWATCH_BASE" record -q -v -F "$HZ" -d "$DUR" -p "$pidlist" -o "$OUT/base.folded" 2>"$OUT/base.log" &
	BASEPID=$!
fi
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# This agent's program (other flamewatch instances may run on the machine):
# its prog ids are in the fdinfo of the agent's descriptors.
prog_stats() { python3 - "$1" <<'PY'
import glob, json, subprocess, sys
ids = set()
for f in glob.glob(f"/proc/{sys.argv[1]}/fdinfo/*"):
    try:
        for line in open(f):
            if line.startswith("prog_id:"):
                ids.add(int(line.split()[1]))
    except OSError:
        pass
for i in sorted(ids):
    p = json.loads(subprocess.run(["bpftool", "prog", "show", "id", str(i), "--json"],
                                  capture_output=True, text=True).stdout or "{}")
    if p.get("name") == "on_cpu_sample":
        print(p.get("run_time_ns", 0), p.get("run_cnt", 0))
        break
else:
    print(0, 0)
PY
}
sleep "$WARMUP"
s0=$(date +%s.%N)
t0=$(ticks "$FWPID"); read -r ns0 cnt0 < <(prog_stats "$FWPID")
[ -n "$BASEPID" ] && { b0=$(ticks "$BASEPID"); read -r bns0 bcnt0 < <(prog_stats "$BASEPID"); }
sleep $((DUR - WARMUP - 3))
s1=$(date +%s.%N)
t1=$(ticks "$FWPID"); read -r ns1 cnt1 < <(prog_stats "$FWPID")
[ -n "$BASEPID" ] && { b1=$(ticks "$BASEPID"); read -r bns1 bcnt1 < <(prog_stats "$BASEPID"); }
wait "$FWPID"
[ -n "$BASEPID" ] && wait "$BASEPID"
hz=$(getconf CLK_TCK)
report() {
python3 - "$@" <<'PY'
import sys
who = sys.argv[1]
t0, t1, s0, s1, hz, ns0, ns1, c0, c1 = map(float, sys.argv[2:])
cpu = (t1 - t0) / hz
wall = s1 - s0
print(f"{who}: CPU {cpu:.2f} s ({t1 - t0:.0f} ticks of 1/{hz:.0f} s) over {wall:.1f} s"
      f" = {100 * cpu / wall:.3f} % of one core (steady state; one tick = {100 / hz / wall:.3f} %)")
if c1 > c0:
    per = (ns1 - ns0) / (c1 - c0)
    print(f"BPF on_cpu_sample: {per / 1000:.1f} us per run, {c1 - c0:.0f} runs"
          f" = {100 * (ns1 - ns0) / 1e9 / wall:.3f} % of one core (charged to the sampled tasks)")
else:
    print("BPF on_cpu_sample: no run-time figures (program not found in the agent's descriptors)")
PY
}
report flamewatch "$t0" "$t1" "$s0" "$s1" "$hz" "$ns0" "$ns1" "$cnt0" "$cnt1"
[ -n "$BASEPID" ] && report base "$b0" "$b1" "$s0" "$s1" "$hz" "$bns0" "$bns1" "$bcnt0" "$bcnt1"
grep -E "^flamewatch: (debug: (hotspot:|bpf stat samples )|info: unwind tables)" "$OUT/log" | sed 's/flamewatch: [a-z]*: //'
awk '/^java;/ {n += $NF}
     /;Chains\.outer;Chains\.middle;Chains\.hot[AB]( |;)/ {c += $NF}
     /;Chains\.coldOuter;Chains\.coldMiddle;Cold\.inner( |;)/ {c += $NF}
     END {printf "chain in %.1f %% of %d samples\n", 100 * c / n, n}' "$OUT/out.folded"
if [ -n "$BASEPID" ]; then
	grep -E "^flamewatch: info: unwind tables" "$OUT/base.log" | sed 's/flamewatch: [a-z]*: /base: /'
fi
