"""System tests for what the store keeps per batch and how the series route
lays out its buckets, against a real `flamewatch server`:

  test_series_aligned_to_minutes  steps of a minute or more start on whole
                                  minutes (the rollups answer them) and still
                                  count nothing before `from`
  test_mixed_periods              agents with different -F on one server:
                                  JSON, speedscope and pprof in time units

Batches are made by hand (serverlib.wire_batch) so that timestamps and
periods are exact.
"""

import time

import pytest

from conftest import Pprof
from serverlib import Client, Procs, diagnostics, free_port, register_plugin, window, wire_batch

SEC = 1_000_000_000
MIN = 60 * SEC


@pytest.fixture(scope="module")
def server(request, flamewatch, tmp_path_factory):
    register_plugin(request.config)
    tmp = tmp_path_factory.mktemp("period")
    ps = Procs(tmp / "logs")
    port = free_port()
    c = None
    try:
        p = ps.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data", tmp / "data"],
                     "server")
        if not p.wait_output(r"flamewatch: listening on", 60):
            pytest.fail(f"server did not start\n{p.describe()}", pytrace=False)
        c = Client(port)
        c.wait_healthy(proc=p)
        yield c
    except (Exception, pytest.fail.Exception) as e:
        text = diagnostics()
        pytest.fail(f"server: {e}\n\n{text}", pytrace=False)
    finally:
        if c:
            c.close()
        ps.close_all()


def _post(c, session, node, period_ns, samples, comm="proc"):
    """One batch of a new session: one stack main;leaf, one series."""
    strings = ["", "comm", comm, "pid", "77", "main", "leaf"]
    frames = [(0, 5, 0x1000), (0, 6, 0x2000)]
    body = wire_batch(session, 1, node, strings, frames, [[0, 1]], [[1, 2, 3, 4]],
                      [(ts, 0, 0, 77, 0) for ts in samples], period_ns=period_ns)
    r = c.post("/api/v1/ingest", body, headers={"Content-Type": "application/x-protobuf"})
    assert r.status == 200, r.describe()


# A quarter-hour starting on a whole minute, 20 minutes ago.
T = (time.time_ns() - 20 * MIN) // MIN * MIN
TS_A = [T + i * 7 * SEC for i in range(120)]          # 14 minutes, every 7 s
TS_B = [T + 3 * SEC + i * 11 * SEC for i in range(50)]


@pytest.fixture(scope="module")
def data(server):
    _post(server, 0xA1, "pa", SEC // 19, TS_A)
    _post(server, 0xB2, "pb", SEC // 99, TS_B)
    return server


def _series(c, **params):
    r = c.get("/api/v1/series", params)
    assert r.status == 200, r.describe()
    return r.json()


def test_series_aligned_to_minutes(data):
    c = data
    frm = T / SEC + 30.5                  # off a minute
    to = T / SEC + 14 * 60 + 0.25
    js = _series(c, query='{node="pa"}', step="60s", **window(frm, to))
    assert js["step"] == MIN and js["from"] == T, js
    pts = js["series"][0]["points"]
    assert all(b % MIN == 0 for b, _ in pts), pts
    assert pts[0][0] == T
    # Nothing before from counts, and every sample after it does.
    want = sum(1 for ts in TS_A if frm * SEC <= ts < to * SEC)
    assert sum(v for _, v in pts) == want
    # The first bucket holds [from, T + 1 min) only; the others whole minutes.
    assert pts[0][1] == sum(1 for ts in TS_A if frm * SEC <= ts < T + MIN)
    assert pts[1] == [T + MIN, sum(1 for ts in TS_A if T + MIN <= ts < T + 2 * MIN)]

    # 90 s is not a whole number of minutes: rounded to one.
    js = _series(c, query='{node="pa"}', step="90s", **window(frm, to))
    assert js["step"] % MIN == 0 and js["from"] == T, js
    assert sum(v for s in js["series"] for _, v in s["points"]) == want
    # align=0 keeps the grid as asked.
    js = _series(c, query='{node="pa"}', step="90s", align="0", **window(frm, to))
    assert js["step"] == 90 * SEC and js["from"] == int(frm * SEC), js
    assert sum(v for s in js["series"] for _, v in s["points"]) == want
    # Under a minute nothing moves.
    js = _series(c, query='{node="pa"}', step="10s", **window(frm, to))
    assert js["step"] == 10 * SEC and js["from"] == int(frm * SEC), js

    # No step over a day: a whole number of minutes from a whole minute,
    # grouped by node, every sample counted.
    now = time.time()
    js = _series(c, by="node", **window(now - 86400 + 0.7, now + 1))
    assert js["step"] % MIN == 0 and js["from"] % MIN == 0, js
    assert (now + 1 - (now - 86400)) * SEC / js["step"] <= 301
    sums = {s["group"]: sum(v for _, v in s["points"]) for s in js["series"]}
    assert sums.get("pa") == len(TS_A) and sums.get("pb") == len(TS_B), sums


def test_mixed_periods(data):
    c = data
    w = window(T / SEC - 60, T / SEC + 20 * 60)
    ns_a, ns_b = len(TS_A) * (SEC // 19), len(TS_B) * (SEC // 99)

    # One agent: sample counts, and the store's period (not ?hz=) for time.
    js = c.get_json("/api/v1/profile", {"query": '{node="pa"}', "hz": "1000", **w})
    assert js["unit"] == "samples" and js["total"] == len(TS_A), {k: js[k] for k in ("unit", "total")}
    pp = Pprof(c.get_ok("/api/v1/profile", {"query": '{node="pa"}', "format": "pprof", **w}).body)
    assert pp.period == SEC // 19
    assert sum(v[1] for v, _, _ in pp.samples) == ns_a
    assert sum(v[0] for v, _, _ in pp.samples) == len(TS_A)

    # Both agents (19 and 99 Hz): nanoseconds of CPU, each at its own period.
    js = c.get_json("/api/v1/profile", w)
    assert js["unit"] == "nanoseconds" and js["total"] == ns_a + ns_b, {k: js[k] for k in ("unit", "total")}
    ss = c.get_json("/api/v1/profile", {"format": "speedscope", **w})
    prof = ss["profiles"][0]
    assert prof["unit"] == "nanoseconds" and sum(prof["weights"]) == ns_a + ns_b
    pp = Pprof(c.get_ok("/api/v1/profile", {"format": "pprof", **w}).body)
    assert sum(v[1] for v, _, _ in pp.samples) == ns_a + ns_b
    # Series count samples whatever their period.
    js = _series(c, by="node", step="60s", **w)
    sums = {s["group"]: sum(v for _, v in s["points"]) for s in js["series"]}
    assert sums == {"pa": len(TS_A), "pb": len(TS_B)}, sums


def test_deep_stacks_truncated_and_flagged(server):
    """Agent batches and folded text deeper than 1024 frames are kept, cut
    to their 1023 root-most frames and a "[truncated]" leaf."""
    c = server
    t0 = time.time()
    # Wire: one stack of 1500 frames, all distinct functions.
    n = 1500
    strings = ["", "comm", "deepproc", "pid", "88"] + [f"f{i}" for i in range(n)]
    frames = [(0, 5 + i, 0x1000 + 16 * i) for i in range(n)]
    now = time.time_ns()
    body = wire_batch(0xDEE9, 1, "deep-n", strings, frames, [list(range(n))], [[1, 2, 3, 4]],
                      [(now + i * SEC // 100, 0, 0, 88, 0) for i in range(3)], period_ns=SEC // 19)
    r = c.post("/api/v1/ingest", body, headers={"Content-Type": "application/x-protobuf"})
    assert r.status == 200, r.describe()
    # Folded: 1200 frames.
    line = "deepfold;" + ";".join(f"g{i}" for i in range(1200)) + " 5\n"
    r = c.post("/api/v1/ingest/folded", line.encode(), params={"node": "deep-f"},
               headers={"Content-Type": "text/plain"})
    assert r.status == 200, r.describe()
    w = window(t0 - 1, time.time() + 1)
    for node, comm, prefix, count in (("deep-n", "deepproc", "f", 3), ("deep-f", "deepfold", "g", 5)):
        text = c.get_ok("/api/v1/profile", {"format": "folded", "query": f'{{node="{node}"}}', **w}).text
        lines = text.strip().split("\n")
        assert len(lines) == 1, text[:300]
        stack, v = lines[0].rsplit(" ", 1)
        parts = stack.split(";")
        assert int(v) == count
        assert parts[0] == comm and parts[-1] == "[truncated]", parts[:3] + parts[-3:]
        assert parts[1:-1] == [f"{prefix}{i}" for i in range(1023)], (len(parts), parts[-3:])
