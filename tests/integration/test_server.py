"""System tests for `flamewatch run`, `flamewatch server` and `flamewatch
agent`: the real binary, real BPF and the real SQLite store, driven over
HTTP as the UI and other tools drive them.

  TestRun                 `run` end to end: folded/json/pprof profiles, labels,
                          series, flame chart, /healthz, /metrics (promtool)
  test_server_agent_tokens  server + agents with the right and a wrong token
  test_restart_*, test_kill9_*  durability across SIGTERM and kill -9
  test_agent_buffers_*    the agent keeps batches while the server is down
  TestBadInput            malformed, oversized and hostile requests
  test_non_loopback_*     a non-loopback --listen needs a token or --insecure

Everything samples at 99 Hz and ships every second so that data lands
fast; the whole file takes under a minute on an idle 2-core machine.
Queries name the pid of the test's own cpu_split: other tests may run one
on the same host at the same time. Processes write their output
to files under the test's tmp directory; when a test fails, its report has
a "flamewatch diagnostics" section with the tail of each process's output
and the last HTTP exchanges.
"""

import gzip
import os
import re
import shutil
import signal
import subprocess
import threading
import time
import zlib
from types import SimpleNamespace

import pytest

from conftest import CRASH_RE, Pprof, Profile, go_binary, go_env, require
from serverlib import Client, Procs, diagnostics, free_port, port_open, register_plugin, window, wire_batch

HZ = 99
# cpu_split's 70/30 split as `run` samples it at 99 Hz (~600 samples): 12 runs
# here read 0.678-0.768 (sd ~2.8 %: the timer aliases with its 0.75-ms
# rounds on top of counting noise), and a clean-clone CI run read 0.630.
# A misnamed leaf moves it far more than this.
SPLIT_LO, SPLIT_HI = 0.61, 0.79
INTERVAL = "1s"
CPU_SPLIT = '{comm="cpu_split"}'
# Other people's tests may run cpu_split on this host at the same time:
# queries name the pid of ours too.


def our(pid, node=None):
    """A selector for the cpu_split process with this pid."""
    return "{" + (f'node="{node}",' if node else "") + f'comm="cpu_split",pid="{pid}"' + "}"

CHAIN_HOT = ["main", "run", "work_loop", "hot_70"]
# How long a flamewatch process gets to start (BPF load, unwind tables on a
# busy 2-core machine) and to print its banner.
START_S = 60


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


def start_server(procs, flamewatch, data, port=None, extra=(), name="server"):
    """Starts `flamewatch server` on 127.0.0.1 and waits for its banner and
    /healthz. Returns (Proc, port)."""
    port = port or free_port()
    p = procs.start(
        [flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data", data, *extra], name
    )
    m = p.wait_output(r"flamewatch: listening on http://(\S+):(\d+) \(data in ([^)]*)\)", START_S)
    if not m:
        pytest.fail(f"server did not print its banner within {START_S} s\n{p.describe()}", pytrace=False)
    assert m.group(2) == str(port), f"banner names port {m.group(2)}, expected {port}: {m.group(0)}"
    assert m.group(3) == str(data), f"banner names data {m.group(3)!r}, expected {data}: {m.group(0)}"
    hc = Client(port)
    try:
        hc.wait_healthy(proc=p)
    finally:
        hc.close()
    return p, port


def start_agent(procs, flamewatch, port, node, token=None, extra=(), name="agent"):
    argv = [flamewatch, "agent", "--server", f"http://127.0.0.1:{port}", "--node", node,
            "-F", HZ, "--interval", INTERVAL]
    if token is not None:
        argv += ["--token", token]
    p = procs.start(argv + list(extra), name)
    if not p.wait_output(r"sampling at \d+ Hz", START_S):
        pytest.fail(f"agent did not start sampling within {START_S} s\n{p.describe()}", pytrace=False)
    return p


def poll(fn, timeout, every=0.5):
    """Calls fn until it returns something truthy; returns that, or the
    last value after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(every)


def folded(client, query, frm, to, **kw):
    r = client.get("/api/v1/profile", {"format": "folded", "query": query, **window(frm, to)}, **kw)
    if r.status != 200:
        pytest.fail(f"profile query failed:\n{r.describe()}", pytrace=False)
    return Profile.parse(r.text, source=f"folded {query}")


def total(client, query, frm, to, **kw):
    r = client.get("/api/v1/profile", {"format": "json", "query": query, **window(frm, to)}, **kw)
    if r.status != 200:
        pytest.fail(f"profile query failed:\n{r.describe()}", pytrace=False)
    return r.json()["total"]


def wait_stable(client, query, frm, timeout=20, settle=2.5):
    """Waits until the total for query in [frm, now] stops growing for
    `settle` seconds (the last batches have landed). Returns the end of
    the window to use."""
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while time.monotonic() < deadline:
        now = time.time()
        t = total(client, query, frm, now + 1)
        if t != last:
            last, since = t, time.monotonic()
        elif time.monotonic() - since >= settle:
            return now + 1
        time.sleep(0.5)
    return time.time() + 1


def check_sample_count(prof, cpu_s, what="cpu_split"):
    """One sample per 1/HZ s of CPU time the workload used (other work on
    a shared 2-core machine takes its share, so wall time is no measure)."""
    expected = cpu_s * HZ
    require(
        0.75 * expected <= prof.total <= 1.25 * expected + 3,
        f"{prof.total} {what} samples, but it used {cpu_s:.2f} s of CPU: expected ~{expected:.0f} at {HZ} Hz",
        prof,
    )


def check_no_crash(proc):
    m = CRASH_RE.search(proc.text())
    assert not m, f"{proc.name} output shows a crash ({m.group(0)})\n{proc.describe()}"


def series_sums(client, query, frm, to, by, **kw):
    """{group: sum of all points} over [frm, to) with one bucket."""
    step = int(to - frm) + 2
    r = client.get("/api/v1/series", {"query": query, "by": by, "step": f"{step}s", **window(frm, to)}, **kw)
    if r.status != 200:
        pytest.fail(f"series query failed:\n{r.describe()}", pytrace=False)
    return {s["group"]: sum(v for _, v in s["points"]) for s in r.json()["series"]}


def post_folded(client, text, labels=None, node=None, **kw):
    params = {}
    if labels:
        params["labels"] = labels
    if node:
        params["node"] = node
    return client.post("/api/v1/ingest/folded", text.encode(), params=params,
                       headers={"Content-Type": "text/plain"}, **kw)


# ---------------------------------------------------------------------------
# 1-3: flamewatch run, end to end


@pytest.fixture(scope="class")
def run_host(request, flamewatch, workloads, tmp_path_factory):
    """`flamewatch run` profiling cpu_split 6; yields once cpu_split has
    ended and its last samples are stored."""
    register_plugin(request.config)
    tmp = tmp_path_factory.mktemp("run")
    ps = Procs(tmp / "logs")
    port = free_port()
    node = "fwtest-run"
    data = tmp / "data"
    client = Client(port)
    try:
        srv = ps.start(
            [flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", data, "-F", HZ,
             "--interval", INTERVAL, "--node", node],
            "run",
        )
        m = srv.wait_output(r"profiling this host at (\d+) Hz; open (http://\S+)/", START_S)
        if not m:
            pytest.fail(f"`flamewatch run` did not print its banner within {START_S} s\n{srv.describe()}",
                        pytrace=False)
        assert m.group(1) == str(HZ) and m.group(2) == f"http://127.0.0.1:{port}", m.group(0)
        client.wait_healthy(proc=srv)

        t_start = time.time()
        work = ps.start([workloads / "cpu_split", "6"], "cpu_split")
        q = our(work.pid)
        first = poll(
            lambda: folded(client, q, t_start - 1, time.time() + 1).total and time.time() - t_start,
            timeout=25,
        )
        rc, cpu_s = work.wait_cpu(30)
        assert rc == 0, f"cpu_split exited with {rc}\n{work.describe()}"
        t_end = wait_stable(client, q, t_start - 1)
    except (Exception, pytest.fail.Exception) as e:
        # Teardown below removes the processes from the diagnostics before
        # the report is made: put them in the message now.
        text = diagnostics()
        ps.close_all()
        client.close()
        pytest.fail(f"setting up `flamewatch run` failed: {e}\n\n{text}", pytrace=False)
    try:
        yield SimpleNamespace(
            proc=srv, client=client, port=port, node=node, data=data, tmp=tmp,
            frm=t_start - 1, to=t_end, first_data_s=first or None, work=work, cpu_s=cpu_s, q=q,
        )
    finally:
        ps.close_all()
        client.close()


def _check_tree(fg):
    """Structure of the flame graph JSON; returns [(name, depth, v, s)]."""
    nodes = fg["nodes"]
    keys = ("n", "b", "k", "v", "s", "d")
    lens = {k: len(nodes.get(k, [])) for k in keys}
    assert len(set(lens.values())) == 1, f"node arrays differ in length: {lens}"
    n = lens["n"]
    assert n >= 1, "no nodes"
    names, bins = fg["names"], fg["binaries"]
    assert all(0 <= i < len(names) for i in nodes["n"]), "a name index is out of range"
    assert all(0 <= i < len(bins) for i in nodes["b"]), "a binary index is out of range"
    d, v, s = nodes["d"], nodes["v"], nodes["s"]
    assert names[nodes["n"][0]] == "all" and d[0] == 0, f"root is {names[nodes['n'][0]]!r} at depth {d[0]}"
    assert all(dd >= 1 for dd in d[1:]), "more than one root"
    assert all(d[i] <= d[i - 1] + 1 for i in range(1, n)), "depths are not a preorder"
    assert v[0] == fg["total"], f"root total {v[0]} != total {fg['total']}"
    assert nodes["k"][0] == -1, f"root kind {nodes['k'][0]}"
    assert all(nodes["k"][i] == -2 for i in range(n) if d[i] == 1), "process nodes must have kind -2"
    # Each node's total is its self plus its children's totals, plus what
    # trimming cut below it; summed over the tree that is trimmed.value.
    cut = 0
    for i in range(n):
        children = 0
        for j in range(i + 1, n):
            if d[j] <= d[i]:
                break
            if d[j] == d[i] + 1:
                children += v[j]
        diff = v[i] - s[i] - children
        assert diff >= 0, f"node {i} ({names[nodes['n'][i]]}): total {v[i]} < self {s[i]} + children {children}"
        cut += diff
    assert cut == fg["trimmed"]["value"], f"trimmed value {fg['trimmed']} but the tree is missing {cut}"
    if fg["trimmed"]["nodes"] == 0:
        assert cut == 0
    return [(names[nodes["n"][i]], d[i], v[i], s[i]) for i in range(n)]


class TestRun:
    """Tests 1-3 share one `flamewatch run` that profiled cpu_split."""

    def test_run_end_to_end(self, run_host):
        c, h = run_host.client, run_host
        require(h.first_data_s is not None, "no cpu_split samples were queryable within 25 s of its start")
        assert h.first_data_s <= 15, f"first cpu_split samples took {h.first_data_s:.1f} s to become queryable"

        # folded: the 70/30 split and the exact chain
        prof = folded(c, h.q, h.frm, h.to)
        require(set(prof.comms()) == {"cpu_split"}, f"query {h.q} returned other processes", prof)
        check_sample_count(prof, h.cpu_s)
        hot, cold = prof.count_frame("hot_70"), prof.count_frame("cold_30")
        require(hot + cold >= 0.9 * prof.total, f"hot_70 {hot} + cold_30 {cold} < 90 % of {prof.total}", prof)
        share = hot / (hot + cold)
        require(SPLIT_LO <= share <= SPLIT_HI,
                f"hot_70 share {share:.1%} (hot {hot}, cold {cold}); expected {SPLIT_LO:.0%}-{SPLIT_HI:.0%}",
                prof)
        chained = prof.count_run(CHAIN_HOT)
        require(chained >= 0.9 * hot, f"only {chained} of {hot} hot_70 samples have main;run;work_loop;hot_70", prof)

        # json: the same samples as a tree
        fg = c.get_json("/api/v1/profile", {"format": "json", "query": h.q, **window(h.frm, h.to)})
        assert fg["version"] == 1 and fg["unit"] == "samples", {k: fg.get(k) for k in ("version", "unit")}
        tree = _check_tree(fg)
        procs = {name: v for name, d, v, _ in tree if d == 1}
        assert procs == {"cpu_split": prof.total}, f"process nodes {procs}, folded total {prof.total}"
        assert fg["total"] == prof.total

        # json of everything: cpu_split among the processes, root = their sum
        fg_all = c.get_json("/api/v1/profile", window(h.frm, h.to))
        tree_all = _check_tree(fg_all)
        procs_all = {name: v for name, d, v, _ in tree_all if d == 1}
        assert procs_all.get("cpu_split", 0) >= prof.total, f"cpu_split {procs_all.get('cpu_split')} in {procs_all}"
        if fg_all["trimmed"]["nodes"] == 0:
            assert sum(procs_all.values()) == fg_all["total"], f"root {fg_all['total']} != sum of {procs_all}"
        else:
            assert sum(procs_all.values()) <= fg_all["total"], f"root {fg_all['total']} < sum of {procs_all}"

        # max_nodes trims but keeps the total and the accounting
        fg_small = c.get_json("/api/v1/profile", {"format": "json", "max_nodes": "8", **window(h.frm, h.to)})
        assert len(fg_small["nodes"]["n"]) <= 8, f"{len(fg_small['nodes']['n'])} nodes with max_nodes=8"
        assert fg_small["total"] == fg_all["total"] and fg_small["trimmed"]["nodes"] > 0, fg_small["trimmed"]
        _check_tree(fg_small)

        # labels
        names = c.get_json("/api/v1/labels", window(h.frm, h.to))["names"]
        missing = {"node", "pid", "comm", "exe"} - set(names)
        assert not missing, f"label names {names} lack {sorted(missing)}"
        assert names == sorted(names), f"label names not sorted: {names}"

        def values(name):
            return c.get_json(f"/api/v1/labels/{name}/values", window(h.frm, h.to))["values"]

        assert "cpu_split" in values("comm"), values("comm")
        assert values("node") == [h.node], values("node")
        assert str(h.work.pid) in values("pid"), f"pid {h.work.pid} not in {values('pid')[:50]}"
        assert any(v.endswith("/cpu_split") for v in values("exe")), values("exe")
        assert c.get_json("/api/v1/labels/no_such_label/values")["values"] == []

        # series by comm: one group, 1 s buckets, sums equal the profile's total
        ser = c.get_json("/api/v1/series", {"query": h.q, "by": "comm", "step": "1s", **window(h.frm, h.to)})
        groups = {s["group"]: s["points"] for s in ser["series"]}
        assert list(groups) == ["cpu_split"], f"groups {list(groups)}"
        pts = groups["cpu_split"]
        from_ns, to_ns, step = ser["from"], ser["to"], ser["step"]
        assert step == 1_000_000_000, ser["step"]
        assert abs(from_ns - h.frm * 1e9) < 2e3 and abs(to_ns - h.to * 1e9) < 2e3, (from_ns, to_ns)
        starts = [p[0] for p in pts]
        assert starts == sorted(set(starts)), "bucket starts not strictly increasing"
        assert all(from_ns <= t < to_ns and (t - from_ns) % step == 0 for t in starts), starts
        assert all(p[1] > 0 for p in pts), pts
        assert len(pts) >= 4, f"cpu_split ran 6 s but has only {len(pts)} non-empty 1 s buckets: {pts}"
        assert sum(p[1] for p in pts) == prof.total, f"series sum {sum(p[1] for p in pts)} != profile total {prof.total}"
        ser_all = c.get_json("/api/v1/series", {"by": "comm", "step": "1s", **window(h.frm, h.to)})
        assert "cpu_split" in {s["group"] for s in ser_all["series"]}

        # flame chart: one lane per cpu_split thread, time-ordered events
        fc = c.get_json("/api/v1/flamechart", {"query": h.q, **window(h.frm, h.to)})
        frames, stacks, comms = fc["frames"], fc["stacks"], fc["comms"]
        assert fc["stride"] == 1 and fc["samples"] == prof.total, (fc["stride"], fc["samples"], prof.total)
        assert all(0 <= f < len(frames) for st in stacks for f in st), "a stack names a missing frame"
        lanes = fc["lanes"]
        assert lanes, "no lanes"
        hot_seen = False
        for lane in lanes:
            assert comms[lane["comm"]] == "cpu_split", f"lane comm {comms[lane['comm']]!r}"
            assert lane["pid"] == h.work.pid, f"lane pid {lane['pid']}, cpu_split was {h.work.pid}"
            prev_end = fc["from"]
            for ev in lane["events"]:
                start, end, k = ev
                assert start < end, f"event {ev} is empty"
                assert start >= prev_end, f"event {ev} starts before the previous one ended ({prev_end})"
                assert 0 <= k < len(stacks), f"event {ev} names stack {k} of {len(stacks)}"
                prev_end = end
                hot_seen |= any(frames[f][0] == "hot_70" for f in stacks[k])
            assert prev_end <= fc["to"] + 10**9, f"event ends at {prev_end}, after the window"
        assert hot_seen, "no flame chart event has hot_70 in its stack"

        r = c.get("/healthz", token=None)
        assert r.status == 200 and r.text.strip() == "ok", r.describe()
        assert h.proc.alive(), "flamewatch run exited"
        check_no_crash(h.proc)


    def test_metrics_promtool(self, run_host, tmp_path):
        c = run_host.client
        c.get_ok("/healthz")
        r = c.get_ok("/metrics")
        assert r.headers.get("Content-Type", "").startswith("text/plain"), r.headers
        promtool = shutil.which("promtool")
        if promtool:
            res = subprocess.run([promtool, "check", "metrics"], input=r.body, capture_output=True, timeout=60)
            out = (res.stdout + res.stderr).decode("utf-8", "replace")
            assert res.returncode == 0, f"promtool check metrics failed ({res.returncode}):\n{out}\n--- metrics ---\n{r.text[:4000]}"
        vals = {}
        for line in r.text.splitlines():
            if line and not line.startswith("#"):
                name, _, v = line.rpartition(" ")
                vals[name] = float(v)
        assert vals.get('flamewatch_http_requests_total{route="healthz",code="2xx"}', 0) >= 1, r.text[:3000]
        assert vals.get("flamewatch_store_samples_written_total", 0) > 0, r.text[:3000]
        if not promtool:
            pytest.skip("promtool is not installed (Debian package `prometheus`); only parsed the metrics")


    def test_pprof_export(self, run_host, tmp_path):
        c, h = run_host.client, run_host
        r = c.get_ok("/api/v1/profile", {"format": "pprof", "query": h.q, **window(h.frm, h.to)})
        data = r.body
        assert data[:2] == b"\x1f\x8b", f"pprof export is not gzipped: {data[:40]!r}"
        pp = Pprof(data)
        assert pp.sample_types and pp.sample_types[0] == ("samples", "count"), pp.sample_types
        w = pp.folded("cpu_split")
        want = total(c, h.q, h.frm, h.to)
        require(w.total == want, f"pprof has {w.total} cpu_split samples, the JSON profile {want}", w)
        hot, cold = w.count_frame("hot_70"), w.count_frame("cold_30")
        require(hot + cold > 0 and SPLIT_LO <= hot / (hot + cold) <= SPLIT_HI,
                f"hot_70 {hot}, cold_30 {cold} in pprof", w)
        require(w.count_run(CHAIN_HOT) > 0, "no main;run;work_loop;hot_70 in pprof", w)

        path = tmp_path / "export.pb.gz"
        path.write_bytes(data)
        go = go_binary()
        res = subprocess.run(
            [go, "tool", "pprof", "-symbolize=none", "-raw", str(path)],
            capture_output=True, text=True, env=go_env(tmp_path), timeout=180, cwd=tmp_path,
        )
        assert res.returncode == 0, f"go tool pprof -raw failed ({res.returncode}):\n{res.stderr[-3000:]}"
        assert "hot_70" in res.stdout, f"go tool pprof -raw does not show hot_70:\n{res.stdout[:3000]}"

    def test_pprof_cpu_time_matches_sampling_rate(self, run_host):
        """Each sample of a 99 Hz recording stands for 1/99 s of CPU: the
        export must say so without the client knowing the agent's rate."""
        c, h = run_host.client, run_host
        r = c.get_ok("/api/v1/profile", {"format": "pprof", "query": h.q, **window(h.frm, h.to)})
        pp = Pprof(r.body)
        assert ("cpu", "nanoseconds") in pp.sample_types, pp.sample_types
        i = pp.sample_types.index(("cpu", "nanoseconds"))
        count = sum(v[0] for v, _, _ in pp.samples)
        nanos = sum(v[i] for v, _, _ in pp.samples)
        per = nanos / count if count else 0
        want = 1e9 / HZ
        assert abs(per - want) <= 0.02 * want, (
            f"cpu/nanoseconds per sample is {per:.0f} (period {pp.period}), but the data was sampled at "
            f"{HZ} Hz: expected {want:.0f}; {count} samples claim {nanos / 1e9:.2f} s of CPU, "
            f"cpu_split used {h.cpu_s:.2f} s")


def start_run(procs, flamewatch, clients, data, node, interval=INTERVAL):
    """Starts `flamewatch run` on 127.0.0.1 and waits until it samples and
    serves. Returns (Proc, Client)."""
    port = free_port()
    srv = procs.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", data,
                       "-F", HZ, "--interval", interval, "--node", node], "run")
    if not srv.wait_output(r"profiling this host", START_S):
        pytest.fail(f"`flamewatch run` did not start\n{srv.describe()}", pytrace=False)
    c = clients(port)
    c.wait_healthy(proc=srv)
    return srv, c


def run_vdso_loop(procs, workloads, seconds):
    """Runs vdso_loop to its end; returns (Proc, CPU seconds it used)."""
    work = procs.start([workloads / "vdso_loop", str(seconds)], "vdso_loop")
    rc, cpu_s = work.wait_cpu(30)
    assert rc == 0, work.describe()
    return work, cpu_s


def check_stored(procs, flamewatch, clients, data, node, work, cpu_s, t0, t1):
    """A `flamewatch server` on data (run has stopped) holds all of work's
    samples."""
    srv, port = start_server(procs, flamewatch, data, name="server-after")
    prof = folded(clients(port), f'{{node="{node}",comm="vdso_loop",pid="{work.pid}"}}', t0 - 1, t1 + 1)
    check_sample_count(prof, cpu_s, "vdso_loop")
    check_no_crash(srv)


def test_run_describes_late_libraries_at_once(flamewatch, workloads, procs, clients, tmp_path):
    """The agent's loop (here `flamewatch run`) answers BPF's wakeup for a
    process to describe at once, as `record` does: ten children in turn
    dlopen() a library never seen before and spin 150 ms in it, and the
    stacks of late_inner reach main from within milliseconds of the
    dlopen(): 94-95 % of them here. Described at the next tick instead,
    53-64 % did."""
    port = free_port()
    srv = procs.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", tmp_path / "data",
                       "-F", 499, "--interval", INTERVAL, "--node", "late-n"], "run")
    if not srv.wait_output(r"profiling this host", START_S):
        pytest.fail(f"`flamewatch run` did not start\n{srv.describe()}", pytrace=False)
    c = clients(port)
    c.wait_healthy(proc=srv)
    t0 = time.time()
    work = procs.start([workloads / "nofp" / "late_dlopen", workloads / "nofp" / "lib" / "late_lib.so",
                        "10", "150", str(tmp_path)], "late_dlopen")
    rc, _ = work.wait_cpu(60)
    assert rc == 0, work.describe()
    q = '{node="late-n",comm="late_dlopen"}'
    t1 = wait_stable(c, q, t0 - 1)
    prof = folded(c, q, t0 - 1, t1)
    chain = ["main", "run_child", "late_outer", "late_inner"]

    def user(frames):
        return [f for f in frames[1:] if not f.endswith("_[k]")]

    def count(pred):
        return sum(n for stack, n in prof.stacks.items() if pred(user(stack.split(";"))))

    inner = count(lambda u: u[-1:] == ["late_inner"])
    full = count(lambda u: any(u[i:i + 4] == chain for i in range(len(u) - 3)))
    print(f"\nrun, late dlopen: {full}/{inner} late_inner samples reach main")
    require(inner >= 0.5 * 10 * 0.15 * 499, f"only {inner} samples in late_inner", prof)
    require(full >= 0.85 * inner, f"{full} of {inner} late_inner samples reach main through "
            f"{';'.join(chain)}; expected >= 85 %", prof)
    check_no_crash(srv)


def test_run_unwind_tables_on_demand(flamewatch, workloads, procs, clients, tmp_path, monkeypatch):
    """With every file's rows built a chunk at a time on demand
    (FLAMEWATCH_UNWIND_ON_DEMAND_KB=1, where large files only are by
    default), the first samples in deep_chain (no frame pointers) ask for
    the chunks they land in, and once those are built its stacks reach
    main; the files of this host's processes that no sample ran in get no
    chunk at all."""
    monkeypatch.setenv("FLAMEWATCH_UNWIND_ON_DEMAND_KB", "1")
    srv, c = start_run(procs, flamewatch, clients, tmp_path / "data", "ondemand-n")
    t0 = time.time()
    work = procs.start([workloads / "nofp" / "deep_chain", "4"], "deep_chain")
    rc, _ = work.wait_cpu(60)
    assert rc == 0, work.describe()
    q = '{node="ondemand-n",comm="deep_chain"}'
    t1 = wait_stable(c, q, t0 - 1)
    prof = folded(c, q, t0 - 1, t1)
    chain = ["main"] + [f"f{i}" for i in range(1, 13)] + ["leaf"]
    leaf = sum(n for stack, n in prof.stacks.items() if stack.split(";")[-1] == "leaf")
    full = sum(n for stack, n in prof.stacks.items() if ";".join(chain) in stack)
    print(f"\nrun, tables on demand: {full}/{leaf} leaf samples reach main")
    require(leaf >= 0.5 * 4 * HZ, f"only {leaf} samples in leaf", prof)
    # The samples before the build (a tick, 0.1 s of 4 s) are walked by frame pointers.
    require(full >= 0.9 * leaf, f"{full} of {leaf} leaf samples reach main through "
            f"{';'.join(chain)}; expected >= 90 %", prof)
    srv.stop()
    m = re.search(r"unwind tables by chunk: (\d+) files, (\d+) of them needed by samples; "
                  r"(\d+) chunks loaded, (\d+) built", srv.text())
    assert m and int(m.group(2)) >= 1 and int(m.group(1)) > int(m.group(2)), srv.describe()
    check_no_crash(srv)


def test_run_vdso_across_batches(flamewatch, workloads, procs, clients, tmp_path):
    """The vDSO is a binary of its own (copied from the kernel's image),
    outside the table of files: its frames must name it in every batch, not
    only in the first, and sampling it must not crash anything."""
    srv, c = start_run(procs, flamewatch, clients, tmp_path / "data", "vdso-n")
    t0 = time.time()
    work, cpu_s = run_vdso_loop(procs, workloads, 5)
    time.sleep(2.5)
    assert srv.alive(), f"flamewatch run died while vdso_loop ran\n{srv.describe()}"
    q = f'{{comm="vdso_loop",pid="{work.pid}"}}'
    t1 = wait_stable(c, q, t0 - 1)
    assert srv.alive(), f"flamewatch run died\n{srv.describe()}"
    assert not re.search(r"cannot store|Invalid argument", srv.text()), f"batches were lost\n{srv.describe()}"
    prof = folded(c, q, t0 - 1, t1)
    check_sample_count(prof, cpu_s, "vdso_loop")
    fc = c.get_json("/api/v1/flamechart", {"query": q, **window(t0 - 1, t1)})
    vdso = {i for i, f in enumerate(fc["frames"]) if f[1] == "[vdso]"}
    starts = sorted(ev[0] for lane in fc["lanes"] for ev in lane["events"]
                    if vdso & set(fc["stacks"][ev[2]]))
    require(starts, f"no flame chart event has a [vdso] frame; frames: {fc['frames'][:40]}", prof)
    span = (starts[-1] - starts[0]) / 1e9
    require(span >= 3, f"[vdso] frames only in {span:.1f} s of a 5 s run (the first batch only?); "
                       f"binaries of the frames: {sorted({f[1] for f in fc['frames']})}", prof)
    check_no_crash(srv)


def test_run_second_signal_while_stopping(flamewatch, workloads, procs, clients, tmp_path):
    """`flamewatch run` saves its last samples as it stops. A second signal
    in that time (`timeout` sends one to the process and one to its group; a
    user presses Ctrl-C twice) once killed it half-way, losing them: libevent
    put SIGINT back to its default when the loop ended. Nothing is written
    before the stop here (--interval 60s), so every sample of the workload
    comes from the stop's own flush."""
    data = tmp_path / "data"
    srv, _ = start_run(procs, flamewatch, clients, data, "stop-n", interval="60s")
    t0 = time.time()
    work, cpu_s = run_vdso_loop(procs, workloads, 2)
    t1 = time.time()
    time.sleep(0.5)
    srv.send(signal.SIGINT)
    time.sleep(0.1)
    srv.send(signal.SIGINT)
    srv.send(signal.SIGTERM)
    rc = srv.wait(60)
    assert rc == 0, f"flamewatch run exited with {rc} on a second signal while stopping\n{srv.describe()}"
    assert "unwind tables:" in srv.text(), f"the stop's report is missing\n{srv.describe()}"
    check_stored(procs, flamewatch, clients, data, "stop-n", work, cpu_s, t0, t1)


def test_run_delivers_before_detaching(flamewatch, workloads, procs, clients, tmp_path):
    """`flamewatch run` stores its last samples before it detaches its BPF
    programs, the slow part of its stop (each uprobe detach waits for RCU:
    0.1 s on an idle host, seconds on a loaded one). A SIGKILL from an
    impatient supervisor in that time must not take them along. The GPU-time
    report comes after the first flush and before the uprobes go: the kill
    is sent as soon as it is printed."""
    data = tmp_path / "data"
    srv, _ = start_run(procs, flamewatch, clients, data, "kill-n", interval="60s")
    if "GPU time profiling: attached" not in srv.text():
        pytest.skip("no libflamewatch-cuda.so to attach to: no uprobes to detach")
    t0 = time.time()
    work, cpu_s = run_vdso_loop(procs, workloads, 2)
    t1 = time.time()
    srv.send(signal.SIGINT)
    deadline = time.monotonic() + 60
    while "GPU time:" not in srv.text() and srv.alive() and time.monotonic() < deadline:
        time.sleep(0.005)
    srv.send(signal.SIGKILL)
    srv.wait(30)
    check_stored(procs, flamewatch, clients, data, "kill-n", work, cpu_s, t0, t1)


# ---------------------------------------------------------------------------
# 4: server + agents with tokens


def test_server_agent_tokens(flamewatch, workloads, procs, clients, tmp_path):
    srv, port = start_server(procs, flamewatch, tmp_path / "data", extra=["--token", "secret"])
    c = clients(port, token="secret")
    anon = clients(port, token=None)
    wrong = clients(port, token="Secret")

    good = start_agent(procs, flamewatch, port, "agent-good", token="secret", name="agent-good")
    bad = start_agent(procs, flamewatch, port, "agent-bad", token="wrong", name="agent-bad")
    t0 = time.time()
    work = procs.start([workloads / "cpu_split", "5"], "cpu_split")
    q_good = our(work.pid, "agent-good")
    first = poll(lambda: total(c, q_good, t0 - 1, time.time() + 1), timeout=25)
    require(first, "no cpu_split samples from agent-good within 25 s of the workload's start")
    rc, cpu_s = work.wait_cpu(30)
    assert rc == 0, work.describe()
    t1 = wait_stable(c, q_good, t0 - 1)

    prof = folded(c, q_good, t0 - 1, t1)
    hot, cold = prof.count_frame("hot_70"), prof.count_frame("cold_30")
    check_sample_count(prof, cpu_s)
    require(hot + cold > 0 and SPLIT_LO <= hot / (hot + cold) <= SPLIT_HI,
            f"hot_70 {hot} / cold_30 {cold}", prof)
    require(prof.count_run(CHAIN_HOT) > 0, "no main;run;work_loop;hot_70 stack from the agent", prof)

    assert good.alive(), f"agent-good died while shipping\n{good.describe()}"

    # The wrong token stored nothing, and that agent keeps trying.
    nodes = c.get_json("/api/v1/labels/node/values", window(t0 - 60, time.time() + 1))["values"]
    assert "agent-good" in nodes and "agent-bad" not in nodes, f"node values {nodes}"
    assert total(c, '{node="agent-bad"}', t0 - 60, time.time() + 1) == 0
    assert bad.alive(), f"the agent with the wrong token exited\n{bad.describe()}"
    assert re.search(r"401", bad.text()), f"agent-bad does not report the 401\n{bad.describe()}"

    # Reading needs the token; /healthz does not.
    params = {"query": CPU_SPLIT, **window(t0 - 1, t1)}
    for who in (anon, wrong):
        for path in ("/api/v1/profile", "/api/v1/flamechart", "/api/v1/series", "/api/v1/labels",
                     "/api/v1/labels/comm/values", "/metrics"):
            r = who.get(path, params)
            assert r.status == 401, f"token {who.token!r}: expected 401\n{r.describe()}"
            assert b"hot_70" not in r.body and b"cpu_split" not in r.body, r.describe()
        r = who.get("/healthz")
        assert r.status == 200, r.describe()
        r = post_folded(who, "intruder;a;b 5\n", node="intruder")
        assert r.status == 401, f"folded ingest with token {who.token!r}: expected 401\n{r.describe()}"
    assert total(c, '{node="intruder"}', t0 - 60, time.time() + 1) == 0, "an unauthenticated ingest was stored"

    m = c.get_ok("/metrics").text
    rej = re.search(r"^flamewatch_ingest_rejected_auth_total (\d+)", m, re.M)
    assert rej and int(rej.group(1)) >= 3, f"rejected_auth counter: {rej and rej.group(0)}"

    # SIGTERM: both agents stop within the drain limit and print a summary.
    for a, want_undelivered in ((good, False), (bad, True)):
        rc, took = a.stop(signal.SIGTERM, timeout=15)
        assert rc == 0 and took <= 8, f"{a.name}: exit {rc} after {took:.1f} s\n{a.describe()}"
        m = re.search(r"shipped (\d+) batches \((\d+) samples.*dropped (\d+) samples; (\d+) batches left undelivered",
                      a.text())
        assert m, f"{a.name} printed no summary\n{a.describe()}"
        shipped, undelivered = int(m.group(1)), int(m.group(4))
        if want_undelivered:
            assert shipped == 0 and undelivered > 0, m.group(0)
        else:
            assert shipped > 0 and undelivered == 0 and int(m.group(3)) == 0, m.group(0)
        check_no_crash(a)
    assert srv.alive()
    check_no_crash(srv)


# ---------------------------------------------------------------------------
# 5-6: durability


def _sorted_lines(text):
    return sorted(line for line in text.splitlines() if line.strip())


def _tree_paths(fg):
    """{(name, ...root to node): (total, self)} of a flame graph JSON."""
    nodes, names = fg["nodes"], fg["names"]
    out, path = {}, []
    for i in range(len(nodes["n"])):
        del path[nodes["d"][i]:]
        path.append(names[nodes["n"][i]])
        out[tuple(path)] = (nodes["v"][i], nodes["s"][i])
    return out


def test_restart_keeps_data(flamewatch, procs, clients, tmp_path):
    data = tmp_path / "data"
    srv, port = start_server(procs, flamewatch, data, name="server-1")
    c = clients(port)
    t0 = time.time()
    batches = [
        "restartproc;main;alpha;leaf_a 10\nrestartproc;main;alpha;leaf_b 20\n",
        "restartproc;main;beta 7\nother_proc;start;spin 3\n",
        "restartproc;main;alpha;leaf_a 5\n",
    ]
    for i, b in enumerate(batches):
        r = post_folded(c, b, labels=f'{{test="restart",batch="{i}"}}', node="restart-n")
        assert r.status == 200, r.describe()
        assert r.json() == {"samples": b.count("\n")}, r.describe()
    t1 = time.time() + 0.001
    time.sleep(0.05)
    q = '{node="restart-n"}'
    before = c.get_ok("/api/v1/profile", {"format": "folded", "query": q, **window(t0, t1)}).text
    assert _sorted_lines(before) == [
        "other_proc;start;spin 3",
        "restartproc;main;alpha;leaf_a 15",
        "restartproc;main;alpha;leaf_b 20",
        "restartproc;main;beta 7",
    ], before
    json_before = c.get_json("/api/v1/profile", {"query": q, **window(t0, t1)})
    by_batch_before = series_sums(c, q, t0, t1, "batch")
    assert by_batch_before == {"0": 30, "1": 10, "2": 5}, by_batch_before

    rc, took = srv.stop(signal.SIGTERM, timeout=15)
    assert rc == 0, f"server exited with {rc} after SIGTERM ({took:.1f} s)\n{srv.describe()}"
    assert took < 5, f"server took {took:.1f} s to stop"
    assert not port_open(port), "port still open after the server exited"

    srv2, _ = start_server(procs, flamewatch, data, port=port, name="server-2")
    after = c.get_ok("/api/v1/profile", {"format": "folded", "query": q, **window(t0, t1)}).text
    assert _sorted_lines(after) == _sorted_lines(before), f"before restart:\n{before}\nafter:\n{after}"
    json_after = c.get_json("/api/v1/profile", {"query": q, **window(t0, t1)})
    assert _tree_paths(json_after) == _tree_paths(json_before), "JSON profile changed across the restart"
    assert series_sums(c, q, t0, t1, "batch") == by_batch_before
    assert "restart" in c.get_json("/api/v1/labels/test/values")["values"]

    # New data after the restart (new and old frames mixed) reads back right,
    # and the old window is unchanged.
    t2 = time.time()
    r = post_folded(c, "restartproc;main;alpha;leaf_a 2\nrestartproc;main;gamma;after_restart 4\n",
                    labels='{test="restart",batch="3"}', node="restart-n")
    assert r.status == 200, r.describe()
    t3 = time.time() + 0.001
    time.sleep(0.05)
    new = c.get_ok("/api/v1/profile", {"format": "folded", "query": q, **window(t2, t3)}).text
    assert _sorted_lines(new) == ["restartproc;main;alpha;leaf_a 2", "restartproc;main;gamma;after_restart 4"], new
    again = c.get_ok("/api/v1/profile", {"format": "folded", "query": q, **window(t0, t1)}).text
    assert _sorted_lines(again) == _sorted_lines(before), again
    check_no_crash(srv2)


def test_kill9_during_ingest_keeps_acknowledged(flamewatch, procs, clients, tmp_path):
    data = tmp_path / "data"
    srv, port = start_server(procs, flamewatch, data, name="server-1")
    c = clients(port)
    t0 = time.time()
    acked = {}  # batch label -> sum of counts acknowledged
    errors = []
    stop = threading.Event()

    def body(i):
        return "".join(f"kill9proc;main;step{j};leaf{(i + j) % 5} {i + j + 1}\n" for j in range(3))

    def sum_counts(text):
        return sum(int(line.rsplit(" ", 1)[1]) for line in text.splitlines())

    def loop():
        lc = Client(port, timeout=5)
        try:
            i = 0
            while not stop.is_set():
                b = body(i)
                r = post_folded(lc, b, labels=f'{{batch="{i}"}}', node="kill9")
                if r.status == 200:
                    acked[str(i)] = sum_counts(b)
                elif r.status is None:
                    errors.append(r.describe())
                    return
                else:
                    errors.append(r.describe())
                    return
                i += 1
        finally:
            lc.close()

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    got = poll(lambda: len(acked) >= 40 or not th.is_alive(), timeout=30, every=0.05)
    assert got and th.is_alive(), f"ingest loop: {len(acked)} acknowledged; errors: {errors}"
    srv.p.kill()  # SIGKILL, mid-stream
    rc = srv.wait(10)
    assert rc == -signal.SIGKILL, f"server exit status {rc}"
    th.join(15)
    stop.set()
    assert not th.is_alive(), "ingest loop hung after the server was killed"
    n_acked, sum_acked = len(acked), sum(acked.values())
    assert n_acked >= 40

    srv2, _ = start_server(procs, flamewatch, data, port=port, name="server-2")
    t1 = time.time()
    q = '{node="kill9"}'
    got = series_sums(c, q, t0 - 1, t1 + 1, "batch")
    lost = {b: (n, got.get(b, 0)) for b, n in acked.items() if got.get(b, 0) != n}
    assert not lost, f"{len(lost)} of {n_acked} acknowledged batches lost or changed (batch: (sent, stored)): " + str(
        dict(list(lost.items())[:10]))
    extra = set(got) - set(acked)
    assert len(extra) <= 1, f"batches stored but never acknowledged: {sorted(extra)} (at most the one in flight)"
    tot = total(c, q, t0 - 1, t1 + 1)
    assert tot >= sum_acked, f"total {tot} < {sum_acked} acknowledged"

    # The store still takes writes after the crash.
    r = post_folded(c, "kill9proc;main;after 1\n", labels='{batch="after"}', node="kill9")
    assert r.status == 200, r.describe()
    assert total(c, q, t0 - 1, time.time() + 1) == tot + 1
    check_no_crash(srv2)


# ---------------------------------------------------------------------------
# 7: the agent buffers while the server is down


def test_agent_buffers_until_server_starts(flamewatch, workloads, procs, clients, tmp_path):
    port = free_port()
    agent = start_agent(procs, flamewatch, port, "agent-buffered")
    t_work = time.time()
    work = procs.start([workloads / "cpu_split", "10"], "cpu_split")
    time.sleep(4)
    assert agent.alive(), "the agent exited while the server was down"
    t_server = time.time()
    srv, _ = start_server(procs, flamewatch, tmp_path / "data", port=port)
    c = clients(port)
    q = our(work.pid, "agent-buffered")
    # Backoff is at most 8 s at this point (1, 2, 4, 8 s), so 15 s covers it.
    early = poll(lambda: total(c, q, t_work, t_server - 0.5), timeout=15)
    t_seen = time.time() - t_server
    require(early, f"no cpu_split samples from before the server started (window "
                   f"[{t_work:.1f}, {t_server - 0.5:.1f}]) within 15 s of its start")
    # The backlog arrives a batch at a time: wait until it is all in.
    last, since = early, time.monotonic()
    while time.monotonic() - since < 2.5 and time.time() - t_server < 20:
        time.sleep(0.5)
        now = total(c, q, t_work, t_server - 0.5)
        if now != last:
            last, since = now, time.monotonic()
    early = last
    # A good part of it: the workload ran all that time (it may get as
    # little as half a CPU on a busy machine).
    expect = (t_server - 0.5 - t_work) * HZ
    assert early >= 0.3 * expect, f"{early} samples from the buffered seconds, expected ~{expect:.0f} ({t_seen:.1f} s after start)"
    ser = c.get_json("/api/v1/series", {"query": q, "step": "1s", **window(t_work, t_server)})
    pts = ser["series"][0]["points"] if ser["series"] else []
    assert len(pts) >= 2, f"series over the buffered seconds has {len(pts)} points: {ser}"
    # cpu_split has one thread: more than HZ samples in a second means a
    # batch was stored twice.
    assert max(v for _, v in pts) <= 1.1 * HZ + 2, f"1 s buckets over {HZ}: {pts}"
    assert re.search(r"no connection|refused|retry|unreachable|cannot", agent.text(), re.I), (
        "the agent did not say that the server was unreachable\n" + agent.describe())

    rc, cpu_s = work.wait_cpu(30)
    assert rc == 0, work.describe()
    t_end = wait_stable(c, q, t_work - 1)
    # Nothing was lost while the server was down.
    check_sample_count(folded(c, q, t_work - 1, t_end), cpu_s)
    rc, took = agent.stop(signal.SIGTERM, timeout=15)
    assert rc == 0, f"agent exit {rc}\n{agent.describe()}"
    m = re.search(r"dropped (\d+) samples; (\d+) batches left undelivered", agent.text())
    assert m and m.group(1) == "0" and m.group(2) == "0", f"summary: {m and m.group(0)}\n{agent.describe()}"
    check_no_crash(agent)
    check_no_crash(srv)


# ---------------------------------------------------------------------------
# 8: bad input is refused and harms nothing

MAX_BODY = 1 << 20


@pytest.fixture(scope="class")
def bad_server(request, flamewatch, tmp_path_factory):
    """A server with --max-body 1 MiB holding a little known data."""
    register_plugin(request.config)
    tmp = tmp_path_factory.mktemp("bad")
    ps = Procs(tmp / "logs")
    c = None
    try:
        srv, port = start_server(ps, flamewatch, tmp / "data", extra=["--max-body", str(MAX_BODY)])
        c = Client(port)
        t0 = time.time()
        r = post_folded(c, "goodproc;main;fine 11\ngoodproc;main;also_fine 4\n", labels='{test="good"}', node="bad-n")
        assert r.status == 200, r.describe()
        t1 = time.time() + 0.001
        time.sleep(0.05)
        base = c.get_ok("/api/v1/profile", {"format": "folded", **window(t0, t1)}).text
        assert _sorted_lines(base) == ["goodproc;main;also_fine 4", "goodproc;main;fine 11"], base
    except (Exception, pytest.fail.Exception) as e:
        text = diagnostics()
        ps.close_all()
        if c:
            c.close()
        pytest.fail(f"setting up the server failed: {e}\n\n{text}", pytrace=False)
    try:
        yield SimpleNamespace(proc=srv, port=port, client=c, frm=t0, to=t1, baseline=base, tmp=tmp)
    finally:
        ps.close_all()
        if c:
            c.close()


def _check_error(r, status, *words):
    assert r.status == status, f"expected {status}\n{r.describe()}"
    body = r.json()
    assert isinstance(body, dict) and isinstance(body.get("error"), str) and body["error"], r.describe()
    for w in words:
        assert w.lower() in body["error"].lower(), f"error message does not mention {w!r}: {body['error']!r}"
    return body["error"]


def _gzip_bomb(size=200 << 20):
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    out = [z.compress(chunk) for _ in range(size >> 20)]
    out.append(z.flush())
    return b"".join(out)


class TestBadInput:
    """Test 8: one server takes all the bad input, in file order."""

    def test_bad_protobuf_400(self, bad_server):
        c = bad_server.client
        for body in (b"\xff\xff\xff\xff this is not a protobuf", b"\x0a\x05ab"):
            r = c.post("/api/v1/ingest", body, headers={"Content-Type": "application/x-protobuf"})
            _check_error(r, 400)
        # Valid gzip around garbage is still a 400.
        r = c.post("/api/v1/ingest", gzip.compress(b"\xff" * 100),
                   headers={"Content-Encoding": "gzip", "Content-Type": "application/x-protobuf"})
        _check_error(r, 400)
        # Truncated gzip.
        r = c.post("/api/v1/ingest", gzip.compress(os.urandom(20000))[:5000], headers={"Content-Encoding": "gzip"})
        _check_error(r, 400, "truncated")


    def test_wire_batch_ok_and_unknown_session_409(self, bad_server):
        c = bad_server.client
        now = time.time_ns()
        strings = ["", "comm", "wireproc", "pid", "4242", "main", "wire_leaf"]
        frames = [(0, 5, 0x1000), (0, 6, 0x2000)]
        stacks = [[0, 1]]
        series = [[1, 2, 3, 4]]
        samples = [(now + i * 10_000_000, 0, 0, 4242, 0) for i in range(5)]
        body = wire_batch(0x1234_5678_9ABC_DEF0, 1, "wire-n", strings, frames, stacks, series, samples)
        r = c.post("/api/v1/ingest", body, headers={"Content-Type": "application/x-protobuf"})
        assert r.status == 200, f"a hand-made version 1 batch was refused\n{r.describe()}"
        assert r.json().get("samples") == 5, r.describe()
        prof = folded(c, '{node="wire-n"}', now / 1e9 - 1, time.time() + 1)
        assert prof.stacks == {"wireproc;main;wire_leaf": 5}, prof.stacks

        # A batch building on dictionary entries of a session the server never saw.
        body = wire_batch(0x0BAD_5E55_10_0000, 7, "wire-n", [], [], [], [], [(now, 0, 0, 1, 0)],
                          base=(7, 0, 2, 1, 1))
        r = c.post("/api/v1/ingest", body)
        _check_error(r, 409, "session")
        # Version 2 is refused, not misread.
        body = wire_batch(0x42, 1, "wire-n", strings, frames, stacks, series, samples[:1], version=2)
        r = c.post("/api/v1/ingest", body)
        assert r.status == 400, r.describe()
        assert total(c, '{node="wire-n"}', now / 1e9 - 1, time.time() + 1) == 5


    def test_body_over_max_body_413(self, bad_server):
        c = bad_server.client
        big = b"x" * (MAX_BODY + 4096)
        for path in ("/api/v1/ingest", "/api/v1/ingest/folded"):
            t0 = time.monotonic()
            r = c.post(path, big, timeout=20)
            assert r.status == 413, f"{path}: expected 413 for {len(big)} bytes over --max-body {MAX_BODY}\n{r.describe()}"
            assert time.monotonic() - t0 < 10
        # Just under the limit is not refused for its size.
        lines = "sizeproc;main;f 1\n" * ((MAX_BODY - 1024) // len("sizeproc;main;f 1\n"))
        r = post_folded(c, lines, labels='{test="size"}', node="size-n", timeout=30)
        assert r.status == 200, r.describe()


    def test_gzip_bomb_413(self, bad_server):
        c = bad_server.client
        bomb = _gzip_bomb()
        assert len(bomb) < MAX_BODY, f"the bomb is {len(bomb)} bytes compressed"
        t0 = time.monotonic()
        r = c.post("/api/v1/ingest", bomb, headers={"Content-Encoding": "gzip"}, timeout=30)
        took = time.monotonic() - t0
        _check_error(r, 413)
        assert took < 3, f"the gzip bomb took {took:.1f} s to refuse"
        r = c.get("/healthz")
        assert r.status == 200, r.describe()


    def test_unknown_content_encoding_415(self, bad_server):
        c = bad_server.client
        r = c.post("/api/v1/ingest", b"\x08\x01", headers={"Content-Encoding": "br"})
        _check_error(r, 415, "br")


    def test_folded_unknown_content_encoding_415(self, bad_server):
        """The folded endpoint must not read a compressed body as text."""
        c = bad_server.client
        r = c.post("/api/v1/ingest/folded", b"encproc;main;f 1\n", params={"node": "enc-n"},
                   headers={"Content-Encoding": "br"})
        _check_error(r, 415, "br")
        assert total(c, '{node="enc-n"}', bad_server.frm, time.time() + 1) == 0


    def test_folded_garbage_400(self, bad_server):
        c = bad_server.client
        t0 = time.time()
        cases = [
            ("okproc;main;f 3\nthis line has no count\n", "line 2"),
            ("okproc;main;f 3\nokproc;main;g 4\nokproc;;h 5\n", "line 3"),
            ("okproc;main;f notanumber\n", "line 1"),
            ("okproc;main;f -3\n", "line 1"),
            ("okproc;main;f 0\n", "line 1"),
            ("noframes 3\n", "line 1"),
            ("okproc;main;f 3\x00\n", ""),
        ]
        for text, where in cases:
            r = post_folded(c, text, labels='{test="garbage"}', node="garbage-n")
            _check_error(r, 400, where)
        for labels in ('{test="x"', '{comm="x"}', '{test=~"x"}'):
            r = post_folded(c, "okproc;main;f 3\n", labels=labels, node="garbage-n")
            _check_error(r, 400, "labels")
        # All or nothing: no line of a refused body was stored.
        assert total(c, '{node="garbage-n"}', t0 - 1, time.time() + 1) == 0


    def test_bad_query_params_400(self, bad_server):
        c = bad_server.client
        w = window(bad_server.frm, bad_server.to)
        for q in ('{comm="cpu_split"', '{comm=cpu_split}', '{comm=~"("}', '{1comm="x"}', '{comm=~"(a+)+" , x=~"a**"}'):
            for path in ("/api/v1/profile", "/api/v1/series", "/api/v1/flamechart"):
                r = c.get(path, {"query": q, **w})
                _check_error(r, 400, "query")
        for params, word in (
            ({"from": "yesterday"}, "from"),
            ({"to": "soon"}, "to"),
            ({"from": "now", "to": "now-1h"}, "from"),
            ({"from": "2024-13-45T00:00:00Z"}, "from"),
            ({"format": "svg", **w}, "format"),
            ({"type": "memory", **w}, "type"),
            ({"max_nodes": "-1", **w}, "max_nodes"),
        ):
            for path in ("/api/v1/profile",) + (("/api/v1/series", "/api/v1/flamechart") if set(params) <= {"from", "to"} else ()):
                r = c.get(path, params)
                _check_error(r, 400, word)
        r = c.get("/api/v1/series", {"step": "often", **w})
        _check_error(r, 400, "step")
        r = c.get("/api/v1/labels", {"from": "garbage"})
        _check_error(r, 400, "from")
        r = c.get("/api/v1/nothing")
        assert r.status == 404, r.describe()
        r = c.request("DELETE", "/api/v1/profile")
        assert r.status in (405, 501), r.describe()


    def test_frames_with_same_address_keep_their_names(self, bad_server):
        """Agents send kernel frames as runtime addresses in the mapping
        "[kernel.kallsyms]" (no build id), and KASLR puts the kernel at a
        different address on every node and every boot: one address can be
        a different function on each node, and a profile merged over nodes
        must keep both names."""
        c = bad_server.client
        now = time.time_ns()
        addr = 0xFFFFFFFF81234560
        for sess, node, fn in ((0xA1, "addr-a", "kfunc_only_on_a"), (0xB2, "addr-b", "kfunc_only_on_b")):
            strings = ["", "comm", "addrproc", "main", fn, "[kernel.kallsyms]"]
            body = wire_batch(sess, 1, node, strings, [(0, 3, 0x1000), (1, 4, addr, 1)], [[0, 1]], [[1, 2]],
                              [(now + i * 1000, 0, 0, 7, 0) for i in range(3)], mappings=[(5, 0)])
            r = c.post("/api/v1/ingest", body)
            assert r.status == 200, r.describe()
        w = (now / 1e9 - 1, time.time() + 1)
        for node, fn in (("addr-a", "kfunc_only_on_a"), ("addr-b", "kfunc_only_on_b")):
            prof = folded(c, f'{{node="{node}"}}', *w)
            assert prof.stacks == {f"addrproc;main;{fn}_[k]": 3}, prof.stacks
        merged = folded(c, '{node=~"addr-.*"}', *w)
        assert merged.stacks == {"addrproc;main;kfunc_only_on_a_[k]": 3, "addrproc;main;kfunc_only_on_b_[k]": 3}, (
            f"merged profile of two nodes: {merged.stacks}")
        fc = c.get_json("/api/v1/flamechart", {"query": '{node=~"addr-.*"}', **window(*w)})
        names = {f[0] for f in fc["frames"]}
        assert {"kfunc_only_on_a", "kfunc_only_on_b"} <= names, f"flame chart frames {fc['frames']}"

    def test_after_bad_input_data_intact(self, bad_server):
        """Runs after the bad-input tests (file order)."""
        c, b = bad_server.client, bad_server
        r = c.get("/healthz")
        assert r.status == 200 and r.text.strip() == "ok", r.describe()
        now = c.get_ok("/api/v1/profile", {"format": "folded", **window(b.frm, b.to)}).text
        assert _sorted_lines(now) == _sorted_lines(b.baseline), f"baseline:\n{b.baseline}\nnow:\n{now}"
        assert b.proc.alive()
        check_no_crash(b.proc)
        m = c.get_ok("/metrics").text
        inv = re.search(r"^flamewatch_ingest_rejected_invalid_total (\d+)", m, re.M)
        lim = re.search(r"^flamewatch_ingest_rejected_limits_total (\d+)", m, re.M)
        assert inv and int(inv.group(1)) > 0, m[:3000]
        assert lim and int(lim.group(1)) > 0, m[:3000]


# ---------------------------------------------------------------------------
# 9: listening beyond loopback needs a token


def test_non_loopback_needs_token(flamewatch, fw, procs, clients, tmp_path):
    port = free_port()
    res = fw.run(["server", "--listen", f"0.0.0.0:{port}", "--data", tmp_path / "d1"], timeout=20)
    res.check_error("--token")
    assert not port_open(port), "the refused server left a listener behind"

    res = fw.run(["run", "--listen", f"0.0.0.0:{port}", "--data", tmp_path / "d2"], timeout=30)
    res.check_error("--token")

    p = procs.start([flamewatch, "server", "--listen", f"0.0.0.0:{port}", "--data", tmp_path / "d3", "--insecure"],
                    "server-insecure")
    assert p.wait_output(r"listening on http://0\.0\.0\.0:%d" % port, START_S), p.describe()
    c = clients(port)
    c.wait_healthy(proc=p)
    assert c.get("/api/v1/labels").status == 200
    rc, _ = p.stop(signal.SIGTERM)
    assert rc == 0, p.describe()

    p = procs.start([flamewatch, "server", "--listen", f"0.0.0.0:{port}", "--data", tmp_path / "d4",
                     "--token", "tok"], "server-token")
    assert p.wait_output(r"listening on http://0\.0\.0\.0:%d" % port, START_S), p.describe()
    c.wait_healthy(proc=p)
    assert c.get("/api/v1/labels").status == 401
    assert c.get("/api/v1/labels", token="tok").status == 200


def test_run_store_flag(flamewatch, fw, procs, clients, tmp_path):
    """`run --store` is the store `run` writes to (run's --no-cpu-strips
    once took --store's option letter and --store was silently ignored)."""
    res = fw.run(["run", "--listen", f"127.0.0.1:{free_port()}", "--store", "nosuch://x"], timeout=30)
    res.check_error("nosuch://x")

    port = free_port()
    d = tmp_path / "store-dir"
    p = procs.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--store", f"sqlite:{d}",
                     "--interval", "1s"], "run-store")
    assert p.wait_output(r"profiling this host at", START_S), p.describe()
    clients(port).wait_healthy(proc=p)
    assert d.is_dir() and any(d.iterdir()), f"nothing in {d}\n{p.describe()}"
    rc, _ = p.stop(signal.SIGTERM)
    assert rc == 0, p.describe()
