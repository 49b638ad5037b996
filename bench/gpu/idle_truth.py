#!/usr/bin/env python3
"""How right "why is the GPU idle?" is against a workload's own log (issue
25's table), from a running flamewatch on 127.0.0.1:PORT and LOG, the JSON
bench/gpu/stall_train.py writes (the loop's window, each stall's times):

    python3 bench/gpu/idle_truth.py PORT LOG [LABEL]

Asks GET /api/v1/gpu/idle for exactly the loop's window and prints one
line: the source used, the idle fraction against the truth (the stalls'
share of the loop), the overlap of the reported idle gaps with the stalls
(intersection over union), the share of the idle CPU samples under
load_batch (the data preparation) and under a CUDA synchronisation call
(the CPU waiting on a busy GPU: never idle), and the samples counted as
waiting on the GPU; with off-CPU time recorded, the share of the idle time
the process's threads spent blocked, and of that the share under
read_shard (stall_train.py --stall-kind read).
"""
import json, sys, urllib.parse, urllib.request

SYNC = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize",
        "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize")


def get(port, path, **params):
    u = f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(u, timeout=60) as r:
        return r.read().decode()


def overlap(xs, ys):
    return sum(max(0, min(b, d) - max(a, c)) for a, b in xs for c, d in ys)


def main():
    port, log_path = sys.argv[1], sys.argv[2]
    label = sys.argv[3] if len(sys.argv) > 3 else ""
    log = json.load(open(log_path))
    pid, frm, to = log["pid"], log["from"], log["to"]
    win = {"pid": pid, "from": f"{frm / 1e9:.6f}", "to": f"{to / 1e9:.6f}", "min_gap": "20ms"}
    doc = json.loads(get(port, "/api/v1/gpu/idle", **win))
    folded = get(port, "/api/v1/gpu/idle", format="folded", **win)
    stalls = [tuple(s) for s in log["stalls"]]
    truth = sum(b - a for a, b in stalls) / (to - frm)
    gaps = [tuple(g) for g in doc["gaps"]]
    inter = overlap(gaps, stalls)
    union = sum(b - a for a, b in gaps) + sum(b - a for a, b in stalls) - inter
    total = load = sync = 0
    for line in folded.splitlines():
        if not line.strip():
            continue
        stack, v = line.rsplit(" ", 1)
        frames, v = stack.split(";"), int(v)
        total += v
        load += v if any(f.startswith("load_batch") for f in frames) else 0
        sync += v if any(f.split(" ")[0].startswith(SYNC) for f in frames) else 0
    # Off-CPU: the share of the idle time the launching threads spent
    # blocked, and of that the share under the loader's read (read_shard).
    off = doc.get("offcpu") or {}
    off_total = off_read = 0
    if off:
        for line in get(port, "/api/v1/gpu/idle", format="folded", graph="offcpu", **win).splitlines():
            if not line.strip():
                continue
            stack, v = line.rsplit(" ", 1)
            off_total += int(v)
            # Python 3.11 and later name a method by its qualified name (Shard.read_shard).
            off_read += int(v) if any("read_shard" in f for f in stack.split(";")) else 0
    s = doc["samples"]
    print(json.dumps({
        "label": label, "source": doc["source"], "coverage": doc.get("coverage"),
        "fallback": doc.get("fallback"), "resolution_ns": doc.get("resolution_ns"),
        "idle_fraction": doc["idle_fraction"], "truth": round(truth, 4),
        "iou": round(inter / union, 4) if union else None,
        "load_batch_share": round(load / total, 4) if total else None,
        "sync_share": round(sync / total, 4) if total else None,
        "waiting_on_gpu": s.get("waiting_on_gpu"), "samples": s["total"], "idle_samples": s["idle"],
        "max_weight": doc["kernels"]["max_weight"], "timeline": doc.get("timeline"),
        "offcpu_share": off.get("share"), "offcpu_idle_ns": off.get("idle_ns"),
        "offcpu_threads": off.get("threads"), "offcpu_tids": off.get("tids_total"),
        "offcpu_other_blocked_ns": (off.get("other_threads") or {}).get("blocked_ns"),
        "offcpu_read_shard_share": round(off_read / off_total, 4) if off_total else None,
    }))


if __name__ == "__main__":
    main()
