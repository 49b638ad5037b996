#!/usr/bin/env python3
"""Is a lone process's GPU utilisation the GPU's? And what a round costs
with and without the driver's per-process query (issue 7).

  python3 bench/gpu/nvml_sole_process.py [--flamewatch build/flamewatch] [--reads 10]

Needs a GPU, python3 with PyTorch, and no other process on GPU 0.

1. Starts one PyTorch load on GPU 0 that is busy a given share of each
   100 ms (matmuls, then a sleep) and, per share (100, 60, 30, 10 %),
   reads once a second nvmlDeviceGetUtilizationRates and
   nvmlDeviceGetProcessUtilization (the load's newest sample): the table
   is device against process, SM and memory, mean and largest difference.
   flamewatch gives a process alone on its GPU the GPU's figures
   (--gpu-process-query shared, the default): this says how far that is
   from what the driver's per-process query would have said.
2. At 100 %, `flamewatch gpu --rounds 20 --interval 1s --breakdown` (the
   first one's breakdown printed), with
   the default (one process: no per-process query) and with
   --process-query always; with the load also copying 64 MB to the GPU
   every 100 ms (PCIe counters read more often); then with a second load
   on the GPU (shared: the query is made either way). Prints the CPU per
   GPU per round.
NVML through ctypes; no pynvml needed.
"""
import argparse
import ctypes as C
import os
import re
import statistics
import subprocess
import sys
import time

LOAD = r"""
import sys, time, torch
x = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
host = torch.empty(64 << 20, dtype=torch.uint8).pin_memory()
dev = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
print("load pid", __import__("os").getpid(), flush=True)
share, copy_mb = 1.0, 0
import select
while True:
    r, _, _ = select.select([sys.stdin], [], [], 0)
    if r:
        line = sys.stdin.readline()
        if not line:
            break
        share, copy_mb = float(line.split()[0]), int((line.split() + ["0"])[1])
    t0 = time.monotonic()
    if copy_mb:
        dev[:copy_mb << 20].copy_(host[:copy_mb << 20], non_blocking=True)
    while time.monotonic() - t0 < 0.1 * share:
        for _ in range(4):
            y = x @ x
        torch.cuda.synchronize()
    rest = 0.1 - (time.monotonic() - t0)
    if rest > 0:
        time.sleep(rest)
"""


class Util(C.Structure):
    _fields_ = [("gpu", C.c_uint), ("memory", C.c_uint)]


class PUS(C.Structure):
    _fields_ = [("pid", C.c_uint), ("timeStamp", C.c_ulonglong), ("smUtil", C.c_uint),
                ("memUtil", C.c_uint), ("encUtil", C.c_uint), ("decUtil", C.c_uint)]


def start_load(share):
    p = subprocess.Popen([sys.executable, "-c", LOAD], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    m = re.match(r"load pid (\d+)", line)
    if not m:
        p.kill()
        sys.exit(f"the load did not start: {line!r}")
    p.stdin.write(f"{share}\n")
    p.stdin.flush()
    return p, int(m.group(1))


def set_share(p, share, copy_mb=0):
    p.stdin.write(f"{share} {copy_mb}\n")
    p.stdin.flush()


def cost(fw, extra, rounds=20, breakdown=False):
    out = subprocess.run([fw, "gpu", "--rounds", str(rounds), "--interval", "1s", "--quiet",
                          "--breakdown"] + extra, capture_output=True, text=True,
                         timeout=rounds + 40)
    if breakdown:
        print("\n".join("   " + l for l in out.stdout.splitlines() if l.startswith("# ")))
    m = re.search(r"cpu_us_per_gpu_round ([\d.]+) max_cpu_us ([\d.]+).*sole_process_reads (\d+)",
                  out.stdout)
    pu = re.search(r"nvmlDeviceGetProcessUtilization\s+([\d.]+)\s+([\d.]+)", out.stdout)
    if not m:
        return f"failed: {out.stdout[-300:]} {out.stderr[-300:]}"
    return (f"{float(m.group(1)) / 1e3:.3f} ms/GPU/round (max {float(m.group(2)) / 1e3:.3f}), "
            f"sole-process reads {m.group(3)}, per-process queries/round "
            f"{pu.group(1) if pu else '0'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flamewatch", default="build/flamewatch")
    ap.add_argument("--reads", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=20, help="rounds per cost measurement")
    ap.add_argument("--cost-only", action="store_true", help="step 2 only")
    a = ap.parse_args()

    nv = C.CDLL("libnvidia-ml.so.1")
    assert nv.nvmlInit_v2() == 0, "nvmlInit_v2 failed"
    dev = C.c_void_p()
    assert nv.nvmlDeviceGetHandleByIndex_v2(0, C.byref(dev)) == 0
    arr = (PUS * 512)()

    load, pid = start_load(1.0)
    print(f"load pid {pid}")
    try:
        time.sleep(3)
        print("\n# 1. one process on GPU 0: the GPU's utilisation against the driver's for the process")
        print(f"{'busy':>5} {'reads':>5} {'gpu sm':>7} {'proc sm':>7} {'mean |d|':>8} {'max |d|':>7}"
              f" {'gpu mem':>7} {'proc mem':>8} {'mean |d|':>8} {'max |d|':>7}")
        for share in () if a.cost_only else (1.0, 0.6, 0.3, 0.1):
            set_share(load, share)
            time.sleep(2)
            rows = []
            for _ in range(a.reads):
                time.sleep(1)
                u = Util()
                nv.nvmlDeviceGetUtilizationRates(dev, C.byref(u))
                n = C.c_uint(512)
                r = nv.nvmlDeviceGetProcessUtilization(dev, arr, C.byref(n), C.c_ulonglong(0))
                mine = [arr[i] for i in range(n.value) if arr[i].pid == pid] if r == 0 else []
                if mine:
                    s = max(mine, key=lambda x: x.timeStamp)
                    rows.append((u.gpu, s.smUtil, u.memory, s.memUtil))
            if not rows:
                print(f"{share * 100:5.0f} no per-process sample for the load")
                continue
            dsm = [abs(g - p) for g, p, _, _ in rows]
            dmem = [abs(g - p) for _, _, g, p in rows]
            print(f"{share * 100:5.0f} {len(rows):5d} {statistics.mean(r[0] for r in rows):7.1f}"
                  f" {statistics.mean(r[1] for r in rows):7.1f} {statistics.mean(dsm):8.1f}"
                  f" {max(dsm):7d} {statistics.mean(r[2] for r in rows):7.1f}"
                  f" {statistics.mean(r[3] for r in rows):8.1f} {statistics.mean(dmem):8.1f}"
                  f" {max(dmem):7d}")
        set_share(load, 1.0)
        time.sleep(2)
        print(f"\n# 2. CPU of a round at 1 s, {a.rounds} rounds, the load busy all along")
        if not os.access(a.flamewatch, os.X_OK):
            print(f"no {a.flamewatch}: skipped")
            return
        print(f"one process, default (shared):  {cost(a.flamewatch, [], a.rounds, True)}")
        print(f"one process, --process-query always: "
              f"{cost(a.flamewatch, ['--process-query', 'always'], a.rounds)}")
        set_share(load, 1.0, 64)
        time.sleep(2)
        print(f"one process, 64 MB host-to-device every 100 ms (~670 MB/s): "
              f"{cost(a.flamewatch, [], a.rounds, True)}")
        set_share(load, 1.0)
        second, pid2 = start_load(0.3)
        try:
            time.sleep(3)
            print(f"two processes ({pid}, {pid2}), default: {cost(a.flamewatch, [], a.rounds)}")
        finally:
            second.kill()
    finally:
        load.kill()


if __name__ == "__main__":
    main()
