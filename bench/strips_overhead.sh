#!/bin/bash
# Cost of the CPU strips collector (sched_switch) under a context-switch
# storm: two threads ping-ponging over pipes, pinned to CPU 1, next to
# `flamewatch run`, once with strips and once with --no-cpu-strips.
#
#   sudo bench/strips_overhead.sh [SECONDS]        # default 20
#
# Reports switches/s (counted by the BPF program itself), the BPF program's
# run time (kernel.bpf_stats_enabled) per switch and as a share of one core,
# the records it emitted, and the agent's CPU (utime + stime of the
# flamewatch process) with and without strips. See bench/STRIPS.md.
set -euo pipefail

cd "$(dirname "$0")/.."
DUR=${1:-20}
FW=${FLAMEWATCH:-build/flamewatch}
die() { echo "strips_overhead: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (BPF, sysctl)"
[ -x "$FW" ] || die "$FW not found: run make"
command -v bpftool >/dev/null || die "bpftool not found"

OUT=$(mktemp -d /tmp/fw-strips-bench.XXXXXX)
OLD_STATS=$(cat /proc/sys/kernel/bpf_stats_enabled)
FW_PID=
cleanup() {
	[ -n "$FW_PID" ] && kill "$FW_PID" 2>/dev/null || true
	wait 2>/dev/null || true
	sysctl -q -w kernel.bpf_stats_enabled="$OLD_STATS" >/dev/null || true
	rm -rf "$OUT"
}
trap cleanup EXIT

cc -O2 -pthread -o "$OUT/pingpong" tests/workloads/pingpong.c
[ -f build/vmlinux.h ] || die "build/vmlinux.h missing: run make"
clang -g -O2 -target bpf -D__TARGET_ARCH_x86 -Ibuild -c bench/strips/null.bpf.c -o "$OUT/null.bpf.o"
cc -O2 -o "$OUT/load" bench/strips/load.c -Wl,-Bstatic -lbpf -lelf -lz -lzstd -Wl,-Bdynamic
sysctl -q -w kernel.bpf_stats_enabled=1

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
prog_stat() { # run_time_ns run_cnt of the program named $1 (default fw_sched_switch)
	bpftool -j prog show | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name") == sys.argv[1]:
        print(p.get("run_time_ns", 0), p.get("run_cnt", 0)); break
else:
    print(0, 0)' "${1:-fw_sched_switch}"
}

calibrate() { # ns per run of the empty and the clock-only program, same storm
	local lp b0 n0 c0 m0 b1 n1 c1 m1
	"$OUT/load" "$OUT/null.bpf.o" $((DUR + 5)) & lp=$!
	sleep 1
	read -r b0 n0 < <(prog_stat fw_cal_empty); read -r c0 m0 < <(prog_stat fw_cal_clock)
	taskset -c 1 "$OUT/pingpong" "$DUR" >/dev/null
	read -r b1 n1 < <(prog_stat fw_cal_empty); read -r c1 m1 < <(prog_stat fw_cal_clock)
	kill $lp 2>/dev/null; wait $lp 2>/dev/null || true
	echo "$(( (b1 - b0) / ((n1 - n0) > 0 ? (n1 - n0) : 1) )) $(( (c1 - c0) / ((m1 - m0) > 0 ? (m1 - m0) : 1) ))"
}

one() { # $1: extra flag; prints: agent_cpu_s bpf_ns bpf_cnt trips
	local port=$((17000 + RANDOM % 2000))
	"$FW" run --listen 127.0.0.1:$port --data "$OUT/data$1" --interval 10s --node bench $1 \
		>"$OUT/log$1" 2>&1 &
	FW_PID=$!
	for _ in $(seq 100); do grep -q "profiling this host" "$OUT/log$1" && break; sleep 0.2; done
	sleep 2	# unwind tables for what runs already are built at start
	local c0 b0 n0 c1 b1 n1 trips
	c0=$(cpu_ticks $FW_PID); read -r b0 n0 < <(prog_stat)
	trips=$(taskset -c 1 "$OUT/pingpong" "$DUR")
	c1=$(cpu_ticks $FW_PID); read -r b1 n1 < <(prog_stat)
	kill -INT $FW_PID; wait $FW_PID || true; FW_PID=
	echo "$(( c1 - c0 )) $(( b1 - b0 )) $(( n1 - n0 )) $trips"
}

HZ_TICKS=$(getconf CLK_TCK)
read -r ca ba na ta < <(one "")
read -r cb _ _ tb < <(one "--no-cpu-strips")
read -r cal_empty cal_clock < <(calibrate)
EMITTED=$(grep -o 'cpu strips: [0-9]* switches, [0-9]* records' "$OUT/log" | tail -1 || true)
python3 - "$DUR" "$HZ_TICKS" "$ca" "$ba" "$na" "$ta" "$cb" "$tb" "$EMITTED" "$cal_empty" "$cal_clock" <<'PY'
import sys
dur, hz = float(sys.argv[1]), int(sys.argv[2])
ca, ba, na, ta, cb, tb = (int(x) for x in sys.argv[3:9])
emitted = sys.argv[9]
cal_empty, cal_clock = int(sys.argv[10]), int(sys.argv[11])
print(f"duration                      {dur:.0f} s per run")
print(f"context switches/s (BPF)      {na / dur:,.0f} (all CPUs; ping-pong round trips/s {ta / dur:,.0f})")
print(f"BPF run time per switch       {ba / max(na, 1):.0f} ns")
print(f"BPF run time, share of a core {ba / dur / 1e9:.3%}")
print(f"agent CPU with strips         {ca / hz / dur:.3%} of a core")
print(f"agent CPU without strips      {cb / hz / dur:.3%} of a core (round trips/s {tb / dur:,.0f})")
print(f"strips total (BPF + agent delta) {(ba / 1e9 + (ca - cb) / hz) / dur:.3%} of a core")
print(f"agent log (whole run)         {emitted}")
print(f"calibration, same storm: an empty sched_switch program {cal_empty} ns/run, "
      f"one clock read {cal_clock} ns/run (bpf_stats accounting included in both)")
PY
