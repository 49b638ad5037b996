#!/usr/bin/env python3
"""What looking for libflamewatch-cuda.so costs the agent on a busy host.

    sudo python3 bench/cuda_tracker_cost.py [--seconds 20] [--warmup 10] [--rate 200] [--out FILE]

Runs side by side, in one run, shipping to one `flamewatch server` (not
counted), `flamewatch agent`s that differ only in how they find the
library in new processes:
  - events:  the dynamic loaders' _dl_debug_state hook (the default);
  - polling: FLAMEWATCH_CUDA_WATCH=0, the way before: every exec'd process's
             /proc/PID/maps read every 100 ms for 3 s, every 500 ms up to 30 s,
             and every process every 5 s;
  - base:    FLAMEWATCH_BASE=PATH, another binary (e.g. the commit before),
             when given.
and loads the host in phases of --seconds each:
  - idle;
  - true:   --rate execs/s of /bin/true (each lives ~1 ms);
  - sleep1: --rate execs/s of `sleep 1` (so ~--rate processes alive at once);
  - dlopen: a program dlopen()ing and dlclose()ing libz as fast as it can
            (4 loader notifications per pair).
Per phase and agent: CPU seconds of the agent (user + system, /proc/PID/stat),
% of one core, /proc/PID/maps reads and full scans (the agents' own /metrics),
and, for the events agent, the run time of its loader-hook BPF programs
(kernel.bpf_stats_enabled, set for the run and put back; charged to the
processes that load libraries, not to the agent). Then what the hook costs
processes, uprobe traps included (hook_ab()): the dlopen loop's ns per pair
and the µs to spawn and wait for /bin/true, alternating no agent, a polling
agent and an agent with the hook, and under an empty bpftrace uprobe.

FLAMEWATCH=PATH measures another binary than build/flamewatch.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FW = Path(os.environ.get("FLAMEWATCH", REPO / "build" / "flamewatch"))
FW_BASE = os.environ.get("FLAMEWATCH_BASE")
TICK = os.sysconf("SC_CLK_TCK")
HOOK_PROGS = {"on_dl_debug_state"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def metrics(port):
    out = {}
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except OSError:
        return out
    for line in text.splitlines():
        if line.startswith("flamewatch_agent_cuda_"):
            name, value = line.split()
            out[name[len("flamewatch_agent_cuda_"):]] = float(value)
    return out


def hook_ns(pid):
    """run_time_ns summed over pid's loader-hook BPF programs."""
    try:
        progs = {p["id"]: p.get("name", "") for p in
                 json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True,
                                           text=True).stdout or "[]")}
    except (OSError, ValueError):
        return None
    total, seen = 0, set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            fields = dict(l.split(":", 1) for l in open(f"/proc/{pid}/fdinfo/{fd}").read().splitlines()
                          if ":" in l)
        except OSError:
            continue
        if "prog_id" not in fields or "run_time_ns" not in fields:
            continue
        pid_ = int(fields["prog_id"])
        if pid_ in seen or progs.get(pid_, "")[:15] not in {n[:15] for n in HOOK_PROGS}:
            continue
        seen.add(pid_)
        total += int(fields["run_time_ns"])
    return total


def spawn(rate, seconds, argv):
    """argv spawned rate times a second for seconds; children reaped. Run
    in a process of its own (--spawn), whose only children they are."""
    path = shutil.which(argv[0])
    end = time.monotonic() + seconds
    nxt = time.monotonic()
    n = 0
    while time.monotonic() < end:
        nxt += 1 / rate
        delay = nxt - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        os.posix_spawn(path, argv, os.environ)
        n += 1
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    print(n)


def spawner(argv, rate, seconds):
    subprocess.run([sys.executable, __file__, "--spawn", str(rate), str(seconds)] + argv, check=True,
                   stdout=subprocess.DEVNULL)


def exec_us(n=500):
    """Mean µs to spawn /bin/true and wait for it, n times in a row."""
    path = shutil.which("true")
    t = time.monotonic()
    for _ in range(n):
        os.waitpid(os.posix_spawn(path, ["true"], os.environ), 0)
    return (time.monotonic() - t) * 1e6 / n


def dlopen_loop(exe, seconds):
    out = subprocess.run([exe, "libz.so.1", str(seconds)], capture_output=True, text=True).stdout.split()
    return int(out[0]), float(out[1])


def hook_ab(lines, loop, port, tmp, rounds=2):
    """What the loader hook costs processes, uprobe traps included: the
    dlopen loop and spawns of /bin/true with no agent, an agent that polls
    and one with the hook, alternated (an agent's own sampling costs them
    too: the polling one shows how much), and under an empty bpftrace
    uprobe on the same function (the trap alone)."""
    loader = Path("/lib64/ld-linux-x86-64.so.2").resolve()
    rows = {}

    def measure(name):
        ns, us = dlopen_loop(loop, 3)[1], exec_us()
        rows.setdefault(name, []).append((ns, us))

    for _ in range(rounds):
        for name, extra in (("no agent", None), ("agent, polling", {"FLAMEWATCH_CUDA_WATCH": "0"}),
                            ("agent, loader events", {})):
            if extra is None:
                measure(name)
                continue
            env = {k: v for k, v in os.environ.items() if not k.startswith("FLAMEWATCH_CUDA")}
            env.update(extra)
            p = subprocess.Popen([FW, "agent", "--server", f"http://127.0.0.1:{port}", "--node",
                                  "bench-ab", "--gpu-interval", "off"], env=env,
                                 stdout=subprocess.DEVNULL, stderr=open(tmp / "ab.log", "a"))
            time.sleep(6)
            measure(name)
            p.terminate()
            p.wait(timeout=20)
    if shutil.which("bpftrace"):
        bt = subprocess.Popen(["bpftrace", "-e", f"uprobe:{loader}:_dl_debug_state {{ }}"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(5)
        measure("bpftrace, empty uprobe")
        bt.terminate()
        bt.wait(timeout=20)
    lines.append("")
    lines.append("| running | dlopen+dlclose of libz, ns (each round) | spawn+wait of /bin/true, µs (each round) |")
    lines.append("|---|---|---|")
    for name, r in rows.items():
        lines.append(f"| {name} | {', '.join(f'{ns:.0f}' for ns, _ in r)} | "
                     f"{', '.join(f'{us:.0f}' for _, us in r)} |")


def main():
    if len(sys.argv) > 4 and sys.argv[1] == "--spawn":
        spawn(float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--warmup", type=float, default=10)
    ap.add_argument("--rate", type=float, default=200)
    ap.add_argument("--out")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root")
    tmp = Path(tempfile.mkdtemp(prefix="fw-tracker-bench-"))
    loop = tmp / "dlopen_loop"
    subprocess.run(["cc", "-O2", "-o", loop, REPO / "bench" / "dlopen_loop.c", "-ldl"], check=True)
    stats_old = Path("/proc/sys/kernel/bpf_stats_enabled").read_text().strip()
    Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
    procs, lines = [], []
    try:
        port = free_port()
        procs.append(subprocess.Popen([FW, "server", "--listen", f"127.0.0.1:{port}", "--data",
                                       tmp / "data"], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL))
        time.sleep(1)
        agents = {"events": (FW, {}), "polling": (FW, {"FLAMEWATCH_CUDA_WATCH": "0"})}
        if FW_BASE:
            agents["base"] = (Path(FW_BASE), {})
        running = {}
        for name, (exe, extra) in agents.items():
            mport = free_port()
            env = {k: v for k, v in os.environ.items() if not k.startswith("FLAMEWATCH_CUDA")}
            env.update(extra)
            p = subprocess.Popen([exe, "agent", "--server", f"http://127.0.0.1:{port}", "--node",
                                  f"bench-{name}", "--gpu-interval", "off", "--metrics-listen",
                                  f"127.0.0.1:{mport}"], env=env, stdout=subprocess.DEVNULL,
                                 stderr=open(tmp / f"{name}.log", "w"))
            procs.append(p)
            running[name] = (p, mport)
        time.sleep(args.warmup)
        phases = {
            "idle": lambda s: time.sleep(s),
            "true": lambda s: spawner(["true"], args.rate, s),
            "sleep1": lambda s: spawner(["sleep", "1"], args.rate, s),
            "dlopen": lambda s: dlopen_loop(loop, s),
        }
        lines.append(f"flamewatch {FW}; {args.rate:g} execs/s; {args.seconds:g} s per phase; "
                     f"{os.cpu_count()} CPUs")
        lines.append("")
        lines.append("| phase | agent | CPU s | % of one core | maps reads | reads/s | full scans "
                     "| hook BPF ms |")
        lines.append("|---|---|---|---|---|---|---|---|")
        for phase, fn in phases.items():
            c0 = {n: cpu_s(p.pid) for n, (p, _) in running.items()}
            m0 = {n: metrics(mp) for n, (_, mp) in running.items()}
            h0 = hook_ns(running["events"][0].pid)
            t0 = time.monotonic()
            fn(args.seconds)
            time.sleep(0.5)		# the last ticks of the phase
            wall = time.monotonic() - t0
            h1 = hook_ns(running["events"][0].pid)
            for n, (p, mp) in running.items():
                cpu = cpu_s(p.pid) - c0[n]
                m1 = metrics(mp)
                reads = m1.get("maps_reads_total", 0) - m0[n].get("maps_reads_total", 0)
                scans = m1.get("full_scans_total", 0) - m0[n].get("full_scans_total", 0)
                hook = f"{(h1 - h0) / 1e6:.1f}" if n == "events" and h0 is not None and h1 is not None else ""
                lines.append(f"| {phase} | {n} | {cpu:.2f} | {100 * cpu / wall:.2f} | {reads:.0f} | "
                             f"{reads / wall:.0f} | {scans:.0f} | {hook} |")
        for p, _ in running.values():
            p.terminate()
            p.wait(timeout=20)
        hook_ab(lines, loop, port, tmp)
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        Path("/proc/sys/kernel/bpf_stats_enabled").write_text(stats_old)
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(f"(logs in {tmp})", file=sys.stderr)


if __name__ == "__main__":
    main()
