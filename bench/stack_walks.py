#!/usr/bin/env python3
"""What the stack walk without bpf_loop() costs, beside the bpf_loop() walk.

    sudo python3 bench/stack_walks.py [--seconds 10] [--depth 100] [--rounds 2] [--base BINARY]

Runs `flamewatch record -F 499` on build/workloads/nofp/recurse (main ->
descend x DEPTH -> leaf, every frame from the unwind tables) once with the
bpf_loop() walk and once with FLAMEWATCH_NO_BPF_LOOP=1 (the bounded loops
that kernels before 5.17 get), alternating, ROUNDS times each. For each
run it reads the run time and run count of the on_cpu_sample program from
flamewatch's own /proc/PID/fdinfo just before it exits, and prints the
mean nanoseconds per sample and the ratio of the two walks. With --base,
it compares BINARY's bpf_loop walk with this build's instead (a change to
the walk against the build before it).

BPF run-time accounting is turned on with BPF_ENABLE_STATS, which lasts as
long as this script holds the returned fd: the kernel.bpf_stats_enabled
sysctl, which other tools on the host may be toggling, is not touched.
"""

import argparse
import ctypes
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FW = REPO / "build" / "flamewatch"
RECURSE = REPO / "build" / "workloads" / "nofp" / "recurse"
BPF_ENABLE_STATS = 32
BPF_STATS_RUN_TIME = 0
NR_BPF = 321  # x86-64


def enable_stats():
    libc = ctypes.CDLL(None, use_errno=True)
    attr = ctypes.create_string_buffer(128)  # union bpf_attr; enable_stats.type is the first u32
    ctypes.c_uint32.from_buffer(attr, 0).value = BPF_STATS_RUN_TIME
    fd = libc.syscall(NR_BPF, BPF_ENABLE_STATS, attr, ctypes.c_uint(len(attr)))
    if fd < 0:
        sys.exit(f"BPF_ENABLE_STATS: {os.strerror(ctypes.get_errno())} (run as root)")
    return fd


def prog_counters(pid):
    """{prog_id: (run_time_ns, run_cnt)} of the BPF programs pid holds."""
    out = {}
    for fd in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = fd.read_text()
        except OSError:
            continue
        kv = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
        if "prog_id" in kv and "run_cnt" in kv:
            out[int(kv["prog_id"])] = (int(kv["run_time_ns"]), int(kv["run_cnt"]))
    return out


def sampler_id(ids):
    """The id of on_cpu_sample among ids, from bpftool."""
    for i in ids:
        res = subprocess.run(["bpftool", "prog", "show", "id", str(i)], capture_output=True, text=True)
        if "on_cpu_sample" in res.stdout:
            return i
    return None


def one_run(mode, fw, seconds, depth, out):
    env = dict(os.environ, FLAMEWATCH_NO_BPF_LOOP="1" if mode == "bounded" else "0")
    argv = [str(fw), "record", "-F", "499", "-q", "-o", str(out), "--", str(RECURSE), str(seconds), str(depth)]
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    last, sid = {}, None
    while p.poll() is None:
        try:
            now = prog_counters(p.pid)
        except OSError:
            now = {}
        if sid is None and now:
            sid = sampler_id(now)
        # The fds close as the process exits: keep the last full reading.
        if sid is not None and sid in now:
            last = now
        time.sleep(0.2)
    err = p.stderr.read().decode(errors="replace")
    if p.returncode != 0 or sid is None or sid not in last:
        sys.exit(f"{mode}: flamewatch failed ({p.returncode}) or on_cpu_sample not found:\n{err[-2000:]}")
    walked = 0
    for line in Path(out).read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if stack.startswith("recurse;"):
            walked += int(n)
    return last[sid] + (walked,)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--out", default="/tmp/fw-stack-walks.folded")
    ap.add_argument("--base", help="another flamewatch binary: compare its bpf_loop walk with this "
                    "build's, instead of this build's two walks")
    a = ap.parse_args()
    # (label, binary, walk) in the order each round runs them; the ratio is second / first.
    if a.base:
        runs = [("base", Path(a.base), "bpf_loop"), ("new", FW, "bpf_loop")]
    else:
        runs = [("bpf_loop", FW, "bpf_loop"), ("bounded", FW, "bounded")]
    for f in (FW, RECURSE):
        if not f.exists():
            sys.exit(f"{f} is missing: run `make && make workloads`")
    if a.base and not Path(a.base).is_file():
        sys.exit(f"--base {a.base}: no such file")
    stats_fd = enable_stats()
    totals = {label: [0, 0, 0] for label, _, _ in runs}
    print(f"recurse depth {a.depth} ({a.depth + 6} frames a sample), -F 499, {a.seconds} s a run")
    print("runs: every run of on_cpu_sample (other tasks' ticks are filtered out early);")
    print("walked: recurse's samples in the profile, each a full walk; ns/walked = all BPF ns / walked\n")
    print(f"{'round':>5}  {'walk':9} {'runs':>7} {'walked':>7} {'ns/run':>8} {'ns/walked':>10}")
    for r in range(a.rounds):
        for label, fw, mode in runs:
            ns, cnt, walked = one_run(mode, fw, a.seconds, a.depth, a.out)
            for i, v in enumerate((ns, cnt, walked)):
                totals[label][i] += v
            print(f"{r + 1:>5}  {label:9} {cnt:>7} {walked:>7} {ns / max(cnt, 1):>8.0f} {ns / max(walked, 1):>10.0f}")
    os.close(stats_fd)
    per = {m: t[0] / max(t[2], 1) for m, t in totals.items()}
    (first, _, _), (second, _, _) = runs
    print(f"\nns per walked sample: {first} {per[first]:.0f}, {second} {per[second]:.0f}, "
          f"{second} / {first} = {per[second] / per[first]:.2f}")


if __name__ == "__main__":
    main()
