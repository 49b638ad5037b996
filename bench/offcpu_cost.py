#!/usr/bin/env python3
"""What off-CPU profiling costs a host (issue 30): for each rate of
blocking context switches (RATES, default 10k, 50k and 100k a second)
bench/offcpu_switches.c blocks that often for SECONDS, alone, beside
`flamewatch run` (CPU samples and strips, the defaults), and beside
`flamewatch run --off-cpu`. The three modes interleave, in a rotated order
each repeat. Needs root and build/flamewatch:

    python3 bench/offcpu_cost.py [--rates 10000,50000,100000] [--seconds 10] [--repeats 3]

Per run: the blocks made, the host's busy CPU over the window (/proc/stat,
every CPU), the agent's own CPU (/proc/PID/stat), and the BPF programs'
run time (kernel.bpf_stats_enabled, turned on for the run and restored):
the sched_switch handlers by name (the CPU strips' and the off-CPU walk),
all programs together. The handlers run at every switch, in and out, of
every task, so their time per block made is an upper bound of the
walk's. Prints a table of medians.
"""
import argparse
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
HZ = os.sysconf("SC_CLK_TCK")


def host_busy_s():
    f = open("/proc/stat").readline().split()[1:]
    v = list(map(int, f))
    idle = v[3] + (v[4] if len(v) > 4 else 0)
    return (sum(v[:8]) - idle) / HZ


def proc_cpu_s(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / HZ
    except OSError:
        return 0.0


def bpf_progs():
    """Per loaded program id: (name, run_time_ns)."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
    return {p["id"]: (p.get("name", ""), p.get("run_time_ns", 0)) for p in json.loads(out or "[]")}


def bpf_delta(before, after):
    """BPF run time between two readings, of programs loaded at both (an
    agent's programs outlive its exit a little): (sched_switch handlers, all)."""
    switch = total = 0
    for pid, (name, ns) in after.items():
        if pid not in before:
            continue
        d = ns - before[pid][1]
        total += d
        if "switch" in name:
            switch += d
    return switch, total


def start_run(tmp, offcpu):
    port = 7400 + (os.getpid() % 500)
    log = open(tmp / "run.log", "w")
    argv = [str(BUILD / "flamewatch"), "run", "--listen", f"127.0.0.1:{port}",
            "--data", str(tmp / "data"), "--gpu-interval", "off"]
    if offcpu:
        argv.append("--off-cpu")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        if "profiling this host at" in open(tmp / "run.log").read():
            break
        time.sleep(0.1)
    time.sleep(2)       # past the start-up work: unwind tables of what runs
    return p


def one(rate, seconds, mode, tmp):
    agent = start_run(tmp, mode == "off-cpu") if mode != "none" else None
    try:
        b0, a0, p0 = host_busy_s(), proc_cpu_s(agent.pid) if agent else 0, bpf_progs()
        out = subprocess.run([str(BUILD / "offcpu_switches"), str(rate), str(seconds)],
                             capture_output=True, text=True, check=True).stdout
        b1, a1, p1 = host_busy_s(), proc_cpu_s(agent.pid) if agent else 0, bpf_progs()
        switch_ns, all_ns = bpf_delta(p0, p1)
    finally:
        if agent:
            agent.send_signal(signal.SIGTERM)
            agent.wait(60)
            shutil.rmtree(tmp / "data", ignore_errors=True)
    blocks = int(re.search(r"blocks (\d+)", out)[1])
    return {"rate": rate, "mode": mode, "blocks": blocks, "achieved": blocks / seconds,
            "host_busy_cpus": (b1 - b0) / seconds, "agent_cpus": (a1 - a0) / seconds,
            "bpf_switch_ns": switch_ns, "bpf_all_ns": all_ns}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="10000,50000,100000")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    if os.geteuid():
        sys.exit("needs root (BPF, bpf_stats)")
    subprocess.run(["gcc", "-O2", "-pthread", str(REPO / "bench" / "offcpu_switches.c"), "-o",
                    str(BUILD / "offcpu_switches")], check=True)
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    was = stats.read_text().strip()
    stats.write_text("1")
    rows = []
    modes = ["none", "cpu", "off-cpu"]
    try:
        with tempfile.TemporaryDirectory() as d:
            for r in range(a.repeats):
                for rate in map(int, a.rates.split(",")):
                    for m in modes[r % 3:] + modes[:r % 3]:
                        row = one(rate, a.seconds, m, Path(d))
                        print(json.dumps(row), flush=True)
                        rows.append(row)
    finally:
        stats.write_text(was)
    med = lambda rate, mode, k: statistics.median(x[k] for x in rows
                                                  if x["rate"] == rate and x["mode"] == mode)
    print("\n| blocks/s asked | mode | achieved | host busy (CPUs) | agent (CPUs) | "
          "sched_switch BPF (ns per block made) | all BPF (CPUs) |")
    print("|---|---|---|---|---|---|---|")
    for rate in map(int, a.rates.split(",")):
        for m in modes:
            ach = med(rate, m, "achieved")
            print(f"| {rate:,} | {m} | {ach:,.0f} | {med(rate, m, 'host_busy_cpus'):.3f} | "
                  f"{med(rate, m, 'agent_cpus'):.4f} | "
                  f"{med(rate, m, 'bpf_switch_ns') / max(1, ach * a.seconds):.0f} | "
                  f"{med(rate, m, 'bpf_all_ns') / 1e9 / a.seconds:.4f} |")


if __name__ == "__main__":
    main()
