"""GPU time profiling without a GPU: `flamewatch run` (real BPF, real USDT
probes, the real SQLite store) against build/workloads/cuda/cuda_chain,
which drives a fake libflamewatch-cuda.so that fires the probes of
src/cuda/probes.h with synthetic timings from known call chains
(tests/workloads/cuda/cuda_chain.c documents the phases).

The agent must find the library (in a process started after it, through
its loader's event, or polling after the exec event with
FLAMEWATCH_CUDA_WATCH=0, the fallback of kernels without bpf_loop(); and
in one already running, through its /proc scan),
attach to its probes, join every record with its launch whichever comes
first, and store exactly these gpu_time samples and intervals.
"""

import json
import os
import re
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import Pprof, cuda_fakes, require
from serverlib import Client, Procs, diagnostics, free_port, register_plugin, window

START_S = 60

# Frames from main to the leaf -> GPU ns x weight (see cuda_chain.c).
EXPECTED = {
    # fwtest_launch, where the probe fires, is in libflamewatch-cuda.so: left out
    ("main", "phase_launch_first", "a", "b", "launch_kernel", "kernelA(int)"): 110000,
    ("main", "phase_records_first", "a", "b", "launch_kernel", "kernelB(float*, int)"): 105000,
    ("main", "phase_copy", "copy_h2d", "[memcpy HtoD]"): 3000,
    # never launched: under the process's last launch (the copy's), marked as such
    ("main", "phase_copy", "copy_h2d", "[launch not seen: stack of another launch]",
     "orphan()"): 5000,
}
TOTAL = sum(EXPECTED.values())


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


def _get(client, path, params):
    r = client.get(path, params)
    if r.status != 200:
        pytest.fail(f"{path} failed:\n{r.describe()}", pytrace=False)
    return r


def _folded(client, q, frm, to):
    r = _get(client, "/api/v1/profile", {"type": "gpu_time", "format": "folded", "query": q,
                                         **window(frm, to)})
    out = {}
    for line in r.text.splitlines():
        if not line.strip():
            continue
        stack, value = line.rsplit(" ", 1)
        frames = stack.split(";")[1:]		# the first is the process (comm)
        if "main" in frames:
            frames = frames[frames.index("main"):]
        key = tuple(frames)
        out[key] = out.get(key, 0) + int(value)
    return out


def _top(client, q, frm, to):
    return _get(client, "/api/v1/gpu/kernels/top", {"query": q, **window(frm, to)}).json()


def _start_server_agent(ps, flamewatch, tmp, port, lib, mport):
    """`flamewatch server` plus `flamewatch agent` shipping to it: the wire
    path. The agent drops CAP_SYS_ADMIN once started, which creating
    uprobes needs: it attaches to the library named in FLAMEWATCH_CUDA_LIB
    at start, and the kernel arms the probes in the workload started later."""
    srv = ps.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data", tmp / "data"],
                   "server")
    if not srv.wait_output(r"flamewatch: listening on", START_S):
        pytest.fail(f"server did not start within {START_S} s\n{srv.describe()}", pytrace=False)
    agent = ps.start([flamewatch, "agent", "--server", f"http://127.0.0.1:{port}", "--node",
                      "fwtest-cuda", "-F", "19", "--interval", "1s",
                      "--metrics-listen", f"127.0.0.1:{mport}"], "agent",
                     env={**os.environ, "FLAMEWATCH_CUDA_LIB": str(lib)})
    if not agent.wait_output(r"sampling at \d+ Hz", START_S):
        pytest.fail(f"agent did not start within {START_S} s\n{agent.describe()}", pytrace=False)
    # A fresh agent first builds the unwind tables of every process on the
    # host (seconds on a busy machine); a workload that launches before its
    # own turn comes unwinds by frame pointers only.
    time.sleep(3)
    return srv, agent


@pytest.fixture(scope="module", params=["agent_first", "workload_first", "agent_server", "polling"])
def gpu_run(request, flamewatch, workloads, tmp_path_factory):
    """One `flamewatch run` and one cuda_chain, started in either order;
    yields once all of cuda_chain's GPU time is stored."""
    tmp = tmp_path_factory.mktemp("cuda")
    ps = Procs(tmp / "logs")
    port, mport = free_port(), free_port()
    client = Client(port)
    chain = workloads / "cuda" / "cuda_chain"
    try:
        t_start = time.time()
        work = None
        # Other agents on this host may attach to our library too: the
        # workload goes on only once ours has (its log says so).
        go = tmp / "go"
        wenv = {**os.environ, "CUDA_CHAIN_GO": str(go)}
        if request.param == "workload_first":
            # Already running (and waiting) when the agent starts: found by the /proc scan.
            work = ps.start([chain], "cuda_chain", env=wenv)
            time.sleep(0.5)
        if request.param == "agent_server":
            srv, logproc = _start_server_agent(ps, flamewatch, tmp, port,
                                               workloads / "cuda" / "libflamewatch-cuda.so", mport)
        else:
            srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data",
                            tmp / "data", "-F", "19", "--interval", "1s", "--node", "fwtest-cuda"],
                           "run", env={**os.environ, "FLAMEWATCH_CUDA_WATCH": "0"}
                           if request.param == "polling" else None)
            if not srv.wait_output(r"profiling this host at", START_S):
                pytest.fail(f"`flamewatch run` did not start within {START_S} s\n{srv.describe()}",
                            pytrace=False)
            logproc = srv
        client.wait_healthy(proc=srv)
        if work is None:
            # Started after the agent: found through its loader's event (polling: its exec).
            work = ps.start([chain], "cuda_chain", env=wenv)
        lib = str(workloads / "cuda" / "libflamewatch-cuda.so")
        if not logproc.wait_output("GPU time profiling: attached to " + re.escape(lib), 60):
            pytest.fail(f"the agent did not attach to {lib}\n{logproc.describe()}", pytrace=False)
        # The agent describes the new process to its unwinder on its own
        # time; a launch before that is walked by frame pointers alone, and
        # the probe's caller (launch_kernel, copy_h2d) drops out of its
        # stack. With FLAMEWATCH_CUDA_LIB (agent_server) the attach line
        # comes at the agent's start, so it says nothing of the workload.
        time.sleep(1)
        go.touch()
        rc = work.wait(70)
        assert rc == 0, f"cuda_chain exited with {rc}\n{work.describe()}"
        assert "done" in work.text(), work.describe()
        q = '{pid="%d"}' % work.pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if _top(client, q, t_start - 1, time.time() + 1)["total_ns"] >= TOTAL:
                break
            time.sleep(0.5)
        time.sleep(1.5)		# anything more (which would be wrong) lands too
        t_end = time.time() + 1
    except (Exception, pytest.fail.Exception) as e:
        text = diagnostics()
        ps.close_all()
        client.close()
        pytest.fail(f"setting up the GPU run ({request.param}) failed: {e}\n\n{text}", pytrace=False)
    try:
        yield SimpleNamespace(client=client, q=q, frm=t_start - 1, to=t_end, pid=work.pid,
                              srv=srv, log=logproc, mode=request.param, mport=mport)
    finally:
        ps.close_all()
        client.close()


def test_gpu_time_samples_exact(gpu_run):
    h = gpu_run
    got = _folded(h.client, h.q, h.frm, h.to)
    assert got == EXPECTED, f"gpu_time stacks of cuda_chain ({h.mode}):\n" + "\n".join(
        f"  {';'.join(k)} {v}" for k, v in sorted(got.items()))
    # The labels: device and stream, next to the process's.
    kernels = _folded(h.client, '{pid="%d",device="0",stream="7"}' % h.pid, h.frm, h.to)
    assert sum(kernels.values()) == 110000 + 105000 + 5000, kernels
    copies = _folded(h.client, '{pid="%d",stream="13",comm="cuda_chain"}' % h.pid, h.frm, h.to)
    assert copies == {("main", "phase_copy", "copy_h2d", "[memcpy HtoD]"): 3000}
    # The flame graph's total is GPU time.
    fg = _get(h.client, "/api/v1/profile", {"type": "gpu_time", "query": h.q,
                                            **window(h.frm, h.to)}).json()
    assert fg["unit"] == "nanoseconds" and fg["total"] == TOTAL, (fg["unit"], fg["total"])


def test_gpu_time_pprof(gpu_run):
    """pprof of GPU time: one sample type, gpu_time/nanoseconds, adding up
    to the GPU time (it was samples/count and cpu/nanoseconds, as if CPU)."""
    h = gpu_run
    r = _get(h.client, "/api/v1/profile", {"type": "gpu_time", "format": "pprof", "query": h.q,
                                           **window(h.frm, h.to)})
    pp = Pprof(r.body)
    assert pp.sample_types == [("gpu_time", "nanoseconds")], pp.sample_types
    assert sum(v[0] for v, _, _ in pp.samples) == TOTAL


def test_gpu_intervals(gpu_run):
    h = gpu_run
    doc = _get(h.client, "/api/v1/gpu/kernels", {"query": h.q, **window(h.frm, h.to)}).json()
    ivs = doc["intervals"]
    assert len(ivs) == 17, [(i["correlation"], i["name"]) for i in ivs]
    assert [i["start"] for i in ivs] == sorted(i["start"] for i in ivs), "not in start order"
    # cuda_chain makes its records one after the other: start order is that order.
    corrs = list(range(1, 11)) + list(range(101, 106)) + [200, 300]
    by_corr = dict(zip(corrs, ivs))
    if h.mode != "agent_server":
        # The correlation id stays on the agent: only `run` stores it.
        assert [i["correlation"] for i in ivs] == corrs
    frames, stacks = doc["frames"], doc["stacks"]

    def launching(iv):
        if iv["stack"] is None:
            return None
        names = [frames[f]["name"] for f in stacks[iv["stack"]]]
        return tuple(names[names.index("main"):]) if "main" in names else tuple(names)

    for k in range(1, 11):
        iv = by_corr[k]
        assert (iv["name"], iv["kind"], iv["end"] - iv["start"], iv["weight"], iv["device"],
                iv["stream"], iv["pid"], iv["comm"]) == \
            ("kernelA(int)", "kernel", 1000 * k, 2, 0, 7, h.pid, "cuda_chain"), iv
        assert launching(iv) == ("main", "phase_launch_first", "a", "b", "launch_kernel"), iv
    for k in range(101, 106):
        iv = by_corr[k]
        assert (iv["name"], iv["end"] - iv["start"]) == ("kernelB(float*, int)", 7000), iv
        assert launching(iv) == ("main", "phase_records_first", "a", "b", "launch_kernel"), iv
    cp = by_corr[200]
    assert (cp["name"], cp["kind"], cp["bytes"], cp["stream"]) == \
        ("[memcpy HtoD]", "memcpy HtoD", 4096, 13), cp
    assert launching(cp) == ("main", "phase_copy", "copy_h2d"), cp
    orphan = by_corr[300]
    assert orphan["name"] == "orphan()", orphan
    assert launching(orphan) == ("main", "phase_copy", "copy_h2d",
                                 "[launch not seen: stack of another launch]"), orphan
    native = {frames[f]["kind"] for f in stacks[by_corr[1]["stack"]]}
    assert native == {"native"}, native


def test_join_counters(gpu_run):
    """How each record found its stack, in the agent's /metrics (agent
    mode; the log's line is test_cuda_attribution's): the launch-first
    kernels and the copy joined,
    the records-first ones joined late, the orphan under another launch's
    stack, none without one."""
    h = gpu_run
    if h.mode != "agent_server":
        pytest.skip("/metrics is the agent's (flamewatch agent --metrics-listen)")
    deadline = time.monotonic() + 10
    while True:
        r = Client(h.mport).get("/metrics", {})
        assert r.status == 200, r.describe()
        got = {m.group(1): float(m.group(2)) for m in re.finditer(
            r'^flamewatch_agent_cuda_records_total\{how="(\w+)"\} (\S+)$', r.text, re.M)}
        if got.get("fallback_other") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    # At least: the agent also joins the records of any other process on the
    # host that maps a copy of the library (another test's).
    assert got["joined"] >= 11 and got["joined_late"] >= 5 and got["fallback_other"] >= 1, r.text
    assert got["lost"] == 0, r.text
    ns = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^flamewatch_agent_cuda_gpu_seconds_total\{how="(\w+)"\} (\S+)$', r.text, re.M)}
    assert ns["fallback_other"] >= 5000e-9 and ns["lost"] == 0, r.text
    # The orphan waited for its launch until it expired or its process exited.
    why = {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^flamewatch_agent_cuda_records_unjoined_total\{why="(\w+)"\} (\S+)$', r.text, re.M)}
    assert why["age"] + why["gone"] >= 1, r.text
    # How the process collected its records: every one, then duty-cycled
    # (phase_collection), logged with the cost it measured.
    sw = re.search(r"^flamewatch_agent_cuda_collection_switches_total (\d+)$", r.text, re.M)
    assert sw and int(sw[1]) >= 1, r.text
    assert re.search(r'^flamewatch_agent_cuda_processes\{records="duty_cycled"\} \d+$', r.text, re.M), r.text
    log = h.log.text()
    assert f"pid {h.pid}: GPU records: every one collected: their cost not measured yet, " \
           "limit 1.00 %" in log, log[-3000:]
    assert f"pid {h.pid}: GPU records: duty-cycled, GPU time estimated and the busy " \
           "timeline from the GPU's monitors: every record would cost 2.50 % of its time " \
           "(1700 ns each), over the limit of 1.00 %" in log, log[-3000:]


def test_kernel_table(gpu_run):
    h = gpu_run
    top = _top(h.client, h.q, h.frm, h.to)
    assert top["total_ns"] == TOTAL, top
    rows = [(k["name"], k["kind"], k["calls"], k["records"], k["total_ns"], k["mean_ns"], k["max_ns"])
            for k in top["kernels"]]
    assert rows == [
        ("kernelA(int)", "kernel", 20, 10, 110000, 5500, 10000),
        ("kernelB(float*, int)", "kernel", 15, 5, 105000, 7000, 7000),
        ("orphan()", "kernel", 1, 1, 5000, 5000, 5000),
        ("[memcpy HtoD]", "memcpy HtoD", 1, 1, 3000, 3000, 3000),
    ], rows
    # The selector applies: another pid has no GPU time here.
    other = _top(h.client, '{pid="1"}', h.frm, h.to)
    assert other["total_ns"] == 0 and other["kernels"] == [], other


def test_burst_loses_nothing(flamewatch, workloads, tmp_path):
    """8000 launches and records as fast as the probes fire: 30 times what
    the CPU sampler's own ring buffer (64 KiB here) holds. Every nanosecond
    of GPU time must arrive. When the agent is starved of CPU (a busy CI
    machine), launches give way to records once the 2 MiB ring buffer is
    half full: some records then count under the kernel alone, but the
    total stays exact, and no stack is wrong."""
    n = 8000
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data",
                        tmp_path / "data", "-F", "19", "--interval", "1s", "-v"], "run")
        assert srv.wait_output(r"profiling this host at", START_S), srv.describe()
        client.wait_healthy(proc=srv)
        t0 = time.time() - 1
        go = tmp_path / "go"
        work = ps.start([workloads / "cuda" / "cuda_chain", "burst", str(n)], "cuda_chain",
                        env={**os.environ, "CUDA_CHAIN_GO": str(go)})
        lib = str(workloads / "cuda" / "libflamewatch-cuda.so")
        assert srv.wait_output("GPU time profiling: attached to " + re.escape(lib), 60), \
            srv.describe()
        go.touch()
        assert work.wait(70) == 0, work.describe()
        q = '{pid="%d"}' % work.pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and \
                _top(client, q, t0, time.time() + 1)["total_ns"] < n * 1000:
            time.sleep(0.5)
        time.sleep(1.5)
        got = _folded(client, q, t0, time.time() + 1)
        chain = ("main", "phase_burst", "a", "b", "launch_kernel", "kernelA(int)")
        text = f"{work.text()}\n" + "\n".join(f"{';'.join(k)} {v}" for k, v in got.items())
        assert sum(got.values()) == n * 1000, text
        assert set(got) <= {chain, ("kernelA(int)",)}, text
        assert got.get(chain, 0) >= n * 1000 // 4, text
    finally:
        ps.close_all()
        client.close()


def _run_agent(ps, flamewatch, tmp_path, port):
    srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data",
                    tmp_path / "data", "-F", "19", "--interval", "1s"], "run")
    assert srv.wait_output(r"profiling this host at", START_S), srv.describe()
    return srv


def test_names_outlive_the_process(flamewatch, workloads, tmp_path):
    """The records of a process's final flush reach the agent after the
    process is gone (cuda_chain exitnow exits right after them): the
    kernel names come from the name probe, never from the dead process."""
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = _run_agent(ps, flamewatch, tmp_path, port)
        client.wait_healthy(proc=srv)
        t0 = time.time() - 1
        go = tmp_path / "go"
        work = ps.start([workloads / "cuda" / "cuda_chain", "exitnow"], "cuda_chain",
                        env={**os.environ, "CUDA_CHAIN_GO": str(go)})
        lib = str(workloads / "cuda" / "libflamewatch-cuda.so")
        assert srv.wait_output("GPU time profiling: attached to " + re.escape(lib), 60), \
            srv.describe()
        go.touch()
        assert work.wait(70) == 0, work.describe()
        q = '{pid="%d"}' % work.pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and \
                _top(client, q, t0, time.time() + 1)["total_ns"] < TOTAL:
            time.sleep(0.5)
        time.sleep(1.5)
        top = _top(client, q, t0, time.time() + 1)
        names = {k["name"]: k["total_ns"] for k in top["kernels"]}
        assert names == {"kernelA(int)": 110000, "kernelB(float*, int)": 105000,
                         "orphan()": 5000, "[memcpy HtoD]": 3000}, (names, srv.text()[-3000:])
    finally:
        ps.close_all()
        client.close()


def _drive_exactly(flamewatch, tmp_path, launches, images=1):
    """Runs `cuda_host drive` with the real library (fake CUPTI) under an
    agent started first, CUPTI always on (duty cycle 1) and no launch
    sampling: the GPU time stored for its pid must equal the fake GPU's to
    the nanosecond, every kernel named. images=2: it execs itself and does
    it all again in the same pid."""
    lib, host, cupti = cuda_fakes(flamewatch)
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = _run_agent(ps, flamewatch, tmp_path, port)
        assert srv.wait_output("GPU time profiling: attached to " + re.escape(str(lib)), 10), \
            "the agent did not attach to the library beside it at start\n" + srv.describe()
        client.wait_healthy(proc=srv)
        t0 = time.time() - 5
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLAMEWATCH_CUDA", "FAKE_CUPTI"))}
        # The host waits for the callbacks, not just the subscription: the
        # launches made between the two were never recorded (the fake's
        # `recorded` came 17 short of the work, and so did the store: one
        # run in a few under load).
        env.update(FLAMEWATCH_CUPTI_PATH=str(cupti), FLAMEWATCH_CUDA_DUTY_CYCLE="1",
                   FLAMEWATCH_CUDA_LAUNCH_BUDGET="100000000", CUDA_HOST_WAIT_CALLBACKS="1")
        if images == 2:
            env["CUDA_HOST_EXEC_AGAIN"] = "1"
        work = ps.start([host, "drive", lib, str(launches), "20000", "0"], "cuda_host", env=env)
        assert work.wait(60) == 0, work.describe()
        truths = [json.loads(ln) for ln in work.text().splitlines() if ln.startswith("{")]
        assert len(truths) == images, work.describe()
        want = sum(t["kernel_ns"] + t["memcpy_ns"] + t["memset_ns"] for t in truths)
        q = '{pid="%d"}' % work.pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and \
                _top(client, q, t0, time.time() + 5)["total_ns"] < want:
            time.sleep(0.5)
        time.sleep(1.5)
        top = _top(client, q, t0, time.time() + 5)
        names = {k["name"] for k in top["kernels"]}
        text = f"truths {truths}\n{json.dumps(top)[:3000]}\n{srv.text()[-3000:]}"
        assert top["total_ns"] == want, text
        assert names == {"kernel_one(float*)", "kernel_two(float*, int)", "driver_kernel(float*)",
                         "graph_kernel()", "[memcpy HtoD]", "[memset]"}, text
    finally:
        ps.close_all()
        client.close()


def test_real_library_short_run(flamewatch, tmp_path):
    """The real libflamewatch-cuda.so (fake CUPTI, build/fakes) in a process
    that starts after the agent and exits right after its work: the agent
    armed the library's probes at its own start (the copy beside its
    binary, which `flamewatch cuda` injects), so the run is collected from
    its first window without a /proc scan, the records of the flush at
    exit are all stored, and every kernel is named. (The sweep of gone
    processes, falling between the exit and the next drain, once made
    about one run in ten lose the names of its exit flush.)"""
    _drive_exactly(flamewatch, tmp_path, 3000)


def test_exec_keeps_the_new_images_names(flamewatch, tmp_path):
    """A CUDA process that execs itself and does its work again in the same
    pid: every kernel of both images is named and the GPU time of both is
    stored exactly: the old image's names and launches are forgotten at
    its exec mark, in the order of the CUDA records, and the new image's
    are kept. (Forgetting them at the exec event instead, from the other
    ring buffer, could drop names the new image had just announced; that
    race is too narrow for this test to hit reliably.)"""
    _drive_exactly(flamewatch, tmp_path, 1000, images=2)


def test_python_frames_in_launch_stacks(flamewatch, workloads, tmp_path):
    """A Python process launching through the library (ctypes here, PyTorch
    on a GPU) from main -> train_step -> forward: the GPU flame graph shows
    those Python functions above the kernel, with no placeholder frame
    (the process exits 3 s after its launches: their new code objects
    wake the agent, which reads them while the process lives; before, the
    launch probe's Python walk wrote the CPU sampler's scratch slot and the
    launch stacks got stale words instead).

    Launches from a native thread with no Python of its own, while
    main -> train_step -> backward waits for it (PyTorch's autograd threads
    run the backward pass so), go under that Python stack, below a marker
    naming the thread, then the thread's own native frames (before, they
    reached no Python function at all)."""
    from test_python import interpreter

    exe = interpreter("3.12")
    script = Path(__file__).resolve().parent.parent / "workloads" / "python" / "cuda_launch.py"
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = _run_agent(ps, flamewatch, tmp_path, port)
        client.wait_healthy(proc=srv)
        t0 = time.time() - 1
        lib = workloads / "cuda" / "libflamewatch-cuda.so"
        work = ps.start([exe, script, lib], "cuda_launch")
        assert srv.wait_output("GPU time profiling: attached to " + re.escape(str(lib)), 60), \
            srv.describe()
        assert work.wait(70) == 0, work.describe()
        q = '{pid="%d"}' % work.pid
        deadline = time.monotonic() + 40  # a loaded machine: the agent builds unwind tables first
        while time.monotonic() < deadline and \
                _top(client, q, t0, time.time() + 1)["total_ns"] < 80 * 1000:
            time.sleep(0.5)
        time.sleep(1.5)
        r = _get(client, "/api/v1/profile", {"type": "gpu_time", "format": "folded", "query": q,
                                             **window(t0, time.time() + 1)})
        got = {}
        for line in r.text.splitlines():
            stack, _, n = line.rpartition(" ")
            got[stack] = got.get(stack, 0) + int(n)
        text = "\n".join(f"{k} {v}" for k, v in got.items())
        assert sum(got.values()) == 80 * 1000, text
        assert not any("[python code" in k for k in got), text
        chained = sum(v for k, v in got.items()
                      if re.search(r";main;train_step;forward;.*matmul\(\)$", k))
        assert chained >= 40 * 1000 // 2, text
        # The library's own frames are left out: start_thread is the thread's.
        borrowed = sum(v for k, v in got.items() if re.search(
            r";main;train_step;backward;\[from thread fw_native\];"
            r"(?!.*(train_step|forward|backward)).*start_thread;matmul\(\)$", k))
        assert borrowed >= 40 * 1000 // 2, text
        assert not any("forward;" in k and "fw_native" in k for k in got), text
    finally:
        ps.close_all()
        client.close()


def test_gpu_routes_bad_input(gpu_run):
    h = gpu_run
    w = window(h.frm, h.to)
    for path in ("/api/v1/gpu/kernels", "/api/v1/gpu/kernels/top"):
        for params, word in (({"query": "{pid="}, "query"), ({"limit": "x"}, "limit"),
                             ({"limit": "0"}, "limit"), ({"from": "yesterday-ish"}, "from")):
            r = h.client.get(path, {**w, "query": h.q, **params})
            assert r.status == 400 and word in r.text, r.describe()
    # More intervals than the limit: refused whole, never cut silently.
    r = h.client.get("/api/v1/gpu/kernels", {**w, "query": h.q, "limit": "5"})
    assert r.status == 400 and "limit" in r.text, r.describe()
    r = h.client.get("/api/v1/gpu/kernels", {**w, "query": h.q, "limit": "17"})
    assert r.status == 200 and len(r.json()["intervals"]) == 17, r.describe()
