#!/bin/sh
# Every check this repository makes on a GPU machine, in one bounded run
# (about 9 minutes), for the closing notes of issues 7, 8 and 10:
#
#   OUT=/tmp/out bench/gpu/run_all.sh BUILD_DIR [cuda]
#
# BUILD_DIR holds flamewatch and libflamewatch-cuda.so (from `make`) and
# dist/flamewatch (from `make dist`); nothing is built here. Needs root (BPF),
# nvidia-smi and python3 with PyTorch. Logs go under $OUT. FLAMEWATCH_BASE=
# an older flamewatch binary adds its NVML round cost to step 2, for the ratio.
# With `cuda`, only the GPU time checks (issues 8 and 6), with more repeats:
# under 8 minutes. CUDA_MODES= picks the modes of bench/gpu/cuda_overhead.py
# (default plain,fw-agent,fw-agent-always,torchprof).
set -u
cd "$(dirname "$0")/../.."
B=${1:-build}
ONLY=${2:-all}
OUT=${OUT:-$(mktemp -d /tmp/fw-gpu.XXXXXX)}
mkdir -p "$OUT"
PORT=7181
# Each run starts PyTorch (~15 s a run on the H200): four modes fit three
# repeats of both workloads in the budget, seven fitted one.
CUDA_MODES=${CUDA_MODES:-plain,fw-agent,fw-agent-always,torchprof}
# CUDA_BUDGET= (seconds of runs) from the environment, else 170 (330 with cuda).
if [ "$ONLY" = cuda ]; then
	CUDA_BUDGET=${CUDA_BUDGET:-330}
else
	CUDA_BUDGET=${CUDA_BUDGET:-170}
fi
CUDA_TIMEOUT=$((CUDA_BUDGET + 130))

if [ "$ONLY" != cuda ]; then
echo "== 1. the release binary on this distribution (issue 10)"
timeout 90 sh deploy/smoke-test.sh "$B/dist" > "$OUT/smoke.log" 2>&1
echo "exit $?"
head -c 6000 "$OUT/smoke.log"

echo
echo "== 2. NVML metrics against nvidia-smi (issue 7)"
FLAMEWATCH="$B/flamewatch" OUT="$OUT/nvml" timeout 300 bash bench/gpu/nvml_compare.sh 20 \
	> "$OUT/nvml.log" 2>&1
echo "exit $?"
tail -n 90 "$OUT/nvml.log"
fi

echo
echo "== 3. GPU time: overhead and accuracy, with the agent attached (issue 8)"
OUT="$OUT/cuda" PYTHONUNBUFFERED=1 timeout $CUDA_TIMEOUT python3 bench/gpu/cuda_overhead.py \
	--build "$B" --budget-s $CUDA_BUDGET --repeats 3 --agent-port $PORT --modes "$CUDA_MODES" \
	--agent-cmd "exec $B/flamewatch run --listen 127.0.0.1:$PORT --data $OUT/fwdata --interval 1s --no-cpu-strips" \
	> "$OUT/cuda.log" 2>&1
echo "exit $?"
grep -v '^{' "$OUT/cuda.log" | tail -n 60
echo "-- the agent's own account (one line per agent start and stop):"
grep -hE "python: |GPU time: |unwind tables: |lost|dropped" "$OUT/cuda/agent.log" 2>/dev/null | tail -n 12

echo
echo "== 4. the GPU flame graph and kernel table the agent stored"
"$B/flamewatch" server --listen 127.0.0.1:$PORT --data "$OUT/fwdata" > "$OUT/server.log" 2>&1 &
SRV=$!
sleep 2
timeout 60 python3 - "$PORT" "$OUT" <<'EOF'
import json, statistics, sys, urllib.parse, urllib.request
port, out = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
def get(path):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return r.read().decode()
win = "from=now-1h&to=now"
folded = get(f"/api/v1/profile?type=gpu_time&format=folded&{win}")
open(f"{out}/gpu_time.folded", "w").write(folded)
rows = []
for line in folded.splitlines():
    stack, _, n = line.rpartition(" ")
    rows.append((int(n), stack))
rows.sort(reverse=True)
total = sum(n for n, _ in rows)
print(f"gpu_time flame graph: {len(rows)} stacks, {total / 1e9:.3f} s of GPU time")
for n, s in rows[:6]:
    frames = s.split(";")
    short = ";".join(frames[:2] + ["..."] + frames[-6:]) if len(frames) > 9 else s
    print(f"  {n / 1e6:10.2f} ms  {short[:300]}")
cpu = get(f"/api/v1/profile?type=cpu&format=folded&{win}&query=" + urllib.parse.quote('{comm="python3"}'))
open(f"{out}/cpu_python3.folded", "w").write(cpu)
named = sum(int(l.rpartition(" ")[2]) for l in cpu.splitlines() if ".py" in l or "[python]" in l)
placeholder = sum(int(l.rpartition(" ")[2]) for l in cpu.splitlines() if "[python code" in l)
allp = sum(int(l.rpartition(" ")[2]) for l in cpu.splitlines())
print(f"CPU samples of python3: {allp}; with a placeholder Python frame: {placeholder}")
pyfr = {}
for l in cpu.splitlines():
    for f in l.rpartition(" ")[0].split(";"):
        if "(" not in f and "::" not in f and not f.startswith(("lib", "_", "[", "Py", "python")) and "+0x" not in f:
            pyfr[f] = pyfr.get(f, 0) + int(l.rpartition(" ")[2])
print("  frame names seen in CPU stacks (not C++/libs):", sorted(pyfr.items(), key=lambda kv: -kv[1])[:12])
top = json.loads(get(f"/api/v1/gpu/kernels/top?{win}"))
open(f"{out}/kernels_top.json", "w").write(json.dumps(top, indent=1))
print(f"kernel table: total {top.get('total_ns', 0) / 1e9:.3f} s")
for k in top.get("kernels", [])[:8]:
    print(f"  {k.get('calls', 0):8} calls  {k.get('total_ns', 0) / 1e6:10.2f} ms  {k.get('name', '')[:90]}")
# The independent measure: torch.profiler's kernel ns per step, times the
# steps the fw-agent runs made.
try:
    res = json.load(open(f"{out}/cuda/cuda_overhead.json"))
except OSError:
    res = []
expect = 0
for wl in {r["workload"] for r in res}:
    prof = [r["prof_kernel_ns"] / r["steps"] for r in res
            if r["workload"] == wl and r["mode"] == "torchprof" and r.get("prof_kernel_ns")]
    steps = sum(r["steps"] for r in res if r["workload"] == wl and r["mode"].startswith("fw-agent"))
    if prof and steps:
        expect += statistics.median(prof) * steps
        print(f"  {wl}: {steps} steps under the agent x {statistics.median(prof):.0f} kernel ns/step "
              f"(torch.profiler)")
if expect:
    kern = sum(k.get("total_ns", 0) for k in top.get("kernels", []) if not k.get("name", "").startswith("[mem"))
    print(f"agent's kernel GPU time {kern / 1e9:.4f} s vs torch.profiler-based {expect / 1e9:.4f} s: "
          f"{(kern / expect - 1) * 100:+.2f} %")
EOF
kill $SRV 2>/dev/null
wait $SRV 2>/dev/null
tail -n 5 "$OUT/server.log"
ls -la "$OUT" | head -30
