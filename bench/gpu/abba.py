#!/usr/bin/env python3
"""What flamewatch costs a training loop on a GPU node, measured honestly
(issue 25, item 6): interleaved runs of the same script without and with
GPU time collection, each pinned to the same cores.

    OUT=/tmp/out python3 bench/gpu/abba.py --build DIR [--workloads mlp,tiny]
        [--pairs 6] [--seconds 6]

`flamewatch run` (defaults, as a user starts it) runs throughout; A is the
workload alone (bench/gpu/cuda_overhead.py --worker: a small MLP training
step, or 100 tiny elementwise kernels a step), B the same under
`flamewatch cuda` (libflamewatch-cuda.so injected, the agent attached).
Pairs alternate their order (AB, BA, AB, ...), so that a drift of the
machine falls on both sides. Each run's step time is the mean over its
measured seconds; the result is, per workload, the median and the range
of the per-pair ratios B/A. Targets: MLP <= 1 %, tiny <= 3 %.

Beside it, the agent's own CPU over the whole benchmark: user + system
time of `flamewatch run` and its children (the GPU monitors' child), and
the run time of its BPF programs (kernel.bpf_stats_enabled, read from the
programs' fdinfo), as a share of one core. `run` also holds the server and
the store, which a node's agent does not.

Needs root, an NVIDIA GPU and python3 with PyTorch.
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
WORKER = HERE.parent / "cuda_overhead.py"


def tree(pid):
    """pid and its descendants."""
    kids = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def cpu_ns(pid):
    """User + system ns of pid's tree (live processes; exited children are
    in their parent's cutime/cstime), and its BPF programs' run time."""
    hz = os.sysconf("SC_CLK_TCK")
    task = bpf = 0
    for p in tree(pid):
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime stime cutime cstime: fields 14-17 (1-based), here 11-14
        task += sum(int(x) for x in f[11:15]) * 1_000_000_000 // hz
        try:
            fds = os.listdir(f"/proc/{p}/fdinfo")
        except OSError:
            continue
        for fd in fds:
            try:
                info = open(f"/proc/{p}/fdinfo/{fd}").read()
            except OSError:
                continue
            m = re.search(r"^run_time_ns:\s+(\d+)", info, re.M)
            if m and "prog_type" in info:
                bpf += int(m[1])
    return task, bpf


def run(cmd, env, log):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(map(str, cmd))}\nrc={p.returncode}\n{p.stdout}\n{p.stderr}\n")
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True, help="holds flamewatch and libflamewatch-cuda.so")
    ap.add_argument("--workloads", default="mlp,tiny")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=6.0, help="measured seconds per run")
    ap.add_argument("--warmup-s", type=float, default=2.0)
    ap.add_argument("--pin", default="2,3", help="CPUs for every run (taskset -c)")
    ap.add_argument("--port", type=int, default=7189)
    ap.add_argument("--run-args", default="", help="more arguments for `flamewatch run`")
    a = ap.parse_args()
    out = Path(os.environ.get("OUT") or "/tmp/fw-abba")
    out.mkdir(parents=True, exist_ok=True)
    fw = Path(a.build).resolve() / "flamewatch"
    lib = Path(a.build).resolve() / "libflamewatch-cuda.so"
    try:
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
    except OSError as e:
        print(f"bpf_stats_enabled: {e}: BPF time not counted", file=sys.stderr)
    runlog = open(out / "abba-run.log", "w")
    srv = subprocess.Popen([str(fw), "run", "--listen", f"127.0.0.1:{a.port}", "--data",
                            str(out / "abba-data")] + a.run_args.split(),
                           stdout=runlog, stderr=subprocess.STDOUT)
    for _ in range(200):
        if "profiling this host at" in (out / "abba-run.log").read_text():
            break
        time.sleep(0.3)
    time.sleep(3)		# the GPU monitors' child, NVML's first rounds
    t0, (c0, b0) = time.monotonic(), cpu_ns(srv.pid)
    env = dict(os.environ)
    base = [sys.executable, str(WORKER), "--seconds", str(a.seconds), "--warmup-s", str(a.warmup_s)]
    pin = ["taskset", "-c", a.pin] if a.pin else []
    rows = {}

    # A timeout's SIGTERM ends the runs, not the report of those done.
    def _stop(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, _stop)
    try:
        for wl in a.workloads.split(","):
            ratios, pairs = [], []
            for i in range(a.pairs):
                order = "AB" if i % 2 == 0 else "BA"
                got = {}
                for side in order:
                    cmd = pin + ([str(fw), "cuda", "--lib", str(lib), "--"] if side == "B" else []) \
                        + base + ["--worker", wl]
                    r = run(cmd, env, out / f"abba-{wl}.log")
                    got[side] = r["step_ms"] if r else None
                if got["A"] and got["B"]:
                    ratios.append(got["B"] / got["A"])
                    pairs.append((order, got["A"], got["B"]))
                print(json.dumps({"workload": wl, "pair": i, "order": order, "A_ms": got["A"],
                                  "B_ms": got["B"]}), flush=True)
                rows[wl] = (ratios, pairs)
    except KeyboardInterrupt:
        print("stopped: the pairs done so far", flush=True)
    finally:
        t1, (c1, b1) = time.monotonic(), cpu_ns(srv.pid)
        srv.terminate()
        srv.wait(30)
    wall = t1 - t0
    print(f"\n{'workload':9} {'pairs':>5} {'median B/A':>11} {'range':>21}   A ms (median)  B ms (median)")
    for wl, (ratios, pairs) in rows.items():
        if not ratios:
            print(f"{wl:9} no pair completed, see {out}/abba-{wl}.log")
            continue
        print(f"{wl:9} {len(ratios):5} {(statistics.median(ratios) - 1) * 100:+10.2f}% "
              f"{(min(ratios) - 1) * 100:+9.2f}% .. {(max(ratios) - 1) * 100:+7.2f}%   "
              f"{statistics.median(p[1] for p in pairs):13.4f}  {statistics.median(p[2] for p in pairs):13.4f}")
    print(f"\nagent (`flamewatch run` and children) over {wall:.0f} s: "
          f"{(c1 - c0) / 1e9 / wall * 100:.3f} % of a core in user+system, "
          f"{(b1 - b0) / 1e9 / wall * 100:.3f} % in BPF programs")


if __name__ == "__main__":
    main()
