#!/usr/bin/env python3
"""How much of a process's GPU time sits under the Python function that
caused it (issue 32), from a running flamewatch on 127.0.0.1:PORT and the
LOG bench/gpu/attribution_work.py wrote:

    python3 bench/gpu/attribution.py PORT LOG LABEL RUN_LOG

Prints one JSON line: the GPU time stored for the pid over its whole life
(work before the clock included), the share under a stack reaching one of
the workload's own functions, the share under a stack not its own launch's
(a "[launch not seen" frame), the share with no stack at all, the GPU time
per leaf kind and the share of each under a workload function, the last
two join lines of the run's log (RUN_LOG) and the biggest stacks that
reach none of the workload's functions.
"""
import json
import re
import sys
import urllib.parse
import urllib.request


def get(port, path, **params):
    u = f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode(params)}"
    with urllib.request.urlopen(u, timeout=120) as r:
        return r.read().decode()


def main():
    port, log_path, label, run_log = sys.argv[1:5]
    log = json.load(open(log_path))
    owners = set(log["owners"])
    # Everything the process ever did: from well before the clock to after.
    q = {"type": "gpu_time", "format": "folded", "query": '{pid="%d"}' % log["pid"],
         "from": f"{log['from'] / 1e9 - 120:.3f}", "to": f"{log['to'] / 1e9 + 60:.3f}"}
    total = reach = marked = bare = 0
    kinds, strays = {}, {}
    for line in get(port, "/api/v1/profile", **q).splitlines():
        if not line.strip():
            continue
        stack, v = line.rsplit(" ", 1)
        frames, v = stack.split(";"), int(v)
        leaf = frames[-1]
        kind = leaf if leaf.startswith("[memcpy") or leaf == "[memset]" else "kernel"
        ok = any(f.split(" ")[0] in owners for f in frames)
        total += v
        reach += v if ok else 0
        if not ok:
            # The stack's root end and leaf end: enough to see whose it is.
            key = ";".join(frames[:8]) + (" ... " + ";".join(frames[-4:]) if len(frames) > 12 else
                                          ";".join([""] + frames[8:]))
            strays[key] = strays.get(key, 0) + v
        marked += v if any(f.startswith("[launch not seen") for f in frames) else 0
        bare += v if len(frames) <= 2 else 0
        k = kinds.setdefault(kind, [0, 0])
        k[0] += v
        k[1] += v if ok else 0
    join = [ln.split("GPU time join: ", 1)[1].strip() for ln in open(run_log)
            if "GPU time join: " in ln and " launches" in ln]
    print(json.dumps({
        "label": label, "gpu_ns": total,
        "under_its_function": round(reach / total, 4) if total else None,
        "under_another_launch": round(marked / total, 4) if total else None,
        "no_stack": round(bare / total, 4) if total else None,
        "kinds": {k: {"ns": v[0], "under_its_function": round(v[1] / v[0], 4) if v[0] else None}
                  for k, v in sorted(kinds.items())},
        "join": join[-2:],
        "not_under_its_function": [[k, round(v / total, 4)] for k, v in
                                   sorted(strays.items(), key=lambda kv: -kv[1])[:4]],
    }))


if __name__ == "__main__":
    main()
