#!/bin/sh
# Does the GPU count kernel launches? (issue 25, item 3: weights from
# counts). If `gr__dispatch_count` counts one per kernel, the GPU monitors
# the agent already runs give every launch's count at no cost to the
# application, where duty-cycled records only estimate it.
#
#   OUT=/tmp/out sh bench/gpu/pm_sampling/dispatch_count.sh [BUILD_PM]
#
# BUILD_PM is build-pm/ from build.sh. Two checks, each printing one line:
#   truth  pm_probe's own schedule (656 spin kernels) with CUPTI's kernel
#          records beside the samples: dispatches against records;
#   hold   pm_probe samples the GPU with no work of its own while
#          cuda_overhead.py's tiny and mlp workers run in turn inside
#          torch.profiler: dispatches in each worker's span against the
#          profiler's kernel count.
# Needs an NVIDIA GPU (Hopper: sm_90), python3 with PyTorch.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
B=${1:-$root/build-pm}
OUT=${OUT:-$(mktemp -d /tmp/fw-dispatch.XXXXXX)}
mkdir -p "$OUT"
cuda=${CUDA_HOME:-/usr/local/cuda-13.0}
for d in "$cuda/targets/x86_64-linux/lib" "$cuda/extras/CUPTI/lib64" "$cuda/lib64"; do
	[ -e "$d/libcupti.so.13" ] && cupti_dir=$d && break
done
export PMS_CUPTI_PATH=${cupti_dir:?no libcupti.so.13}/libcupti.so.13
export LD_LIBRARY_PATH=$cupti_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
M=gr__compute_cycles_active.sum,gr__cycles_elapsed.max,gr__dispatch_count.sum

"$B/pm_probe" truth --metrics $M --interval 100000 --activity --out "$OUT/truth" > "$OUT/truth.log" 2>&1
echo "truth exit $?"

"$B/pm_probe" hold --seconds "${HOLD_S:-45}" --metrics $M --interval 100000 --out "$OUT/hold" \
	> "$OUT/hold.log" 2>&1 &
HOLD=$!
sleep 3
for W in tiny mlp; do
	a=$(date +%s%N)
	python3 "$root/bench/gpu/cuda_overhead.py" --worker $W --profiler --seconds 3 > "$OUT/worker-$W.log" 2>&1
	b=$(date +%s%N)
	echo "$W $a $b" >> "$OUT/spans.txt"
done
wait $HOLD
echo "hold exit $?"

python3 - "$OUT" <<'EOF'
import csv, json, sys
out = sys.argv[1]

def samples(prefix):
    with open(f"{out}/{prefix}.samples.csv") as f:
        return [(int(r["start"]), int(r["end"]), float(r["gr__dispatch_count.sum"])) for r in csv.DictReader(f)]

def count(rows, a=0, b=1 << 63):
    return sum(d for s, e, d in rows if s >= a and e <= b)

try:
    t = samples("truth")
    with open(f"{out}/truth.activity.csv") as f:
        recs = list(csv.DictReader(f))
    kernels = [r for r in recs if r["kind"] == "kernel"]
    with open(f"{out}/truth.truth.csv") as f:
        spins = sum(1 for _ in csv.DictReader(f))
    print(json.dumps({"check": "truth", "dispatches": count(t), "activity_rows": len(recs),
                      "kernel_rows": len(kernels), "spin_kernels": spins}))
except (OSError, KeyError) as e:
    print(json.dumps({"check": "truth", "error": str(e)}))
try:
    h = samples("hold")
    for line in open(f"{out}/spans.txt"):
        w, a, b = line.split()
        res = next(json.loads(l[7:]) for l in open(f"{out}/worker-{w}.log") if l.startswith("RESULT "))
        print(json.dumps({"check": "hold", "workload": w, "dispatches": count(h, int(a), int(b)),
                          "prof_kernels": res.get("prof_kernels"), "steps": res.get("steps"),
                          "samples_in_span": sum(1 for s, e, d in h if s >= int(a) and e <= int(b))}))
except (OSError, KeyError, StopIteration) as e:
    print(json.dumps({"check": "hold", "error": str(e)}))
EOF
