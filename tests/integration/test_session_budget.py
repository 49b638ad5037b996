"""The server's budget for agents' session dictionaries (issue 28).

A server forgets an agent's session when its session dictionaries are over
--max-session-memory (least recently used first), when the session was idle
for an hour, when it restarts, or when the agent says it started another
(ends_session). A batch that builds on a forgotten session is answered 409
with "session": "unknown", and the agent sends that same batch again in a
new session with every dictionary entry it uses: no batch is lost.

  test_forgotten_and_ended         hand-made batches: ends_session frees the
                                   agent's old session (not another node's);
                                   a tiny budget forgets each session after
                                   its batch; 409 says why; /metrics counts
                                   it all and the log says what to raise
  test_tiny_budget_loses_nothing   the real agent against a server whose
                                   budget holds no session, on a host with
                                   process churn: nearly every batch gets
                                   409 and goes again, and every sample the
                                   agent took is stored; none dropped,
                                   rejected or left undelivered
"""

import re
import shutil
import signal
import subprocess
import time

import pytest

from conftest import CRASH_RE, require
from serverlib import Client, free_port, pb_fixed64, register_plugin, window, wire_batch

START_S = 60
NODE = "sessions"
# Small enough that no session fits: each is forgotten right after its batch.
TINY_BUDGET = 1024
DRAIN_S = 10
STOP_SLACK_S = 10
SUMMARY_RE = (r"shipped (\d+) batches \((\d+) samples, [\d.]+ MiB\); dropped (\d+) samples; "
              r"(\d+) batches left undelivered")


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


def start_server(procs, flamewatch, data, port, extra=(), name="server"):
    p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data", data, *extra], name)
    if not p.wait_output(r"flamewatch: listening on http://", START_S):
        pytest.fail(f"server did not start within {START_S} s\n{p.describe()}", pytrace=False)
    hc = Client(port)
    try:
        hc.wait_healthy(proc=p)
    finally:
        hc.close()
    return p


def metrics(port, prefix):
    """/metrics as {name or name{labels}: value} for names starting with
    prefix; the text must pass `promtool check metrics`."""
    c = Client(port, timeout=10)
    try:
        resp = c.get("/metrics")
    finally:
        c.close()
    assert resp.status == 200, resp.describe()
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/install-deps.sh installs Debian's prometheus"
    res = subprocess.run([promtool, "check", "metrics"], input=resp.body, capture_output=True, timeout=60)
    assert res.returncode == 0, f"promtool: {res.stdout.decode()}{res.stderr.decode()}\n{resp.text}"
    out = {}
    for line in resp.text.splitlines():
        m = re.match(r"^(" + prefix + r"\w*(?:\{[^}]*\})?) (\S+)$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


def forgot(m, reason):
    return m.get(f'flamewatch_ingest_sessions_forgotten_total{{reason="{reason}"}}')


def post(c, body):
    return c.post("/api/v1/ingest", body, headers={"Content-Type": "application/x-protobuf"})


def check_no_crash(proc):
    m = CRASH_RE.search(proc.text())
    assert not m, f"{proc.name} output shows a crash ({m.group(0)})\n{proc.describe()}"


STRINGS = ["", "comm", "sessproc", "pid", "4242", "main", "leaf"]
FRAMES = [(0, 5, 0x1000), (0, 6, 0x2000)]
STACKS = [[0, 1]]
SERIES = [[1, 2, 3, 4]]


def first_batch(session, node, now, ends=0):
    """A session's first batch: its whole dictionary and two samples;
    ends: the session it replaces (Batch.ends_session)."""
    samples = [(now, 0, 0, 4242, 0), (now + 1000, 0, 0, 4242, 0)]
    return wire_batch(session, 1, node, STRINGS, FRAMES, STACKS, SERIES, samples) + pb_fixed64(80, ends)


def next_batch(session, node, now):
    """A later batch of the session: samples on the dictionary it sent."""
    return wire_batch(session, 2, node, [], [], [], [], [(now, 0, 0, 4242, 0)],
                      base=(len(STRINGS), 0, len(FRAMES), len(STACKS), len(SERIES)))


def test_forgotten_and_ended(flamewatch, procs, clients, tmp_path):
    now = time.time_ns()
    port = free_port()
    srv = start_server(procs, flamewatch, tmp_path / "data", port)
    c = clients(port)
    a, b, other = 0x5E55_0000_0000_00A1, 0x5E55_0000_0000_00B2, 0x5E55_0000_0000_00C3

    assert post(c, first_batch(a, "n1", now)).status == 200
    assert post(c, next_batch(a, "n1", now + 1)).status == 200
    m = metrics(port, "flamewatch_ingest_session")
    assert m["flamewatch_ingest_sessions"] == 1, m
    assert m["flamewatch_ingest_session_bytes"] > 0, m
    assert m["flamewatch_ingest_session_max_bytes"] >= 64 << 20, m

    # Session b replaces a (the agent's cap): a goes at once.
    assert post(c, first_batch(b, "n1", now + 2, ends=a)).status == 200
    m = metrics(port, "flamewatch_ingest_session")
    assert m["flamewatch_ingest_sessions"] == 1, m
    assert forgot(m, "ended") == 1 and forgot(m, "budget") == 0, m

    # a's agent, had it gone on with a, would be told plainly.
    r = post(c, next_batch(a, "n1", now + 3))
    assert r.status == 409, r.describe()
    assert r.json().get("session") == "unknown", r.describe()
    assert "session" in r.json().get("error", ""), r.describe()
    # Another node cannot end n1's session.
    assert post(c, first_batch(other, "n2", now + 4, ends=b)).status == 200
    assert post(c, next_batch(b, "n1", now + 5)).status == 200
    m = metrics(port, "flamewatch_ingest_session")
    assert m["flamewatch_ingest_sessions"] == 2, m
    assert forgot(m, "ended") == 1, m
    assert m["flamewatch_ingest_session_unknown_total"] == 1, m
    check_no_crash(srv)

    # A budget no session fits: each is forgotten right after its batch.
    port2 = free_port()
    srv2 = start_server(procs, flamewatch, tmp_path / "data2", port2,
                        ["--max-session-memory", str(TINY_BUDGET)], name="server-tiny")
    c2 = clients(port2)
    assert post(c2, first_batch(a, "n1", now)).status == 200
    r = post(c2, next_batch(a, "n1", now + 1))
    assert r.status == 409 and r.json().get("session") == "unknown", r.describe()
    # The agent's answer: the same samples again in a new session.
    assert post(c2, first_batch(b, "n1", now + 1, ends=a)).status == 200
    m = metrics(port2, "flamewatch_ingest_session")
    assert m["flamewatch_ingest_sessions"] == 0, m
    assert m["flamewatch_ingest_session_max_bytes"] == TINY_BUDGET, m
    assert forgot(m, "budget") == 2, m
    assert m["flamewatch_ingest_session_unknown_total"] == 1, m
    assert re.search(r"forgot 1 agent session to keep session dictionaries within "
                     r"--max-session-memory", srv2.text()), srv2.describe()
    r = c2.get_json("/api/v1/profile", {"format": "json", "query": '{node="n1"}',
                                        **window(now / 1e9 - 1, time.time() + 1)})
    assert r["total"] == 4, r
    check_no_crash(srv2)

    # Below 1 KiB, or not a number: refused at start.
    for bad in ("1000", "1k", "-5"):
        p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{free_port()}", "--data",
                         tmp_path / "data3", "--max-session-memory", bad], f"server-bad-{bad}")
        rc = p.wait(30)
        assert rc == 2, p.describe()
        assert "--max-session-memory" in p.text(), p.describe()


def agent_metrics(port):
    return {k: v for k, v in metrics(port, "flamewatch_agent_").items() if "{" not in k}


def test_tiny_budget_loses_nothing(flamewatch, workloads, procs, clients, tmp_path):
    """Before, a server over its budget forgot sessions and the agent
    resent; but nothing let a test set a budget, a 409 for a batch that
    built on nothing was reset and resent in a loop, and a server that
    forgot sessions said so nowhere. Here every batch after a session's
    first builds on a session the server has already forgotten."""
    port, mport = free_port(), free_port()
    srv = start_server(procs, flamewatch, tmp_path / "data", port,
                       ["--max-session-memory", str(TINY_BUDGET)])
    c = clients(port)
    t_start = time.time()
    agent = procs.start([flamewatch, "agent", "--server", f"http://127.0.0.1:{port}", "--node", NODE,
                         "--interval", "250ms", "-F", "99", "--no-cpu-strips",
                         # CPU samples only: the profile queried below is of
                         # them, and the agent's summary counts every sample.
                         "--no-off-cpu",
                         "--metrics-listen", f"127.0.0.1:{mport}"], "agent")
    if not agent.wait_output(r"sampling at \d+ Hz", START_S):
        pytest.fail(f"agent did not start sampling within {START_S} s\n{agent.describe()}", pytrace=False)
    # A CPU-bound process, and a new short-lived process every 20 ms: new
    # series and stacks in most batches.
    work = procs.start([workloads / "cpu_split", "20"], "cpu_split")
    churn = procs.start([workloads / "spawner", "50", "20"], "spawner")
    rc, _ = work.wait_cpu(90)
    assert rc == 0, work.describe()
    rc = churn.wait(60)
    assert rc == 0, churn.describe()
    time.sleep(2)
    during = agent_metrics(mport)
    rc, took = agent.stop(signal.SIGTERM, timeout=DRAIN_S + STOP_SLACK_S + 30)
    assert rc == 0, f"agent exit {rc} after {took:.1f} s\n{agent.describe()}"
    m = re.search(SUMMARY_RE, agent.text())
    assert m, f"the agent printed no summary\n{agent.describe()}"
    shipped, samples, dropped, left = (int(g) for g in m.groups())

    assert dropped == 0 and left == 0, f"dropped {dropped} samples, {left} batches left\n{agent.describe()}"
    assert shipped >= 40, f"only {shipped} batches in ~25 s of 250-ms batches\n{agent.describe()}"
    assert during.get("flamewatch_agent_batches_rejected_total") == 0, during
    assert during.get("flamewatch_agent_batches_dropped_total") == 0, during
    # Every batch but the first few of each session went twice.
    resets = during.get("flamewatch_agent_sessions_reset_total", 0)
    assert resets >= during.get("flamewatch_agent_batches_sent_total", 0) / 2 >= 10, during

    sm = metrics(port, "flamewatch_ingest_")
    assert sm["flamewatch_ingest_samples_total"] == samples, (sm, agent.describe())
    assert sm["flamewatch_ingest_batches_total"] == shipped, sm
    assert sm["flamewatch_ingest_session_unknown_total"] >= resets, sm
    assert forgot(sm, "budget") >= shipped, sm
    assert sm["flamewatch_ingest_sessions"] == 0, sm
    # What the agent says it delivered is what the store holds.
    r = c.get_json("/api/v1/profile", {"format": "json", "query": f'{{node="{NODE}"}}',
                                       **window(t_start - 60, time.time() + 60)})
    assert r["total"] == samples, r.get("total")
    require(r["total"] > 0, "the agent took no samples")
    assert "forgot" in srv.text(), srv.describe()
    check_no_crash(agent)
    check_no_crash(srv)
