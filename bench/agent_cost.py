#!/usr/bin/env python3
"""The node agent's steady-state cost beside a long-running load (issue 31):
CPU share of one core with its BPF programs' run time, RSS, VmHWM and BPF
map memory; one or more builds in turn over the same load.

    sudo python3 bench/agent_cost.py --load cpu --seconds 180 --warmup 60 \\
        --agent "before=/path/to/old/flamewatch" --agent "after=build/flamewatch" \\
        [--mode agent|run] [--hz 19] [--perf DIR | --self-profile]

    # on a GPU node (python3 there has torch); NVML on, as users run it:
    sudo python3 bench/agent_cost.py --load torch --agent "new=build/flamewatch"

--load cpu (any machine): one Python process (a pyenv 3.12 if there is
one, else this interpreter) that imports many modules, maps libLLVM and
libclang-cpp through ctypes and, from ~40 Python frames deep, runs LLVM's
O2 pipeline on a small module, json, re, decimal and sqlite3 in turn: a
long-lived interpreter driving a large C++ library, as PyTorch does; and
one node process running varied JavaScript half of the time (a large
executable, a data loader's duty cycle). --load torch: an MLP training
loop on the GPU (model loaded once) and a data-loader-like CPU process.
The load starts first and runs through every agent.

Each --agent is NAME=BINARY, then VAR=VALUE environment settings and extra
arguments (e.g. `--gpu-interval off`). It runs alone (agents in turn, so
none samples another and BPF maps are told apart), or with --together all
at once over the same window (the same host noise for each; each samples
and walks the others, and the unwind inner maps cannot be told apart): `flamewatch agent`
shipping to a `flamewatch server` on loopback (not counted), or with
--mode run `flamewatch run` (server included, counted). After --warmup
seconds, over --seconds:
  - CPU: user + system of the agent and its children (/proc/PID/stat,
    children found by parent pid: the GPU busy helper is one);
  - BPF: run_time_ns of the programs the agent holds (fdinfo, with
    kernel.bpf_stats_enabled=1, as `bpftool prog show` prints it): this time
    is charged to the sampled tasks, so it is added apart;
  - wakeups: context switches of the agent's threads (voluntary + not);
  - RSS at the end, VmHWM (peak since the start), RssAnon, and the BPF maps:
    those the agent holds (memlock in fdinfo) and the unwind tables' inner
    maps (fw_unwind*, created since the agent started, held by the kernel
    only; other flamewatch processes on the host would count here too).
--perf DIR records the agent over the window (perf record -g, cpu-clock,
999 Hz) and prints where its CPU went, by symbol. --smaps prints its RSS
by mapping at the end. --lib-dir DIR puts DIR first in the agent's
LD_LIBRARY_PATH: build/fakes runs its NVML rounds against the fake
libnvidia-ml.so.1 on a machine without a GPU.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from overhead import exact_rss_kib, free_port, status_kib  # noqa: E402
sys.path.insert(0, str(Path(__file__).resolve().parent / "gpu"))
from agent_memory import smaps_by_mapping  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")

PY_LOAD = r"""
import ctypes, ctypes.util, decimal, json, re, sqlite3, sys, time
# Modules a long-lived Python service imports; their code objects live on.
import argparse, asyncio, collections, csv, dataclasses, email.parser, fractions, hashlib
import http.client, inspect, logging, pathlib, pickle, statistics, string, tarfile, textwrap
import typing, unittest, urllib.parse, uuid, xml.etree.ElementTree, zipfile, zlib

L = ctypes.CDLL("libLLVM-14.so.1")
for lib in ("libclang-cpp.so.14", "libLLVM-15.so.1"):
    try:
        ctypes.CDLL(lib)
    except OSError:
        pass
V = ctypes.c_void_p
L.LLVMContextCreate.restype = V
L.LLVMCreateMemoryBufferWithMemoryRangeCopy.restype = V
L.LLVMCreateMemoryBufferWithMemoryRangeCopy.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p]
L.LLVMParseIRInContext.argtypes = [V, V, ctypes.POINTER(V), ctypes.POINTER(ctypes.c_char_p)]
L.LLVMCreatePassBuilderOptions.restype = V
L.LLVMRunPasses.argtypes = [V, ctypes.c_char_p, V, V]
L.LLVMRunPasses.restype = V
L.LLVMDisposeModule.argtypes = [V]
L.LLVMPrintModuleToString.argtypes = [V]
L.LLVMPrintModuleToString.restype = V
L.LLVMDisposeMessage.argtypes = [V]
IR = b'''define i32 @f(i32 %n) {
entry:
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i2, %loop]
  %s = phi i32 [0, %entry], [%s2, %loop]
  %m = mul i32 %i, %i
  %s2 = add i32 %s, %m
  %i2 = add i32 %i, 1
  %c = icmp slt i32 %i2, %n
  br i1 %c, label %loop, label %exit
exit:
  ret i32 %s2
}
'''
ctx, opts = L.LLVMContextCreate(), L.LLVMCreatePassBuilderOptions()
db = sqlite3.connect(":memory:")
db.execute("create table t (k integer primary key, v text)")
db.executemany("insert into t values (?, ?)", ((i, str(i) * 8) for i in range(5000)))
WORD = re.compile(r"(\w+)@(\w+)\.(com|org)")


def llvm():
    buf = L.LLVMCreateMemoryBufferWithMemoryRangeCopy(IR, len(IR), b"m")
    mod, err = V(), ctypes.c_char_p()
    if L.LLVMParseIRInContext(ctx, buf, ctypes.byref(mod), ctypes.byref(err)):
        raise SystemExit(err.value)
    L.LLVMRunPasses(mod, b"default<O2>", None, opts)
    L.LLVMDisposeMessage(L.LLVMPrintModuleToString(mod))
    L.LLVMDisposeModule(mod)


def stdlib(i):
    doc = json.loads(json.dumps({"k": list(range(200)), "s": "x" * 100, "i": i}))
    sum(1 for _ in WORD.finditer("ab@cd.com, ef@gh.org " * 50))
    decimal.Decimal(i) / decimal.Decimal(7) * decimal.Decimal("1.0001")
    db.execute("select count(*), max(v) from t where k % 7 = ?", (i % 7,)).fetchall()
    return len(doc["k"])


def work(depth, i):
    if depth:
        return work(depth - 1, i)
    for _ in range(20):
        llvm()
    return stdlib(i)


end = time.time() + float(sys.argv[1])
i = 0
while time.time() < end:
    work(40, i)
    i += 1
"""

NODE_LOAD = r"""
const end = Date.now() + 1000 * Number(process.argv[1]);
function burn(ms) {
  const stop = Date.now() + ms; let m = new Map(), s = 0;
  while (Date.now() < stop) {
    for (let i = 0; i < 2000; i++) m.set('k' + (i % 500), { i, t: [i, i * 2].join(',') });
    s += JSON.stringify([...m.values()].slice(0, 50)).length;
    s += 'abc,def;ghi'.repeat(50).split(/[,;]/).sort().length;
    s += Number(BigInt(s) ** 3n % 1000003n);
  }
  return s;
}
(function loop() { if (Date.now() < end) { burn(100); setTimeout(loop, 100); } })();
"""

TORCH_LOAD = r"""
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

# A data loader's share of CPU beside the training loop: busy half the time.
LOADER = r"""
import sys, time, json
end = time.time() + float(sys.argv[1])
while time.time() < end:
    t = time.time() + 0.1
    while time.time() < t:
        json.loads(json.dumps(list(range(1000))))
    time.sleep(0.1)
"""


def pyenv_312():
    root = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv")) / "versions"
    found = sorted(root.glob("3.12*/bin/python3.12")) if root.exists() else []
    return str(found[-1]) if found else sys.executable


def start_load(kind, seconds, python):
    if kind == "cpu":
        procs = [subprocess.Popen([python or pyenv_312(), "-c", PY_LOAD, str(seconds)])]
        if shutil.which("node"):
            procs.append(subprocess.Popen(["node", "-e", NODE_LOAD, str(seconds)]))
        return procs
    py = python or "python3"
    return [subprocess.Popen([py, "-c", TORCH_LOAD, str(seconds)]),
            subprocess.Popen([py, "-c", LOADER, str(seconds)])]


def tree(pid):
    """pid and its descendants."""
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def tree_cpu_s(pid, own=False):
    """user + system seconds of the live tree, reaped children included;
    own: of the process pid alone."""
    total = 0
    for p in [pid] if own else tree(pid):
        try:
            f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in f[11:13 if own else 15])
    return total / TICK


def ctx_switches(pid):
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        n += (status_kib(f"{pid}/task/{t}", "voluntary_ctxt_switches") or 0) + \
             (status_kib(f"{pid}/task/{t}", "nonvoluntary_ctxt_switches") or 0)
    return n


def prog_ids(pid):
    """Ids of the BPF programs pid holds, directly or through links (a
    perf_event or tracepoint link's fdinfo names its program)."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            for line in open(f"/proc/{pid}/fdinfo/{fd}"):
                if line.startswith("prog_id:"):
                    ids.add(int(line.split()[1]))
        except OSError:
            continue
    return ids


def bpf_progs(ids, pid=None):
    """{id: (name, run_time_ns, run_cnt)} from `bpftool prog show` (bpf_stats);
    a tail-called program's time is its caller's. Without bpftool, from the
    fdinfo of the program fds pid holds (no names there: the ids stand in)."""
    try:
        out = subprocess.run(["bpftool", "prog", "show", "-j"], capture_output=True, text=True)
        progs = json.loads(out.stdout)
    except (OSError, ValueError):
        progs = _fdinfo_progs(pid) if pid else []
    return {p["id"]: (p.get("name", "?"), p.get("run_time_ns", 0), p.get("run_cnt", 0))
            for p in progs if p["id"] in ids}


def fdinfos(pid):
    """The fdinfo of each of pid's open files, as {field: text}."""
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            text = open(f"/proc/{pid}/fdinfo/{fd}").read()
        except OSError:
            continue
        yield dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def _fdinfo_progs(pid):
    progs = {}
    for f in fdinfos(pid):
        if "prog_id" in f and "run_time_ns" in f:
            i = int(f["prog_id"])
            progs[i] = {"id": i, "name": f"prog {i} ({f.get('prog_type', '?').strip()})",
                        "run_time_ns": int(f["run_time_ns"]), "run_cnt": int(f.get("run_cnt", 0))}
    return list(progs.values())


def held_map_bytes(pid):
    total, seen = 0, set()
    for f in fdinfos(pid):
        if "map_id" in f and "memlock" in f and int(f["map_id"]) not in seen:
            seen.add(int(f["map_id"]))
            total += int(f["memlock"])
    return total, seen


def inner_unwind_map_bytes(after_id, held):
    """Bytes of the unwind tables' inner maps, and the largest maps by name
    (those held and those inner maps)."""
    maps = bpftool_maps()
    if maps is None:
        return None, []
    inner = [m for m in maps
             if m["id"] > after_id and m["id"] not in held and m.get("name", "").startswith("fw_unwind")]
    by_name = {}
    for m in inner + [m for m in maps if m["id"] in held]:
        by_name[m.get("name", "?")] = by_name.get(m.get("name", "?"), 0) + m.get("bytes_memlock", 0)
    top = sorted(((b, n) for n, b in by_name.items()), reverse=True)[:8]
    return sum(m.get("bytes_memlock", 0) for m in inner), [(n, b >> 10) for b, n in top]


def bpftool_maps():
    """Every BPF map on the host, or None without bpftool (the GPU node has
    none: the agent's own log line then gives the unwind tables' size)."""
    try:
        out = subprocess.run(["bpftool", "map", "show", "-j"], capture_output=True, text=True)
        return json.loads(out.stdout)
    except (OSError, ValueError):
        return None


def max_map_id():
    return max((m["id"] for m in bpftool_maps() or []), default=0)


def offcpu_walks(port):
    """Off-CPU stack walks so far (blocks walked, and walks of blocks that
    turned out short), from the agent's /metrics; None without them."""
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    except OSError:
        return None
    n = 0
    for line in text.splitlines():
        if line.startswith('flamewatch_agent_offcpu_blocks_total{stack="walked"}') or \
           line.startswith("flamewatch_agent_offcpu_wasted_walks_total"):
            n += float(line.split()[-1])
    return n


def perf_breakdown(data, out):
    """Self time by symbol (and by shared object), as perf report prints it."""
    for sort in ("dso", "sym"):
        r = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--stdio", "-g", "none",
                            "--percent-limit", "1", "--sort", sort], capture_output=True, text=True)
        lines = [ln for ln in r.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
        (out / f"{data.stem}.by-{sort}.txt").write_text(r.stdout)
        print(f"  perf self time by {sort}:")
        for ln in lines[:25]:
            print("    " + ln.strip()[:150])
    r = subprocess.run(["perf", "report", "-i", str(data), "--children", "--stdio", "-g", "none",
                        "--percent-limit", "3", "--sort", "sym"], capture_output=True, text=True)
    (out / f"{data.stem}.children.txt").write_text(r.stdout)


def self_breakdown(folded, top=20):
    """Self time by leaf frame and time under each frame, from the folded
    stacks `flamewatch record` wrote of an agent: where a machine has no
    perf (the GPU node), the agent profiles itself."""
    self_t, under, total = {}, {}, 0
    for line in Path(folded).read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not n.isdigit() or not stack:
            continue
        n, frames = int(n), stack.split(";")
        total += n
        self_t[frames[-1]] = self_t.get(frames[-1], 0) + n
        for f in set(frames):
            under[f] = under.get(f, 0) + n
    if not total:
        print("  no samples")
        return
    for title, d in (("self", self_t), ("under", under)):
        print(f"  {title} ({total} samples):")
        for f, n in sorted(d.items(), key=lambda kv: -kv[1])[:top]:
            print(f"    {100 * n / total:5.1f} %  {f[:140]}")


def run_agents(specs, a, out):
    """Starts the agents of specs together, measures them over the same
    window, stops them; a row per agent."""
    runs, rows = [], []
    try:
        for name, binary, env, extra in specs:
            port = free_port()
            data = out / f"data-{name}"
            server, mport = None, None
            if a.mode == "agent":
                server = subprocess.Popen([binary, "server", "--listen", f"127.0.0.1:{port}", "--data", data],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1)
                mport = free_port()
                argv = [binary, "agent", "--server", f"http://127.0.0.1:{port}", "--node", name,
                        "--metrics-listen", f"127.0.0.1:{mport}"]
            else:
                argv = [binary, "run", "--listen", f"127.0.0.1:{port}", "--data", data]
            argv += ["-F", str(a.hz)] + extra
            first_map = max_map_id()
            log = open(out / f"{name}.log", "w")
            env = dict(os.environ, **env)
            if a.lib_dir:
                env["LD_LIBRARY_PATH"] = ":".join(x for x in (str(a.lib_dir.resolve()),
                                                              env.get("LD_LIBRARY_PATH")) if x)
            p = subprocess.Popen([str(x) for x in argv], env=env, stdout=log, stderr=log)
            runs.append({"name": name, "p": p, "server": server, "mport": mport, "first_map": first_map})
        time.sleep(a.warmup)
        for r in runs:
            if r["p"].poll() is not None:
                raise SystemExit(f"{r['name']}: exited with {r['p'].returncode}; see {out / (r['name'] + '.log')}")
        recs = []
        if a.self_profile:
            # The agent's tree (the gpu-busy child too), by the agent's own binary.
            recs = [subprocess.Popen([binary, "record", "-q", "-F", "499", "-d", str(a.seconds),
                                      "-p", ",".join(str(x) for x in tree(r["p"].pid)),
                                      "-o", str(out / f"{r['name']}.self.folded")],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                    for (_, binary, _, _), r in zip(specs, runs)]
        elif a.perf:
            recs = [subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", "999", "-g", "-p",
                                      str(r["p"].pid), "-o", str(out / f"{r['name']}.perf.data"), "--",
                                      "sleep", str(a.seconds)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for r in runs]
        for r in runs:
            pid = r["p"].pid
            r["ids"] = prog_ids(pid)
            r["w0"] = offcpu_walks(r["mport"]) if r["mport"] else None
            r["c0"], r["b0"], r["s0"] = tree_cpu_s(pid), bpf_progs(r["ids"], pid), ctx_switches(pid)
            r["own0"] = tree_cpu_s(pid, own=True)
        t0 = time.monotonic()
        time.sleep(a.seconds)
        wall = time.monotonic() - t0
        for r in runs:
            pid = r["p"].pid
            r["own1"] = tree_cpu_s(pid, own=True)
            c1, b1, s1 = tree_cpu_s(pid), bpf_progs(r["ids"], pid), ctx_switches(pid)
            w1 = offcpu_walks(r["mport"]) if r["mport"] else None
            b0, w0 = r["b0"], r["w0"]
            per_prog = sorted(((v[1] - b0[k][1], v[2] - b0[k][2], v[0]) for k, v in b1.items() if k in b0),
                              reverse=True)
            held, held_ids = held_map_bytes(pid)
            inner, maps_by_name = inner_unwind_map_bytes(r["first_map"], held_ids)
            rows.append((r["name"], {
                "cpu_pct": 100 * (c1 - r["c0"]) / wall,
                "own_cpu_pct": 100 * (r["own1"] - r["own0"]) / wall,
                "children_rss": sum(status_kib(k, "VmRSS") or 0 for k in tree(pid)[1:]),
                "bpf_pct": 100 * sum(ns for ns, _, _ in per_prog) / 1e9 / wall if b1 else None,
                "progs": [(n, round(100 * ns / 1e9 / wall, 3), round(cnt / wall, 1), round(ns / cnt / 1e3, 2))
                          for ns, cnt, n in per_prog if cnt],
                "wakeups": (s1 - r["s0"]) / wall,
                "offcpu_walks": (w1 - w0) / wall if w0 is not None and w1 is not None else None,
                "hwm": status_kib(pid, "VmHWM"), "rss": status_kib(pid, "VmRSS"),
                "anon": status_kib(pid, "RssAnon"), "exact": exact_rss_kib(pid),
                "maps": held, "inner": inner, "maps_by_name": maps_by_name,
                "smaps": smaps_by_mapping(pid)[:15] if a.smaps else [],
            }))
        for rec in recs:
            rec.wait(timeout=60)
    finally:
        for r in runs:
            r["p"].send_signal(signal.SIGINT)
        for r in runs:
            try:
                r["p"].wait(timeout=40)
            except subprocess.TimeoutExpired:
                r["p"].kill()
            if r["server"]:
                r["server"].terminate()
                r["server"].wait(timeout=30)
    for name, row in rows:
        text = (out / f"{name}.log").read_text(errors="replace")
        m = re.findall(r"unwind tables: .*", text)
        row["unwind"] = m[-1] if m else ""
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agent", action="append", required=True,
                    help="NAME=BINARY [VAR=VALUE ...] [agent arguments ...], split as a shell "
                         "would: quote a value with spaces ('VAR=a b')")
    ap.add_argument("--load", choices=("cpu", "torch"), default="cpu")
    ap.add_argument("--python", help="the load's interpreter (cpu: a pyenv 3.12; torch: python3)")
    ap.add_argument("--mode", choices=("agent", "run"), default="agent")
    ap.add_argument("--hz", type=int, default=19)
    ap.add_argument("--seconds", type=int, default=180)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--perf", type=Path, help="record each agent's CPU into this folder and break it down")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--self-profile", action="store_true",
                    help="profile each agent's tree with its own `record -p` (no perf needed)")
    ap.add_argument("--together", action="store_true",
                    help="run the agents at once, over the same window (each then samples the others)")
    ap.add_argument("--smaps", action="store_true", help="print each agent's RSS by mapping at the end")
    ap.add_argument("--lib-dir", type=Path, help="first in the agent's LD_LIBRARY_PATH (build/fakes: fake NVML)")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("agent_cost: needs root")
    out = a.out or Path(tempfile.mkdtemp(prefix="fw-agent-cost-"))
    out.mkdir(parents=True, exist_ok=True)
    if a.perf:
        a.perf.mkdir(parents=True, exist_ok=True)
    runs = []
    for spec in a.agent:
        name, _, rest = spec.partition("=")
        words = shlex.split(rest)     # 'KNOB=a value with spaces' quoted
        env = dict(w.split("=", 1) for w in words[1:] if re.match(r"^[A-Z_][A-Z0-9_]*=", w))
        extra = [w for w in words[1:] if not re.match(r"^[A-Z_][A-Z0-9_]*=", w)]
        runs.append((name, str(Path(words[0]).resolve()), env, extra))

    old = open("/proc/sys/kernel/bpf_stats_enabled").read().strip()
    open("/proc/sys/kernel/bpf_stats_enabled", "w").write("1")
    total = (1 if a.together else len(runs)) * (a.warmup + a.seconds + 60) + 30
    load = start_load(a.load, total, a.python)
    time.sleep(10)  # imports done, libraries mapped, the loop running
    rows = []
    try:
        for group in ([runs] if a.together else [[r] for r in runs]):
            if any(p.poll() is not None for p in load):
                sys.exit("agent_cost: the load stopped")
            for name, row in run_agents(group, a, out):
                rows.append((name, row))
                print(f"{name}: {row}", flush=True)
                if a.self_profile:
                    print(f"{name}: where its CPU went (flamewatch record, 499 Hz):")
                    self_breakdown(out / f"{name}.self.folded")
                elif a.perf:
                    perf_breakdown(out / f"{name}.perf.data", a.perf)
    finally:
        open("/proc/sys/kernel/bpf_stats_enabled", "w").write(old)
        for p in load:
            p.kill()
            p.wait()

    print(f"\n{os.cpu_count()} CPUs; load {a.load}; `flamewatch {a.mode}` at {a.hz} Hz, "
          f"{'all at once' if a.together else 'each alone'}; "
          f"{a.warmup} s start-up, then {a.seconds} s measured\n")
    print("| agent | CPU % of a core | BPF % | total % | wakeups/s | off-CPU walks/s | VmHWM MiB | RSS MiB "
          "| RssAnon MiB | exact RSS MiB | maps held KiB | unwind inner maps KiB |")
    print("|---" * 12 + "|")
    for name, r in rows:
        f = lambda v, s="{:.2f}": s.format(v) if v is not None else "-"
        tot = r["cpu_pct"] + (r["bpf_pct"] or 0)
        print(f"| {name} | {r['cpu_pct']:.3f} | {f(r['bpf_pct'], '{:.3f}')} | {tot:.3f} | {r['wakeups']:.1f} | "
              f"{f(r['offcpu_walks'], '{:.1f}')} | "
              f"{f(r['hwm'] / 1024)} | {f(r['rss'] / 1024)} | {f(r['anon'] / 1024)} | {f(r['exact'] / 1024)} | "
              f"{r['maps'] / 1024:.0f} | {f(r['inner'] / 1024 if r['inner'] is not None else None, '{:.0f}')} |")
    for name, r in rows:
        print(f"{name}: the agent process alone {r['own_cpu_pct']:.3f} % of a core, its children "
              f"{r['cpu_pct'] - r['own_cpu_pct']:.3f} %; children's RSS {r['children_rss'] / 1024:.2f} MiB")
        print(f"{name}: BPF by program (name, % of a core, runs/s, us a run): {r.get('progs')}")
        print(f"{name}: largest BPF maps (name, KiB): {r['maps_by_name']}")
        if r["unwind"]:
            print(f"{name}: {r['unwind']}")
        for kb, what in r["smaps"]:
            print(f"    {kb:8d} kB  {what}")
    print(f"\nlogs in {out}")


if __name__ == "__main__":
    main()
