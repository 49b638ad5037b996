#!/usr/bin/env python3
"""What off-CPU profiling costs a host (issue 30): for each rate of
blocking context switches (RATES, default 10k, 50k and 100k a second)
bench/offcpu_switches.c blocks that often for SECONDS, alone, beside
`flamewatch run --no-off-cpu` (CPU samples and strips), and beside
`flamewatch run` (off-CPU time too, the default: stacks walked only where
a block is predicted to reach the minimum). With --baseline FLAMEWATCH,
also beside that binary's `run --off-cpu`: a build from before the
prediction walks every block. The modes interleave, in a rotated order
each repeat. Needs root and build/flamewatch:

    python3 bench/offcpu_cost.py [--rates 10000,50000,100000] [--seconds 10] [--repeats 3]
                                 [--block-us 500] [--baseline PATH] [--pingpong SECONDS]

Each block lasts about BLOCK_US (default 500 us, under the 1 ms minimum, as
most of a busy server's are): RATE * BLOCK_US threads each block once a
period of BLOCK_US. A BLOCK_US over 1000 has every block reach the minimum:
what a host of long blocks pays, where every walk is of use.

Per run: the blocks made, the host's busy CPU over the window (/proc/stat,
every CPU), the agent's own CPU (/proc/PID/stat), and the BPF programs'
run time (kernel.bpf_stats_enabled, turned on for the run and restored):
the sched_switch handlers by name (the CPU strips' and the off-CPU one),
all programs together. The handlers run at every switch, in and out, of
every task, so their time per block made is an upper bound. The off-CPU
handler's time per run is given where it runs as a program of its own
(the baseline's); run's strips program tail-calls it, so its time is
theirs. And the stack walks it made in the window (its stats map), every
process's: the host's own long blocks are walked as well, as they should
be. Prints a table of medians.

--pingpong SECONDS measures instead the worst case for the handler's cost
per switch: tests/workloads/pingpong pinned to one CPU, two threads
passing a byte, every switch a block of a followed thread (too short to
be walked). Round trips a second under each mode, and what a switch cost
more than with no agent.
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
    """Per loaded program id: (name, run_time_ns, run_cnt)."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True).stdout
    return {p["id"]: (p.get("name", ""), p.get("run_time_ns", 0), p.get("run_cnt", 0))
            for p in json.loads(out or "[]")}


# The sample object's stats map: enum fw_stat in src/agent/bpf/sample.h.
STAT_OFFCPU_WALKS = 30


def offcpu_walks():
    """Stack walks at blocking switches so far: the stats map of the agent
    started last (the newest map of that name; an older agent's may linger
    a moment after its exit), summed over CPUs."""
    maps = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True,
                                     text=True).stdout or "[]")
    ids = [m["id"] for m in maps
           if m.get("name") == "stats" and m.get("max_entries", 0) > STAT_OFFCPU_WALKS]
    if not ids:
        return 0
    key = [str(b) for b in STAT_OFFCPU_WALKS.to_bytes(4, "little")]
    got = json.loads(subprocess.run(["bpftool", "-j", "map", "lookup", "id", str(max(ids)),
                                     "key", *key], capture_output=True,
                                    text=True).stdout or "{}")
    total = 0
    for v in got.get("values", []):
        val = v.get("value")
        total += (int.from_bytes(bytes(int(x, 16) for x in val), "little")
                  if isinstance(val, list) else int(val))
    return total


def bpf_delta(before, after):
    """BPF run time between two readings, of programs loaded at both (an
    agent's programs outlive its exit a little): sched_switch handlers, all,
    and the off-CPU handler's time and runs."""
    switch = total = off_ns = off_runs = 0
    for pid, (name, ns, runs) in after.items():
        if pid not in before:
            continue
        d = ns - before[pid][1]
        total += d
        if "switch" in name:
            switch += d
        if name == "on_sched_switch":
            off_ns += d
            off_runs += runs - before[pid][2]
    return switch, total, off_ns, off_runs


# mode -> (binary, flags); "none": no agent. "baseline" is added by --baseline.
MODES = {"none": None,
         "no-off-cpu": (BUILD / "flamewatch", ["--no-off-cpu"]),
         "run": (BUILD / "flamewatch", [])}


def start_run(tmp, binary, flags):
    port = 7400 + (os.getpid() % 500)
    log = open(tmp / "run.log", "w")
    argv = [str(binary), "run", "--listen", f"127.0.0.1:{port}",
            "--data", str(tmp / "data"), "--gpu-interval", "off", *flags]
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(300):
        if "profiling this host at" in open(tmp / "run.log").read():
            break
        time.sleep(0.1)
    time.sleep(2)       # past the start-up work: unwind tables of what runs
    return p


def one(rate, seconds, block_us, mode, tmp):
    agent = start_run(tmp, *MODES[mode]) if MODES[mode] else None
    try:
        b0, a0, p0 = host_busy_s(), proc_cpu_s(agent.pid) if agent else 0, bpf_progs()
        w0 = offcpu_walks() if agent else 0
        threads = max(1, round(rate * block_us / 1e6))
        out = subprocess.run([str(BUILD / "offcpu_switches"), str(rate), str(seconds),
                              str(threads)], capture_output=True, text=True, check=True).stdout
        b1, a1, p1 = host_busy_s(), proc_cpu_s(agent.pid) if agent else 0, bpf_progs()
        w1 = offcpu_walks() if agent else 0
        switch_ns, all_ns, off_ns, off_runs = bpf_delta(p0, p1)
    finally:
        if agent:
            agent.send_signal(signal.SIGTERM)
            agent.wait(60)
            shutil.rmtree(tmp / "data", ignore_errors=True)
    blocks = int(re.search(r"blocks (\d+)", out)[1])
    return {"rate": rate, "mode": mode, "blocks": blocks, "achieved": blocks / seconds,
            "host_busy_cpus": (b1 - b0) / seconds, "agent_cpus": (a1 - a0) / seconds,
            "bpf_switch_ns": switch_ns, "bpf_all_ns": all_ns, "offcpu_ns": off_ns,
            "offcpu_runs": off_runs, "walks": w1 - w0}


def pingpong(seconds, mode, tmp):
    """Round trips a second of pingpong pinned to CPU 1, beside mode."""
    agent = start_run(tmp, *MODES[mode]) if MODES[mode] else None
    try:
        out = subprocess.run(["taskset", "-c", "1", str(BUILD / "workloads" / "pingpong"),
                              str(seconds)], capture_output=True, text=True, check=True).stdout
    finally:
        if agent:
            agent.send_signal(signal.SIGTERM)
            agent.wait(60)
            shutil.rmtree(tmp / "data", ignore_errors=True)
    return {"mode": mode, "round_trips_s": int(re.search(r"(\d+)", out)[1]) / seconds}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="10000,50000,100000")
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--block-us", type=float, default=500)
    ap.add_argument("--baseline", help="a flamewatch binary whose `run --off-cpu` walks every "
                    "block, to compare with")
    ap.add_argument("--pingpong", type=float, metavar="SECONDS",
                    help="measure pingpong's round trips instead")
    a = ap.parse_args()
    if os.geteuid():
        sys.exit("needs root (BPF, bpf_stats)")
    subprocess.run(["gcc", "-O2", "-pthread", str(REPO / "bench" / "offcpu_switches.c"), "-o",
                    str(BUILD / "offcpu_switches")], check=True)
    rows = []
    if a.baseline:
        MODES["baseline"] = (Path(a.baseline).resolve(), ["--off-cpu"])
    modes = list(MODES)
    # Not under kernel.bpf_stats_enabled, which adds to every run of every program.
    if a.pingpong:
        with tempfile.TemporaryDirectory() as d:
            for r in range(a.repeats):
                for m in modes[r % len(modes):] + modes[:r % len(modes)]:
                    row = pingpong(a.pingpong, m, Path(d))
                    print(json.dumps(row), flush=True)
                    rows.append(row)
        rt = {m: statistics.median(x["round_trips_s"] for x in rows if x["mode"] == m)
              for m in modes}
        print("\n| mode | round trips/s | ns more a switch than with no agent |")
        print("|---|---|---|")
        for m in modes:
            # A round trip is two switches, each a block of one thread.
            more = (1e9 / rt[m] - 1e9 / rt["none"]) / 2
            print(f"| {m} | {rt[m]:,.0f} | {more:.0f} |")
        return
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    was = stats.read_text().strip()
    stats.write_text("1")
    try:
        with tempfile.TemporaryDirectory() as d:
            for r in range(a.repeats):
                for rate in map(int, a.rates.split(",")):
                    for m in modes[r % len(modes):] + modes[:r % len(modes)]:
                        row = one(rate, a.seconds, a.block_us, m, Path(d))
                        print(json.dumps(row), flush=True)
                        rows.append(row)
    finally:
        stats.write_text(was)
    med = lambda rate, mode, k: statistics.median(x[k] for x in rows
                                                  if x["rate"] == rate and x["mode"] == mode)
    print("\n| blocks/s asked | mode | achieved | host busy (CPUs) | agent (CPUs) | "
          "sched_switch BPF (ns per block made) | off-CPU handler (ns per run) | "
          "walks/s | all BPF (CPUs) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for rate in map(int, a.rates.split(",")):
        for m in modes:
            ach = med(rate, m, "achieved")
            made = max(1, ach * a.seconds)
            runs = med(rate, m, "offcpu_runs")
            per_run = f"{med(rate, m, 'offcpu_ns') / runs:.0f}" if runs else ""
            print(f"| {rate:,} | {m} | {ach:,.0f} | {med(rate, m, 'host_busy_cpus'):.3f} | "
                  f"{med(rate, m, 'agent_cpus'):.4f} | "
                  f"{med(rate, m, 'bpf_switch_ns') / made:.0f} | {per_run} | "
                  f"{med(rate, m, 'walks') / a.seconds:,.0f} | "
                  f"{med(rate, m, 'bpf_all_ns') / 1e9 / a.seconds:.4f} |")


if __name__ == "__main__":
    main()
