#!/usr/bin/env python3
"""On a GPU machine: a PyTorch process that calls cuInit 10 s after its
start, with CUDA_INJECTION64_PATH naming a copy of libflamewatch-cuda.so
the agent has never seen. The real CUDA driver dlopens it; the agent must
learn of it from the loader's event (the periodic scan is off), attach
within a second, and store the process's GPU time. Bounded (~60 s):

    OUT=/tmp/out python3 bench/gpu/late_cuinit.py [--build build] [--port 7182]

Needs root (BPF) and python3 with PyTorch. Logs under $OUT; prints a short
table: cuInit start/end, when the agent attached (ms after cuInit ended),
the GPU time it stored for the process, and the agent's own account of
loader events and maps reads.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

WORK = r"""
import sys, time
time.sleep(10)
import torch
t0 = time.time()
torch.cuda.init()
x = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize()
t1 = time.time()
print(f"cuinit {t0:.6f} {t1:.6f}", flush=True)
end = time.time() + 3
while time.time() < end:
    for _ in range(20):
        x = x @ x
        x = x / x.norm()
    torch.cuda.synchronize()
print("done", flush=True)
"""


def get(port, path, params):
    url = f"http://127.0.0.1:{port}{path}?{urllib.parse.urlencode(params)}"
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--port", type=int, default=7182)
    args = ap.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="fw-late-cuinit-"))
    out.mkdir(parents=True, exist_ok=True)
    build = Path(args.build).resolve()
    lib = out / "inject" / "libflamewatch-cuda.so"
    lib.parent.mkdir(exist_ok=True)
    shutil.copy(build / "libflamewatch-cuda.so", lib)
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLAMEWATCH_CUDA")}
    agent_log = open(out / "agent.log", "w")
    agent = subprocess.Popen([build / "flamewatch", "run", "-v", "--listen", f"127.0.0.1:{args.port}",
                              "--data", out / "fwdata", "--interval", "1s", "--no-cpu-strips"],
                             env={**env, "FLAMEWATCH_CUDA_SCAN_INTERVAL": "off"},
                             stdout=agent_log, stderr=subprocess.STDOUT)
    rows = []
    try:
        deadline = time.time() + 60
        while "profiling this host at" not in (out / "agent.log").read_text():
            if time.time() > deadline or agent.poll() is not None:
                sys.exit("the agent did not start; see agent.log")
            time.sleep(0.2)
        t_start = time.time()
        work = subprocess.Popen([sys.executable, "-c", WORK], stdout=subprocess.PIPE,
                                stderr=open(out / "work.err", "w"), text=True,
                                env={**env, "CUDA_INJECTION64_PATH": str(lib)})
        pat = re.compile("attached to %s \\(pid %d\\)" % (re.escape(str(lib)), work.pid))
        seen = None
        deadline = time.time() + 40
        while time.time() < deadline and work.poll() is None and seen is None:
            if pat.search((out / "agent.log").read_text()):
                seen = time.time()
            time.sleep(0.05)
        text, _ = work.communicate(timeout=60)
        m = re.search(r"cuinit (\S+) (\S+)", text)
        t0, t1 = (float(m.group(1)), float(m.group(2))) if m else (None, None)
        rows.append(("cuInit (torch.cuda.init + first tensor), s after start",
                     f"{t0 - t_start:.2f} .. {t1 - t_start:.2f}" if m else "missing (see work.err)"))
        rows.append(("agent attached, ms after it ended",
                     f"{(seen - t1) * 1000:.0f}" if seen and t1 else "never"))
        time.sleep(4)
        top = get(args.port, "/api/v1/gpu/kernels/top", {"query": '{pid="%d"}' % work.pid,
                                                         "from": f"{t_start - 5:.3f}",
                                                         "to": f"{time.time() + 5:.3f}"})
        rows.append(("GPU time stored for the process, ms", f"{top['total_ns'] / 1e6:.1f}"))
        rows.append(("top kernels", "; ".join(k["name"][:50] for k in top["kernels"][:3])))
    finally:
        agent.send_signal(2)
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
    log = (out / "agent.log").read_text()
    for pat in (r"GPU time: \d+ loaders watched: .*", r"GPU time: the library looked for .*",
                r"watching the library loads of .*"):
        m = re.search(pat, log)
        rows.append(("agent", m.group(0) if m else f"(no line matching {pat!r})"))
    print("| what | value |\n|---|---|")
    for k, v in rows:
        print(f"| {k} | {v} |")
    print(f"(logs in {out})")


if __name__ == "__main__":
    main()
