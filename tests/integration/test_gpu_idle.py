"""GET /api/v1/gpu/idle, "why is the GPU idle?", against the real agent and
store: `flamewatch run` (real BPF sampling, real USDT probes, the fake NVML
library) and `cuda_chain gap`, a training loop whose GPU is busy while the
CPU waits in wait_for_gpu and idle while the CPU runs load_batch_stall
(tests/workloads/cuda/cuda_chain.c). The GPU-idle flame graph must name
load_batch_stall, and the idle fraction of the loop must be about one half,
both from the kernel intervals and, with source=nvml, from NVML's
per-process utilisation under or over a threshold.

`cuda_chain blockgap` is the same loop with a loader that blocks in read()
instead of spinning, under `run`, which records off-CPU time by default: the
idle time must be off-CPU time under load_batch_blocked, the known blocked
time, and not CPU time.
"""

import os
from pathlib import Path
import re
import time

import pytest

from conftest import BUILD, require
from serverlib import Client, Procs, diagnostics, free_port, register_plugin, window

ROUNDS, MS = 4, 400
START_S = 60


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


@pytest.fixture(scope="module")
def gap_run(flamewatch, workloads, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gpu_idle")
    ps = Procs(tmp / "logs")
    port = free_port()
    client = Client(port)
    go = tmp / "go"
    try:
        # The workload starts first (waiting for an agent) so that the fake
        # NVML can name its pid: 80 % SM utilisation on GPU 0 all along (alone
        # on it, the process gets the GPU's utilisation: 80 % too).
        work = ps.start([workloads / "cuda" / "cuda_chain", "gap", str(ROUNDS), str(MS)],
                        "cuda_chain", env={**os.environ, "CUDA_CHAIN_GO": str(go)})
        values = tmp / "nvml-values"
        values.write_text(f"gpu0.util 80\ngpu0.mem_util 10\nproc 0 {work.pid} 80 10 1000000\n")
        env = {**os.environ, "LD_LIBRARY_PATH": str(BUILD / "fakes"),
               "FAKE_NVML_VALUES": str(values)}
        srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data",
                        tmp / "data", "-F", "99", "--interval", "1s", "--gpu-interval", "200ms",
                        "--no-off-cpu", "--node", "fwtest-idle"], "run", env=env)
        if not srv.wait_output(r"profiling this host at", START_S):
            pytest.fail(f"`flamewatch run` did not start\n{srv.describe()}", pytrace=False)
        client.wait_healthy(proc=srv)
        lib = re.escape(str(workloads / "cuda" / "libflamewatch-cuda.so"))
        if not srv.wait_output("GPU time profiling: attached to " + lib, 60):
            pytest.fail(f"the agent did not attach\n{srv.describe()}", pytrace=False)
        time.sleep(1)		# the agent describes the workload to its unwinder
        go.touch()
        assert work.wait(60) == 0, work.describe()
        m = re.search(r"gap (\d+) (\d+)", work.text())
        assert m, work.describe()
        frm, to = int(m[1]) / 1e9, int(m[2]) / 1e9
        q = '{pid="%d"}' % work.pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            doc = client.get_json("/api/v1/gpu/kernels", {"query": q, **window(frm - 1, to + 1)})
            if len(doc["intervals"]) >= ROUNDS:
                break
            time.sleep(0.5)
        time.sleep(2)		# the last samples' flush
    except (Exception, pytest.fail.Exception) as e:
        text = diagnostics()
        ps.close_all()
        client.close()
        pytest.fail(f"setting up the gap run failed: {e}\n\n{text}", pytrace=False)
    try:
        yield client, work.pid, frm, to
    finally:
        ps.close_all()
        client.close()


def _idle(client, pid, frm, to, **kw):
    r = client.get("/api/v1/gpu/idle", {"pid": str(pid), **window(frm, to), **kw})
    if r.status != 200:
        pytest.fail(f"/api/v1/gpu/idle failed:\n{r.describe()}", pytrace=False)
    return r


def _folded(text):
    out = {}
    for line in text.splitlines():
        if line.strip():
            stack, v = line.rsplit(" ", 1)
            out[stack] = out.get(stack, 0) + int(v)
    return out


def _share(folded, fn):
    total = sum(folded.values())
    hit = sum(v for k, v in folded.items() if fn in k.split(";"))
    return hit / total if total else 0.0


def test_kernel_gaps_name_the_stall(gap_run):
    client, pid, frm, to = gap_run
    doc = _idle(client, pid, frm, to).json()
    assert doc["source"] == "kernels", doc["source"]
    assert doc["kernels"] == {"intervals": ROUNDS, "max_weight": 1}, doc["kernels"]
    assert doc["resolution_ns"] == 0, doc["resolution_ns"]
    # The loop is half kernel, half stall; the span is the loop itself.
    assert 0.4 < doc["idle_fraction"] < 0.6, doc["idle_fraction"]
    assert len(doc["gaps"]) >= ROUNDS - 1, doc["gaps"]
    s = doc["samples"]
    assert s["idle"] >= 20, s
    assert 0.3 < s["idle"] / s["total"] < 0.7, s
    # The CPU waited in cudaStreamSynchronize while each kernel ran.
    assert 0.3 < s["waiting_on_gpu"] / s["total"] < 0.7, s
    folded = _folded(_idle(client, pid, frm, to, format="folded").text)
    assert sum(folded.values()) == s["idle"]
    assert _share(folded, "load_batch_stall") > 0.85, folded
    assert _share(folded, "wait_for_gpu") < 0.1, folded
    # Gaps shorter than min_gap are not listed; the idle time still counts them.
    assert doc["gaps_min_ns"] == int((to - frm) * 1e9) // 2000 or abs(
        doc["gaps_min_ns"] - (to - frm) * 1e9 / 2000) < 2, doc["gaps_min_ns"]
    none = _idle(client, pid, frm, to, min_gap="1s").json()
    assert none["gaps"] == [] and none["idle_fraction"] == doc["idle_fraction"], none["gaps"]
    every = _idle(client, pid, frm, to, min_gap="0s").json()
    assert len(every["gaps"]) >= len(doc["gaps"]), (every["gaps"], doc["gaps"])
    # The JSON flame graph holds the same samples.
    prof = doc["profile"]
    assert prof["total"] == s["idle"]
    assert "load_batch_stall" in prof["names"]
    # The CPU spun through every gap: its idle samples explain the idle time.
    assert doc["sample_period_ns"] == 1_000_000_000 // 99, doc["sample_period_ns"]
    assert doc["cpu_idle_ns"] == s["idle"] * doc["sample_period_ns"]
    assert 0.7 < doc["cpu_share"] < 1.3, doc["cpu_share"]
    # The agent ran with --no-off-cpu: no off-CPU answer, not zeros.
    assert doc["offcpu"] is None, doc["offcpu"]


def test_nvml_threshold(gap_run):
    client, pid, frm, to = gap_run
    # The fake says this process keeps GPU 0 at 80 %: busy all along over 50 %...
    busy = _idle(client, pid, frm, to, source="nvml", threshold="50").json()
    assert busy["source"] == "nvml_process" and busy["nvml_points"] > 0, busy
    assert busy["idle_fraction"] < 0.05, busy["idle_fraction"]
    assert busy["samples"]["idle"] == 0, busy["samples"]
    assert busy["resolution_ns"] >= 100_000_000, busy["resolution_ns"]
    # ... and idle all along under 90 %: NVML's averages cannot place the
    # phases, but the CPU samples inside cudaStreamSynchronize are the CPU
    # waiting on a busy GPU, never idle: only the stall is in the graph.
    idle = _idle(client, pid, frm, to, source="nvml", threshold="90").json()
    assert idle["idle_fraction"] > 0.95, idle["idle_fraction"]
    s = idle["samples"]
    # The library's own control thread is the profiler's, neither.
    assert s["idle"] + s["waiting_on_gpu"] + s["profiler"] == s["total"] > 0, s
    assert 0.3 < s["waiting_on_gpu"] / s["total"] < 0.7, s
    folded = _folded(_idle(client, pid, frm, to, source="nvml", threshold="90",
                           format="folded").text)
    assert _share(folded, "wait_for_gpu") < 0.05, folded
    assert _share(folded, "load_batch_stall") > 0.85, folded


def test_bad_input_is_a_clear_400(gap_run):
    client, pid, frm, to = gap_run
    for params, msg in [({}, "pid"), ({"pid": "abc"}, "pid"), ({"pid": "0"}, "pid"),
                        ({"pid": str(pid), "source": "gpu"}, "source"),
                        ({"pid": str(pid), "threshold": "101"}, "threshold"),
                        ({"pid": str(pid), "format": "pprof"}, "format"),
                        ({"pid": str(pid), "graph": "offcpus"}, "graph"),
                        ({"pid": str(pid), "graph": ""}, "graph"),
                        ({"pid": str(pid), "min_gap": "soon"}, "min_gap"),
                        ({"pid": str(pid), "node": 'a"b'}, "node"),
                        ({"pid": str(pid), "from": "yesterday"}, "from")]:
        r = client.get("/api/v1/gpu/idle", params)
        assert r.status == 400, (params, r.describe())
        assert msg in r.json()["error"], (params, r.text)
    # A process with no samples and no kernels: an empty answer, not an error.
    doc = _idle(client, 1, frm, to).json()
    assert doc["samples"] == {"total": 0, "idle": 0, "idle_inside": 0, "waiting_on_gpu": 0,
                              "profiler": 0}, doc
    assert doc["idle_fraction"] is None, doc


def _real_library(flamewatch):
    """The real libflamewatch-cuda.so and the fake CUPTI host beside the
    binary, and an environment free of their tuning variables."""
    build = Path(flamewatch).resolve().parent
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("FLAMEWATCH_CUDA", "FAKE_CUPTI"))}
    return (build / "fakes" / "cuda_host", build / "fakes" / "libcupti.so",
            build / "libflamewatch-cuda.so", env)


def _run_for_library(ps, flamewatch, tmp_path, port, hz, node, env):
    srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data",
                    tmp_path / "data", "-F", hz, "--interval", "1s", "--gpu-interval", "off",
                    "--node", node], "run", env=env)
    assert srv.wait_output(r"profiling this host at", START_S), srv.describe()
    return srv


def test_busy_timeline_when_launches_are_sampled(flamewatch, tmp_path):
    """The real libflamewatch-cuda.so (fake CUPTI) in its default
    collection, with the launch budget at its floor so that the kept
    kernels stand for many launches each (the case where the answer used
    to fall back to NVML's one-second averages): the busy timeline the
    library builds from every kernel record places the GPU's busy and idle
    phases exactly. The idle fraction is the truth's within 0.03, the idle
    graph is the data-loading function, and the CPU's wait in
    cudaDeviceSynchronize is waiting_on_gpu, not idle. The library's own
    control thread burns CPU at every flush (as CUPTI's does with many
    records): its samples are the profiler's, in neither graph."""
    host, cupti, lib, env = _real_library(flamewatch)
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = _run_for_library(ps, flamewatch, tmp_path, port, "99", "fwtest-timeline", env)
        client.wait_healthy(proc=srv)
        work = ps.start([host, "stall", lib, "8", "40", "5000", "200"], "cuda_host",
                        env={**env, "FLAMEWATCH_CUPTI_PATH": str(cupti),
                             "FLAMEWATCH_CUDA_LAUNCH_BUDGET": "1", "FAKE_CUPTI_FLUSH_SPIN_US": "500"})
        assert work.wait(60) == 0, work.describe()
        out = work.text().splitlines()
        truth = [tuple(map(int, l.split()[1:3])) for l in out if l.startswith("busy ")]
        loop = [tuple(map(int, l.split()[1:3])) for l in out if l.startswith("loop ")][0]
        assert len(truth) == 8, work.describe()
        frm, to = loop[0] / 1e9, loop[1] / 1e9
        want_idle = 1 - sum(min(b, loop[1]) - max(a, loop[0]) for a, b in truth) / (loop[1] - loop[0])
        deadline = time.monotonic() + 20
        doc = None
        while time.monotonic() < deadline:
            doc = _idle(client, work.pid, frm, to).json()
            # Every round's span stored, not only most of the coverage: the
            # last batches of a loaded agent come a little later.
            if doc["source"] == "timeline" and doc["coverage"] > 0.95 and \
                    doc["samples"]["total"] > 100 and (doc["timeline"] or {}).get("spans", 0) >= len(truth):
                break
            time.sleep(0.5)
        time.sleep(2)		# the last samples' flush
        doc = _idle(client, work.pid, frm, to).json()
        assert doc["source"] == "timeline", doc
        print(f"\ntimeline: idle {doc['idle_fraction']:.4f} (truth {want_idle:.4f}), coverage "
              f"{doc['coverage']:.4f}, {doc['timeline']}, samples {doc['samples']}, "
              f"kernels {doc['kernels']}")
        assert doc["kernels"]["max_weight"] > 1, doc["kernels"]     # attribution is sampled
        assert doc["coverage"] > 0.95 and doc["fallback"] == "kernels", doc
        # Cheap records (the fake's cost nothing): every one collected, and said.
        rec = doc["timeline"]["records"]
        assert rec["mode"] == "all" and rec["complete"] > 0.95, rec
        assert re.search(r"pid %d: GPU records: every one collected" % work.pid, srv.text()), \
            srv.describe()
        assert abs(doc["idle_fraction"] - want_idle) < 0.03, (doc["idle_fraction"], want_idle)
        assert len(doc["gaps"]) >= 7, doc["gaps"]
        s = doc["samples"]
        assert s["total"] > 100, s
        assert 0.3 < s["waiting_on_gpu"] / s["total"] < 0.7, s
        folded = _folded(_idle(client, work.pid, frm, to, format="folded").text)
        assert _share(folded, "host_load_batch") > 0.9, folded
        assert _share(folded, "cudaDeviceSynchronize") < 0.05, folded
        assert s["profiler"] > 0 and _share(folded, "_control") == 0, (s, folded)
        # source=timeline alone says the same; the kernels alone do not.
        alone = _idle(client, work.pid, frm, to, source="timeline").json()
        assert alone["fallback"] == "none" and abs(alone["idle_fraction"] - want_idle) < 0.03, alone
        kernels = _idle(client, work.pid, frm, to, source="kernels").json()
        assert kernels["source"] == "kernels" and kernels["idle_fraction"] > want_idle + 0.05, kernels
        # The spans are the busy timeline's, not kernels: /gpu/kernels lists them only when asked.
        q = '{pid="%d"}' % work.pid
        plain = client.get_json("/api/v1/gpu/kernels", {"query": q, **window(frm, to)})
        assert all(iv["kind"] not in ("busy", "coverage") for iv in plain["intervals"]), plain
        tl = client.get_json("/api/v1/gpu/kernels", {"query": q, "timeline": "1", **window(frm, to)})
        assert any(iv["kind"] == "busy" for iv in tl["intervals"]), tl["intervals"][:5]
        assert client.get("/api/v1/gpu/kernels", {"query": q, "timeline": "yes"}).status == 400
        # timeline=only: the spans alone, merged below the resolution (a
        # pixel of the kernel track): one busy span per round, each within
        # a millisecond of the round's truth; wider than the stalls, one.
        only = client.get_json("/api/v1/gpu/kernels", {"query": q, "timeline": "only",
                                                       **window(frm, to)})
        busy = sorted((iv["start"], iv["end"]) for iv in only["intervals"] if iv["kind"] == "busy")
        assert {iv["kind"] for iv in only["intervals"]} <= {"busy", "coverage"}, only
        assert only["resolution_ns"] == int((to - frm) * 1e9) // 2000 or \
            abs(only["resolution_ns"] - (to - frm) * 1e6 / 2) < 2, only["resolution_ns"]
        # Each round against its part that every record covered: a probe
        # window (activity off while the records' cost is measured) may
        # take a round's first milliseconds on a loaded machine.
        # (Listed by start: the span that holds the loop's start began before it.)
        wider = client.get_json("/api/v1/gpu/kernels", {"query": q, "timeline": "only",
                                                        **window(frm - 10, to)})
        cover = sorted((iv["start"], iv["end"]) for iv in wider["intervals"]
                       if iv["kind"] == "coverage")
        inside = []
        for a, b in truth:
            if a < loop[0] or b > loop[1]:
                continue
            parts = [(max(a, ca), min(b, cb)) for ca, cb in cover if ca < b and cb > a]
            if parts:
                inside.append((parts[0][0], parts[-1][1]))
        assert len(inside) >= len(truth) - 2, (cover, truth)
        # A hole in the coverage inside a round splits its span: one round,
        # the spans that overlap it.
        rounds = [[(a, b) for a, b in busy if a < tb and b > ta] for ta, tb in inside]
        assert sum(map(len, rounds)) == len(busy), (busy, inside)
        for spans, (ta, tb) in zip(rounds, inside):
            assert spans, (busy, inside, cover)
            # Clipped to the coverage as the truth is: records read just
            # before a coverage part began (a probe window) still make spans.
            clip = [(max(a, ca), min(b, cb)) for a, b in spans for ca, cb in cover
                    if ca < b and cb > a]
            assert clip, (spans, cover)
            a, b = clip[0][0], clip[-1][1]
            assert abs(a - ta) < 1e6 and abs(b - tb) < 1e6, (busy, inside, cover)
        wide = client.get_json("/api/v1/gpu/kernels", {"query": q, "timeline": "only",
                                                       "resolution": "1s", **window(frm, to)})
        assert len([iv for iv in wide["intervals"] if iv["kind"] == "busy"]) == 1, wide
        assert client.get("/api/v1/gpu/kernels", {"query": q, "timeline": "only",
                                                  "resolution": "-1s"}).status == 400
    finally:
        ps.close_all()
        client.close()


def test_idle_between_kernels_is_idle(flamewatch, tmp_path):
    """A launch-bound loop: the fake GPU leaves 60 us between 100-us
    kernels, too short for the busy timeline's spans to keep apart once its
    merge gap widens. The gaps the spans merge are still idle time: the idle
    fraction is the truth's (kernel time against the loop) within 0.03, and
    idle_inside_ns says how much of it no gap can place. Counted as busy, as
    before, the loop would read about 0.38 idle against 0.62."""
    host, cupti, lib, env = _real_library(flamewatch)
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    rounds, kernels, kernel_us, gap_ns = 6, 1500, 100, 60000
    try:
        srv = _run_for_library(ps, flamewatch, tmp_path, port, "99", "fwtest-inside", env)
        client.wait_healthy(proc=srv)
        work = ps.start([host, "stall", lib, str(rounds), str(kernels), str(kernel_us), "150"],
                        "cuda_host",
                        env={**env, "FLAMEWATCH_CUPTI_PATH": str(cupti),
                             "FAKE_CUPTI_KERNEL_GAP_NS": str(gap_ns)})
        assert work.wait(60) == 0, work.describe()
        out = work.text().splitlines()
        truth = [tuple(map(int, l.split()[1:3])) for l in out if l.startswith("busy ")]
        loop = [tuple(map(int, l.split()[1:3])) for l in out if l.startswith("loop ")][0]
        assert len(truth) == rounds, work.describe()
        frm, to = loop[0] / 1e9, loop[1] / 1e9
        kernel_ns = rounds * kernels * kernel_us * 1000
        want_idle = 1 - kernel_ns / (loop[1] - loop[0])
        span_idle = 1 - sum(b - a for a, b in truth) / (loop[1] - loop[0])
        assert want_idle - span_idle > 0.15, (want_idle, span_idle)
        deadline = time.monotonic() + 20
        doc = None
        while time.monotonic() < deadline:
            # 404 until the first span is stored.
            r = client.get("/api/v1/gpu/idle", {"pid": str(work.pid), **window(frm, to),
                                                "source": "timeline"})
            doc = r.json() if r.status == 200 else {}
            if doc and doc["coverage"] > 0.95 and (doc["timeline"] or {}).get("spans", 0) >= rounds:
                break
            time.sleep(0.5)
        time.sleep(2)
        doc = _idle(client, work.pid, frm, to, source="timeline").json()
        tl = doc["timeline"]
        print(f"\ninside: idle {doc['idle_fraction']:.4f} (truth {want_idle:.4f}, spans alone "
              f"{span_idle:.4f}), {tl}")
        assert doc["coverage"] > 0.95, doc
        assert abs(doc["idle_fraction"] - want_idle) < 0.03, (doc["idle_fraction"], want_idle)
        # What the merged spans hold: most of the gaps between kernels.
        gaps_ns = rounds * (kernels - 1) * gap_ns
        assert 0.5 * gaps_ns < tl["idle_inside_ns"] <= 1.05 * gaps_ns, (tl, gaps_ns)
        assert tl["merge_gap_ns"] > gap_ns, tl
        assert doc["busy_ns"] + doc["idle_ns"] == doc["span"][1] - doc["span"][0] or \
            doc["coverage"] < 1, doc
        # Each source alone: the records' spans say the same.
        rec = _idle(client, work.pid, frm, to, source="timeline", timeline_from="records").json()
        assert abs(rec["idle_fraction"] - want_idle) < 0.03, rec
        # The kernel track's spans carry it too: merged to one span a
        # second, the spans' idle_ns leave the kernels' time busy.
        q = '{pid="%d"}' % work.pid
        only = client.get_json("/api/v1/gpu/kernels", {"query": q, "timeline": "only",
                                                       "resolution": "1s", **window(frm, to)})
        busy = [iv for iv in only["intervals"] if iv["kind"] == "busy"]
        assert len(busy) == 1, only["intervals"]
        b = busy[0]
        computed = b["end"] - b["start"] - b["idle_ns"]
        assert abs(computed - kernel_ns) < 0.02 * kernel_ns, (b, kernel_ns)
        listed = client.get_json("/api/v1/gpu/kernels", {"query": q, "timeline": "1",
                                                         **window(frm, to)})
        spans = [iv for iv in listed["intervals"] if iv["kind"] == "busy"]
        assert spans and all(0 <= iv["idle_ns"] <= iv["end"] - iv["start"] and
                             iv["correlation"] == 0 for iv in spans), spans[:3]
        assert abs(sum(iv["end"] - iv["start"] - iv["idle_ns"] for iv in spans) - kernel_ns) \
            < 0.02 * kernel_ns
    finally:
        ps.close_all()
        client.close()


def test_launch_bound_idle_is_the_cpu_between_kernels(flamewatch, tmp_path):
    """A launch-bound loop: 300 us of CPU (host_prepare_launch), then a
    200-us kernel the GPU finishes before the next launch. The GPU idles
    in gaps the busy spans merge once their merge gap widens, where no gap
    places them;
    yet that idle time is the CPU's work between kernels. A CPU sample
    inside a span is called idle with the odds of the span's idle share:
    the idle graph is host_prepare_launch, and of the samples inside
    spans, the share called idle is the spans' idle share. Before, no
    sample inside a span was idle: the gaps merged lost their CPU side."""
    host, cupti, lib, env = _real_library(flamewatch)
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    kernel_us, cpu_us = 200, 300
    try:
        srv = _run_for_library(ps, flamewatch, tmp_path, port, "99", "fwtest-launchbound", env)
        client.wait_healthy(proc=srv)
        work = ps.start([host, "launchbound", lib, "4", str(kernel_us), str(cpu_us)], "cuda_host",
                        env={**env, "FLAMEWATCH_CUPTI_PATH": str(cupti)})
        assert work.wait(60) == 0, work.describe()
        line = [l for l in work.text().splitlines() if l.startswith("launchbound ")][0]
        t0, t1, n = map(int, line.split()[1:4])
        frm, to = t0 / 1e9, t1 / 1e9
        want_idle = 1 - n * kernel_us * 1000 / (t1 - t0)
        assert 0.2 < want_idle < 0.8, (want_idle, n)
        deadline = time.monotonic() + 20
        doc = None
        while time.monotonic() < deadline:
            doc = _idle(client, work.pid, frm, to).json()
            if doc["source"] == "timeline" and doc["coverage"] > 0.95 and doc["samples"]["total"] > 150:
                break
            time.sleep(0.5)
        time.sleep(2)
        doc = _idle(client, work.pid, frm, to).json()
        s = doc["samples"]
        print(f"\nlaunch-bound: idle {doc['idle_fraction']:.4f} (truth {want_idle:.4f}), "
              f"samples {s}, {doc['timeline']}")
        assert doc["source"] == "timeline" and doc["coverage"] > 0.95, doc
        assert abs(doc["idle_fraction"] - want_idle) < 0.05, (doc["idle_fraction"], want_idle)
        # Of the samples inside busy spans, the share called idle is the
        # spans' idle share (the samples in placed gaps are idle anyway).
        # Not the idle fraction itself: a thread waiting for a CPU on this
        # loaded machine leaves the GPU idle and takes no sample.
        assert s["total"] > 150, s
        in_spans = s["total"] - (s["idle"] - s["idle_inside"]) - s["waiting_on_gpu"]
        inside_ns = doc["timeline"]["idle_inside_ns"]
        want = inside_ns / (doc["busy_ns"] + inside_ns)
        assert want > 0.05 and in_spans > 50, (want, s)
        assert abs(s["idle_inside"] / in_spans - want) < 0.12, (s, want)
        folded = _folded(_idle(client, work.pid, frm, to, format="folded").text)
        assert _share(folded, "host_prepare_launch") > 0.8, folded
        # The same answer every time: the odds are dice of the samples' own.
        again = _idle(client, work.pid, frm, to).json()
        assert again["samples"] == s, (again["samples"], s)
    finally:
        ps.close_all()
        client.close()


def test_costly_records_duty_cycled_and_said(flamewatch, tmp_path):
    """Records that cost the launching thread 4 us each (the fake CUPTI) in
    a loop launching as fast as it can: the library measures that every
    record would cost far over 1 % of the process's time and duty-cycles
    them. The agent logs the switch with the measured cost, and
    /api/v1/gpu/idle says the records were duty-cycled (no coverage of
    their own once the switch is made)."""
    host, cupti, lib, env = _real_library(flamewatch)
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = _run_for_library(ps, flamewatch, tmp_path, port, "19", "fwtest-cost", env)
        client.wait_healthy(proc=srv)
        t0 = time.time()
        work = ps.start([host, "drive", lib, "60000", "20000", "1"], "cuda_host",
                        env={**env, "FLAMEWATCH_CUPTI_PATH": str(cupti),
                             "FAKE_CUPTI_RECORD_COST_NS": "4000"})
        assert work.wait(120) == 0, work.describe()
        t1 = time.time()
        m = re.search(r"pid %d: GPU records: duty-cycled, GPU time estimated and the busy "
                      r"timeline from the GPU's monitors: every record would cost ([0-9.]+) %% "
                      r"of its time \((\d+) ns each\), over the limit of 1.00 %%" % work.pid,
                      srv.text())
        assert m, srv.describe()
        assert float(m[1]) > 1 and 3000 <= int(m[2]) <= 6000, m[0]
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            r = client.get("/api/v1/gpu/idle", {"pid": str(work.pid), **window(t0, t1)})
            if r.status == 200 and (r.json()["timeline"] or {}).get("records"):
                break
            time.sleep(0.5)
        doc = r.json()
        rec = doc["timeline"]["records"]
        # Every record until the cost was measured, then none complete.
        assert rec["mode"] in ("mixed", "duty_cycled") and rec["complete"] < 0.5, (rec, doc)
    finally:
        ps.close_all()
        client.close()


@pytest.fixture(scope="module")
def blockgap_run(flamewatch, workloads, tmp_path_factory):
    """`cuda_chain blockgap` under `run` (off-CPU time by default): kernels
    while the CPU spins in wait_for_gpu, then the GPU idle while the loader
    sleeps in read(). Yields the client, the pid, the loop and the blocked ns the
    workload measured."""
    tmp = tmp_path_factory.mktemp("gpu_idle_offcpu")
    ps = Procs(tmp / "logs")
    port = free_port()
    client = Client(port)
    go = tmp / "go"
    try:
        work = ps.start([workloads / "cuda" / "cuda_chain", "blockgap", str(ROUNDS), str(MS)],
                        "cuda_chain", env={**os.environ, "CUDA_CHAIN_GO": str(go)})
        srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data",
                        tmp / "data", "-F", "99", "--interval", "1s", "--gpu-interval", "off",
                        "--node", "fwtest-idle-offcpu"], "run")
        if not srv.wait_output(r"profiling this host at", START_S):
            pytest.fail(f"`flamewatch run` did not start\n{srv.describe()}", pytrace=False)
        client.wait_healthy(proc=srv)
        lib = re.escape(str(workloads / "cuda" / "libflamewatch-cuda.so"))
        if not srv.wait_output("GPU time profiling: attached to " + lib, 60):
            pytest.fail(f"the agent did not attach\n{srv.describe()}", pytrace=False)
        time.sleep(1)		# the agent describes the workload to its unwinder
        go.touch()
        assert work.wait(60) == 0, work.describe()
        m = re.search(r"blockgap (\d+) (\d+) (\d+)", work.text())
        assert m, work.describe()
        frm, to, blocked = int(m[1]) / 1e9, int(m[2]) / 1e9, int(m[3])
        q = '{pid="%d"}' % work.pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            doc = client.get_json("/api/v1/gpu/idle", {"pid": str(work.pid), **window(frm, to)})
            if len(doc["gaps"]) >= ROUNDS - 1 and doc["offcpu"] and \
                    doc["offcpu"]["idle_ns"] >= 0.9 * blocked:
                break
            time.sleep(0.5)
        time.sleep(2)		# the last samples' flush
    except (Exception, pytest.fail.Exception) as e:
        text = diagnostics()
        ps.close_all()
        client.close()
        pytest.fail(f"setting up the blockgap run failed: {e}\n\n{text}", pytrace=False)
    try:
        yield client, work.pid, frm, to, blocked
    finally:
        ps.close_all()
        client.close()


def test_offcpu_explains_a_blocked_loader(blockgap_run):
    """Issue 30: the GPU idles while the loader blocks in read(); the
    off-CPU graph of the idle time is that function, the blocked time is
    the truth's, and the CPU graph does not claim it."""
    client, pid, frm, to, blocked = blockgap_run
    doc = _idle(client, pid, frm, to).json()
    off = doc["offcpu"]
    print(f"\nblockgap: truth {blocked / 1e6:.1f} ms blocked; idle {doc['idle_ns'] / 1e6:.1f} ms "
          f"(fraction {doc['idle_fraction']:.3f}); off-CPU charged {off['idle_ns'] / 1e6:.1f} ms "
          f"of {off['blocked_ns'] / 1e6:.1f} ms blocked, share {off['share']:.3f}; "
          f"other threads {off['other_threads']}; CPU idle {doc['cpu_idle_ns'] / 1e6:.1f} ms "
          f"(share {doc['cpu_share']}), samples {doc['samples']}")
    assert doc["source"] == "kernels", doc["source"]
    assert 0.4 < doc["idle_fraction"] < 0.6, doc["idle_fraction"]
    # The charged time is the time the loader was blocked, within 15 %.
    assert abs(off["idle_ns"] - blocked) <= 0.15 * blocked, (off, blocked)
    assert off["idle_ns"] <= off["blocked_ns"] and off["wall_ns"] <= doc["idle_ns"], off
    assert 0.85 < off["share"] <= 1.0, off
    # Only launching threads are charged. The pool workers parked on a
    # timer beside them, blocked through busy and idle time alike, are
    # counted apart: charged, they would make the share about 4.
    assert off["threads"] == "launching" and off["tids_total"] == 2, off
    assert pid in off["tids"], off
    loop_ns = (to - frm) * 1e9
    assert off["other_threads"]["blocks"] > 0, off
    assert off["other_threads"]["blocked_ns"] > 2 * loop_ns, (off, loop_ns)
    # The backward thread launches too, and waits through every gap for
    # the next step: the main thread's launch ends each gap, so only the
    # main thread is charged it. Charged, the backward thread's wait would
    # be half the graph.
    assert off["not_next_ns"] > 0.8 * blocked, (off, blocked)
    assert off["waiting_on_gpu_ns"] == 0, off
    # >= 90 % of the off-CPU idle graph is under load_batch_blocked, in
    # the JSON graph and in graph=offcpu's folded stacks alike.
    prof = off["profile"]
    assert prof["unit"] == "nanoseconds" and prof["total"] == off["idle_ns"], prof["total"]
    folded = _folded(_idle(client, pid, frm, to, format="folded", graph="offcpu").text)
    assert sum(folded.values()) == off["idle_ns"], (sum(folded.values()), off["idle_ns"])
    assert _share(folded, "load_batch_blocked") >= 0.9, folded
    names, nodes = prof["names"], prof["nodes"]
    under = sum(v for n, v, d in zip(nodes["n"], nodes["v"], nodes["d"])
                if names[n] == "load_batch_blocked")
    assert under >= 0.9 * prof["total"], (under, prof["total"])
    # The CPU graph does not claim the blocked time: the loader was asleep.
    assert doc["cpu_idle_ns"] < 0.1 * blocked, doc["cpu_idle_ns"]
    assert doc["cpu_share"] < 0.1, doc["cpu_share"]
    cpu = _folded(_idle(client, pid, frm, to, format="folded").text)
    assert sum(cpu.values()) == doc["samples"]["idle"], cpu
    assert sum(cpu.values()) * doc["sample_period_ns"] < 0.1 * blocked, cpu
    assert _idle(client, pid, frm, to, format="folded", graph="cpu").text == \
        _idle(client, pid, frm, to, format="folded").text
    r = client.get("/api/v1/gpu/idle", {"pid": str(pid), "graph": "flame", **window(frm, to)})
    assert r.status == 400 and "graph" in r.json()["error"], r.describe()
