#!/usr/bin/env python3
"""GPU time profiling overhead and accuracy on a CUDA machine (issue 8).

Two workloads, each in its own process per run: `mlp` (a small MLP training
step, AdamW) and `tiny` (100 tiny elementwise kernels per step). Modes:

  plain       the workload alone
  fw-idle     under `flamewatch cuda`, no agent: the library loaded, idle
  fw          under `flamewatch cuda`, collecting without an agent
              (FLAMEWATCH_CUDA_SUMMARY), default duty cycle: CUPTI's cost + ours
  fw-always   as fw with FLAMEWATCH_CUDA_DUTY_CYCLE=1 (CUPTI always on)
  fw-agent    under `flamewatch cuda` with an agent attached (only if
              --agent-cmd is given, or `flamewatch run --help` mentions cuda)
  torchprof   inside torch.profiler (CPU + CUDA activities)

Runs are interleaved (every mode once per repeat, in a shuffled order) and
the whole script stops starting new runs at --budget-s (default 210 s).
Step time: median over chunks of 20 steps (synchronised per chunk).
Accuracy: GPU kernel ns per step from the library's weighted totals (fw,
fw-always) against torch.profiler's sum of kernel durations (torchprof), both
over every step the process ran. Logs and JSON under $OUT if set.

  bench/gpu/cuda_overhead.sh            # from the repository root, build/ prebuilt
"""

import argparse
import glob
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
REPO = HERE.parents[2]


# ---------------------------------------------------------------- worker side

def worker(args):
    import torch

    dev = torch.device("cuda")
    prof = None
    if args.profiler:
        from torch.profiler import ProfilerActivity, profile
        prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
        prof.__enter__()

    if args.workload == "mlp":
        model = torch.nn.Sequential(
            torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
            torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
            torch.nn.Linear(4096, 1024)).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        x = torch.randn(512, 1024, device=dev)
        y = torch.randn(512, 1024, device=dev)

        def step():
            opt.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    else:
        t = torch.zeros(256, device=dev)

        def step():
            for _ in range(100):
                t.add_(1.0)

    steps = 0
    chunk = 20
    end_warm = time.perf_counter() + args.warmup_s
    while time.perf_counter() < end_warm:
        for _ in range(chunk):
            step()
        steps += chunk
    torch.cuda.synchronize()
    times = []
    end = time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for _ in range(chunk):
            step()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / chunk)
        steps += chunk
    out = {"workload": args.workload, "step_ms": statistics.median(times) * 1e3,
           "chunks": len(times), "steps": steps}
    if prof is not None:
        prof.__exit__(None, None, None)
        kernel_ns = 0
        kernels = 0
        for ev in prof.events():
            dt = getattr(ev, "device_type", None)
            if (dt is not None and "CUDA" in str(dt) and ev.time_range is not None
                    and not ev.name.startswith(("Memcpy", "Memset"))):
                kernel_ns += int((ev.time_range.end - ev.time_range.start) * 1000)
                kernels += 1
        out["prof_kernel_ns"] = kernel_ns
        out["prof_kernels"] = kernels
    print("RESULT " + json.dumps(out), flush=True)


# ---------------------------------------------------------------- driver side

def find_cupti():
    try:
        import torch  # noqa: F401
        import nvidia  # type: ignore
        for d in nvidia.__path__:
            hits = sorted(glob.glob(os.path.join(d, "*", "lib", "libcupti.so*")))
            if hits:
                return hits[-1]
    except Exception:
        pass
    for pat in ("/usr/local/cuda-13.0/targets/x86_64-linux/lib/libcupti.so.13",
                "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                "/usr/local/cuda/lib64/libcupti.so.13"):
        if os.path.exists(pat):
            return pat
    return None


def run_one(mode, workload, a, fw, logdir, agent_on):
    cmd = [sys.executable, str(HERE), "--worker", workload, "--seconds", str(a.seconds),
           "--warmup-s", str(a.warmup_s)]
    env = dict(os.environ)
    summary = None
    if mode == "torchprof":
        cmd.append("--profiler")
    if mode.startswith("fw"):
        cmd = [str(fw), "cuda", "--"] + cmd
        if a.cupti:
            env["FLAMEWATCH_CUPTI_PATH"] = a.cupti
        if mode in ("fw", "fw-always"):
            summary = Path(tempfile.mkstemp(prefix="fwsum", suffix=".json", dir=logdir)[1])
            env["FLAMEWATCH_CUDA_SUMMARY"] = str(summary)
        if mode == "fw-always":
            env["FLAMEWATCH_CUDA_DUTY_CYCLE"] = "1"
    t0 = time.time()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.seconds + a.warmup_s + 90)
    with open(os.path.join(logdir, f"{mode}-{workload}.log"), "a") as f:
        f.write(f"$ {' '.join(cmd)}\nrc={p.returncode} wall={time.time() - t0:.1f}s\n{p.stdout}\n{p.stderr}\n")
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None:
        return None
    res["mode"] = mode
    if summary and summary.exists() and summary.read_text().strip():
        s = json.loads(summary.read_text().splitlines()[-1])
        res["fw_kernel_ns"] = s["kernel_ns"]
        res["fw_summary"] = s
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["mlp", "tiny"])
    ap.add_argument("--profiler", action="store_true")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per run")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=210.0, help="start no run after this")
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--modes", default="plain,fw-idle,fw,fw-always,fw-agent,torchprof")
    ap.add_argument("--workloads", default="mlp,tiny")
    ap.add_argument("--agent-cmd", default=None, help="command that runs an agent attaching to the library")
    ap.add_argument("--cupti", default=None, help="CUPTI for the library (default: torch's, else CUDA's)")
    a = ap.parse_args()
    if a.worker:
        a.workload = a.worker
        return worker(a)

    start = time.time()
    fw = Path(a.build) / "flamewatch"
    if not (Path(a.build) / "libflamewatch-cuda.so").exists():
        sys.exit(f"{a.build}/libflamewatch-cuda.so is missing")
    a.cupti = a.cupti or find_cupti()
    logdir = os.environ.get("OUT") or tempfile.mkdtemp(prefix="fw-cuda-bench-")
    os.makedirs(logdir, exist_ok=True)
    modes = a.modes.split(",")
    agent_cmd = a.agent_cmd
    if "fw-agent" in modes and not agent_cmd:
        h = subprocess.run([str(fw), "run", "--help"], capture_output=True, text=True)
        if "cuda" in (h.stdout + h.stderr).lower():
            agent_cmd = f"{fw} run --listen 127.0.0.1:0 --data-dir {logdir}/fwdata"
    if "fw-agent" in modes and not agent_cmd:
        modes.remove("fw-agent")
        print("fw-agent: no agent with CUDA support found (pass --agent-cmd); skipped", flush=True)
    print(f"cupti={a.cupti} logs={logdir} modes={modes}", flush=True)

    results = []
    agent = None
    for rep in range(a.repeats):
        order = [(m, w) for m in modes for w in a.workloads.split(",")]
        random.shuffle(order)
        for mode, wl in order:
            if time.time() - start > a.budget_s:
                break
            if mode == "fw-agent" and agent is None:
                agent = subprocess.Popen(agent_cmd, shell=True, stdout=open(f"{logdir}/agent.log", "a"),
                                         stderr=subprocess.STDOUT)
                time.sleep(5)
            if mode != "fw-agent" and agent is not None:
                agent.terminate()
                agent.wait(timeout=30)
                agent = None
            r = run_one(mode, wl, a, fw, logdir, agent is not None)
            if r:
                r["repeat"] = rep
                results.append(r)
                print(json.dumps(r), flush=True)
            else:
                print(f"{mode}/{wl}: failed, see {logdir}/{mode}-{wl}.log", flush=True)
    if agent is not None:
        agent.terminate()
        agent.wait(timeout=30)

    with open(os.path.join(logdir, "cuda_overhead.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(f"\n{'workload':9} {'mode':10} {'runs':>4} {'step ms':>9} {'overhead':>9} {'GPU ns/step':>12} {'vs prof':>8}")
    for wl in a.workloads.split(","):
        base = [r["step_ms"] for r in results if r["workload"] == wl and r["mode"] == "plain"]
        prof = [r["prof_kernel_ns"] / r["steps"] for r in results
                if r["workload"] == wl and r["mode"] == "torchprof" and r.get("prof_kernel_ns")]
        b = statistics.median(base) if base else None
        pk = statistics.median(prof) if prof else None
        for mode in modes:
            rs = [r for r in results if r["workload"] == wl and r["mode"] == mode]
            if not rs:
                continue
            st = statistics.median(r["step_ms"] for r in rs)
            ov = f"{(st / b - 1) * 100:+.2f}%" if b else "-"
            gpu = [r["fw_kernel_ns"] / r["steps"] for r in rs if "fw_kernel_ns" in r]
            gpu += [r["prof_kernel_ns"] / r["steps"] for r in rs if "prof_kernel_ns" in r]
            g = statistics.median(gpu) if gpu else None
            agree = f"{(g / pk - 1) * 100:+.2f}%" if g and pk and mode != "torchprof" else "-"
            print(f"{wl:9} {mode:10} {len(rs):4} {st:9.4f} {ov:>9} {g if g else 0:12.0f} {agree:>8}")
    print(f"\ntotal {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
