#!/usr/bin/env python3
"""The node agent's memory and CPU beside a PyTorch training load, one or
more builds side by side in the same run; and what building the unwind
tables of the load's CUDA libraries costs each build.

    sudo python3 bench/gpu/agent_memory.py --agent NEW=build/flamewatch \\
        --agent OLD=/path/to/old/flamewatch [--cuda-lib build/libflamewatch-cuda.so] \\
        [--unwind-build NEW=build/unwind_build ...]

Every agent samples the whole host at --hz and ships to one `flamewatch
server` on loopback (the first agent's binary; not counted). The load is a
small MLP training loop on the GPU plus --burners CPU-bound Python loops.
Per agent: peak RSS (VmHWM), RSS at the end, CPU % of one core over the
measured window (after --warmup), and when its RSS was highest. With
--unwind-build, each given bench/unwind_build binary (see its header for
the compile line) builds the table of every large library the load maps
(torch's and the nvidia-* wheels'), one file per process (--stream: as the
agent builds it): rows, hash, CPU ms, VmHWM. Equal hashes: equal tables.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from overhead import cpu_s, free_port, status_kib, stop_tools  # noqa: E402

LOAD = r"""
import sys, time, torch
m = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                        torch.nn.Linear(4096, 1024)).cuda()
opt = torch.optim.SGD(m.parameters(), lr=0.01)
x = torch.randn(256, 1024, device="cuda")
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        opt.zero_grad()
        m(x).square().mean().backward()
        opt.step()
    torch.cuda.synchronize()
"""

BURN = "import time, sys\nend = time.time() + float(sys.argv[1])\nwhile time.time() < end: pass\n"


def smaps_by_mapping(pid):
    """RSS (kB) per mapped file and permission, anonymous memory apart, largest first."""
    rss, what = {}, None
    try:
        for line in open(f"/proc/{pid}/smaps"):
            f = line.split()
            if "-" in f[0] and len(f) >= 5 and ":" not in f[0]:
                what = (f[5] if len(f) > 5 else "[anon]") + " " + f[1]
            elif f[0] == "Rss:" and what:
                rss[what] = rss.get(what, 0) + int(f[1])
    except OSError:
        return []
    return sorted(((kb, w) for w, kb in rss.items() if kb > 64), reverse=True)


def stack_quality(port, node, pid, frm, to):
    """Of the load process's samples that node's agent stored in [frm, to):
    how many, the share whose stack holds the script's Python frames
    (<module>), the share that reaches the interpreter's native root
    (Py_BytesMain), and the mean depth."""
    q = urllib.parse.urlencode({"format": "folded", "query": f'{{node="{node}",pid="{pid}"}}',
                                "from": f"{frm:.6f}", "to": f"{to:.6f}"})
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/profile?{q}", timeout=30).read().decode()
    except OSError as e:
        return f"query failed: {e}"
    n = py = root = depth = 0
    for line in text.splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        c, frames = int(count), stack.split(";")
        n += c
        py += c * any(f.startswith("<module>") for f in frames)
        root += c * any(f.startswith("Py_BytesMain") for f in frames)
        depth += c * len(frames)
    if not n:
        return "no samples"
    return f"{n} samples, {100 * py / n:.1f} % with <module>, {100 * root / n:.1f} % reach Py_BytesMain, " \
           f"depth {depth / n:.1f}"


def big_libraries(min_mb):
    """The libraries of torch and of the nvidia-* wheels over min_mb."""
    out = subprocess.run([sys.executable, "-c", "import os, torch; print(os.path.dirname(torch.__file__))"],
                         capture_output=True, text=True)
    roots = []
    if out.returncode == 0:
        torch_dir = Path(out.stdout.strip())
        roots = [torch_dir / "lib", torch_dir.parent / "nvidia"]
    libs = []
    for r in roots:
        if r.exists():
            libs += [p for p in r.rglob("*.so*") if p.is_file() and p.stat().st_size > min_mb << 20]
    return sorted(set(libs))


def unwind_builds(builders, libs):
    print("| library | MB | build | rows | hash | CPU ms | VmHWM MB |")
    print("|---|---|---|---|---|---|---|")
    for lib in libs:
        for name, path in builders:
            r = subprocess.run([path, "--stream", str(lib)], capture_output=True, text=True)
            rows = hsh = ms = hwm = "-"
            for line in r.stdout.splitlines():
                if line.startswith("VmHWM:"):
                    hwm = f"{int(line.split()[1]) / 1024:.2f}"
                elif "rows hash" in line:
                    f = line.split(": ", 1)[1]
                    rows = f.split(" rows")[0].split(", ")[-1]
                    ms = f.split(" ms CPU")[0].split(", ")[-1]
                    hsh = f.rsplit(" ", 1)[1]
                elif "error" in line:
                    rows = line.split(": ", 1)[1]
            print(f"| {lib.name} | {lib.stat().st_size >> 20} | {name} | {rows} | {hsh} | {ms} | {hwm} |",
                  flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", action="append", default=[],
                    help="NAME=PATH of a flamewatch binary, then any extra agent arguments after spaces")
    ap.add_argument("--unwind-build", action="append", default=[], help="NAME=PATH of bench/unwind_build")
    ap.add_argument("--hz", type=int, default=19)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--burners", type=int, default=2)
    ap.add_argument("--min-lib-mb", type=int, default=20)
    ap.add_argument("--smaps", action="store_true", help="print each agent's RSS by mapping at the end")
    ap.add_argument("--cuda-lib", metavar="PATH",
                    help="run the training loop with CUDA_INJECTION64_PATH=PATH (libflamewatch-cuda.so): "
                         "the agents then profile its GPU time too, and map the CUDA ring")
    ap.add_argument("--profile", metavar="NAME=DIR",
                    help="record agent NAME's own CPU (flamewatch record -F 999) over the measured "
                         "window into DIR/NAME.folded")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("agent_memory: needs root")
    agents = [(x.split("=", 1)[0], x.split("=", 1)[1].split()) for x in a.agent]
    builders = [x.split("=", 1) for x in a.unwind_build]

    if builders:
        libs = big_libraries(a.min_lib_mb)
        print(f"{len(libs)} libraries over {a.min_lib_mb} MB")
        unwind_builds(builders, libs)
    if not agents:
        return

    total = a.warmup + a.seconds
    tmp = Path(tempfile.mkdtemp(prefix="fw-agent-memory-"))
    port = free_port()
    server = subprocess.Popen([agents[0][1][0], "server", "--listen", f"127.0.0.1:{port}", "--data", tmp / "data"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    env = dict(os.environ, CUDA_INJECTION64_PATH=str(Path(a.cuda_lib).resolve())) if a.cuda_lib else None
    load = [subprocess.Popen([sys.executable, "-c", LOAD, str(total + 30)], env=env)]
    load += [subprocess.Popen([sys.executable, "-c", BURN, str(total + 30)]) for _ in range(a.burners)]
    time.sleep(1)
    procs = {}
    for name, argv in agents:
        procs[name] = subprocess.Popen([argv[0], "agent", "--server", f"http://127.0.0.1:{port}", "-F", str(a.hz),
                                        "--node", name] + argv[1:], stdout=subprocess.DEVNULL,
                                       stderr=open(tmp / f"{name}.log", "w"))
    t_start = time.monotonic()
    trace = {n: [] for n in procs}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            for n, p in procs.items():
                kb = status_kib(p.pid, "VmRSS")
                if kb is not None:
                    trace[n].append((time.monotonic() - t_start, kb))
            stop.wait(0.1)

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    time.sleep(a.warmup)
    rec = None
    if a.profile:
        name, out_dir = a.profile.split("=", 1)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        rec = subprocess.Popen([agents[0][1][0], "record", "-q", "-F", "999", "-d", str(a.seconds),
                                "-p", str(procs[name].pid), "-o", str(Path(out_dir) / f"{name}.folded")])
    c0 = {n: cpu_s(p.pid) for n, p in procs.items()}
    t0 = time.monotonic()
    time.sleep(a.seconds)
    if rec:
        rec.wait(timeout=60)
    wall = time.monotonic() - t0
    rows = []
    for n, p in procs.items():
        c1 = cpu_s(p.pid)
        cpu = 100 * (c1 - c0[n]) / wall if c1 is not None and c0[n] is not None else None
        rows.append((n, status_kib(p.pid, "VmHWM"), status_kib(p.pid, "VmRSS"), cpu,
                     smaps_by_mapping(p.pid) if a.smaps else []))
    stop.set()
    th.join()
    stop_tools(procs.values())
    t_end = time.time()
    time.sleep(2)
    quality = {n: stack_quality(port, n, load[0].pid, t_end - a.seconds, t_end) for n in procs}
    for p in load:
        p.kill()
        p.wait()
    server.terminate()
    server.wait(timeout=30)
    print(f"\n{os.cpu_count()} CPUs; agents at {a.hz} Hz beside an MLP training loop"
          f"{' (under ' + a.cuda_lib + ')' if a.cuda_lib else ''} and {a.burners} "
          f"CPU burners; {a.warmup} s start-up, then {a.seconds} s measured (CPU: user + system of the "
          f"agent, BPF run time not counted)\n")
    print("| agent | peak RSS MB | RSS at the end MB | % of a core | highest RSS sampled at |")
    print("|---|---|---|---|---|")
    for n, hwm, rss, cpu, _ in rows:
        t, kb = max(trace[n], key=lambda x: x[1]) if trace[n] else (0, 0)
        print(f"| {n} | {hwm / 1024:.2f} | {rss / 1024:.2f} | {cpu:.3f} | {kb / 1024:.2f} MB at {t:.1f} s |")
    print("\nThe training process's stacks, as each agent stored them over the measured window:")
    for n, q in quality.items():
        print(f"    {n}: {q}")
    for n, _, _, _, by_mapping in rows:
        if by_mapping:
            print(f"\n{n}: RSS by mapping at the end (kB, mappings over 64 kB)")
            for kb, what in by_mapping:
                print(f"    {kb:8d}  {what}")
    for n in procs:
        log = (tmp / f"{n}.log").read_text().splitlines()
        print(f"\n{n} log, last lines:")
        for line in log[-6:]:
            print("   ", line[:200])


if __name__ == "__main__":
    main()
