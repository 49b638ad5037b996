#!/usr/bin/env python3
"""Unwind tables beside a PyTorch training loop: whole tables against
tables built a chunk at a time (issue 31), one or more builds in turn over
the same long-running training process.

    sudo python3 bench/gpu/unwind_chunks.py \\
        --run "before=build/flamewatch_old" \\
        --run "after=build/flamewatch FLAMEWATCH_UNWIND_ON_DEMAND_KB=1024 --unwind-table-mb 16" \\
        [--seconds 60] [--hz 99] [--out DIR]

Each --run is NAME=BINARY, then VAR=VALUE environment settings and extra
`record` arguments. The load (one MLP training loop on the GPU, model
loaded once) starts first and runs through every recording; each run is
`flamewatch record -a -v` for --seconds. Per run: the unwinder's own
report (files, rows, KiB of BPF maps as it counts them, files over the
cap, build ms; chunks loaded and built), frames that asked for a chunk, and
from the folded profile the training process's samples: how many reach
main (Py_BytesMain or main), their mean native depth, and the same for the
samples with a libtorch frame (at::, c10::, torch::).
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LOAD = r"""
import sys, time, torch
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                        torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                        torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
x = torch.randn(256, 1024, device="cuda")
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
"""

def analyse(folded, comm_re):
    """(samples, reach-main share, mean depth) for the load's samples, all
    and those with a libtorch frame."""
    out = {"all": [0, 0, 0], "torch": [0, 0, 0]}
    for line in open(folded, errors="replace"):
        stack, _, count = line.rstrip("\n").rpartition(" ")
        if not count.isdigit():
            continue
        frames = stack.split(";")
        if not re.match(comm_re, frames[0]):
            continue
        n = int(count)
        native = [f for f in frames[1:] if not f.endswith("_[k]") and not f.startswith("[py]")]
        main = any(f in ("main", "Py_BytesMain", "__libc_start_main", "_start") for f in frames)
        kinds = ["all"] + (["torch"] if any(re.match(r"(\S+ )?(at|c10|torch)::", f) for f in frames) else [])
        for k in kinds:
            out[k][0] += n
            out[k][1] += n * main
            out[k][2] += n * len(native)
    return {k: (v[0], v[1] / v[0] if v[0] else 0.0, v[2] / v[0] if v[0] else 0.0) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", action="append", required=True)
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--out", default=None)
    ap.add_argument("--load", default=None, help="a Python file to run as the load instead (argv[1]: seconds)")
    ap.add_argument("--comm", default=r"^(python|pt_)", help="regex of the load's comm in the profile")
    args = ap.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="unwind_chunks."))
    out.mkdir(parents=True, exist_ok=True)

    runs = []
    for spec in args.run:
        name, _, rest = spec.partition("=")
        words = rest.split()
        env = dict(w.split("=", 1) for w in words[1:] if "=" in w and not w.startswith("-"))
        extra = [w for w in words[1:] if not ("=" in w and not w.startswith("-"))]
        runs.append((name, words[0], env, extra))

    total_s = len(runs) * (args.seconds + 30) + 30
    src = Path(args.load).read_text() if args.load else LOAD
    load = subprocess.Popen([sys.executable, "-c", src, str(total_s)])
    time.sleep(20)  # CUDA initialised, the loop running
    rows = []
    try:
        for name, binary, env, extra in runs:
            folded, log = out / f"{name}.folded", out / f"{name}.log"
            e = dict(os.environ, **env)
            cmd = [binary, "record", "-a", "-v", "-F", str(args.hz), "-d", str(int(args.seconds)),
                   "--format", "folded", "-o", str(folded)] + extra
            with open(log, "w") as lf:
                subprocess.run(cmd, env=e, stderr=lf, stdout=lf, timeout=args.seconds + 300)
            text = log.read_text(errors="replace")
            info = re.search(r"unwind tables: (\d+) files, (\d+) rows, ([\d.]+) KiB of BPF maps \(cap (\d+) "
                             r"MiB\); (\d+) files without CFI, (\d+) (?:over the cap|chunks put off for room); built in (\d+) ms", text)
            chunks = re.search(r"unwind tables by chunk: (\d+) files, (\d+) of them needed by samples; "
                               r"(\d+) chunks loaded, (\d+) built, (\d+) evicted", text)
            wanted = re.search(r"bpf stat unwind_(?:chunks|tables)_wanted = (\d+)", text)
            res = analyse(folded, args.comm) if folded.exists() else None
            rows.append((name, info.groups() if info else None, chunks.groups() if chunks else None,
                         wanted[1] if wanted else "0", res))
            print(f"{name}: {rows[-1]}", flush=True)
    finally:
        load.kill()
        load.wait()

    print("\n| run | files | rows | KiB of maps | over the cap (before) or chunks put off (after) | build ms | chunk files (needed) "
          "| chunks loaded / built | frames that asked | load samples | reach main | depth "
          "| libtorch samples | reach main | depth |")
    print("|---" * 15 + "|")
    for name, info, chunks, wanted, res in rows:
        i = info or ("?",) * 7
        c = f"{chunks[0]} ({chunks[1]})" if chunks else "-"
        cl = f"{chunks[2]} / {chunks[3]}" if chunks else "-"
        a, t = (res or {}).get("all", (0, 0, 0)), (res or {}).get("torch", (0, 0, 0))
        print(f"| {name} | {i[0]} | {i[1]} | {i[2]} | {i[5]} | {i[6]} | {c} | {cl} | "
              f"{wanted} | {a[0]} | {a[1]:.1%} | {a[2]:.1f} | {t[0]} | {t[1]:.1%} | {t[2]:.1f} |")
    print(f"\nlogs and profiles in {out}")


if __name__ == "__main__":
    main()
