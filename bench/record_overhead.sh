#!/bin/bash
# Overhead of `flamewatch record -a` next to `perf record -a -g`, both sampling
# the same CPU-bound load at the same rate for the same time, concurrently.
#
#   sudo bench/record_overhead.sh [SECONDS]        # default 60
#
# Environment: HZ (default 19), LOAD (CPU-bound load processes, default
# nproc), FLAMEWATCH (binary, default build/flamewatch), KEEP=1 keeps the
# scratch directory. See bench/README.md for how to read the table.
set -euo pipefail

cd "$(dirname "$0")/.."
DUR=${1:-${DURATION:-60}}
HZ=${HZ:-19}
NLOAD=${LOAD:-$(nproc)}
FW=${FLAMEWATCH:-build/flamewatch}

die() { echo "record_overhead: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "needs root (BPF, perf -a, sysctl)"
[ -x "$FW" ] || die "$FW not found: run make"
[ -x /usr/bin/time ] || die "/usr/bin/time not found: apt-get install time"
command -v perf >/dev/null || die "perf not found: apt-get install linux-perf"
command -v bpftool >/dev/null || die "bpftool not found: apt-get install bpftool"
command -v python3 >/dev/null || die "python3 not found"
[ -x build/workloads/cpu_split ] || make -s workloads

OUT=$(mktemp -d /tmp/fw-bench.XXXXXX)
OLD_STATS=$(cat /proc/sys/kernel/bpf_stats_enabled)
LOAD_PIDS=()
TOOL_PIDS=()

cleanup() {
	# Only what this script started, by pid.
	for p in "${TOOL_PIDS[@]}" "${LOAD_PIDS[@]}"; do
		kill "$p" 2>/dev/null || true
	done
	wait 2>/dev/null || true
	sysctl -q -w kernel.bpf_stats_enabled="$OLD_STATS" >/dev/null || true
	if [ "${KEEP:-0}" = 1 ]; then
		echo "scratch files kept in $OUT" >&2
	else
		rm -rf "$OUT"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Run-time accounting of BPF programs costs a few ns per run, so it is off by
# default; turn it on for the measurement and put it back afterwards.
sysctl -q -w kernel.bpf_stats_enabled=1

echo "load: $NLOAD x cpu_split on $(nproc) CPUs; sampling at $HZ Hz for $DUR s" >&2
for _ in $(seq "$NLOAD"); do
	build/workloads/cpu_split $((DUR + 30)) &
	LOAD_PIDS+=($!)
done
sleep 2

/usr/bin/time -v -o "$OUT/fw.time" \
	"$FW" record -a -F "$HZ" -d "$DUR" --quiet -o "$OUT/fw.pb.gz" >"$OUT/fw.log" 2>&1 &
FW_TIME=$!
TOOL_PIDS+=($FW_TIME)
/usr/bin/time -v -o "$OUT/perf.time" \
	perf record -q -e cpu-clock -F "$HZ" -a -g -o "$OUT/perf.data" -- sleep "$DUR" >"$OUT/perf.log" 2>&1 &
PERF_TIME=$!
TOOL_PIDS+=($PERF_TIME)
T0=$(date +%s.%N)

# /usr/bin/time forks the tool; the tool's pid is time's only child.
FW_PID=""
for _ in $(seq 50); do
	FW_PID=$(ps -o pid= --ppid "$FW_TIME" | tr -d ' ' | head -n1)
	[ -n "$FW_PID" ] && break
	sleep 0.1
done
[ -n "$FW_PID" ] || die "could not find the flamewatch process under /usr/bin/time"
TOOL_PIDS+=("$FW_PID")
PERF_PID=$(ps -o pid= --ppid "$PERF_TIME" | tr -d ' ' | head -n1)
[ -z "$PERF_PID" ] || TOOL_PIDS+=("$PERF_PID")

# The programs' counters vanish when flamewatch exits and unloads them, so
# they are read until then and the last reading is used. They are read from
# flamewatch's own /proc fdinfo (prog_id, run_time_ns, run_cnt: the same
# kernel counters `bpftool prog show` prints), which picks out exactly the
# programs this process holds even when bpftool cannot fill in "pids" or
# another flamewatch has programs of the same names loaded, and costs little
# enough to poll every 0.2 s. bpftool, which takes seconds per call on a busy
# machine, is run once to name the programs.
prog_counters() {
	local f
	for f in /proc/"$FW_PID"/fdinfo/*; do
		awk '/^prog_id:/ {id = $2} /^run_time_ns:/ {t = $2} /^run_cnt:/ {c = $2}
		     END {if (id != "" && c != "") print id, t, c}' "$f" 2>/dev/null || true
	done | sort -un
}
sleep $((DUR > 6 ? DUR - 5 : 1))
bpftool prog show -j >"$OUT/progs.json" 2>/dev/null || echo '[]' >"$OUT/progs.json"
while kill -0 "$FW_PID" 2>/dev/null; do
	snap=$(prog_counters)
	if [ -n "$snap" ]; then
		{ date +%s.%N; echo "$snap"; } >"$OUT/bpf.tmp"
		mv "$OUT/bpf.tmp" "$OUT/bpf.last"
	fi
	sleep 0.2
done

wait "$FW_TIME" || true
wait "$PERF_TIME" || true
TOOL_PIDS=()

python3 - "$OUT" "$T0" "$DUR" <<'EOF'
import glob, json, os, re, sys

out, t0, dur = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])

def gnu_time(path):
    r = {}
    try:
        text = open(path).read()
    except OSError:
        return None
    for key, pat in (("user", r"User time \(seconds\): ([\d.]+)"), ("sys", r"System time \(seconds\): ([\d.]+)"),
                     ("rss_kb", r"Maximum resident set size \(kbytes\): (\d+)"), ("exit", r"Exit status: (\d+)"),
                     ("wall", r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)")):
        m = re.search(pat, text)
        r[key] = m.group(1) if m else None
    if r["wall"]:
        secs = 0.0
        for part in r["wall"].split(":"):
            secs = secs * 60 + float(part)
        r["wall"] = secs
    m = re.search(r'Command exited with non-zero status (\d+)', text)
    if m:
        r["exit"] = m.group(1)
    return r

def bpf_stats():
    """(run_time_ns, run_cnt, {name: (ns, runs)}, seconds since start) from
    the last reading of flamewatch's programs, or None."""
    try:
        ts, *lines = open(os.path.join(out, "bpf.last")).read().splitlines()
    except (OSError, ValueError):
        return None
    try:
        names_by_id = {p["id"]: p.get("name", "?") for p in json.load(open(os.path.join(out, "progs.json")))}
    except (OSError, ValueError, KeyError, TypeError):
        names_by_id = {}
    per = {}
    for line in lines:
        pid_, ns, cnt = (int(x) for x in line.split())
        name = names_by_id.get(pid_, f"id {pid_}")
        a, b = per.get(name, (0, 0))
        per[name] = (a + ns, b + cnt)
    if not per:
        return None
    return sum(v[0] for v in per.values()), sum(v[1] for v in per.values()), per, float(ts) - t0

rows = []
for tool, f in (("flamewatch", "fw.time"), ("perf", "perf.time")):
    t = gnu_time(os.path.join(out, f))
    if not t or t["user"] is None:
        rows.append((tool, "-", "-", "-", "-", "-", "-", "no /usr/bin/time output"))
        continue
    cpu = float(t["user"]) + float(t["sys"])
    wall = t["wall"] or dur
    note = "" if t["exit"] in (None, "0") else f"exit status {t['exit']}"
    bpf = ("-", "-", "-")
    total = "-"
    if tool == "flamewatch":
        s = bpf_stats()
        if s:
            ns, cnt, per_prog, age = s
            bpf = (f"{ns:,}", f"{cnt:,}", f"{ns / cnt:,.0f}" if cnt else "-")
            total = f"{100 * (cpu + ns / 1e9) / wall:.2f}"
            note = (note + "; " if note else "") + f"BPF read at {age:.1f} s"
        else:
            note = (note + "; " if note else "") + "no BPF stats (programs not found)"
    rows.append((tool, f"{cpu:.2f}", f"{100 * cpu / wall:.2f}", total, f"{int(t['rss_kb']) / 1024:.1f}",
                 *bpf, note))

head = ("tool", "CPU s", "% of one core", "% with BPF", "peak RSS MB", "BPF ns", "BPF runs", "ns/run",
        "notes")
w = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
for r in [head] + rows:
    print("  ".join(str(c).rjust(w[i]) if 0 < i < 8 else str(c).ljust(w[i]) for i, c in enumerate(r)).rstrip())

s = bpf_stats()
if s:
    print("\nflamewatch BPF programs (run time is charged to the interrupted tasks, not to flamewatch):")
    for name, (ns, cnt) in sorted(s[2].items(), key=lambda kv: -kv[1][0]):
        print(f"  {name:<16} {ns:>14,} ns  {cnt:>10,} runs  {ns / cnt if cnt else 0:>8,.0f} ns/run")
EOF

for f in fw.log perf.log; do
	if [ -s "$OUT/$f" ]; then
		echo "--- $f" >&2
		tail -n 5 "$OUT/$f" >&2
	fi
done
ls -l "$OUT/fw.pb.gz" "$OUT/perf.data" 2>/dev/null | awk '{print "output: " $9 " " $5 " bytes"}' >&2
