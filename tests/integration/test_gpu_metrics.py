"""GPU hardware metrics (NVML) end to end, on a machine without a GPU.

The agent loads the fake libnvidia-ml.so.1 built from tests/fakes/fake_nvml.c
(through LD_LIBRARY_PATH, as it would load the real one) with values this
test scripts in a file; every value is then checked at each hop:

  collector -> batch -> server (wire format, SQLite) -> /api/v1/gpu/metrics
            -> /metrics (server and agent, promtool) -> a real Prometheus
               scraping both, read back through its HTTP query API

The fake lacks nvmlDeviceGetMigMode and answers NOT_SUPPORTED for the
temperature thresholds: those metrics must be absent everywhere, never 0.
Per-process metrics name a `sleep` process this test starts, so the comm
label is known. `run` and a machine without the library are covered too.
"""

import json
import os
import re
import shutil
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import BUILD
from serverlib import Client, free_port, register_plugin

FAKE_DIR = BUILD / "fakes"
START_S = 60
GPU_INTERVAL = "200ms"

# Scripted values per GPU: the fake's keys, and the metric and unit we export.
RAW = {
    0: dict(util=61, mem_util=23, mem_used=5368709120, mem_total=150754820096, sm_clock=1755,
            mem_clock=2619, sm_clock_max=1980, mem_clock_max=2619, power_mw=312456,
            power_limit_mw=700000, temp=47, pcie_tx_kb=1500, pcie_rx_kb=2500, reasons=5,
            energy_mj=987654321),
    1: dict(util=3, mem_util=1, mem_used=1048576, mem_total=150754820096, sm_clock=345,
            mem_clock=2619, sm_clock_max=1980, mem_clock_max=2619, power_mw=90001,
            power_limit_mw=650000, temp=31, pcie_tx_kb=7, pcie_rx_kb=9, reasons=1,
            energy_mj=12345),
}
UUID = {0: "GPU-fa4e0000-0000-4000-8000-000000000000", 1: "GPU-fa4e0000-0000-4000-8000-000000000001"}


def expected_gpu(g):
    r = RAW[g]
    return {
        "flamewatch_gpu_utilization_percent": r["util"],
        "flamewatch_gpu_memory_utilization_percent": r["mem_util"],
        "flamewatch_gpu_memory_used_bytes": r["mem_used"],
        "flamewatch_gpu_memory_total_bytes": r["mem_total"],
        "flamewatch_gpu_sm_clock_hertz": r["sm_clock"] * 1e6,
        "flamewatch_gpu_memory_clock_hertz": r["mem_clock"] * 1e6,
        "flamewatch_gpu_sm_clock_max_hertz": r["sm_clock_max"] * 1e6,
        "flamewatch_gpu_memory_clock_max_hertz": r["mem_clock_max"] * 1e6,
        "flamewatch_gpu_power_watts": r["power_mw"] / 1000,
        "flamewatch_gpu_power_limit_watts": r["power_limit_mw"] / 1000,
        "flamewatch_gpu_temperature_celsius": r["temp"],
        "flamewatch_gpu_pcie_tx_bytes_per_second": r["pcie_tx_kb"] * 1024,
        "flamewatch_gpu_pcie_rx_bytes_per_second": r["pcie_rx_kb"] * 1024,
        "flamewatch_gpu_throttle_reasons": r["reasons"],
        "flamewatch_gpu_energy_joules_total": r["energy_mj"] / 1000,
    }


# (process, gpu, sm util, mem util, used bytes) as the driver gives them for
# the test's two sleep processes: "main" on both GPUs, "other" on GPU 0 only.
PROCS = [("main", 0, 55, 11, 1073741824), ("other", 0, 20, 3, 4096),
         ("main", 1, 7, 2, 268435456)]
ABSENT = ["flamewatch_gpu_mig_mode", "flamewatch_gpu_temperature_slowdown_celsius"]


def expected_proc(who, g):
    """What we export for process who on GPU g: on GPU 0, shared, the
    driver's per-process figures; on GPU 1, where main is alone, the GPU's
    own utilisation (the driver's costly per-process query is not made)."""
    _, _, sm, mem, used = next(p for p in PROCS if p[:2] == (who, g))
    if g == 1:
        sm, mem = RAW[1]["util"], RAW[1]["mem_util"]
    return {
        "flamewatch_gpu_process_utilization_percent": sm,
        "flamewatch_gpu_process_memory_utilization_percent": mem,
        "flamewatch_gpu_process_memory_used_bytes": used,
    }


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


@pytest.fixture(autouse=True)
def _close_clients(monkeypatch):
    """Clients are diagnostics sources until closed: close ours after each test
    so that other tests' failure reports do not show our HTTP exchanges."""
    made = []
    orig = Client.__init__

    def init(self, *a, **kw):
        orig(self, *a, **kw)
        made.append(self)

    monkeypatch.setattr(Client, "__init__", init)
    yield
    for c in made:
        c.close()


@pytest.fixture
def gpu_env(tmp_path):
    """Environment that makes flamewatch load the fake with our values; and
    {"main": pid, "other": pid} of the processes PROCS puts on the GPUs."""
    lib = FAKE_DIR / "libnvidia-ml.so.1"
    if not lib.exists():
        pytest.fail(f"{lib} is missing: run `make fakes`", pytrace=False)
    sleepers = {who: subprocess.Popen(["sleep", "300"]) for who in ("main", "other")}
    lines = [f"gpu{g}.{k} {v}" for g, kv in RAW.items() for k, v in kv.items()]
    lines += [f"proc {g} {sleepers[who].pid} {sm} {mem} {used}"
              for who, g, sm, mem, used in PROCS]
    values = tmp_path / "nvml-values"
    values.write_text("\n".join(lines) + "\n")
    env = dict(os.environ, LD_LIBRARY_PATH=str(FAKE_DIR), FAKE_NVML_VALUES=str(values))
    yield env, {who: p.pid for who, p in sleepers.items()}
    for p in sleepers.values():
        p.kill()
        p.wait()


def poll(fn, timeout, every=0.3):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(every)


def start_server(procs, flamewatch, tmp_path):
    port = free_port()
    p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data",
                     tmp_path / "data"], "server")
    if not p.wait_output(r"flamewatch: listening on", START_S):
        pytest.fail(f"server did not start\n{p.describe()}", pytrace=False)
    c = Client(port)
    c.wait_healthy(proc=p)
    return p, port, c


def api_latest(client, node):
    """{(metric, gpu, pid or None): (value, labels)} from the newest raw point of each series."""
    r = client.get("/api/v1/gpu/metrics", {"from": "now-5m", "to": "now+1m", "step": "0",
                                           "query": '{node="%s"}' % node})
    assert r.status == 200, r.describe()
    out = {}
    for s in r.json()["series"]:
        assert s["points"], s
        assert len(s["max"]) == len(s["points"])
        ls = s["labels"]
        out[(s["metric"], ls["gpu"], ls.get("pid"))] = (s["points"][-1][1], ls)
    return out


def check_all(got, node, pids, where):
    """got: {(metric, gpu, pid): (value, labels)}: every scripted value, labels,
    absences. pids: gpu_env's."""
    problems = []
    want_rows = [(name, g, None, v) for g in RAW for name, v in expected_gpu(g).items()]
    want_rows += [(name, g, pids[who], v) for who, g, *_ in PROCS
                  for name, v in expected_proc(who, g).items()]
    for name, g, pid, want in want_rows:
        key = (name, str(g), str(pid) if pid else None)
        if key not in got:
            problems.append(f"{where}: missing {key}")
            continue
        v, ls = got[key]
        if float(v) != float(want):
            problems.append(f"{where}: {key} = {v!r}, want {want!r}")
        if ls.get("node") != node or ls.get("uuid") != UUID[g]:
            problems.append(f"{where}: {key} labels {ls}")
        if "process" in name and ls.get("comm") != "sleep":
            problems.append(f"{where}: {key} comm {ls.get('comm')!r}, want 'sleep'")
    for (name, g, p) in got:
        if name in ABSENT:
            problems.append(f"{where}: {name} (gpu {g}) should be unavailable, not exported")
        if p is not None and p not in (str(pid) for pid in pids.values()):
            problems.append(f"{where}: unexpected process {p} for {name}")
    assert not problems, "\n".join(problems)


SAMPLE_RE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prom(text, node):
    """GPU samples of a text exposition for one node, as for check_all()."""
    out = {}
    for line in text.splitlines():
        if not line.startswith("flamewatch_gpu_"):
            continue
        m = SAMPLE_RE.match(line)
        assert m, f"unparsable line {line!r}"
        ls = dict(LABEL_RE.findall(m.group(3) or ""))
        if ls.get("node") != node:
            continue
        key = (m.group(1), ls.get("gpu"), ls.get("pid"))
        assert key not in out, f"series twice: {line}"
        out[key] = (float(m.group(4)), ls)
    return out


def promtool_ok(text):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/install-deps.sh installs Debian's prometheus"
    res = subprocess.run([promtool, "check", "metrics"], input=text.encode(), capture_output=True,
                         timeout=60)
    out = (res.stdout + res.stderr).decode(errors="replace")
    assert res.returncode == 0, f"promtool check metrics failed:\n{out}\n{text[:3000]}"


def start_prometheus(procs, tmp_path, targets):
    prom = shutil.which("prometheus")
    assert prom, "prometheus is missing: scripts/install-deps.sh installs Debian's prometheus"
    port = free_port()
    cfg = tmp_path / "prometheus.yml"
    jobs = "".join(
        f"  - job_name: {job}\n    static_configs:\n      - targets: ['127.0.0.1:{p}']\n"
        for job, p in targets.items())
    cfg.write_text("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + jobs)
    p = procs.start([prom, f"--config.file={cfg}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                     f"--web.listen-address=127.0.0.1:{port}"], "prometheus")
    return p, port


def prom_query(port, q):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": q})
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            body = json.load(r)
    except OSError:
        return None
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_gpu_metrics_end_to_end(flamewatch, procs, gpu_env, tmp_path):
    env, pids = gpu_env
    node = "gpu-node-e2e"
    server, port, client = start_server(procs, flamewatch, tmp_path)
    mport = free_port()
    agent = procs.start([flamewatch, "agent", "--server", f"http://127.0.0.1:{port}", "--node", node,
                         "-F", "19", "--interval", "1s", "--gpu-interval", GPU_INTERVAL,
                         "--metrics-listen", f"127.0.0.1:{mport}"], "agent", env=env)
    assert agent.wait_output(r"sampling at \d+ Hz", START_S), agent.describe()
    assert agent.wait_output(r"nvml: 2 GPUs, first: Fake H200 0", 5), agent.describe()
    assert "flamewatch_gpu_mig_mode unavailable" in agent.text()
    assert agent.wait_output(r"GPU 1: flamewatch_gpu_temperature_slowdown_celsius unavailable "
                             r"\(Not Supported\)", 10), agent.describe()
    # Logged once, not every round.
    time.sleep(1)
    assert agent.text().count("GPU 0: flamewatch_gpu_temperature_slowdown_celsius unavailable") == 1

    # API: every scripted value once the first batches have landed.
    want_keys = 2 * (len(expected_gpu(0)) + 3)
    got = poll(lambda: (lambda g: g if len(g) >= want_keys else None)(api_latest(client, node)), 30)
    assert got, f"API never showed all series: {api_latest(client, node)}"
    check_all(got, node, pids, "api")

    # Sub-second utilisation: the fake takes a sample every 100 ms, all of them kept.
    # The agent asks for them once a second (nvmlDeviceGetSamples returns every
    # sample since the last call), so the first batches may hold only one.
    def util_ts():
        r = client.get("/api/v1/gpu/metrics", {"from": "now-5m", "to": "now+1m", "step": "0",
                                               "query": 'flamewatch_gpu_utilization_percent{gpu="0",node="%s"}' % node})
        return [p[0] for p in r.json()["series"][0]["points"]]
    ts = poll(lambda: (lambda t: t if len(t) >= 5 else None)(util_ts()), 15) or util_ts()
    assert len(ts) >= 5 and ts == sorted(set(ts)), ts[:20]
    assert all(b - a == 100_000_000 for a, b in zip(ts, ts[1:])), "utilisation samples not every 100 ms"
    # Bucketed: a 1 s step averages ten samples of the constant value.
    r = client.get("/api/v1/gpu/metrics", {"from": "now-5m", "to": "now+1m", "step": "1s",
                                           "query": 'flamewatch_gpu_power_watts{node="%s"}' % node})
    body = r.json()
    assert body["aggregation"] == {"points": "avg", "max": "max"}
    for s in body["series"]:
        want = RAW[int(s["labels"]["gpu"])]["power_mw"] / 1000
        # The mean of n equal doubles may differ from them in the last bit; the max may not.
        assert all(p[1] == pytest.approx(want, rel=1e-12) for p in s["points"]), s
        assert all(m == want for m in s["max"]), s

    # /metrics on the server and on the agent: same values, promtool-clean.
    for where, c in (("server", client), ("agent", Client(mport))):
        r = c.get("/metrics")
        assert r.status == 200, r.describe()
        promtool_ok(r.text)
        check_all(parse_prom(r.text, node), node, pids, f"{where} /metrics")
    # The agent's own cost of collecting: rounds, NVML queries, CPU and wall time.
    def own_metrics():
        own = {}
        for line in Client(mport).get("/metrics").text.splitlines():
            m = SAMPLE_RE.match(line)
            if m and m.group(1).startswith("flamewatch_agent_gpu"):
                own[m.group(1)] = float(m.group(4))
        return own
    first = own_metrics()
    assert first.get("flamewatch_agent_gpus") == 2, first
    assert first["flamewatch_agent_gpu_rounds_total"] >= 5, first
    # Calls per round between two scrapes at least 20 rounds apart, so that the
    # first round's once-a-minute queries do not weigh on a handful of rounds.
    own = poll(lambda: (lambda o: o if o["flamewatch_agent_gpu_rounds_total"] >=
                        first["flamewatch_agent_gpu_rounds_total"] + 20 else None)(own_metrics()), 20)
    assert own, (first, own_metrics())
    rounds = own["flamewatch_agent_gpu_rounds_total"] - first["flamewatch_agent_gpu_rounds_total"]
    # At 200 ms, per GPU: memory, 2 clocks, power, temperature, clock
    # reasons (6); every fifth round the utilisation samples (2) and the
    # running-process lists (2); the PCIe and energy counters every 5 s (one
    # field-values call), per-process utilisation every 10 s; the values that
    # hardly change (5) once a minute. About 6.9 a round.
    calls = (own["flamewatch_agent_gpu_nvml_calls_total"] -
             first["flamewatch_agent_gpu_nvml_calls_total"]) / rounds
    assert 2 * 6 <= calls <= 2 * 7.5, (first, own)
    assert 0 < own["flamewatch_agent_gpu_round_max_cpu_seconds"] <= 1, own
    assert 0 < own["flamewatch_agent_gpu_round_cpu_seconds_total"] <= \
        own["flamewatch_agent_gpu_round_wall_seconds_total"] * 1.5 + 0.01, own
    assert 0 < own["flamewatch_agent_gpu_round_max_wall_seconds"] < 5, own
    # TYPE lines: the energy counter is a counter, the rest gauges.
    assert "# TYPE flamewatch_gpu_energy_joules_total counter" in client.get("/metrics").text

    # A real Prometheus scrapes both and answers the same values.
    prom, pport = start_prometheus(procs, tmp_path, {"server": port, "agent": mport})

    def scraped():
        res = prom_query(pport, '{__name__=~"flamewatch_gpu_.*",node="%s"}' % node)
        if not res:
            return None
        by_job = {}
        for r in res:
            ls = r["metric"]
            by_job.setdefault(ls["job"], {})[(ls["__name__"], ls.get("gpu"), ls.get("pid"))] = (
                float(r["value"][1]), ls)
        if len(by_job) == 2 and all(len(v) >= want_keys for v in by_job.values()):
            return by_job
        return None

    by_job = poll(scraped, 45, every=1)
    assert by_job, f"Prometheus did not scrape every series:\n{prom.describe()}"
    for job, got in by_job.items():
        check_all(got, node, pids, f"prometheus job={job}")
    agent.stop()
    assert re.search(r"nvml: \d+ rounds, \d+ points, [\d.]+ us CPU per round", agent.text())


def test_run_with_fake_gpus(flamewatch, procs, gpu_env, tmp_path):
    env, pids = gpu_env
    port = free_port()
    node = "gpu-node-run"
    p = procs.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", tmp_path / "d",
                     "--node", node, "--interval", "1s", "--gpu-interval", "500ms"], "run", env=env)
    assert p.wait_output(r"profiling this host", START_S), p.describe()
    c = Client(port)
    want_keys = 2 * (len(expected_gpu(0)) + 3)
    got = poll(lambda: (lambda g: g if len(g) >= want_keys else None)(
        parse_prom(c.get("/metrics").text, node)), 30)
    assert got, c.get("/metrics").text
    check_all(got, node, pids, "run /metrics")
    promtool_ok(c.get("/metrics").text)
    check_all(api_latest(c, node), node, pids, "run api")


def test_process_started_later(flamewatch, procs, tmp_path):
    """A GPU process that starts after the agent, with the driver's
    per-process samples every 500 ms at the driver's own time and
    NOT_FOUND between them (as the H200's did): its rows appear under its
    pid and comm, each utilisation sample once, and go when it leaves."""
    values = tmp_path / "nvml-values"
    values.write_text("gpu0.util 50\n")
    env = dict(os.environ, LD_LIBRARY_PATH=str(FAKE_DIR), FAKE_NVML_VALUES=str(values),
               FAKE_NVML_RELOAD="1", FAKE_NVML_PROC_PERIOD_MS="500")
    port = free_port()
    node = "gpu-node-later"
    p = procs.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", tmp_path / "d",
                     "--node", node, "--interval", "1s", "--gpu-interval", "1s",
                     # every second, not every 10 s, to see one sample after another
                     "--gpu-process-interval", "1s",
                     # the driver's own samples, though the process is alone on its GPU
                     "--gpu-process-query", "always"], "run", env=env)
    assert p.wait_output(r"profiling this host", START_S), p.describe()
    c = Client(port)
    assert poll(lambda: parse_prom(c.get("/metrics").text, node), 30), p.describe()
    time.sleep(1.5)
    assert not [k for k in parse_prom(c.get("/metrics").text, node) if k[2]]

    sleeper = subprocess.Popen(["sleep", "120"])
    try:
        t_start = time.time()
        values.write_text(f"gpu0.util 50\nproc 0 {sleeper.pid} 66 6 2097152\n")
        want = {"flamewatch_gpu_process_utilization_percent": 66,
                "flamewatch_gpu_process_memory_utilization_percent": 6,
                "flamewatch_gpu_process_memory_used_bytes": 2097152}

        def rows():
            got = {k[0]: v for k, v in parse_prom(c.get("/metrics").text, node).items()
                   if k[2] == str(sleeper.pid)}
            return got if len(got) == 3 else None
        got = poll(rows, 15)
        assert got, c.get("/metrics").text
        for name, (v, ls) in got.items():
            assert v == want[name] and ls["comm"] == "sleep" and ls["gpu"] == "0", (name, v, ls)
        time.sleep(3)
        r = c.get("/api/v1/gpu/metrics", {"from": "now-5m", "to": "now+1m", "step": "0",
                                          "query": 'flamewatch_gpu_process_utilization_percent'
                                                   '{pid="%d",node="%s"}' % (sleeper.pid, node)})
        pts = r.json()["series"][0]["points"]
        ts = [t for t, _ in pts]
        # The driver's sample times: on its 500 ms grid, none twice, none before the process.
        assert len(ts) >= 3 and ts == sorted(set(ts)), ts
        assert all(t % 500_000_000 == 0 and t >= (t_start - 1.5) * 1e9 for t in ts), ts
        assert all(v == 66 for _, v in pts), pts
    finally:
        sleeper.kill()
        sleeper.wait()
    values.write_text("gpu0.util 50\n")
    t_gone = time.time()

    def gpu_newest():
        r = c.get("/api/v1/gpu/metrics", {"from": "now-5m", "to": "now+1m", "step": "0",
                                          "query": 'flamewatch_gpu_power_watts{gpu="0",node="%s"}' % node})
        return r.json()["series"][0]["points"][-1][0]
    # Rows of the GPUs themselves keep coming...
    assert poll(lambda: gpu_newest() > (t_gone + 2.5) * 1e9, 20)
    # ...but none of the process after it left (one round may have been under way).
    r = c.get("/api/v1/gpu/metrics", {"from": "now-5m", "to": "now+1m", "step": "0",
                                      "query": '{pid="%d",node="%s"}' % (sleeper.pid, node)})
    newest = max(t for s in r.json()["series"] for t, _ in s["points"])
    assert newest < (t_gone + 1.5) * 1e9, (newest, t_gone)


def test_no_nvml_library(flamewatch, procs, tmp_path):
    """Without libnvidia-ml.so.1 the collector is off with one info line and
    the rest runs on."""
    port = free_port()
    empty = tmp_path / "nolib"
    empty.mkdir()
    env = dict(os.environ, LD_LIBRARY_PATH=str(empty))
    p = procs.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", tmp_path / "d",
                     "--node", "no-gpu", "--interval", "1s"], "run", env=env)
    assert p.wait_output(r"profiling this host", START_S), p.describe()
    if os.path.exists("/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"):
        pytest.skip("this machine has a real NVML")
    assert len(re.findall(r"nvml: no GPU metrics: cannot load libnvidia-ml\.so\.1", p.text())) == 1
    c = Client(port)
    assert poll(lambda: c.get("/api/v1/labels", {"from": "now-1m"}).status == 200, 10)
    time.sleep(1.5)
    assert p.alive()
    text = c.get("/metrics").text
    assert not re.search(r"^flamewatch_gpu_.*node=\"no-gpu\"", text, re.M)
    r = c.get("/api/v1/gpu/metrics", {"from": "now-5m", "query": '{node="no-gpu"}'})
    assert r.status == 200 and r.json()["series"] == []


CONTAINER = "ab" * 32
POD = "1b2c3d4e-0000-4000-8000-00000000abcd"


def test_process_container_and_pod_labels(flamewatch, tmp_path):
    """A GPU process in a Kubernetes-style cgroup gets container and pod
    labels (read through `flamewatch gpu`: the collector alone, no BPF)."""
    root = "/sys/fs/cgroup" if os.path.exists("/sys/fs/cgroup/cgroup.controllers") else "/sys/fs/cgroup/pids"
    top = f"{root}/fwtest-{os.getpid()}-kubepods"
    leaf = f"{top}/burstable/pod{POD}/{CONTAINER}"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        try:
            os.makedirs(leaf)
            with open(f"{leaf}/cgroup.procs", "w") as f:
                f.write(str(sleeper.pid))
        except OSError as e:
            pytest.skip(f"cannot make a cgroup under {root}: {e}")
        values = tmp_path / "values"
        values.write_text(f"proc 1 {sleeper.pid} 9 3 4096\n")
        env = dict(os.environ, LD_LIBRARY_PATH=str(FAKE_DIR), FAKE_NVML_VALUES=str(values))
        out = subprocess.run([flamewatch, "gpu"], env=env, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        lines = [l for l in out.stdout.splitlines() if f'pid="{sleeper.pid}"' in l]
        assert len(lines) == 3, out.stdout
        for l in lines:
            assert f'container="{CONTAINER}"' in l and f'pod="{POD}"' in l and 'comm="sleep"' in l, l
            assert 'gpu="1"' in l, l
    finally:
        sleeper.kill()
        sleeper.wait()
        for d in (leaf, f"{top}/burstable/pod{POD}", f"{top}/burstable", top):
            try:
                os.rmdir(d)
            except OSError:
                pass


@pytest.mark.parametrize("argv", [["gpu", "--process-query", "sometimes"],
                                  ["agent", "--gpu-process-query", "sometimes"],
                                  ["run", "--gpu-process-query", ""]])
def test_bad_process_query_is_refused(flamewatch, argv):
    """--gpu-process-query takes shared or always: anything else is a clear
    error before anything starts."""
    out = subprocess.run([flamewatch] + argv, capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "process-query" in out.stderr and "is not shared or always" in out.stderr, out.stderr
