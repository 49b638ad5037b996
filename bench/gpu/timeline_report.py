#!/usr/bin/env python3
"""The report of bench/gpu/timeline_demo.sh, from a running flamewatch on
127.0.0.1:PORT and OUT/stalls.json (written by stall_train.py: the pid, the
loop's window and each stall's and training phase's real times):

    python3 bench/gpu/timeline_report.py PORT OUT

Prints the GPU-idle fraction and the heaviest Python path of the GPU-idle
flame graph (GET /api/v1/gpu/idle), then per stall how far the kernel gap,
the NVML utilisation dip and the process's CPU strip are from the stall's
real start and end. Writes OUT/gpu_idle.json, OUT/gpu_idle.folded and
OUT/fwdata/demo.json (the window for timeline_screenshot.mjs).
"""
import json, statistics, sys, urllib.parse, urllib.request
port, out = sys.argv[1], sys.argv[2]
base = f"http://127.0.0.1:{port}"
log = json.load(open(f"{out}/stalls.json"))
pid, frm, to = log["pid"], log["from"] / 1e9, log["to"] / 1e9

def get(path, **params):
    u = f"{base}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(u, timeout=30) as r:
        return r.read().decode()

win = {"from": f"{frm:.3f}", "to": f"{to:.3f}"}
# Gaps under 50 ms (between kernels launched back to back) are not listed.
idle = json.loads(get("/api/v1/gpu/idle", pid=pid, min_gap="50ms", **win))
open(f"{out}/gpu_idle.json", "w").write(json.dumps(idle))
open(f"{out}/gpu_idle.folded", "w").write(get("/api/v1/gpu/idle", pid=pid, format="folded", **win))
stall_s = sum(e - s for s, e in log["stalls"]) / 1e9
print(f"\nprocess {pid}, loop {to - frm:.1f} s, stalls {stall_s:.1f} s "
      f"(expected idle fraction {stall_s / (to - frm):.3f})")
print(f"flamewatch GPU-idle fraction {idle['idle_fraction']} from {idle['source']} "
      f"({idle['kernels']['intervals']} kernel intervals, max weight {idle['kernels']['max_weight']}); "
      f"CPU samples while idle {idle['samples']['idle']} of {idle['samples']['total']}")

# The heavy path of the GPU-idle flame graph: its Python frames.
p = idle["profile"]
n, v, d, k = p["nodes"]["n"], p["nodes"]["v"], p["nodes"]["d"], p["nodes"]["k"]
path, i, total = [], 0, max(p["total"], 1)
while True:
    kids, j = [], i + 1
    while j < len(n) and d[j] > d[i]:
        if d[j] == d[i] + 1:
            kids.append(j)
        j += 1
    if not kids:
        break
    i = max(kids, key=lambda j: v[j])
    path.append((p["names"][n[i]], k[i], v[i] / total))
py = [(name, share) for name, kind, share in path if kind == 3]
print("GPU-idle flame graph, Python frames on its heaviest path: " +
      (" > ".join(f"{name} {share:.0%}" for name, share in py) or "(none)"))

def shares(folded):
    """Each function's share of the samples whose stack holds it."""
    per, total = {}, 0
    for line in folded.splitlines():
        stack, _, cnt = line.rpartition(" ")
        if not stack:
            continue
        total += int(cnt)
        for f in set(stack.split(";")[1:]):
            per[f] = per.get(f, 0) + int(cnt)
    return {f: c / max(total, 1) for f, c in per.items()}

idle_sh = shares(open(f"{out}/gpu_idle.folded").read())
all_sh = shares(get("/api/v1/profile", query='{pid="%d"}' % pid, format="folded", **win))
# The stalling function: the outermost Python frame on the heavy path that
# holds most idle samples and is over-represented in them against all of
# the process's samples (main holds everything in both; load_batch does
# not). Else the deepest Python frame holding half the idle samples.
# (Native frames stand in when the process has no Python frames.)
cands = py or [(name, share) for name, _, share in path]
top = next(((name, share) for name, share in cands if share >= 0.5 and
            idle_sh.get(name, 0) >= 1.5 * all_sh.get(name, 1)), None)
if top:
    print(f"top function: {top[0]} ({idle_sh.get(top[0], 0):.0%} of the GPU-idle samples, "
          f"{all_sh.get(top[0], 0):.0%} of all the process's CPU samples)")
print("its heaviest path's last frames: " + " > ".join(f"{name} {share:.0%}" for name, _, share in path[-6:]))
if not top:
    print("top function (deepest Python frame holding half the idle samples): " +
          next((name for name, share in reversed(py) if share >= 0.5), "(none)"))

# NVML utilisation of the busiest GPU, every point.
m = json.loads(get("/api/v1/gpu/metrics", query="flamewatch_gpu_utilization_percent", step="0",
                   **{"from": f"{frm - 2:.3f}", "to": f"{to + 2:.3f}"}))
series = max(m["series"], key=lambda s: sum(x[1] or 0 for x in s["points"]), default=None)
pts = [(t / 1e9, val) for t, val in series["points"]] if series else []
trains = log["trains"]
busy_util = statistics.median([val for t, val in pts if any(s / 1e9 + 0.3 < t < e / 1e9 for s, e in trains)] or [0])
print(f"NVML utilisation: {len(pts)} points on gpu {series['labels'].get('gpu') if series else '-'}, "
      f"median {busy_util:.0f} % while training")

strips = json.loads(get("/api/v1/cpu/strips", query='{pid="%d"}' % pid, **win))
busy = sorted((s / 1e9, e / 1e9) for c in strips["cpus"] for s, e, *_ in c["intervals"])

def covered(ivs, a, b):
    tot, cur = 0.0, a
    for s, e in ivs:
        s, e = max(s, cur), min(e, b)
        if e > s:
            tot += e - s
            cur = e
    return tot

def ms(x):
    return "    -" if x is None else f"{x * 1000:+5.0f}"

print("\nper stall: times relative to the stall's real start and end (ms)")
print(" #  start  len_ms | kernel gap  dstart   dend | util dip  dstart   dend | CPU busy in stall / in training")
for idx, (s, e) in enumerate(log["stalls"]):
    s, e = s / 1e9, e / 1e9
    gaps = [(a / 1e9, b / 1e9) for a, b in idle["gaps"] if b / 1e9 > s and a / 1e9 < e]
    g = max(gaps, key=lambda x: x[1] - x[0], default=None)
    low = [t for t, val in pts if s - 0.5 < t < e + 0.5 and val is not None and val < busy_util / 2]
    tr = trains[idx]
    tr_busy = covered(busy, tr[0] / 1e9, tr[1] / 1e9) / max((tr[1] - tr[0]) / 1e9, 1e-9)
    print(f"{idx:2d} {s - frm:6.2f} {1000 * (e - s):7.0f} |           "
          f"{ms(g[0] - s if g else None)} {ms(g[1] - e if g else None)} |         "
          f"{ms(low[0] - s if low else None)} {ms(low[-1] - e if low else None)} | "
          f"{covered(busy, s, e) / (e - s):6.0%} / {tr_busy:4.0%}")
json.dump({"pid": pid, "from": frm - 2, "to": to + 2}, open(f"{out}/fwdata/demo.json", "w"))
