#!/usr/bin/env python3
"""The busy fraction of a workload's span by flamewatch's busy timeline
(bench/gpu/busy_complete.sh), from a running flamewatch on 127.0.0.1:PORT
and the LOG bench/gpu/attribution_work.py wrote:

    python3 bench/gpu/busy_fraction.py PORT LOG LABEL [TIMELINE_FROM]

Prints one JSON line: 1 - the idle fraction GET /api/v1/gpu/idle gives
for exactly the workload's span (its busy timeline from both sources, or
TIMELINE_FROM: records or gpu_monitors alone), with the source, the
timeline's sources and coverage, and the resolution.
"""
import json
import sys
import urllib.parse
import urllib.request


def main():
    port, log_path, label = sys.argv[1:4]
    tl_from = sys.argv[4] if len(sys.argv) > 4 else "both"
    log = json.load(open(log_path))
    q = {"pid": log["pid"], "from": f"{log['from'] / 1e9:.6f}", "to": f"{log['to'] / 1e9:.6f}",
         "timeline_from": tl_from}
    u = f"http://127.0.0.1:{port}/api/v1/gpu/idle?{urllib.parse.urlencode(q)}"
    with urllib.request.urlopen(u, timeout=60) as r:
        doc = json.loads(r.read())
    idle = doc["idle_fraction"]
    print(json.dumps({
        "label": label, "busy_fraction": None if idle is None else round(1 - idle, 4),
        "source": doc["source"], "coverage": doc.get("coverage"), "fallback": doc.get("fallback"),
        "timeline": doc.get("timeline"), "resolution_ns": doc.get("resolution_ns"),
        "max_weight": doc["kernels"]["max_weight"],
    }))


if __name__ == "__main__":
    main()
