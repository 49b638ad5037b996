"""Blocked spans in the flame chart (issue 30): real BPF, the real binary.

`flamewatch run --off-cpu` profiles tests/workloads/offcpu.c alternating
spin_on_cpu (on CPU) and block_in_sleep (blocked); the workload writes each
blocking call's start and end (OFFCPU_SPANS), the truth. /api/v1/flamechart
must give every block as a span within a few ms of it, under block_in_sleep:
alone with type=offcpu, and beside the on-CPU events with with=offcpu (each
on-CPU event ending where the thread blocked), in JSON and as a Chrome trace.
"""
import bisect
import os
import time

import pytest

from serverlib import Client, Procs, free_port, register_plugin, window

SECONDS, SPIN_MS, BLOCK_MS, HZ = 3, 40, 30, 99
TOL_NS = 3_000_000


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


def _names(doc, stack):
    return [doc["frames"][f][0] for f in doc["stacks"][stack]]


def _lane(doc, pid):
    lanes = [l for l in doc["lanes"] if l["pid"] == pid and l["tid"] == pid]
    assert len(lanes) == 1, [(l["pid"], l["tid"]) for l in doc["lanes"]]
    return lanes[0]


class Recorded:
    pass


@pytest.fixture(scope="module")
def rec(flamewatch, workloads, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("offcpu-chart")
    ps = Procs(tmp / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", tmp / "data",
                        "--interval", "1s", "-F", str(HZ), "--node", "fwtest-offcpu-chart",
                        "--off-cpu"], "run")
        assert srv.wait_output(r"profiling this host", 60), srv.describe()
        client.wait_healthy(proc=srv)
        spans = tmp / "spans"
        t0 = time.time()
        work = ps.start([workloads / "offcpu", "sleep", str(SECONDS), str(SPIN_MS), str(BLOCK_MS)],
                        "offcpu", env={**os.environ, "OFFCPU_SPANS": str(spans)})
        assert work.wait(30) == 0, work.describe()
        r = Recorded()
        r.client = client
        r.pid = int(work.text().split("pid ")[1].split()[0])
        r.truth = [tuple(map(int, line.split())) for line in spans.read_text().splitlines()]
        r.q = f'{{pid="{r.pid}"}}'
        r.win = window(t0 - 1, time.time() + 1)
        deadline = time.time() + 30
        while True:
            doc = client.get_json("/api/v1/flamechart", {"type": "offcpu", "query": r.q, **r.win})
            n = sum(1 for l in doc["lanes"] if l["tid"] == r.pid for e in l["events"]
                    if "block_in_sleep" in _names(doc, e[2]))
            if n >= len(r.truth) or time.time() > deadline:
                break
            time.sleep(0.5)
        yield r
    finally:
        ps.close_all()
        client.close()


def _match(spans, truth):
    """truth spans with a span whose start and end are each within TOL_NS."""
    starts = [s[0] for s in spans]
    out = {}
    for a, b in truth:
        i = bisect.bisect_left(starts, a - TOL_NS)
        while i < len(spans) and spans[i][0] <= a + TOL_NS:
            if abs(spans[i][1] - b) <= TOL_NS:
                out[(a, b)] = spans[i]
                break
            i += 1
    return out


def _check_blocks(doc, spans, truth, what):
    sleeps = [s for s in spans if "block_in_sleep" in _names(doc, s[2])]
    got = _match(sleeps, truth)
    err = [(round((s[0] - a) / 1e3), round((s[1] - b) / 1e3)) for (a, b), s in got.items()]
    msg = (f"{what}: {len(truth)} blocking calls, {len(sleeps)} spans under block_in_sleep, "
           f"{len(got)} within {TOL_NS / 1e6} ms (start, end errors in us: {err[:8]})")
    print(msg)
    # The agent may see the process a moment after it started.
    assert len(got) >= len(truth) - 2, msg
    # No block_in_sleep span that the workload did not make.
    assert len(sleeps) <= len(truth), msg
    for s in spans:
        assert s[0] < s[1], s
    return got


def test_offcpu_chart_is_the_blocks(rec):
    doc = rec.client.get_json("/api/v1/flamechart", {"type": "offcpu", "query": rec.q, **rec.win})
    assert doc["type"] == "offcpu" and doc["stride"] == 1, {k: doc[k] for k in ("type", "stride")}
    lane = _lane(doc, rec.pid)
    assert "blocked" not in lane
    got = _check_blocks(doc, lane["events"], rec.truth, "type=offcpu")
    # Each block stands alone, root first, ending in the kernel's scheduler.
    for s in got.values():
        names = _names(doc, s[2])
        assert names.index("main") < names.index("block_in_sleep"), names
    kernel_leaf = sum(1 for s in got.values() if doc["frames"][doc["stacks"][s[2]][-1]][2] == 1)
    assert kernel_leaf >= 0.9 * len(got), f"{kernel_leaf} of {len(got)} blocks end in the kernel"
    assert doc["samples"] == sum(len(l["events"]) for l in doc["lanes"])


def test_cpu_chart_with_blocked_spans(rec):
    doc = rec.client.get_json("/api/v1/flamechart", {"with": "offcpu", "query": rec.q, **rec.win})
    assert doc["type"] == "cpu" and doc["blocked_stride"] == 1, doc.keys()
    lane = _lane(doc, rec.pid)
    got = _check_blocks(doc, lane["blocked"], rec.truth, "with=offcpu")
    assert doc["blocks"] == sum(len(l["blocked"]) for l in doc["lanes"])
    # The same blocks as type=offcpu gives.
    alone = rec.client.get_json("/api/v1/flamechart", {"type": "offcpu", "query": rec.q, **rec.win})
    assert [(s[0], s[1], _names(doc, s[2])) for s in lane["blocked"]] == \
        [(s[0], s[1], _names(alone, s[2])) for s in _lane(alone, rec.pid)["events"]]
    events = lane["events"]
    spin = [e for e in events if "spin_on_cpu" in _names(doc, e[2])]
    assert len(spin) >= len(rec.truth) // 2, f"{len(spin)} on-CPU events under spin_on_cpu"
    # On CPU and blocked never overlap: an on-CPU event ends where the block begins.
    blocked = sorted(lane["blocked"])
    for e in events:
        i = bisect.bisect_left(blocked, [e[1]])
        for b in blocked[max(i - 1, 0):i + 1]:
            assert not (e[0] < b[1] and b[0] < e[1]), (e, b)
    ends = {e[1] for e in events}
    cut = sum(1 for s in got.values() if s[0] in ends)
    msg = f"{cut} of {len(got)} blocks start where an on-CPU event ends"
    print(msg)
    assert cut >= 0.8 * len(got), msg


def _slices(trace, tid, name):
    return sorted((e["ts"], e["ts"] + e["dur"]) for e in trace["traceEvents"]
                  if e["ph"] == "X" and e["tid"] == tid and e["name"] == name)


@pytest.mark.parametrize("params", [{"type": "offcpu"}, {"with": "offcpu"}], ids=["offcpu", "with"])
def test_trace_has_blocked_slices(rec, params):
    doc = rec.client.get_json("/api/v1/flamechart", {**params, "query": rec.q, **rec.win})
    trace = rec.client.get_json("/api/v1/flamechart", {**params, "format": "trace", "query": rec.q,
                                                       **rec.win})
    spans = _lane(doc, rec.pid)["events" if "type" in params else "blocked"]
    # The trace counts microseconds from its first event.
    origin = min(e[0] for l in doc["lanes"] for e in l["events"] + l.get("blocked", []))
    want = sorted(((s[0] - origin) / 1e3, (s[1] - origin) / 1e3) for s in spans)
    off = _slices(trace, rec.pid, "off-CPU")
    assert len(off) == len(want), (len(off), len(want))
    for (a, b), (c, d) in zip(off, want):
        assert abs(a - c) < 0.01 and abs(b - d) < 0.01, ((a, b), (c, d))
    # Each off-CPU slice lies under a block_in_sleep slice, as its stack says.
    outer = _slices(trace, rec.pid, "block_in_sleep")
    under = sum(1 for a, b in off if any(c <= a + 0.001 and b <= d + 0.001 for c, d in outer))
    assert under >= len(rec.truth) - 2, (under, len(off))
    assert all(e["cat"] == "offcpu" for e in trace["traceEvents"] if e["name"] == "off-CPU")
    if "with" in params:
        assert _slices(trace, rec.pid, "spin_on_cpu"), "no on-CPU slices beside the blocked ones"


def test_bad_type_and_with(rec):
    for params, word in (({"type": "offcpus"}, "type"), ({"with": "cpu"}, "with")):
        r = rec.client.get("/api/v1/flamechart", {**params, **rec.win})
        assert r.status == 400 and r.json()["error"].startswith(word + ":"), r.describe()
