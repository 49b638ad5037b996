#!/usr/bin/env python3
"""Overhead of the node agent beside perf and bpftrace, in one run.

    sudo python3 bench/overhead.py [--seconds 60] [--warmup 30] [--hz 19,99] [--load idle,busy]

For each (load, rate) it starts, at the same time and for the same
seconds, sampling the whole host at that rate with stacks:
  - `flamewatch agent` shipping to a `flamewatch server` on loopback (the
    server is not counted: on a fleet it runs elsewhere);
  - `perf record -e cpu-clock -F HZ -a -g`;
  - `bpftrace -e 'profile:hz:HZ { @[kstack, ustack, comm] = count(); }'`.
and prints, per tool, CPU seconds (user + system of the tool's processes,
from /proc/PID/stat), % of one core, peak RSS (VmHWM), for our agents also
the highest exact RSS (smaps_rollup, read every 0.05 s: VmHWM is the
highest of readings that may be off by ~128 KiB per CPU, see
exact_rss_kib(); a peak shorter than 0.05 s may be missed), the RSS at the
end of the window (VmRSS), and for the BPF tools the run time of their BPF
programs (kernel.bpf_stats_enabled; it is charged to the sampled tasks,
not to the tool, so it is listed apart and added in the "total" column). "busy" runs one CPU-bound cpu_split per CPU.
Writes the table as markdown to --out (default: stdout only); prints when
each agent's RSS peaked, and with --rss-dir DIR writes its RSS and VmHWM
every 0.1 s there.

FLAMEWATCH=PATH measures another binary; FLAMEWATCH_BASE=PATH adds a
second agent, that binary, to the same run (its own node name, the same
server): a before/after comparison under the same load.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FW = Path(os.environ.get("FLAMEWATCH", REPO / "build" / "flamewatch"))
FW_BASE = os.environ.get("FLAMEWATCH_BASE")
LOAD = REPO / "build" / "workloads" / "cpu_split"
TICK = os.sysconf("SC_CLK_TCK")
# Every process a measurement starts: main() kills what is left should one fail.
STARTED = []


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid):
    """user + system seconds of pid and its reaped children."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return sum(int(x) for x in f[11:15]) / TICK


def status_kib(pid, field):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def hwm_kib(pid):
    return status_kib(pid, "VmHWM")


def exact_rss_kib(pid):
    """RSS from a walk of the page tables (smaps_rollup). VmRSS and VmHWM
    come from per-CPU counters that Linux 6.2+ reads without summing them:
    they can be off by ~128 KiB per CPU either way, and VmHWM keeps the
    highest such reading (seen on a 2-CPU VM: a VmHWM lower than the one
    read 5 ms before, and a VmHWM 0.6 MiB above every VmRSS sampled)."""
    try:
        for line in open(f"/proc/{pid}/smaps_rollup"):
            if line.startswith("Rss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def bpf_ns(pid):
    """Sum of run_time_ns over the BPF programs pid holds (from fdinfo)."""
    total = 0
    try:
        fds = os.listdir(f"/proc/{pid}/fdinfo")
    except OSError:
        return None
    seen = set()
    for fd in fds:
        try:
            text = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if "prog_id" in fields and "run_time_ns" in fields:
            pid_ = fields["prog_id"].strip()
            if pid_ not in seen:
                seen.add(pid_)
                total += int(fields["run_time_ns"])
    return total


def stop_tools(procs):
    """SIGINT, as a user stops them (they flush), then 30 s before SIGKILL."""
    for p in procs:
        p.send_signal(signal.SIGINT)
    for p in procs:
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()


def measure(load, hz, seconds, warmup, tmp, rss_dir):
    loads = []
    if load == "busy":
        loads = [subprocess.Popen([LOAD, str(seconds + 60)], stdout=subprocess.DEVNULL)
                 for _ in range(os.cpu_count())]
        STARTED.extend(loads)
        time.sleep(2)
    port = free_port()
    data = tmp / f"data-{load}-{hz}"
    server = subprocess.Popen([FW, "server", "--listen", f"127.0.0.1:{port}", "--data", data],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    STARTED.append(server)
    time.sleep(1)
    tools = {
        "flamewatch agent": [FW, "agent", "--server", f"http://127.0.0.1:{port}", "-F", str(hz),
                             "--node", "bench"],
        "perf record -g": ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(hz), "-a", "-g",
                           "-o", str(tmp / f"perf-{load}-{hz}.data")],
        "bpftrace": ["bpftrace", "-e", f"profile:hz:{hz} {{ @[kstack, ustack, comm] = count(); }}"],
    }
    if FW_BASE:
        tools["flamewatch agent (base)"] = [FW_BASE, "agent", "--server", f"http://127.0.0.1:{port}",
                                            "-F", str(hz), "--node", "bench-base"]
    procs = {}
    for name, argv in tools.items():
        if not shutil.which(str(argv[0])):
            continue
        procs[name] = subprocess.Popen([str(a) for a in argv], stdout=subprocess.DEVNULL,
                                       stderr=open(tmp / f"{name.replace(' ', '_')}-{load}-{hz}.log", "w"))
        STARTED.append(procs[name])
    # The agents' RSS every 0.1 s from their start: when the peak came
    # (start-up, first flush, a table build) is what a memory change needs;
    # and the highest exact RSS (smaps_rollup) seen every 0.05 s.
    trace = {n: [] for n in procs if n.startswith("flamewatch")}
    exact = {n: 0 for n in trace}
    t_start = time.monotonic()
    stop = threading.Event()

    def sample_rss():
        tick = 0
        while not stop.is_set():
            for n in trace:
                exact[n] = max(exact[n], exact_rss_kib(procs[n].pid) or 0)
                if tick % 2:
                    continue
                kb, hwm = status_kib(procs[n].pid, "VmRSS"), hwm_kib(procs[n].pid)
                if kb is not None and hwm is not None:
                    trace[n].append((time.monotonic() - t_start, kb, hwm))
            tick += 1
            stop.wait(0.05)

    sampler = threading.Thread(target=sample_rss, daemon=True)
    sampler.start()
    # Start-up (BPF load, BTF parsing, bpftrace's compile, the agent's unwind
    # tables and first symbolization) is reported on its own; the measured
    # window is the steady state that follows.
    time.sleep(warmup)
    t0 = time.monotonic()
    c0 = {n: cpu_s(p.pid) for n, p in procs.items()}
    b0 = {n: bpf_ns(p.pid) for n, p in procs.items()}
    end = t0 + seconds
    last_b = dict(b0)
    while time.monotonic() < end:
        time.sleep(min(1.0, max(0.0, end - time.monotonic())))
        for n, p in procs.items():
            b = bpf_ns(p.pid)
            if b is not None:
                last_b[n] = b
    wall = time.monotonic() - t0
    stop.set()
    sampler.join()
    for n, points in trace.items():
        if points:
            # The sampled RSS can miss a short peak; the VmHWM says when it came.
            t_hwm = next(t for t, _, hwm in points if hwm == points[-1][2])
            t, kb, _ = max(points, key=lambda x: x[1])
            print(f"{load} {hz} Hz {n}: VmHWM {points[-1][2] / 1024:.2f} MiB reached by {t_hwm:.1f} s "
                  f"after start; highest VmRSS sampled {kb / 1024:.2f} MiB at {t:.1f} s; highest exact "
                  f"RSS {exact[n] / 1024:.2f} MiB; {points[-1][1] / 1024:.2f} MiB at the end",
                  file=sys.stderr)
            if rss_dir:
                rss_dir.mkdir(parents=True, exist_ok=True)
                (rss_dir / f"rss-{n.replace(' ', '_')}-{load}-{hz}.txt").write_text(
                    "".join(f"{t:.2f} {kb} {hwm}\n" for t, kb, hwm in points))
    rows = []
    for n, p in procs.items():
        c1, hwm, rss = cpu_s(p.pid), hwm_kib(p.pid), status_kib(p.pid, "VmRSS")
        cpu = (c1 - c0[n]) if c1 is not None and c0[n] is not None else None
        bpf = (last_b[n] - b0[n]) / 1e9 if last_b.get(n) is not None and b0[n] is not None else None
        rows.append((n, cpu, hwm, exact.get(n), rss, bpf, wall, c0[n]))
    stop_tools(procs.values())
    server.terminate()
    server.wait(timeout=30)
    for p in loads:
        p.kill()
        p.wait()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--hz", default="19,99")
    ap.add_argument("--load", default="idle,busy")
    ap.add_argument("--out")
    ap.add_argument("--rss-dir", type=Path, help="write each agent's RSS and VmHWM every 0.1 s here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("overhead: needs root")
    if not FW.exists() or not LOAD.exists():
        sys.exit("overhead: run `make all workloads` first")
    old = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
    open("/proc/sys/kernel/bpf_stats_enabled", "w").write("1")
    lines = ["| load | Hz | tool | start-up CPU s | CPU s | % of a core | BPF s | total % of a core "
             "| peak RSS MiB (VmHWM) | highest exact RSS MiB | RSS MiB at the end |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    try:
        with tempfile.TemporaryDirectory(prefix="fw-overhead-") as d:
            for load in a.load.split(","):
                for hz in (int(x) for x in a.hz.split(",")):
                    for n, cpu, hwm, ex, rss, bpf, wall, c0 in measure(load, hz, a.seconds, a.warmup,
                                                                   Path(d), a.rss_dir):
                        pct = 100 * cpu / wall if cpu is not None else None
                        tot = 100 * (cpu + (bpf or 0)) / wall if cpu is not None else None
                        fmt = lambda v, f: f.format(v) if v is not None else "-"
                        lines.append(f"| {load} | {hz} | {n} | {fmt(c0, '{:.2f}')} | {fmt(cpu, '{:.2f}')} | "
                                     f"{fmt(pct, '{:.3f}')} | "
                                     f"{fmt(bpf, '{:.3f}')} | {fmt(tot, '{:.3f}')} | "
                                     f"{fmt(hwm / 1024 if hwm else None, '{:.1f}')} | "
                                     f"{fmt(ex / 1024 if ex else None, '{:.2f}')} | "
                                     f"{fmt(rss / 1024 if rss else None, '{:.1f}')} |")
                        print(lines[-1], flush=True)
    finally:
        open("/proc/sys/kernel/bpf_stats_enabled", "w").write(old)
        for p in STARTED:
            if p.poll() is None:
                p.kill()
                p.wait()
    table = "\n".join(lines)
    print(f"\n{os.cpu_count()} CPUs; per row {a.warmup} s of start-up, then {a.seconds} s measured; "
          f"all three tools at once\n\n{table}")
    if a.out:
        Path(a.out).write_text(table + "\n")


if __name__ == "__main__":
    main()
