#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# flamewatch's NVML metrics next to nvidia-smi on a real GPU machine.
#
#   bench/gpu/nvml_compare.sh [SECONDS]      (default 20 s of load)
#
# Needs: build/flamewatch (prebuilt), nvidia-smi, python3 with PyTorch and
# CUDA. Installs nothing. Run from the repository root. FLAMEWATCH_BASE=
# another build (e.g. the previous release) measures its round cost in the
# same run, for the ratio. Steps:
#   1. `flamewatch gpu`: one NVML round printed, and the CPU cost of a round
#      per GPU at 1 s (20 rounds) and 100 ms (50 rounds) intervals, with
#      the CPU time of each kind of NVML query (--breakdown); the base
#      build's the same way (no BPF, no server needed);
#   2. `flamewatch run` (needs root for BPF; skipped with a note otherwise),
#      --gpu-interval 1s, beside a PyTorch matmul loop on GPU 0;
#   3. five times during the load, nvidia-smi and our API in the same
#      second; per metric: ours, nvidia-smi's, the difference, the tolerance;
#   4. the collection cost from `run`'s own count at exit;
#   5. the per-process rows: the pids NVML lists (nvidia-smi) and ours, and
#      our rows for the load's pid (the python process itself, which
#      prints its pid: `timeout`'s pid is not the one on the GPU); then one
#      `flamewatch gpu` round beside the load, its per-process rows printed;
#   6. with pynvml, the CPU time of each NVML query we make (median and
#      best of 20), per-process ones included.
# PCIe RX is also compared with the bytes the load itself copies to the GPU
# (nvidia-smi dmon reads a 20 ms window, which mostly misses the copies).
# Steps 5 and 6 run while the load does, before step 4.
# Output: a table on stdout; everything (logs, raw answers) under $OUT (or
# a temporary directory). Every step has a time limit; the script ends in
# about SECONDS + 4 minutes at most and kills what it started. The load
# runs for SECONDS / 2 of warm-up plus the five comparisons (~6 s each).
set -u
LOAD_S=${1:-20}
FW=${FLAMEWATCH:-build/flamewatch}
OUTDIR=${OUT:-$(mktemp -d /tmp/nvml_compare.XXXXXX)}
mkdir -p "$OUTDIR"
LOG="$OUTDIR/nvml_compare.log"
PIDS=()

say() { echo "$*" | tee -a "$LOG"; }
cleanup() {
	for p in "${PIDS[@]}"; do kill -INT "$p" 2>/dev/null; done
	sleep 2
	for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
}
trap cleanup EXIT

say "== nvml_compare $(date -u +%FT%TZ) on $(hostname); logs in $OUTDIR"
[ -x "$FW" ] || { say "ERROR: $FW missing (build it, or set FLAMEWATCH=)"; exit 1; }
command -v nvidia-smi >/dev/null || { say "ERROR: no nvidia-smi"; exit 1; }

# NVML where the driver put it, even if the loader's cache does not list it.
for d in /usr/lib /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/nvidia/lib64; do
	[ -e "$d/libnvidia-ml.so.1" ] && { export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; }
done
say "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
timeout 20 nvidia-smi -L 2>&1 | tee -a "$LOG"

say ""
say "== 1. flamewatch gpu: one round, then what a round costs"
timeout 30 "$FW" gpu > "$OUTDIR/gpu_one_round.txt" 2> "$OUTDIR/gpu_one_round.err"
say "exit $?; $(grep -c '^flamewatch_gpu' "$OUTDIR/gpu_one_round.txt") points; unavailable:"
grep -i "unavailable\|no GPU\|error" "$OUTDIR/gpu_one_round.err" | sed 's/^/   /' | tee -a "$LOG"
grep 'gpu="0"' "$OUTDIR/gpu_one_round.txt" | sed 's/^/   /' | tee -a "$LOG"
cost() {	# BUILD INTERVAL ROUNDS [--breakdown]
	timeout 120 "$1" gpu --rounds "$3" --interval "$2" --quiet ${4:-} 2>> "$OUTDIR/gpu_cost.err" |
		tee "$OUTDIR/gpu_cost_$(basename "$(dirname "$1")")_$2.txt" | tail -n 30
}
# COST_ROUNDS="N1 N2": rounds at 1 s and at 100 ms (fewer for a quick check).
set -- ${COST_ROUNDS:-20 50}
R1=$1 R2=$2
say "cost at 1 s (the agent's default), $R1 rounds:"
cost "$FW" 1s "$R1" --breakdown | sed 's/^/   /' | tee -a "$LOG"
say "cost at 100 ms (utilisation from nvmlDeviceGetSamples), $R2 rounds:"
cost "$FW" 100ms "$R2" --breakdown | sed 's/^/   /' | tee -a "$LOG"
if [ -n "${FLAMEWATCH_BASE:-}" ] && [ -x "$FLAMEWATCH_BASE" ]; then
	say "base build $FLAMEWATCH_BASE, same rounds:"
	b1=$(cost "$FLAMEWATCH_BASE" 1s "$R1" | tail -1)
	b2=$(cost "$FLAMEWATCH_BASE" 100ms "$R2" | tail -1)
	say "   1 s:    $b1"
	say "   100 ms: $b2"
	n1=$(tail -1 "$OUTDIR/gpu_cost_$(basename "$(dirname "$FW")")_1s.txt")
	python3 - "$n1" "$b1" <<'PYEOF' | tee -a "$LOG"
import re, sys
def per_gpu(line):
    m = re.search(r"cpu_us_per_gpu_round ([0-9.]+)", line)
    return float(m.group(1)) if m else None
new, base = per_gpu(sys.argv[1]), per_gpu(sys.argv[2])
if new and base:
    print(f"   at 1 s, CPU per GPU per round: this build {new / 1000:.3f} ms, base {base / 1000:.3f} ms, base/this = {base / new:.1f}")
PYEOF
fi
say ""
say "== 2. flamewatch run + PyTorch load (${LOAD_S} s)"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
RUN_OK=0
timeout $((LOAD_S + 240)) "$FW" run --listen "127.0.0.1:$PORT" --data "$OUTDIR/data" --node bench \
	--interval 1s --gpu-interval 1s > "$OUTDIR/run.log" 2>&1 &
RUN_PID=$!
PIDS+=("$RUN_PID")
for _ in $(seq 1 120); do
	if python3 -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:$PORT/healthz', timeout=1)" 2>/dev/null; then
		RUN_OK=1; break
	fi
	kill -0 "$RUN_PID" 2>/dev/null || break
	sleep 0.5
done
if [ "$RUN_OK" = 1 ]; then
	say "run is up on port $PORT"
else
	say "NOTE: flamewatch run did not start (root/BPF needed?); comparing with \`flamewatch gpu\` instead:"
	tail -5 "$OUTDIR/run.log" | sed 's/^/   /' | tee -a "$LOG"
fi

cat > "$OUTDIR/load.py" <<'EOF'
import sys, time, torch
dur = float(sys.argv[1])
x = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
y = torch.randn(8192, 8192, device="cuda:0", dtype=torch.bfloat16)
h = torch.randn(64 << 20, dtype=torch.float32).pin_memory()   # 256 MiB for PCIe traffic
import os
print("load: started pid", os.getpid(), flush=True)
# Host-to-device bytes copied so far, once a second: the reference for our
# PCIe RX rate (nvidia-smi dmon looks at a 20 ms window, which mostly misses
# these bursts).
COPY = 256 << 20
end = time.time() + dur
n = copied = 0
said = 0.0
while time.time() < end:
    for _ in range(20):
        z = x @ y
    if n % 10 == 0:
        d = h.to("cuda:0", non_blocking=True)
        copied += COPY
    torch.cuda.synchronize()
    n += 1
    if time.time() - said >= 1:
        said = time.time()
        print("load: copied", said, copied, flush=True)
print("load: done", n, "iterations", copied, "bytes copied to the GPU", flush=True)
EOF
# The load outlasts the comparisons (about 6 s each) and is stopped after them.
timeout $((LOAD_S + 150)) python3 "$OUTDIR/load.py" $((LOAD_S + 120)) > "$OUTDIR/load.log" 2>&1 &
LOAD_PID=$!
PIDS+=("$LOAD_PID")
for _ in $(seq 1 120); do grep -q "load: started" "$OUTDIR/load.log" && break; kill -0 $LOAD_PID 2>/dev/null || break; sleep 0.5; done
if ! grep -q "load: started" "$OUTDIR/load.log"; then
	say "WARNING: the PyTorch load did not start:"; tail -5 "$OUTDIR/load.log" | sed 's/^/   /' | tee -a "$LOG"
fi
# The pid NVML sees is python's, not timeout's ($LOAD_PID): the load says it.
GPU_PID=$(sed -n 's/^load: started pid \([0-9]*\).*/\1/p' "$OUTDIR/load.log" | head -1)
say "load pid $GPU_PID (under timeout, pid $LOAD_PID)"
GPU_PID=${GPU_PID:-$LOAD_PID}

say ""
say "== 3. ours vs nvidia-smi (GPU 0; per-process rows: the load's pid)"
timeout $((LOAD_S + 80)) python3 - "$FW" "$PORT" "$RUN_OK" "$GPU_PID" "$LOAD_S" "$OUTDIR" <<'EOF' 2>&1 | tee -a "$LOG"
import json, os, subprocess, sys, time, urllib.request
fw, port, run_ok, load_pid, load_s, outdir = sys.argv[1], sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]), float(sys.argv[5]), sys.argv[6]
raw = open(os.path.join(outdir, "samples.jsonl"), "w")

def sh(argv, t=15):
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=t).stdout
    except Exception as e:
        return ""

# (our metric, nvidia-smi field, smi value -> our unit, tolerance (abs, rel), note)
FIELDS = [
    ("flamewatch_gpu_utilization_percent", "utilization.gpu", 1, (15, 0), "ours: mean of samples in the last 1 s"),
    ("flamewatch_gpu_memory_utilization_percent", "utilization.memory", 1, (15, 0), "same"),
    ("flamewatch_gpu_memory_used_bytes", "memory.used", 1 << 20, (1 << 30, 0.02), "MiB in smi"),
    ("flamewatch_gpu_memory_total_bytes", "memory.total", 1 << 20, (1 << 30, 0.01), ""),
    ("flamewatch_gpu_sm_clock_hertz", "clocks.sm", 1e6, (0, 0.10), ""),
    ("flamewatch_gpu_memory_clock_hertz", "clocks.mem", 1e6, (0, 0.02), ""),
    ("flamewatch_gpu_sm_clock_max_hertz", "clocks.max.sm", 1e6, (1e6, 0), ""),
    ("flamewatch_gpu_memory_clock_max_hertz", "clocks.max.mem", 1e6, (1e6, 0), ""),
    ("flamewatch_gpu_power_watts", "power.draw", 1, (0, 0.15), "both ~1 s averages on Hopper"),
    ("flamewatch_gpu_power_limit_watts", "enforced.power.limit", 1, (1, 0), ""),
    ("flamewatch_gpu_temperature_celsius", "temperature.gpu", 1, (3, 0), ""),
    ("flamewatch_gpu_throttle_reasons", "clocks_event_reasons.active", None, (0, 0), "bit mask; may change"),
    ("flamewatch_gpu_mig_mode", "mig.mode.current", None, (0, 0), "Enabled=1"),
]
# Fields this nvidia-smi knows (older ones lack some names).
def smi_ok(f):
    return "not a valid field" not in sh(["nvidia-smi", "-i", "0", f"--query-gpu={f}", "--format=csv,noheader"]) and \
           sh(["nvidia-smi", "-i", "0", f"--query-gpu={f}", "--format=csv,noheader"]).strip() != ""
alt = {"clocks_event_reasons.active": "clocks_throttle_reasons.active", "enforced.power.limit": "power.limit"}
fields = []
for row in FIELDS:
    f = row[1]
    if not smi_ok(f) and f in alt:
        f = alt[f]
    fields.append((row[0], f if smi_ok(f) else None) + row[2:])
qf = [f[1] for f in fields if f[1]]

our_pids, smi_pids = {}, set()


def ours_now(t_smi):
    """Our points near t_smi: from the API when run is up, else one `flamewatch gpu` round."""
    pts = {}
    if run_ok:
        q = '{gpu="0",node="bench"}'
        url = f"http://127.0.0.1:{port}/api/v1/gpu/metrics?from=now-20s&to=now%2B5s&step=0&query=" + urllib.parse.quote(q)
        try:
            body = json.load(urllib.request.urlopen(url, timeout=5))
        except Exception as e:
            print("API error:", e); return pts, None
        for s in body["series"]:
            pid = s["labels"].get("pid")
            if pid is not None:
                our_pids.setdefault(int(pid), s["labels"].get("comm"))
            if pid is not None and int(pid) != load_pid:
                continue
            name = s["metric"] + (":proc" if pid else "")
            ps = s["points"]
            if name.startswith(("flamewatch_gpu_utilization", "flamewatch_gpu_memory_utilization")):
                win = [v for ts, v in ps if t_smi - 1.0 <= ts / 1e9 <= t_smi + 0.1]
                if win:
                    pts[name] = (sum(win) / len(win), 0.0)
                    continue
            best = min(ps, key=lambda p: abs(p[0] / 1e9 - t_smi))
            pts[name] = (best[1], best[0] / 1e9 - t_smi)
        return pts, "api"
    out = sh([fw, "gpu"])
    for line in out.splitlines():
        if not line.startswith("flamewatch_gpu") or 'gpu="0"' not in line:
            continue
        head, v, ts = line.rsplit(" ", 2)
        name = head.split("{")[0]
        if 'pid="' in head:
            p = head.split('pid="')[1].split('"')[0]
            our_pids.setdefault(int(p), head.split('comm="')[1].split('"')[0] if 'comm="' in head else None)
            if f'pid="{load_pid}"' not in head:
                continue
            name += ":proc"
        pts[name] = (float(v), int(ts) / 1e9 - t_smi)
    return pts, "flamewatch gpu"

def num(s):
    s = s.strip()
    if s in ("Enabled",): return 1.0
    if s in ("Disabled",): return 0.0
    try:
        return float(int(s, 16)) if s.startswith("0x") else float(s)
    except ValueError:
        return None

import urllib.parse
time.sleep(load_s / 2)                     # warm up: clocks and power settle
rows = {}
rounds = 5
for k in range(rounds):
    t0 = time.time()
    smi = sh(["nvidia-smi", "-i", "0", "--query-gpu=" + ",".join(qf), "--format=csv,noheader,nounits"])
    t_smi = (t0 + time.time()) / 2
    apps = sh(["nvidia-smi", "-i", "0", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"])
    pmon = sh(["nvidia-smi", "pmon", "-i", "0", "-c", "1", "-s", "u"], t=20)
    dmon = sh(["nvidia-smi", "dmon", "-i", "0", "-c", "1", "-s", "t"], t=20)
    time.sleep(2.5 if run_ok else 0)       # our batch for that second reaches the store
    ours, src = ours_now(t_smi)
    vals = dict(zip(qf, [x.strip() for x in smi.split(",")]))
    rec = {"t": t_smi, "smi": vals, "ours": ours, "apps": apps, "pmon": pmon, "dmon": dmon}
    raw.write(json.dumps(rec) + "\n")
    for name, f, scale, tol, note in fields:
        sv = num(vals[f]) if f and f in vals else None
        if sv is not None and scale:
            sv *= scale
        rows.setdefault(name, []).append((ours.get(name, (None, None))[0], sv, ours.get(name, (None, None))[1]))
    # PCIe RX against what the load copied to the GPU over the last 5 s.
    cps = []
    for line in open(os.path.join(outdir, "load.log")):
        p = line.split()
        if len(p) == 4 and p[:2] == ["load:", "copied"]:
            cps.append((float(p[2]), int(p[3])))
    win = [c for c in cps if t_smi - 5.5 <= c[0] <= t_smi + 0.5]
    load_rx = (win[-1][1] - win[0][1]) / (win[-1][0] - win[0][0]) if len(win) >= 2 and win[-1][0] > win[0][0] else None
    rows.setdefault("flamewatch_gpu_pcie_rx_bytes_per_second:load", []).append(
        (ours.get("flamewatch_gpu_pcie_rx_bytes_per_second", (None,))[0], load_rx, None))
    # PCIe from dmon (MB/s): columns "# gpu rxpci txpci" (a 20 ms window: informative)
    for line in dmon.splitlines():
        p = line.split()
        if p and p[0] == "0" and len(p) >= 3:
            rows.setdefault("flamewatch_gpu_pcie_rx_bytes_per_second", []).append(
                (ours.get("flamewatch_gpu_pcie_rx_bytes_per_second", (None,))[0], num(p[1]) and num(p[1]) * 1e6, None))
            rows.setdefault("flamewatch_gpu_pcie_tx_bytes_per_second", []).append(
                (ours.get("flamewatch_gpu_pcie_tx_bytes_per_second", (None,))[0], num(p[2]) and num(p[2]) * 1e6, None))
    # per process: memory (MiB) and SM %
    smi_mem = smi_sm = None
    for line in apps.splitlines():
        p = [x.strip() for x in line.split(",")]
        if p and p[0].isdigit():
            smi_pids.add(int(p[0]))
        if len(p) >= 2 and p[0].isdigit() and int(p[0]) == load_pid:
            smi_mem = num(p[1]) * (1 << 20) if num(p[1]) is not None else None
    for line in pmon.splitlines():
        p = line.split()
        if len(p) >= 4 and p[1].isdigit() and int(p[1]) == load_pid:
            smi_sm = num(p[3])
    rows.setdefault("flamewatch_gpu_process_memory_used_bytes:proc", []).append(
        (ours.get("flamewatch_gpu_process_memory_used_bytes:proc", (None,))[0], smi_mem, None))
    rows.setdefault("flamewatch_gpu_process_utilization_percent:proc", []).append(
        (ours.get("flamewatch_gpu_process_utilization_percent:proc", (None,))[0], smi_sm, None))
    print(f"round {k + 1}/{rounds}: ours from {src}", flush=True)

tols = {f[0]: f[3] for f in fields}
# Ours is the mean over a second, the load's over five, of copies every ~0.3 s.
tols.update({"flamewatch_gpu_pcie_rx_bytes_per_second": (200e6, 0.5), "flamewatch_gpu_pcie_tx_bytes_per_second": (200e6, 0.5),
             "flamewatch_gpu_pcie_rx_bytes_per_second:load": (50e6, 0.35),
             "flamewatch_gpu_process_memory_used_bytes:proc": (64 << 20, 0.02), "flamewatch_gpu_process_utilization_percent:proc": (20, 0)})
print()
print(f"{'metric (GPU 0)':52s} {'ours (median)':>16s} {'nvidia-smi':>16s} {'diff':>12s} {'tolerance':>14s}  verdict   (n, max |dt| s)")
bad = 0
for name, vs in rows.items():
    pairs = [(o, s) for o, s, dt in vs if o is not None and s is not None]
    dts = [abs(dt) for o, s, dt in vs if dt is not None]
    if not pairs:
        o = next((o for o, s, dt in vs if o is not None), None)
        s = next((s for o, s, dt in vs if s is not None), None)
        print(f"{name:52s} {('%.6g' % o) if o is not None else 'absent':>16s} {('%.6g' % s) if s is not None else 'n/a':>16s} {'':>12s} {'':>14s}  {'-':8s}")
        continue
    pairs.sort(key=lambda p: p[0])
    o_med = pairs[len(pairs) // 2][0]
    s_med = sorted(s for _, s in pairs)[len(pairs) // 2]
    ta, tr = tols.get(name, (0, 0))
    tol = max(ta, tr * abs(s_med))
    ok = abs(o_med - s_med) <= tol
    bad += not ok
    print(f"{name:52s} {o_med:16.6g} {s_med:16.6g} {o_med - s_med:12.4g} {tol:14.4g}  {'OK' if ok else 'DIFFERS':8s}  ({len(pairs)}, {max(dts) if dts else 0:.2f})")
print(f"\n{bad} metric(s) outside tolerance; raw answers in {outdir}/samples.jsonl")
print("\nper-process rows (GPU 0):")
print(f"  load pid {load_pid}; nvidia-smi --query-compute-apps listed {sorted(smi_pids) or 'none'}")
print(f"  our rows named {', '.join(f'{p} ({c})' for p, c in sorted(our_pids.items())) or 'no process'}")
for name in ("flamewatch_gpu_process_memory_used_bytes:proc", "flamewatch_gpu_process_utilization_percent:proc"):
    got = [o for o, s, dt in rows.get(name, []) if o is not None]
    print(f"  {name[:-5]} for pid {load_pid}: {len(got)}/{rounds} rounds" + (f", median {sorted(got)[len(got) // 2]:.6g}" if got else " (ABSENT)"))
EOF

say ""
say "== 5. flamewatch gpu beside the load: the load's per-process rows (no server involved)"
timeout 30 "$FW" gpu --rounds 2 --interval 1s > "$OUTDIR/gpu_load_round.txt" 2>> "$OUTDIR/gpu_cost.err"
grep 'pid="' "$OUTDIR/gpu_load_round.txt" | sed 's/^/   /' | tee -a "$LOG"
grep -q "pid=\"$GPU_PID\"" "$OUTDIR/gpu_load_round.txt" || say "   NO ROW for pid $GPU_PID"

say ""
say "== 6. CPU per NVML call on GPU 0 beside the load (pynvml; median and best of 20)"
timeout 60 python3 - <<'PYEOF' 2>&1 | sed 's/^/   /' | tee -a "$LOG"
import time
try:
    import pynvml as nv
except ImportError:
    print("no pynvml: skipped"); raise SystemExit
nv.nvmlInit()
h = nv.nvmlDeviceGetHandleByIndex(0)
now_us = lambda: int(time.time() * 1e6)
calls = {
    "GetUtilizationRates": lambda: nv.nvmlDeviceGetUtilizationRates(h),
    "GetMemoryInfo": lambda: nv.nvmlDeviceGetMemoryInfo(h),
    "GetMemoryInfo_v2": lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2),
    "GetClockInfo(SM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
    "GetClockInfo(MEM)": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
    "GetPowerUsage": lambda: nv.nvmlDeviceGetPowerUsage(h),
    "GetTemperature": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
    "GetCurrentClocksEventReasons": lambda: nv.nvmlDeviceGetCurrentClocksThrottleReasons(h),
    "GetTotalEnergyConsumption": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(h),
    "GetSamples(GPU_UTIL, now-1s)": lambda: nv.nvmlDeviceGetSamples(h, nv.NVML_GPU_UTILIZATION_SAMPLES, now_us() - 1000000),
    "GetFieldValues(197,198)": lambda: nv.nvmlDeviceGetFieldValues(h, [197, 198]),
    "GetFieldValues(197,198,83)": lambda: nv.nvmlDeviceGetFieldValues(h, [197, 198, 83]),
    "GetFieldValues(83)": lambda: nv.nvmlDeviceGetFieldValues(h, [83]),
    "GetProcessUtilization(now-1s)": lambda: nv.nvmlDeviceGetProcessUtilization(h, now_us() - 1000000),
    "GetComputeRunningProcesses": lambda: nv.nvmlDeviceGetComputeRunningProcesses(h),
    "GetGraphicsRunningProcesses": lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(h),
}
for name, fn in calls.items():
    ts, err = [], ""
    for _ in range(20):
        t0 = time.thread_time()
        try:
            fn()
        except Exception as e:   # NVMLError, or an older pynvml without the call
            err = f"  ({type(e).__name__}: {e})"
        ts.append(time.thread_time() - t0)
        time.sleep(0.01)
    ts.sort()
    print(f"{name:32s} median {ts[10] * 1e3:7.3f} ms  best {ts[0] * 1e3:7.3f} ms CPU{err}")
PYEOF

say ""
say "== 4. collection cost inside run"
kill -INT "$LOAD_PID" 2>/dev/null
for _ in $(seq 1 20); do kill -0 "$LOAD_PID" 2>/dev/null || break; sleep 0.5; done
tail -2 "$OUTDIR/load.log" | tee -a "$LOG"
if [ "$RUN_OK" = 1 ]; then
	kill -INT "$RUN_PID" 2>/dev/null
	# run prints its NVML account as it stops. In one clean-clone run on a
	# loaded 2-CPU VM it had not, 15 s after SIGINT: it was still detaching
	# its BPF programs (each close of a tracepoint link waits for RCU; 0.1 s
	# each on an idle host).
	FW_PID=$(pgrep -P "$RUN_PID" | head -1)
	T0=$(date +%s.%N)
	for _ in $(seq 1 120); do kill -0 "$RUN_PID" 2>/dev/null || break; sleep 0.5; done
	if kill -0 "$RUN_PID" 2>/dev/null; then
		say "run had not stopped 60 s after SIGINT; where its threads wait:"
		for t in /proc/"$FW_PID"/task/*; do
			say "   thread ${t##*/} $(cat "$t/comm" 2>/dev/null) state $(awk '/^State/ {print $2}' "$t/status" 2>/dev/null) wchan $(cat "$t/wchan" 2>/dev/null)"
			sed 's/^/      /' "$t/stack" 2>/dev/null | tee -a "$LOG"
		done
		tail -8 "$OUTDIR/run.log" | sed 's/^/   log: /' | tee -a "$LOG"
	else
		wait "$RUN_PID"
		RC=$?
		say "run stopped $(python3 -c "import sys,time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$T0") s after SIGINT, exit $RC"
	fi
	grep -E "nvml:" "$OUTDIR/run.log" | tee -a "$LOG"
	grep -E "getrusage|CPU" "$OUTDIR/run.log" | tail -3 >> "$LOG"
fi
say "done; logs in $OUTDIR"
