#!/usr/bin/env python3
"""GPU time profiling overhead and accuracy on a CUDA machine (issue 8).

Two workloads, each in its own process per run: `mlp` (a small MLP training
step, AdamW) and `tiny` (100 tiny elementwise kernels per step). Modes:

  plain       the workload alone
  fw-idle     under `flamewatch cuda`, no agent: the library loaded, idle
  fw          under `flamewatch cuda`, collecting without an agent
              (FLAMEWATCH_CUDA_SUMMARY), default duty cycle: CUPTI's cost + ours
  fw-always   as fw with FLAMEWATCH_CUDA_DUTY_CYCLE=1 (CUPTI always on)
  fw-agent    under `flamewatch cuda` with an agent attached (--agent-cmd),
              default duty cycle: the product as deployed
  fw-agent-always  as fw-agent with CUPTI always on (duty cycle 1)
  torchprof   inside torch.profiler (CPU + CUDA activities)

A mode with -ab in it (fw-ab, fw-agent-ab-count) measures the overhead
inside one process: the worker turns collection on and off in phases of
--ab-phase-s (FLAMEWATCH_CUDA_LISTEN_FILE, a file the library looks for at
every tick), and the `A/B` column is the median over the on phases of
their mean chunk time against the mean of the two off phases around them.
The library is loaded in both (CUPTI is unsubscribed 1 s into an off
phase). Step times of separate processes vary by more than the targets on
the tiny loop (+-20 % between plain runs on the H200); inside one process
they do not. The GPU totals of -ab runs cover the on phases only and are
not compared.

A mode with -count in it (fw-count, fw-agent-count) sets
FLAMEWATCH_CUDA_COUNT_ALL=1: the launch callbacks stay on between windows
and count every launch, and a window's records stand for the launches
counted over those its windows saw instead of D. `all/step` is that count.

By default CUPTI's activity kinds stay on between windows (every kernel's
record arrives, totals are exact) while the records cost the process at
most FLAMEWATCH_CUDA_MAX_COST_PPM (1 %) of its time as the library
measures it; only the launch callbacks are duty-cycled. A mode with -exact
in it (fw-agent-exact-ab) sets FLAMEWATCH_CUDA_EXACT_MAX_RATE to its
maximum (the rule by launch rate, lifted: activity always on), one with -est in it sets
FLAMEWATCH_CUDA_ACTIVITY_ALL=0 (activity duty-cycled with the callbacks,
totals estimated x D: the default before 2026-12-04), and -act sets
FLAMEWATCH_CUDA_ACTIVITY_ALL=1 (the default).

A mode with -lim in it sets FLAMEWATCH_CUDA_MAX_COST_PPM=1000000: every
record whatever it costs, decided by the measured cost (probe windows
still measure it where its bound is over 100 %). Every run's library
summary gives the cost it measured and the mode it chose (a table after
the others).

A mode with -pm in it runs `flamewatch gpu-busy` (the GPU's monitors
sampled by another process, as the agent's child does) beside the worker;
one with -cf in it sets FLAMEWATCH_CUDA_CLOSE_FLUSH=1 (a forced flush of
CUPTI's buffers as each window closes). Both look for where duty-cycled
records go missing (bench/gpu/duty_records.py).

A mode with -dN or -wN appended (fw-d40, fw-agent-d40-w10) runs with
FLAMEWATCH_CUDA_DUTY_CYCLE=N or FLAMEWATCH_CUDA_WINDOW_MS=N instead of the
defaults, to see how the overhead falls with the duty cycle.

Each repeat runs the modes without an agent in a shuffled order, then
starts the agent once and runs the agent modes (shuffled); the script starts
no new run after --budget-s. Step time: the mean over chunks of 20 steps
(synchronised per chunk; the median is kept as step_ms_median). Accuracy, GPU kernel ns per step over every step
the process ran: the library's totals (FLAMEWATCH_CUDA_SUMMARY, also in the
agent modes) and, in the agent modes, what the agent stored for the
worker's pid (queried from the agent's API after the run), each against
torch.profiler's sum of kernel durations (torchprof runs, the independent
measure). The agent modes also count the worker's CPU samples with a
`[python code 0x...]` placeholder frame and keep its GPU flame graph and
kernel table. Logs and JSON under $OUT if set.

Duty-cycled totals are an estimate from ~1 window in 30: on a 4-s run of a
bursty launch pattern expect several % of sampling error either way (see
docs/gpu-time.md); the always-on modes must agree within 2 %.

  bench/gpu/cuda_overhead.sh            # from the repository root, build/ prebuilt
"""

import argparse
import glob
import json
import os
import random
import re
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
    # A second, independent reference: GPU time between CUDA events around
    # each measured chunk (kernels plus any idle gaps between them: an upper
    # bound of the kernel sum, close to it when the GPU is kept busy).
    ev_ns = 0
    end_warm = time.perf_counter() + args.warmup_s
    while time.perf_counter() < end_warm:
        for _ in range(chunk):
            step()
        steps += chunk
    torch.cuda.synchronize()
    times = []
    start = time.perf_counter()
    end = start + args.seconds
    measured = 0
    phases = []         # with --ab-file: (phase index, chunk times)
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        if args.ab_file:
            ph = int((t0 - start) / args.ab_phase_s)
            if not phases or phases[-1][0] != ph:
                if ph % 2 == 0:
                    open(args.ab_file, "w").close()
                elif os.path.exists(args.ab_file):
                    os.unlink(args.ab_file)
                phases.append((ph, []))
                t0 = time.perf_counter()
                skip = True   # the first chunk of a phase: the library reacts at its next tick
            else:
                skip = False
        e0 = torch.cuda.Event(enable_timing=True)
        e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(chunk):
            step()
        e1.record()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / chunk)
        if args.ab_file and not skip:
            phases[-1][1].append(times[-1])
        ev_ns += int(e0.elapsed_time(e1) * 1e6)
        steps += chunk
        measured += chunk
    # The mean, not the median: with the duty cycle the collecting windows
    # are a minority of the chunks, and a median would hide what they cost.
    out = {"workload": args.workload, "step_ms": statistics.mean(times) * 1e3,
           "step_ms_median": statistics.median(times) * 1e3,
           "chunks": len(times), "steps": steps, "pid": os.getpid(),
           "event_ns_per_step": ev_ns / measured if measured else 0,
           "chunk_ms": [round(x * 1e3, 4) for x in times]}
    if args.ab_file:
        if os.path.exists(args.ab_file):
            os.unlink(args.ab_file)
        means = [(ph, statistics.mean(ts)) for ph, ts in phases if ts]
        # Each on phase (even) against the mean of the off phases on both sides.
        ratios = []
        for i, (ph, m) in enumerate(means):
            if ph % 2:
                continue
            offs = [mm for pp, mm in means[max(i - 1, 0):i + 2] if pp % 2 and abs(pp - ph) == 1]
            if offs:
                ratios.append(m / statistics.mean(offs) - 1)
        out["ab"] = {"phase_s": args.ab_phase_s,
                     "on_ms": [round(m * 1e3, 4) for ph, m in means if ph % 2 == 0],
                     "off_ms": [round(m * 1e3, 4) for ph, m in means if ph % 2],
                     "overheads": [round(r, 5) for r in ratios],
                     "overhead": statistics.median(ratios) if ratios else None}
    if prof is not None:
        prof.__exit__(None, None, None)
        kernel_ns = 0
        kernels = 0
        for ev in prof.events():
            dt = getattr(ev, "device_type", None)
            # Kernels only: not copies, and not the user annotations
            # (record_function ranges drawn on the GPU timeline over the
            # kernels they cover), which would count those kernels twice.
            if (dt is not None and "CUDA" in str(dt) and ev.time_range is not None
                    and not getattr(ev, "is_user_annotation", False)
                    and not ev.name.startswith(("Memcpy", "Memset", "ProfilerStep", "aten::"))):
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


def agent_get(port, path, params):
    import urllib.parse
    import urllib.request
    url = f"http://127.0.0.1:{port}{path}?" + urllib.parse.urlencode(params)
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def agent_view(port, pid, t0, t1, logdir, tag):
    """What the agent stored for one worker: its kernel table, GPU flame
    graph and CPU samples (placeholders counted)."""
    q = '{pid="%d"}' % pid
    win = {"from": f"{t0 - 5:.6f}", "to": f"{t1 + 5:.6f}", "query": q}
    out = {}
    top = {}
    # The agent flushes every second: wait until the total stops growing.
    last, deadline = -1, time.monotonic() + 15
    while time.monotonic() < deadline:
        top = json.loads(agent_get(port, "/api/v1/gpu/kernels/top", {**win, "limit": "50"}))
        total = top.get("total_ns", 0)
        if total == last and total > 0:
            break
        last = total
        time.sleep(1.5)
    kern = [k for k in top.get("kernels", []) if k.get("kind") == "kernel"]
    out["agent_kernel_ns"] = sum(k.get("total_ns", 0) for k in kern)
    out["agent_kernel_calls"] = sum(k.get("calls", 0) for k in kern)
    out["agent_unknown_ns"] = sum(k.get("total_ns", 0) for k in kern if k.get("name", "").startswith("[unknown"))
    out["agent_top"] = [[k.get("name", "")[:80], k.get("calls", 0), k.get("total_ns", 0)] for k in kern[:5]]
    gpu = agent_get(port, "/api/v1/profile", {**win, "type": "gpu_time", "format": "folded"})
    cpu = agent_get(port, "/api/v1/profile", {**win, "type": "cpu", "format": "folded"})
    with open(os.path.join(logdir, f"{tag}.gpu.folded"), "w") as f:
        f.write(gpu)
    with open(os.path.join(logdir, f"{tag}.cpu.folded"), "w") as f:
        f.write(cpu)
    rows = []
    for line in gpu.splitlines():
        stack, _, n = line.rpartition(" ")
        if n.isdigit():
            rows.append((int(n), stack))
    rows.sort(reverse=True)
    gtotal = sum(n for n, _ in rows) or 1
    # Folded stacks carry names only: the worker's own Python functions
    # (worker, step; <module>) mark a launch stack that reached Python.
    pyre = ("<module>;", ";worker;", ";step;", "_call_impl;")
    out["gpu_stacks_with_python"] = sum(n for n, st in rows if any(p in st for p in pyre)) / gtotal
    out["gpu_placeholder_ns"] = sum(n for n, st in rows if "[python code" in st)
    out["gpu_top_stack"] = rows[0][1][-400:] if rows else ""
    allp = plc = 0
    for line in cpu.splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit():
            continue
        allp += int(n)
        if "[python code" in stack:
            plc += int(n)
    out["cpu_samples"] = allp
    out["cpu_placeholder_samples"] = plc
    return out


def gpu_local_cpus():
    """Two CPUs of GPU 0's own NUMA node. Unpinned, the same plain run of
    the tiny workload took 0.69 ms a step once and 1.02 ms the next on the
    H200 (one NUMA node there: the scheduler's placement, not distance),
    which swamps the few % this script measures; every worker is pinned to
    the same CPUs, and on a two-socket host they are the GPU's own."""
    try:
        bus = subprocess.run(["nvidia-smi", "--query-gpu=pci.bus_id", "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout.strip().lower()
        bus = bus[4:] if len(bus) > 12 else bus  # 00000000:xx:yy.z -> 0000:xx:yy.z
        cpus = open(f"/sys/bus/pci/devices/{bus}/local_cpulist").read().strip()
    except (OSError, subprocess.SubprocessError):
        return None
    first = []
    for part in cpus.split(","):
        lo, _, hi = part.partition("-")
        first += list(range(int(lo), int(hi or lo) + 1))
    # Not the node's first CPU, where interrupts and the agent tend to run.
    return ",".join(str(c) for c in (first[2:4] if len(first) >= 4 else first[:2]))


COST_KEYS = ("activity_all", "activity_switches", "launch_rate", "cost_ppm", "cost_bound_ppm",
             "record_cost_in_call_ns", "record_cost_own_ns", "launch_call_on_ns",
             "launch_call_off_ns", "probe_windows")


def run_one(mode, workload, a, fw, logdir, agent_port):
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
        if mode != "fw-idle":
            summary = Path(tempfile.mkstemp(prefix="fwsum", suffix=".json", dir=logdir)[1])
            env["FLAMEWATCH_CUDA_SUMMARY"] = str(summary)
        if mode.endswith("always"):
            env["FLAMEWATCH_CUDA_DUTY_CYCLE"] = "1"
        if "-count" in mode:
            env["FLAMEWATCH_CUDA_COUNT_ALL"] = "1"
        if "-act" in mode:
            env["FLAMEWATCH_CUDA_ACTIVITY_ALL"] = "1"
        if "-exact" in mode:
            env["FLAMEWATCH_CUDA_EXACT_MAX_RATE"] = "4294967295"
            env["FLAMEWATCH_CUDA_MAX_COST_PPM"] = "1000000"
        if "-lim" in mode:
            env["FLAMEWATCH_CUDA_MAX_COST_PPM"] = "1000000"
        if "-est" in mode:
            env["FLAMEWATCH_CUDA_ACTIVITY_ALL"] = "0"
        if "-ab" in mode:
            ab_file = Path(logdir) / f"listen-{os.getpid()}"
            env["FLAMEWATCH_CUDA_LISTEN_FILE"] = str(ab_file)
            cmd += ["--ab-file", str(ab_file), "--ab-phase-s", str(a.ab_phase_s)]
        if "-cf" in mode:
            env["FLAMEWATCH_CUDA_CLOSE_FLUSH"] = "1"
        for key, n in re.findall(r"-([dw])([0-9]+)", mode):
            env["FLAMEWATCH_CUDA_DUTY_CYCLE" if key == "d" else "FLAMEWATCH_CUDA_WINDOW_MS"] = n
    if a.pin:
        cmd = ["taskset", "-c", a.pin] + cmd
    beside = None
    if "-pm" in mode:
        # The GPU's monitors sampled by another process, as the agent's
        # gpu-busy child does, without an agent: does it change what CUPTI
        # traces in the worker?
        beside = subprocess.Popen([str(fw), "gpu-busy"] + (["--cupti", a.cupti] if a.cupti else []),
                                  stdin=subprocess.PIPE,
                                  stdout=open(os.path.join(logdir, f"{mode}-{workload}.busy.log"), "a"),
                                  stderr=subprocess.STDOUT)
        time.sleep(2)
    t0 = time.time()
    try:
        p = subprocess.run(cmd, env=env, capture_output=True, text=True,
                           timeout=a.seconds + a.warmup_s + 90)
    except subprocess.TimeoutExpired as e:
        if beside:
            beside.stdin.close()
            beside.wait()
        # One stuck run (torch.profiler on the tiny loop, once on the H200)
        # must not cost the table of all the others.
        with open(os.path.join(logdir, f"{mode}-{workload}.log"), "a") as f:
            f.write(f"$ {' '.join(cmd)}\ntimed out after {e.timeout:.0f}s\n{e.stdout or ''}\n{e.stderr or ''}\n")
        return None
    t1 = time.time()
    if beside:
        beside.stdin.close()   # gpu-busy stops on EOF
        beside.wait()
    with open(os.path.join(logdir, f"{mode}-{workload}.log"), "a") as f:
        f.write(f"$ {' '.join(cmd)}\nrc={p.returncode} wall={t1 - t0:.1f}s\n{p.stdout}\n{p.stderr}\n")
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            res = json.loads(line[7:])
    if res is None:
        return None
    res["mode"] = mode
    if summary and summary.exists() and summary.read_text().strip():
        s = json.loads(summary.read_text().splitlines()[-1])
        # What the library measured a record to cost, and the mode it chose.
        res["fw_cost"] = {k: s.get(k) for k in COST_KEYS}
        if "-ab" not in mode:
            res["fw_kernel_ns"] = s["kernel_ns"]
            res["fw_summary"] = s
    if mode.startswith("fw-agent") and agent_port:
        try:
            res.update(agent_view(agent_port, res["pid"], t0, t1, logdir,
                                  f"{mode}-{workload}-{res['pid']}"))
        except Exception as e:  # noqa: BLE001 - reported, the run goes on
            res["agent_error"] = str(e)
        if "-ab" in mode:
            res.pop("agent_kernel_ns", None)   # the on phases only: not comparable
    return res


def start_agent(cmd, logdir):
    """Starts the agent and waits until it samples (its log says so)."""
    log = open(f"{logdir}/agent.log", "a")
    agent = subprocess.Popen(cmd, shell=True, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if "profiling this host" in open(f"{logdir}/agent.log").read():
            break
        time.sleep(0.5)
    time.sleep(2)  # its first unwind tables
    return agent


def stop_agent(agent):
    agent.terminate()
    try:
        agent.wait(timeout=30)
    except subprocess.TimeoutExpired:
        agent.kill()
        agent.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker", choices=["mlp", "tiny"])
    ap.add_argument("--profiler", action="store_true")
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per run")
    ap.add_argument("--ab-file", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--ab-phase-s", type=float, default=2.0,
                    help="-ab modes: seconds of each on and off phase")
    ap.add_argument("--warmup-s", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=210.0, help="start no run after this")
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--modes", default="plain,fw-idle,fw,fw-always,fw-agent,fw-agent-always,torchprof")
    ap.add_argument("--workloads", default="mlp,tiny")
    ap.add_argument("--agent-cmd", default=None,
                    help="command that runs an agent attaching to the library; it must listen on --agent-port "
                         "and store every second (--interval 1s): what it stored is read once it stops "
                         "growing for 1.5 s, which a 10-s batch does between batches")
    ap.add_argument("--agent-port", type=int, default=7181)
    ap.add_argument("--cupti", default=None, help="CUPTI for the library (default: torch's, else CUDA's)")
    ap.add_argument("--pin", default="auto",
                    help="CPUs for every worker (taskset -c); auto: two of GPU 0's NUMA node; none")
    a = ap.parse_args()
    if a.worker:
        a.workload = a.worker
        return worker(a)

    start = time.monotonic()
    fw = Path(a.build) / "flamewatch"
    if not (Path(a.build) / "libflamewatch-cuda.so").exists():
        sys.exit(f"{a.build}/libflamewatch-cuda.so is missing")
    a.cupti = a.cupti or find_cupti()
    a.pin = None if a.pin == "none" else gpu_local_cpus() if a.pin == "auto" else a.pin
    logdir = os.environ.get("OUT") or tempfile.mkdtemp(prefix="fw-cuda-bench-")
    os.makedirs(logdir, exist_ok=True)
    modes = a.modes.split(",")
    agent_cmd = a.agent_cmd or (f"exec {fw} run --listen 127.0.0.1:{a.agent_port} "
                                f"--data {logdir}/fwdata --interval 1s --no-cpu-strips")
    print(f"cupti={a.cupti} logs={logdir} modes={modes} workers on CPUs {a.pin}", flush=True)

    results = []
    wls = a.workloads.split(",")
    for rep in range(a.repeats):
        plain = [(m, w) for m in modes if not m.startswith("fw-agent") for w in wls]
        agented = [(m, w) for m in modes if m.startswith("fw-agent") for w in wls]
        random.shuffle(plain)
        random.shuffle(agented)
        for block, with_agent in ((plain, False), (agented, True)):
            if not block or time.monotonic() - start > a.budget_s:
                continue
            agent = start_agent(agent_cmd, logdir) if with_agent else None
            try:
                for mode, wl in block:
                    if time.monotonic() - start > a.budget_s:
                        break
                    r = run_one(mode, wl, a, fw, logdir, a.agent_port if agent else None)
                    if r:
                        r["repeat"] = rep
                        results.append(r)
                        print(json.dumps(r), flush=True)
                    else:
                        print(f"{mode}/{wl}: failed, see {logdir}/{mode}-{wl}.log", flush=True)
            finally:
                if agent:
                    stop_agent(agent)

    with open(os.path.join(logdir, "cuda_overhead.json"), "w") as f:
        json.dump(results, f, indent=1)
    def med(xs):
        return statistics.median(xs) if xs else None

    def pct(x, ref):
        return f"{(x / ref - 1) * 100:+.2f}%" if x is not None and ref else "-"

    print(f"\n{'workload':9} {'mode':16} {'runs':>4} {'step ms':>9} {'overhead':>9} "
          f"{'lib ns/step':>12} {'vs prof':>8} {'vs evts':>8} {'agent ns/step':>13} {'vs prof':>8} "
          f"{'vs lib':>8} {'A/B':>8}")
    for wl in wls:
        b = med([r["step_ms"] for r in results if r["workload"] == wl and r["mode"] == "plain"])
        pk = med([r["prof_kernel_ns"] / r["steps"] for r in results
                  if r["workload"] == wl and r["mode"] == "torchprof" and r.get("prof_kernel_ns")])
        ev = med([r["event_ns_per_step"] for r in results
                  if r["workload"] == wl and r["mode"] == "plain" and r.get("event_ns_per_step")])
        print(f"{wl}: references per step: torch.profiler kernel sum {pk or 0:.0f} ns, "
              f"CUDA events around the chunks (plain runs, kernels + gaps) {ev or 0:.0f} ns")
        for mode in modes:
            rs = [r for r in results if r["workload"] == wl and r["mode"] == mode]
            if not rs:
                continue
            st = med([r["step_ms"] for r in rs])
            lib = med([r["fw_kernel_ns"] / r["steps"] for r in rs if "fw_kernel_ns" in r] +
                      [r["prof_kernel_ns"] / r["steps"] for r in rs if "prof_kernel_ns" in r])
            ag = med([r["agent_kernel_ns"] / r["steps"] for r in rs if "agent_kernel_ns" in r])
            ab = med([r["ab"]["overhead"] for r in rs if r.get("ab", {}).get("overhead") is not None])
            print(f"{wl:9} {mode:16} {len(rs):4} {st:9.4f} {pct(st, b):>9} {lib or 0:12.0f} "
                  f"{pct(lib, pk) if mode != 'torchprof' else '-':>8} {pct(lib, ev):>8} "
                  f"{ag or 0:13.0f} {pct(ag, pk):>8} {pct(ag, lib):>8} "
                  f"{f'{ab * 100:+.2f}%' if ab is not None else '-':>8}")
    print("\nper run: what the library measured a record to cost (cost ppm: every record's "
          "share of the process's time; bound: whole launch calls) and the mode it chose "
          "(all: every record), beside the A/B overhead of the run")
    print(f"{'workload':9} {'mode':22} {'all':>3} {'sw':>3} {'launch/s':>9} {'cost ppm':>9} "
          f"{'bound ppm':>9} {'in call':>7} {'own':>5} {'on ns':>6} {'off ns':>6} {'probes':>6} {'A/B':>8}")
    for r in results:
        c = r.get("fw_cost")
        if not c:
            continue
        ab = r.get("ab", {}).get("overhead")
        print(f"{r['workload']:9} {r['mode']:22} {c['activity_all']!s:>3} {c['activity_switches']!s:>3} "
              f"{c['launch_rate']!s:>9} {c['cost_ppm']!s:>9} {c['cost_bound_ppm']!s:>9} "
              f"{c['record_cost_in_call_ns']!s:>7} {c['record_cost_own_ns']!s:>5} "
              f"{c['launch_call_on_ns']!s:>6} {c['launch_call_off_ns']!s:>6} {c['probe_windows']!s:>6} "
              f"{f'{ab * 100:+.2f}%' if ab is not None else '-':>8}")
    print("\nper run: library summary (kernels) and what the agent stored")
    # Launches per step: the library's weighted estimate against the
    # kernels torch.profiler counted (torchprof rows): an estimate right on
    # launches but short on GPU ns means records of seen launches missing.
    print(f"{'workload':9} {'mode':16} {'kernels seen':>12} {'kept':>7} {'carried':>8} {'unseen':>7} "
          f"{'launch/step':>11} {'all/step':>8} {'dropped':>7} {'agent calls':>11} {'unknown ns':>10} {'py in GPU':>9} {'GPU placeh ns':>13} "
          f"{'CPU smp':>7} {'placeh':>6}")
    for r in results:
        s = r.get("fw_summary")
        if not s and "agent_kernel_ns" not in r and "prof_kernels" not in r:
            continue
        s = s or {}
        print(f"{r['workload']:9} {r['mode']:16} {s.get('launches_seen', 0):12} {s.get('kept', 0):7} "
              f"{s.get('carried', 0):8} {s.get('unsampled', 0):7} "
              f"{(s['launch_weight'] if 'launch_weight' in s else r.get('prof_kernels', 0)) / max(r['steps'], 1):11.1f} "
              f"{s.get('launches_all', 0) / max(r['steps'], 1):8.1f} "
              f"{s.get('cupti_dropped', 0) + s.get('refused_buffers', 0):7} "
              f"{r.get('agent_kernel_calls', '-'):>11} {r.get('agent_unknown_ns', '-'):>10} "
              f"{('%.0f%%' % (100 * r['gpu_stacks_with_python'])) if 'gpu_stacks_with_python' in r else '-':>9} "
              f"{r.get('gpu_placeholder_ns', '-'):>13} "
              f"{r.get('cpu_samples', '-'):>7} {r.get('cpu_placeholder_samples', '-'):>6}")
    for wl in wls:
        rs = [r for r in results if r["workload"] == wl and r.get("agent_top")]
        if rs:
            print(f"\n{wl}: top kernels the agent stored (one {rs[-1]['mode']} run): calls, ms")
            for name, calls, ns in rs[-1]["agent_top"]:
                print(f"  {calls:9} {ns / 1e6:9.2f}  {name}")
            print(f"  heaviest GPU stack: ...{rs[-1].get('gpu_top_stack', '')[-300:]}")
    print(f"\ntotal {time.monotonic() - start:.0f} s")


if __name__ == "__main__":
    main()
