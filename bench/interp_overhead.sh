#!/bin/bash
# The measurement behind bench/python_overhead.sh and bench/ruby_overhead.sh:
# LOAD copies of an interpreter workload under `flamewatch record -p PIDS
# -F HZ`, with the interpreter's walk in BPF. Not meant to be run directly:
#
#   DUR=60 STATS=python CHAIN=REGEX bench/interp_overhead.sh CMD ARGS...
#
# CMD ARGS SECONDS runs one copy of the workload for SECONDS. STATS is the
# prefix of the interpreter's BPF counters and debug line, CHAIN the regex a
# folded stack with the workload's full chain matches. HZ, LOAD and
# FLAMEWATCH are the callers' (see there).
# Reports flamewatch's own CPU between t=WARMUP s (default 10) and the end
# (from /proc/PID/stat, so loading BPF and building tables are left out:
# on a loaded machine they can take longer, then raise WARMUP), and the BPF
# program's run time per sample (kernel.bpf_stats_enabled), which is
# charged to the sampled tasks.
set -euo pipefail

cd "$(dirname "$0")/.."
HZ=${HZ:-19}
NLOAD=${LOAD:-$(nproc)}
FW=${FLAMEWATCH:-build/flamewatch}
WARMUP=${WARMUP:-10}
[ "$DUR" -ge $((WARMUP + 10)) ] || { echo "$STATS overhead: SECONDS must be >= WARMUP + 10" >&2; exit 1; }

OUT=$(mktemp -d /tmp/fw-interpbench.XXXXXX)
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
	"$@" $((DUR + 30)) &
	PIDS+=($!)
done
sleep 1
sysctl -q -w kernel.bpf_stats_enabled=1
pidlist=$(IFS=,; echo "${PIDS[*]}")
"$FW" record -q -v -F "$HZ" -d "$DUR" -p "$pidlist" -o "$OUT/out.folded" 2>"$OUT/log" &
FWPID=$!
ticks() { awk '{print $14 + $15}' "/proc/$FWPID/stat"; }
sleep "$WARMUP"
t0=$(ticks); s0=$(date +%s.%N)
# Other flamewatch instances may run too: only programs whose fds this one holds count.
prog_stats() { bpftool prog show --json | python3 -c '
import glob, json, sys
mine = set()
for f in glob.glob("/proc/%s/fdinfo/*" % sys.argv[1]):
    try:
        for line in open(f):
            if line.startswith("prog_id:"):
                mine.add(int(line.split()[1]))
    except OSError:
        pass
for p in json.load(sys.stdin):
    if p.get("name") == "on_cpu_sample" and p.get("id") in mine:
        print(p.get("run_time_ns", 0), p.get("run_cnt", 0)); break
else:
    print(0, 0)' "$FWPID"; }
read -r ns0 cnt0 < <(prog_stats)
sleep $((DUR - WARMUP - 3))
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
grep -E "^flamewatch: debug: bpf stat (samples|${STATS}_[a-z_]+) |^flamewatch: debug: $STATS: " "$OUT/log" |
	sed 's/flamewatch: debug: //; s/^bpf stat //'
awk -v re="$CHAIN" '{n += $NF} $0 ~ re {c += $NF} END {printf "full chain in %.1f %% of %d samples\n", 100 * c / n, n}' "$OUT/out.folded"
