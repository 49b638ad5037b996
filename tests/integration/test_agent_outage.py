"""The agent's outage buffer and its drain on SIGTERM (issue 27): the real
agent and a real server, stopped and started again on the same data
directory and port.

  test_outage_keeps_every_batch     an 18-s outage: its ~80 light batches
                                    fit an 8 MiB --buffer-mb many times
                                    over; none is dropped, and after the
                                    restart every second is there
  test_sigterm_delivers_backlog     the server comes back while the agent
                                    waits out a long backoff; a SIGTERM then
                                    delivers the whole backlog before exit
  test_sigterm_server_down          the server is still down at SIGTERM: the
                                    agent exits within its deadline and says
                                    what it could not deliver
  test_sigterm_refused_ends_early   a refused connection ends the drain long
                                    before a generous --drain-timeout
  test_sigterm_silent_server        a server that accepts and never answers:
                                    the agent exits at --drain-timeout
  test_endless_answer_bounded       a server that answers with endless
                                    headers or body cannot grow the agent

The agents sample at the default 19 Hz without CPU strips, so that batches
are small and alike on any host; the workload is cpu_split, queried by its
own pid (other tests may run one on this host at the same time).
"""

import re
import shutil
import signal
import socket
import subprocess
import threading
import time

import pytest

from conftest import CRASH_RE, require
from serverlib import Client, free_port, register_plugin, window

START_S = 60
NODE = "outage"
# What a stop may take besides the drain: the last flush and detaching the
# BPF programs (seconds on a busy host).
STOP_SLACK_S = 10
# The agent's default --drain-timeout.
DRAIN_S = 10
SUMMARY_RE = (r"shipped (\d+) batches \((\d+) samples, [\d.]+ MiB\); dropped (\d+) samples; "
              r"(\d+) batches left undelivered")
UNDELIVERED_RE = r"could not deliver (\d+) batches \((\d+) samples, (\d+) bytes\): (.*)"


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


def start_server(procs, flamewatch, data, port, name="server"):
    p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data", data], name)
    if not p.wait_output(r"flamewatch: listening on http://", START_S):
        pytest.fail(f"server did not start within {START_S} s\n{p.describe()}", pytrace=False)
    hc = Client(port)
    try:
        hc.wait_healthy(proc=p)
    finally:
        hc.close()
    return p


@pytest.fixture
def busy(procs, workloads):
    """A CPU-bound process for the test's length: on an idle host the agent
    takes no samples, so it would have no batch to keep or deliver."""
    return procs.start([workloads / "cpu_split", "120"], "cpu_split")


def start_agent(procs, flamewatch, port, interval, extra=()):
    p = procs.start([flamewatch, "agent", "--server", f"http://127.0.0.1:{port}", "--node", NODE,
                     "--interval", interval, "--no-cpu-strips", *extra], "agent")
    if not p.wait_output(r"sampling at \d+ Hz", START_S):
        pytest.fail(f"agent did not start sampling within {START_S} s\n{p.describe()}", pytrace=False)
    return p


def agent_metrics(port):
    """The agent's /metrics as {name: value} (names without labels), or {};
    the text must pass `promtool check metrics`."""
    r = Client(port, timeout=5)
    try:
        resp = r.get("/metrics")
    finally:
        r.close()
    if resp.status != 200:
        return {}
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/install-deps.sh installs Debian's prometheus"
    res = subprocess.run([promtool, "check", "metrics"], input=resp.body, capture_output=True, timeout=60)
    assert res.returncode == 0, f"promtool: {res.stdout.decode()}{res.stderr.decode()}\n{resp.text}"
    out = {}
    for line in resp.text.splitlines():
        m = re.match(r"^(flamewatch_agent_\w+) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def total(client, query, frm, to):
    r = client.get("/api/v1/profile", {"format": "json", "query": query, **window(frm, to)})
    if r.status != 200:
        pytest.fail(f"profile query failed:\n{r.describe()}", pytrace=False)
    return r.json()["total"]


def poll(fn, timeout, every=0.5):
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(every)


def our(pid):
    return f'{{node="{NODE}",comm="cpu_split",pid="{pid}"}}'


def check_no_gap(client, frm, to, step=2):
    """Every whole step-second bucket in [frm, to) has samples of the node.
    The workload keeps a CPU busy: when it gets little of it on a loaded
    host, whatever runs instead is sampled. (A single lost batch is found
    by the agent's own counters; this finds the seconds that never came.)"""
    query = f'{{node="{NODE}"}}'
    ser = client.get_json("/api/v1/series", {"query": query, "step": f"{step}s", **window(frm, to)})
    pts = ser["series"][0]["points"] if ser["series"] else []
    have = {round((t / 1e9 - frm) / step) for t, v in pts if v > 0}
    want = range(0, int((to - frm) / step))
    missing = [k for k in want if k not in have]
    assert not missing, (
        f"{len(missing)} of {len(want)} {step}-s buckets have no samples, {missing[0] * step} s "
        f"to {missing[-1] * step + step} s after {frm:.1f}: {pts}")


def server_ingested(port):
    """Samples the server took in since it started (its /metrics)."""
    c = Client(port)
    try:
        text = c.get_ok("/metrics").text
    finally:
        c.close()
    m = re.search(r"^flamewatch_ingest_samples_total (\d+)", text, re.M)
    assert m, text[:2000]
    return int(m.group(1))


def summary(agent):
    m = re.search(SUMMARY_RE, agent.text())
    assert m, f"the agent printed no summary\n{agent.describe()}"
    return [int(g) for g in m.groups()]


def check_no_crash(proc):
    m = CRASH_RE.search(proc.text())
    assert not m, f"{proc.name} output shows a crash ({m.group(0)})\n{proc.describe()}"


def test_outage_keeps_every_batch(flamewatch, workloads, procs, clients, tmp_path):
    """Each batch counted 0.2-0.5 MiB against --buffer-mb however little it
    held, so an 8 MiB buffer dropped all but the last 20-odd batches of an
    outage. Light 200-ms batches hold a few dozen KiB at most: the outage's
    ~80 take a fraction of the cap, and none may be dropped."""
    data, port, mport = tmp_path / "data", free_port(), free_port()
    srv = start_server(procs, flamewatch, data, port)
    c = clients(port)
    agent = start_agent(procs, flamewatch, port, "200ms",
                        ["--buffer-mb", "8", "--metrics-listen", f"127.0.0.1:{mport}"])
    work = procs.start([workloads / "cpu_split", "35"], "cpu_split")
    t_work = time.time()
    q = our(work.pid)
    require(poll(lambda: total(c, q, t_work - 1, time.time() + 1), 20),
            "no samples of the workload before the outage")

    rc, _ = srv.stop(signal.SIGTERM, timeout=30)
    assert rc == 0, srv.describe()
    # 18 s of 200-ms batches: up to 90 (fewer when the host is busy).
    time.sleep(18)
    during = agent_metrics(mport)
    srv2 = start_server(procs, flamewatch, data, port, name="server-2")
    t_up = time.time()
    rc, _ = work.wait_cpu(60)
    assert rc == 0, work.describe()
    t_end = time.time()
    # Oldest first: once a second after the restart is in, the backlog is.
    require(poll(lambda: total(c, q, t_up + 1, t_up + 2), 60),
            "the agent did not deliver after the server came back")
    time.sleep(3)

    check_no_gap(c, t_work, t_end)
    rc, _ = agent.stop(signal.SIGTERM, timeout=DRAIN_S + STOP_SLACK_S + 10)
    assert rc == 0, agent.describe()
    shipped, samples, dropped, left = summary(agent)
    assert dropped == 0 and left == 0, f"dropped {dropped} samples, {left} batches left\n{agent.describe()}"

    batches = during.get("flamewatch_agent_buffer_batches", 0)
    held = during.get("flamewatch_agent_buffer_bytes", 0)
    cap = during.get("flamewatch_agent_buffer_max_bytes", 0)
    assert batches >= 50, f"{batches} batches buffered during the outage: {during}"
    assert during.get("flamewatch_agent_batches_dropped_total") == 0, during
    # Far below the cap: the count is the batches' real size.
    assert 0 < held <= cap / 2, f"{batches} batches count {held} bytes against {cap}: {during}"
    check_no_crash(agent)
    check_no_crash(srv2)


def test_sigterm_delivers_backlog(flamewatch, workloads, procs, clients, tmp_path):
    """The server starts 20 s after the agent: the agent's retries have
    backed off to 16-20 s by then (1, 2, 4, 8, 16 s), so none comes before
    ~32 s. A SIGTERM right after the server is up used to wait 5 s on that
    timer and exit with all ~20 batches undelivered; now it sends them at
    once and every second of the workload reaches the server."""
    data, port = tmp_path / "data", free_port()
    agent = start_agent(procs, flamewatch, port, "1s")
    t_agent = time.monotonic()
    work = procs.start([workloads / "cpu_split", "60"], "cpu_split")
    t_work = time.time()
    time.sleep(max(0, 20 - (time.monotonic() - t_agent)))
    srv = start_server(procs, flamewatch, data, port)
    c = clients(port)
    assert agent.alive(), agent.describe()
    t_stop = time.time()
    rc, took = agent.stop(signal.SIGTERM, timeout=DRAIN_S + STOP_SLACK_S + 30)
    assert rc == 0, f"agent exit {rc} after {took:.1f} s\n{agent.describe()}"
    shipped, samples, dropped, left = summary(agent)
    assert left == 0 and dropped == 0, (
        f"{left} batches left undelivered, {dropped} samples dropped at SIGTERM\n{agent.describe()}")
    assert shipped >= 15, f"only {shipped} batches shipped for ~20 s of batches\n{agent.describe()}"
    assert not re.search(UNDELIVERED_RE, agent.text()), agent.describe()
    assert took <= DRAIN_S + STOP_SLACK_S, f"the stop took {took:.1f} s\n{agent.describe()}"
    # What the agent says it delivered, the server took in: all of it.
    assert server_ingested(port) == samples, agent.describe()
    check_no_gap(c, t_work, t_stop)
    check_no_crash(agent)


def test_sigterm_server_down(flamewatch, procs, busy, tmp_path):
    """The server is down at SIGTERM: the agent does not wait for it past
    its deadline, and says how many batches, samples and bytes it could not
    deliver."""
    port, mport = free_port(), free_port()
    agent = start_agent(procs, flamewatch, port, "1s", ["--metrics-listen", f"127.0.0.1:{mport}"])
    # At least three batches queued (a loaded host starts the agent slowly).
    deadline = time.monotonic() + 30
    before = {}
    while time.monotonic() < deadline:
        time.sleep(1)
        before = agent_metrics(mport)
        if before.get("flamewatch_agent_buffer_batches", 0) >= 3:
            break
    rc, took = agent.stop(signal.SIGTERM, timeout=DRAIN_S + STOP_SLACK_S + 30)
    assert rc == 0, f"agent exit {rc} after {took:.1f} s\n{agent.describe()}"
    assert took <= DRAIN_S + STOP_SLACK_S, f"the stop took {took:.1f} s\n{agent.describe()}"
    m = re.search(UNDELIVERED_RE, agent.text())
    assert m, f"the agent does not say what it could not deliver\n{agent.describe()}"
    batches, samples, nbytes = int(m.group(1)), int(m.group(2)), int(m.group(3))
    assert "cannot be reached" in m.group(4), m.group(0)
    shipped, _, dropped, left = summary(agent)
    assert shipped == 0 and dropped == 0 and left == batches, agent.describe()
    # What was queued at the last look, plus the batches flushed since.
    b0 = before.get("flamewatch_agent_buffer_batches", 0)
    s0 = before.get("flamewatch_agent_buffer_samples", 0)
    assert b0 >= 3 and b0 <= batches <= b0 + 3, f"{m.group(0)}; before the stop: {before}"
    assert s0 <= samples and nbytes >= before.get("flamewatch_agent_buffer_bytes", 0) > 0, (
        f"{m.group(0)}; before the stop: {before}")
    check_no_crash(agent)


def test_sigterm_refused_ends_early(flamewatch, procs, busy, tmp_path):
    """A refused connection ends the drain: a generous --drain-timeout is
    not spent waiting for a server that is not there."""
    port = free_port()
    agent = start_agent(procs, flamewatch, port, "1s", ["--drain-timeout", "120s"])
    time.sleep(3)
    rc, took = agent.stop(signal.SIGTERM, timeout=150)
    assert rc == 0, f"agent exit {rc} after {took:.1f} s\n{agent.describe()}"
    assert took <= STOP_SLACK_S + 5, f"the stop took {took:.1f} s of a 120 s deadline\n{agent.describe()}"
    m = re.search(UNDELIVERED_RE, agent.text())
    assert m and "cannot be reached" in m.group(4), agent.describe()
    check_no_crash(agent)


def test_sigterm_silent_server(flamewatch, procs, busy, tmp_path):
    """A server that takes the connection and never answers (hung, or a
    black hole in between): the drain ends at --drain-timeout, counted from
    the signal, and says so."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as ls:
        ls.bind(("127.0.0.1", 0))
        # Never accepted: the kernel completes the handshakes, nobody reads.
        ls.listen(16)
        port = ls.getsockname()[1]
        agent = start_agent(procs, flamewatch, port, "1s", ["--drain-timeout", "3s"])
        time.sleep(3)
        rc, took = agent.stop(signal.SIGTERM, timeout=60)
    assert rc == 0, f"agent exit {rc} after {took:.1f} s\n{agent.describe()}"
    assert 3 <= took <= 3 + STOP_SLACK_S, f"the stop took {took:.1f} s\n{agent.describe()}"
    m = re.search(UNDELIVERED_RE, agent.text())
    assert m and "drain-timeout" in m.group(4), agent.describe()
    assert int(m.group(1)) >= 3 and int(m.group(2)) > 0, m.group(0)
    check_no_crash(agent)


def _endless_server(ls, what, stop):
    """Answers every request with endless headers or an endless body (up to
    256 MiB a connection), one connection at a time."""
    chunk = (b"X-Junk: " + b"y" * 1000 + b"\r\n") * 64 if what == "headers" else b"x" * (1 << 16)
    ls.settimeout(0.2)
    while not stop.is_set():
        try:
            c, _ = ls.accept()
        except OSError:
            continue
        with c:
            try:
                c.settimeout(5)
                req = b""
                while b"\r\n\r\n" not in req:
                    got = c.recv(65536)
                    if not got:
                        break
                    req += got
                c.sendall(b"HTTP/1.1 200 OK\r\n" if what == "headers" else
                          b"HTTP/1.1 200 OK\r\nContent-Length: 4000000000\r\n\r\n")
                for _ in range((256 << 20) // len(chunk)):
                    if stop.is_set():
                        break
                    c.sendall(chunk)
            except OSError:
                pass


def _rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@pytest.mark.parametrize("what", ["body", "headers"])
def test_endless_answer_bounded(flamewatch, procs, busy, tmp_path, what):
    """evhttp kept a server's answer in memory however long it was: a broken
    or hostile server streaming an endless body took the agent past 400 MB
    in seconds. The answer is capped (64 KiB): the request fails like any
    other, the batches wait, and the agent's memory stays where it was."""
    stop = threading.Event()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as ls:
        ls.bind(("127.0.0.1", 0))
        ls.listen(4)
        port = ls.getsockname()[1]
        srv = threading.Thread(target=_endless_server, args=(ls, what, stop), daemon=True)
        srv.start()
        try:
            agent = start_agent(procs, flamewatch, port, "1s")
            peak, deadline = 0, time.monotonic() + 8
            while time.monotonic() < deadline and agent.alive():
                peak = max(peak, _rss_kib(agent.pid))
                time.sleep(0.05)
            assert agent.alive(), agent.describe()
            rc, _ = agent.stop(signal.SIGTERM, timeout=DRAIN_S + STOP_SLACK_S + 30)
        finally:
            stop.set()
            srv.join(10)
    assert rc == 0, agent.describe()
    assert peak < 64 << 10, f"the agent grew to {peak} KiB on an endless answer\n{agent.describe()}"
    assert re.search(r"cannot deliver to the server \((an answer over 64 KiB|an invalid or oversized "
                     r"answer)\)", agent.text()), agent.describe()
    m = re.search(UNDELIVERED_RE, agent.text())
    assert m and int(m.group(1)) > 0, agent.describe()
    check_no_crash(agent)
