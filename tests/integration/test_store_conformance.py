"""Store conformance: the same data through `flamewatch server` on SQLite and
on ClickHouse gives the same query API answers, and those answers are the
ones expected from the data.

A real Debian `clickhouse-server` (18.16) is started for the module on free
ports with its own configuration in a temporary directory, as root, and
stopped afterwards. The data are hand-made agent wire batches (CPU samples
of two sampling periods on two nodes, GPU-time samples, GPU kernel and copy
intervals, GPU metric points and CPU busy intervals) spread over 13 minutes
with edges inside minutes, so that answers combine rollup minutes and raw
samples. Each backend gets its own server; the ClickHouse one is also
checked with the batches ingested through two servers and queried through
a third (stateless servers on one database), and once more over HTTPS
(secure=1, ClickHouse's https_port with a certificate from a CA the test
makes). More tests run on ClickHouse alone: retention by one server seen
exactly by another, ClickHouse killed and restarted under a running
server, and TLS failures (wrong CA, wrong host name, plain HTTP port).
"""

import json
import os
import shutil
import signal
import struct
import subprocess
import time
import urllib.parse
import uuid

import pytest

from serverlib import Client, Procs, free_port, port_open, register_plugin, window
from tlslib import make_ca, make_cert

CLICKHOUSE = shutil.which("clickhouse-server") or "/usr/sbin/clickhouse-server"
START_S = 60


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


# ---------------------------------------------------------------------------
# ClickHouse, started for this module


def _ch_query(port, sql):
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request("POST", "/", body=sql.encode())
        r = c.getresponse()
        body = r.read().decode(errors="replace")
        if r.status != 200:
            raise RuntimeError(f"ClickHouse: HTTP {r.status}: {body[:500]}")
        return body
    finally:
        c.close()


def _clickhouse_config(d, tls=None):
    """Writes a configuration for a private clickhouse-server under d; returns its HTTP port.
    With tls (a dict with cert and key), it also serves HTTPS on tls["port"]."""
    http_port, tcp_port = free_port(), free_port()
    https = ""
    if tls:
        # ClickHouse 18.16 (Poco) takes the server's certificate from
        # <openSSL><server>; verificationMode none: clients show no certificate.
        https = f"""<https_port>{tls["port"]}</https_port>
  <openSSL><server>
    <certificateFile>{tls["cert"]}</certificateFile>
    <privateKeyFile>{tls["key"]}</privateKeyFile>
    <verificationMode>none</verificationMode>
    <loadDefaultCAFile>false</loadDefaultCAFile>
    <disableProtocols>sslv2,sslv3,tlsv1,tlsv1_1</disableProtocols>
  </server></openSSL>"""
    for sub in ("data", "tmp", "log", "fmt"):
        (d / sub).mkdir(exist_ok=True)
    (d / "users.xml").write_text(
        "<?xml version=\"1.0\"?><yandex><profiles><default></default></profiles>"
        "<users><default><password></password><networks><ip>127.0.0.1</ip></networks>"
        "<profile>default</profile><quota>default</quota></default>"
        "<fw><password>s3cr@t</password><networks><ip>127.0.0.1</ip></networks>"
        "<profile>default</profile><quota>default</quota></fw></users>"
        "<quotas><default></default></quotas></yandex>\n")
    (d / "config.xml").write_text(f"""<?xml version="1.0"?>
<yandex>
  <logger><level>warning</level><log>{d}/log/server.log</log><errorlog>{d}/log/err.log</errorlog></logger>
  <listen_host>127.0.0.1</listen_host>
  <http_port>{http_port}</http_port>
  <tcp_port>{tcp_port}</tcp_port>
  {https}
  <path>{d}/data/</path>
  <tmp_path>{d}/tmp/</tmp_path>
  <format_schema_path>{d}/fmt/</format_schema_path>
  <mark_cache_size>5368709</mark_cache_size>
  <users_config>{d}/users.xml</users_config>
  <default_profile>default</default_profile>
  <default_database>default</default_database>
</yandex>
""")
    return http_port


def _clickhouse_start(procs, d, http_port, name="clickhouse-server"):
    """Starts clickhouse-server with d's configuration; returns the Proc once it answers."""
    if not os.access(CLICKHOUSE, os.X_OK):
        pytest.fail(f"{CLICKHOUSE} is missing: run scripts/install-deps.sh", pytrace=False)
    p = procs.start([CLICKHOUSE, f"--config-file={d}/config.xml"], name)
    deadline = time.monotonic() + START_S
    while True:
        try:
            if _ch_query(http_port, "SELECT 1").strip() == "1":
                return p
        except (OSError, RuntimeError):
            pass
        if not p.alive() or time.monotonic() > deadline:
            log = d / "log" / "err.log"
            pytest.fail(f"clickhouse-server did not start\n{p.describe()}\n"
                        f"{log.read_text()[-3000:] if log.exists() else ''}", pytrace=False)
        time.sleep(0.2)


@pytest.fixture(scope="module")
def clickhouse_env(tmp_path_factory):
    """A private clickhouse-server for the module, serving HTTP and HTTPS;
    yields {"port": HTTP port, "https_port", "ca": the CA's certificate,
    "pki": the CA's directory}. The server certificate names 127.0.0.1
    only (an IP SAN), not localhost."""
    d = tmp_path_factory.mktemp("clickhouse")
    pki = d / "pki"
    ca = make_ca(pki)
    cert, key = make_cert(pki, ca, "clickhouse", ["IP:127.0.0.1"])
    tls = {"port": free_port(), "cert": cert, "key": key}
    port = _clickhouse_config(d, tls)
    procs = Procs(d / "procs")
    try:
        _clickhouse_start(procs, d, port)
        yield {"port": port, "https_port": tls["port"], "ca": ca[0], "pki": pki}
    finally:
        procs.close_all()


@pytest.fixture(scope="module")
def clickhouse(clickhouse_env):
    """The module's clickhouse-server; its HTTP port."""
    return clickhouse_env["port"]


# ---------------------------------------------------------------------------
# wire batches: samples, GPU intervals, metric points, CPU intervals


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _zz(v):
    return (v << 1) ^ (v >> 63)


def _key(num, wt):
    return _varint(num << 3 | wt)


def _u(num, v):
    return _key(num, 0) + _varint(v) if v else b""


def _b(num, b):
    if isinstance(b, str):
        b = b.encode()
    return _key(num, 2) + _varint(len(b)) + b


def _packed(num, values, zigzag=False):
    if not values:
        return b""
    return _b(num, b"".join(_varint(_zz(v) if zigzag else v) for v in values))


def _packed_double(num, values):
    return _b(num, b"".join(struct.pack("<d", v) for v in values)) if values else b""


def _deltas(ts):
    prev, out = 0, []
    for t in ts:
        out.append(t - prev)
        prev = t
    return out


def encode_batch(b, session, seq):
    """b: a dict as built by make_batches()."""
    out = [_u(1, 1), _key(2, 1) + struct.pack("<Q", session), _u(3, seq), _b(4, b["node"]),
           _u(5, b["period_ns"])]
    out += [_b(11, s) for s in b["strings"]]
    out += [_b(12, _u(1, p) + _u(2, bid)) for p, bid in b["mappings"]]
    for kind, fn, addr, mapping, file, line in b["frames"]:
        out.append(_b(13, _u(1, kind) + _u(2, mapping) + _u(3, addr) + _u(4, fn) + _u(5, file)
                      + _u(6, line)))
    out += [_b(14, _packed(1, st)) for st in b["stacks"]]
    out += [_b(15, _packed(1, ls)) for ls in b["series"]]
    s = sorted(b["samples"])
    out.append(_packed(16, _deltas([x[0] for x in s]), zigzag=True))
    for col, num in ((1, 17), (2, 18), (3, 19), (4, 20), (5, 21)):
        out.append(_packed(num, [x[col] for x in s]))
    out.append(_packed(22, [x[6] for x in s], zigzag=True))
    g = sorted(b["gpu"])
    if g:
        out.append(_packed(50, _deltas([x[0] for x in g]), zigzag=True))
        for col, num in ((1, 51), (2, 52), (3, 53), (4, 54), (5, 55), (6, 56), (7, 57), (8, 58),
                         (9, 59)):
            out.append(_packed(num, [x[col] for x in g]))
    m = sorted(b["metrics"])
    if m:
        out.append(_packed(30, _deltas([x[0] for x in m]), zigzag=True))
        out.append(_packed(31, [x[1] for x in m]))
        out.append(_packed(32, [x[2] for x in m]))
        out.append(_packed_double(33, [x[3] for x in m]))
    c = sorted(b["civ"], key=lambda x: x[1])
    if c:
        out.append(_packed(40, [x[0] for x in c]))
        out.append(_packed(41, _deltas([x[1] for x in c]), zigzag=True))
        for col, num in ((2, 42), (3, 43), (4, 44), (5, 45)):
            out.append(_packed(num, [x[col] for x in c]))
    return b"".join(out)


MIN = 60_000_000_000
SEC = 1_000_000_000
# Stacks by leaf name; frames (kind, function, mapping path or None, file, line).
STACKS = {
    "hot": [(0, "main", "/usr/bin/app", "", 0), (0, "run", "/usr/bin/app", "run.c", 12),
            (0, "hot", "/usr/bin/app", "hot.c", 7)],
    "cold": [(0, "main", "/usr/bin/app", "", 0), (0, "run", "/usr/bin/app", "run.c", 12),
             (0, "cold", "/usr/lib/libc.so.6", "", 0)],
    "sys": [(0, "main", "/usr/bin/app", "", 0), (1, "do_syscall_64", None, "", 0)],
    "py": [(3, "<module>", None, "train.py", 3), (3, "step", None, "train.py", 40),
           (0, "cudaLaunchKernel", "/usr/lib/libcudart.so.12", "", 0)],
}
PROCS = [  # node, period, labels, stacks cycled by the samples
    ("n1", 10_101_010, {"comm": "app", "pid": "100", "container": "c1"}, ["hot", "hot", "cold", "sys"]),
    ("n1", 10_101_010, {"comm": "python3", "pid": "200"}, ["py", "hot"]),
    ("n2", 52_631_578, {"comm": "app", "pid": "300", "container": "c2"}, ["cold", "sys", "hot"]),
]


def kept_ts(ts):
    """A sample's timestamp as the stores keep it: to the nearest microsecond.
    The expected answers use it where a sample lies within half a microsecond
    of a window's or bucket's edge."""
    return (ts + 500) // 1000 * 1000


def make_batches(t0):
    """Batches of 13 minutes from t0 (inside a minute): one per process and
    30 s, with the expected records alongside."""
    batches, expect = [], {"samples": [], "gpu": [], "metrics": [], "civ": []}
    for pi, (node, period, labels, cycle) in enumerate(PROCS):
        hz_ns = period
        for start in range(t0, t0 + 13 * MIN, 30 * SEC):
            strings = [""]

            def sid(s):
                if s not in strings:
                    strings.append(s)
                return strings.index(s)

            mappings, frames, stacks = [], [], []
            stack_of = {}
            for name in STACKS:
                ids = []
                for kind, fn, path, file, line in STACKS[name]:
                    m = 0
                    if path:
                        key = (sid(path), sid(""))
                        if key not in mappings:
                            mappings.append(key)
                        m = mappings.index(key) + 1
                    fr = (kind, sid(fn), 0x1000 + len(fn) * 16, m, sid(file), line)
                    if fr not in frames:
                        frames.append(fr)
                    ids.append(frames.index(fr))
                stack_of[name] = len(stacks)
                stacks.append(ids)
            lab = []
            for k, v in sorted(labels.items()):
                lab += [sid(k), sid(v)]
            series = [lab]
            samples, gpu, metrics, civ = [], [], [], []
            n = int(30 * SEC // hz_ns)
            for i in range(n):
                ts = start + i * hz_ns + (pi * 1_234_567)
                name = cycle[i % len(cycle)]
                tid = int(labels["pid"]) + i % 3
                samples.append((ts, stack_of[name], 0, tid, i % 4, 0, 1))
                expect["samples"].append((kept_ts(ts), node, labels, name, 1, 0, period, tid, i % 4))
            if labels["comm"] == "python3":
                for i in range(40):
                    ts = start + i * 750_000_000
                    samples.append((ts, stack_of["py"], 0, 200, 1, 1, 250_000 + i))
                    expect["samples"].append((kept_ts(ts), node, labels, "py", 250_000 + i, 1, period,
                                              200, 1))
                    kname = sid("sgemm_kernel" if i % 2 else "relu_kernel")
                    gpu.append((ts + 5000, 100_000 + i, 0, i % 2, 7, 0, kname, stack_of["py"] + 1, 0, 1))
                    expect["gpu"].append((ts + 5000, "sgemm_kernel" if i % 2 else "relu_kernel"))
                gpu.append((start + 17, 4096, 0, 0, 7, 1, sid("[memcpy HtoD]"), 0, 1 << 20, 1))
                expect["gpu"].append((start + 17, "[memcpy HtoD]"))
                for i in range(30):
                    ts = start + i * SEC
                    for gpu_i in (0, 1):
                        gl = [sid("gpu"), sid(str(gpu_i))]
                        if gl not in series:
                            series.append(gl)
                        v = float((i * 7 + gpu_i * 13) % 101)
                        metrics.append((ts, series.index(gl), sid("flamewatch_gpu_utilization_ratio"), v / 100))
                        expect["metrics"].append((ts, gpu_i, v / 100))
            else:
                for c in range(2):
                    # busy 12 s (two pieces in the store), idle, busy 3 s
                    a = start + c * 100_000
                    civ.append((c, a, 12 * SEC, 0, int(labels["pid"]), sid(labels["comm"])))
                    civ.append((c, a + 20 * SEC, 3 * SEC, 0, int(labels["pid"]) + 1, sid("helper")))
                    expect["civ"] += [(node, c, a, a + 12 * SEC), (node, c, a + 20 * SEC, a + 23 * SEC)]
            batches.append({"node": node, "period_ns": period, "strings": strings, "mappings": mappings,
                            "frames": frames, "stacks": stacks, "series": series, "samples": samples,
                            "gpu": gpu, "metrics": metrics, "civ": civ})
    return batches, expect


# ---------------------------------------------------------------------------
# servers


def start_server(procs, flamewatch, store_args, name):
    port = free_port()
    p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", *store_args], name)
    if not p.wait_output(r"flamewatch: listening on http://", START_S):
        pytest.fail(f"{name} did not start\n{p.describe()}", pytrace=False)
    c = Client(port)
    c.wait_healthy(proc=p)
    return p, c


def ingest(clients, batches):
    """Posts each batch (its own session) to clients in turn."""
    for i, b in enumerate(batches):
        c = clients[i % len(clients)]
        r = c.post("/api/v1/ingest", encode_batch(b, 0x5EED_0000 + i, 1),
                   headers={"Content-Type": "application/x-protobuf"})
        assert r.status == 200, f"batch {i} refused\n{r.describe()}"


@pytest.fixture(scope="module")
def data():
    now = time.time_ns()
    # 20 minutes ago, 17.3 s into a minute: windows start and end inside minutes.
    t0 = (now - 20 * MIN) // MIN * MIN + 17_300_000_000
    batches, expect = make_batches(t0)
    return {"t0": t0, "batches": batches, "expect": expect}


def tls_uri(env, db, host="127.0.0.1", ca=None):
    return f"clickhouse://{host}:{env['https_port']}/{db}?secure=1&ca={ca or env['ca']}"


@pytest.fixture(scope="module", params=["sqlite", "clickhouse", "clickhouse-tls"])
def backend(request, flamewatch, data, tmp_path_factory):
    d = tmp_path_factory.mktemp(f"conf-{request.param}")
    procs = Procs(d / "logs")
    try:
        if request.param == "sqlite":
            _, c = start_server(procs, flamewatch, ["--data", str(d / "data")], "server-sqlite")
            ingest([c], data["batches"])
            yield {"name": "sqlite", "client": c}
        else:
            env = request.getfixturevalue("clickhouse_env")
            port = env["port"]
            db = "conf_" + uuid.uuid4().hex[:8]
            uri = f"clickhouse://127.0.0.1:{port}/{db}"
            if request.param == "clickhouse-tls":
                uri = tls_uri(env, db)
            _, a = start_server(procs, flamewatch, ["--store", uri], "server-ch-a")
            _, b = start_server(procs, flamewatch, ["--store", uri], "server-ch-b")
            # Two servers ingest, a third one (started afterwards) answers.
            ingest([a, b], data["batches"])
            _, c = start_server(procs, flamewatch, ["--store", uri], "server-ch-c")
            yield {"name": request.param, "client": c, "db": db, "port": port}
    finally:
        procs.close_all()


ANSWERS = {}


def answer(backend, key, value):
    """Records a backend's answer to compare the two backends afterwards."""
    ANSWERS.setdefault(key, {})[backend["name"]] = value
    return value


def get_json(c, path, params):
    r = c.get(path, params)
    assert r.status == 200, r.describe()
    return r.json()


def folded(c, frm, to, query=None, typ=None):
    params = {"format": "folded", **window(frm / 1e9, to / 1e9)}
    if query:
        params["query"] = query
    if typ:
        params["type"] = typ
    r = c.get("/api/v1/profile", params)
    assert r.status == 200, r.describe()
    out = {}
    for line in r.text.splitlines():
        if line.strip():
            stack, n = line.rsplit(" ", 1)
            out[stack] = out.get(stack, 0) + int(n)
    return out


def leaf_path(name):
    """The folded text of a stack: kernel frames get FlameGraph's _[k]."""
    return ";".join(f[1] + ("_[k]" if f[0] == 1 else "") for f in STACKS[name])


def expected_folded(exp, frm, to, pred=lambda e: True, typ=0):
    out, periods = {}, set()
    sel = [e for e in exp["samples"] if frm <= e[0] < to and e[5] == typ and pred(e)]
    for e in sel:
        periods.add(e[6])
    for e in sel:
        v = e[4] * (e[6] if typ == 0 and len(periods) > 1 else 1)
        k = e[2]["comm"] + ";" + leaf_path(e[3])
        out[k] = out.get(k, 0) + v
    return out


# ---------------------------------------------------------------------------
# the conformance suite, run once per backend


WINDOWS = [(0, 13 * 60), (65.5, 500.25), (3.1, 3.9), (119.999, 240.001), (-600, 2000)]


@pytest.mark.parametrize("w", WINDOWS, ids=lambda w: f"{w[0]}-{w[1]}")
def test_profile_folded(backend, data, w):
    t0, exp = data["t0"], data["expect"]
    frm, to = t0 + int(w[0] * SEC), t0 + int(w[1] * SEC)
    c = backend["client"]
    got = folded(c, frm, to)
    assert got == expected_folded(exp, frm, to), f"{backend['name']}: window {w}"
    answer(backend, ("folded", w), got)
    # One node only: one period, sample counts.
    got = folded(c, frm, to, query='{node="n1",comm=~"app|python3"}')
    assert got == expected_folded(exp, frm, to, lambda e: e[1] == "n1")
    got = folded(c, frm, to, query='{container!=""}')
    assert got == expected_folded(exp, frm, to, lambda e: "container" in e[2])
    got = folded(c, frm, to, typ="gpu_time")
    assert got == expected_folded(exp, frm, to, typ=1)


def json_folded(doc):
    """The folded stacks (and their self values) of a JSON flame graph's tree."""
    nodes, names, out, path = doc["nodes"], doc["names"], {}, []
    for i in range(len(nodes["v"])):
        d = nodes["d"][i]
        del path[max(d - 1, 0):]
        if d:
            path.append(names[nodes["n"][i]] + ("_[k]" if nodes["k"][i] == 1 else ""))
        if d and nodes["s"][i]:
            k = ";".join(path)
            out[k] = out.get(k, 0) + nodes["s"][i]
    return out


# Windows that take whole hours, and ones that start or end beyond the data
# (the ClickHouse store then widens them to whole minutes or hours).
JSON_WINDOWS = WINDOWS + [(-3 * 3600, 3 * 3600), (-86400, 600), (60, 3 * 3600), (-1.5, 779.5)]


@pytest.mark.parametrize("w", JSON_WINDOWS, ids=lambda w: f"{w[0]}-{w[1]}")
def test_flamegraph_json(backend, data, w):
    """The JSON flame graph (cut before it is named) holds exactly the
    window's samples, stack by stack, when nothing is trimmed."""
    t0, exp = data["t0"], data["expect"]
    frm, to = t0 + int(w[0] * SEC), t0 + int(w[1] * SEC)
    c = backend["client"]
    for query, pred in ((None, lambda e: True), ('{node="n1"}', lambda e: e[1] == "n1")):
        params = {"format": "json", "max_nodes": "100000", **window(frm / 1e9, to / 1e9)}
        if query:
            params["query"] = query
        doc = get_json(c, "/api/v1/profile", params)
        want = expected_folded(exp, frm, to, pred)
        assert doc["trimmed"]["nodes"] == 0, (w, query, doc["trimmed"])
        assert doc["total"] == sum(want.values()), (backend["name"], w, query)
        assert json_folded(doc) == want, (backend["name"], w, query)
        answer(backend, ("flamegraph", w, query), {"total": doc["total"], "unit": doc["unit"],
                                                   "folded": json_folded(doc)})


def test_profile_json_period(backend, data):
    """One period: sample counts; two (n1 at 99 Hz, n2 at 19 Hz): nanoseconds."""
    t0, exp = data["t0"], data["expect"]
    frm, to = t0, t0 + 13 * MIN
    c = backend["client"]
    for query, unit, pred in (('{node="n1"}', "samples", lambda e: e[1] == "n1"),
                              ('{node="n2"}', "samples", lambda e: e[1] == "n2"),
                              (None, "nanoseconds", lambda e: True)):
        params = {"format": "json", **window(frm / 1e9, to / 1e9)}
        if query:
            params["query"] = query
        doc = get_json(c, "/api/v1/profile", params)
        answer(backend, ("json", query), doc)
        assert doc["unit"] == unit, (query, doc["unit"])
        assert doc["total"] == sum(expected_folded(exp, frm, to, pred).values()), query


def test_labels(backend, data):
    t0 = data["t0"]
    c = backend["client"]
    w = window(t0 / 1e9, (t0 + 13 * MIN) / 1e9)
    names = get_json(c, "/api/v1/labels", w)
    assert names["names"] == ["comm", "container", "node", "pid"], names
    vals = get_json(c, "/api/v1/labels/comm/values", w)
    answer(backend, "comm", vals)
    assert vals.get("values") == ["app", "python3"], vals
    vals = get_json(c, "/api/v1/labels/node/values", window((t0 + 5 * SEC) / 1e9, (t0 + 6 * SEC) / 1e9))
    assert vals.get("values") == ["n1", "n2"], vals
    # Metric-only series (gpu=...) have no samples: not listed.
    assert "gpu" not in names["names"]


@pytest.mark.parametrize("step", [60, 47, 600])
def test_series(backend, data, step):
    t0, exp = data["t0"], data["expect"]
    c = backend["client"]
    frm, to = t0 + 20 * SEC, t0 + 12 * MIN + 5 * SEC
    doc = get_json(c, "/api/v1/series", {"by": "comm", "step": f"{step}s",
                                         **window(frm / 1e9, to / 1e9)})
    got = {(s["group"], p[0]): p[1] for s in doc["series"] for p in s["points"]}
    # The route aligns the buckets to the step; the window stays as asked.
    origin = doc["from"]
    want = {}
    for e in exp["samples"]:
        if frm <= e[0] < to and e[5] == 0:
            b = origin + (e[0] - origin) // (step * SEC) * step * SEC
            want[(e[2]["comm"], b)] = want.get((e[2]["comm"], b), 0) + e[4]
    assert got == want
    answer(backend, ("series", step), doc["series"])


def _resolve(doc):
    """Replaces stack ids by frame-name paths: ids differ between backends."""
    frames = doc["frames"]

    def name(f):
        return f["name"] if isinstance(f, dict) else f[0]
    return [";".join(name(frames[i]) for i in st) for st in doc["stacks"]]


def test_flamechart(backend, data):
    t0, exp = data["t0"], data["expect"]
    c = backend["client"]
    frm, to = t0 + 61 * SEC, t0 + 95 * SEC
    doc = get_json(c, "/api/v1/flamechart", {"query": '{node="n1"}', **window(frm / 1e9, to / 1e9)})
    paths = _resolve(doc)
    lanes = sorted((lane["pid"], lane["tid"], doc["comms"][lane["comm"]],
                    tuple((e[0], e[1], paths[e[2]]) for e in lane["events"])) for lane in doc["lanes"])
    n = sum(1 for e in exp["samples"] if frm <= e[0] < to and e[5] == 0 and e[1] == "n1")
    assert doc["samples"] == n and doc["stride"] == 1
    answer(backend, "flamechart", lanes)
    doc = get_json(c, "/api/v1/flamechart", {"max_samples": "100", **window(frm / 1e9, to / 1e9)})
    n = sum(1 for e in exp["samples"] if frm <= e[0] < to and e[5] == 0)
    assert doc["stride"] == -(-n // 100), doc["stride"]
    answer(backend, "flamechart-stride", (doc["samples"], doc["stride"], sorted(_resolve(doc))))


def test_cpu_strips(backend, data):
    t0, exp = data["t0"], data["expect"]
    c = backend["client"]
    frm, to = t0 + 25 * SEC, t0 + 75 * SEC
    doc = get_json(c, "/api/v1/cpu/strips", window(frm / 1e9, to / 1e9))
    answer(backend, "strips", doc)
    busy = {}
    for node, cpu, a, b in exp["civ"]:
        a, b = max(a, frm), min(b, to)
        if a < b:
            busy[(node, cpu)] = busy.get((node, cpu), 0) + (b - a)
    text = json.dumps(doc)
    for node, _ in busy:
        assert node in text, (node, text[:2000])


def test_gpu_kernels(backend, data):
    t0, exp = data["t0"], data["expect"]
    c = backend["client"]
    frm, to = t0 + 10 * SEC, t0 + 100 * SEC
    doc = get_json(c, "/api/v1/gpu/kernels", window(frm / 1e9, to / 1e9))
    names = sorted(iv["name"] for iv in doc["intervals"])
    assert names == sorted(n for ts, n in exp["gpu"] if frm <= ts < to)
    paths = _resolve(doc)
    rows = [(iv["start"], iv["end"], iv["name"], iv["kind"], iv["pid"], iv["comm"], iv["bytes"],
             paths[iv["stack"]] if iv["stack"] is not None else None) for iv in doc["intervals"]]
    assert any(r[7] and r[7].endswith("cudaLaunchKernel") for r in rows), rows[:3]
    answer(backend, "kernels", rows)
    top = get_json(c, "/api/v1/gpu/kernels/top", window(frm / 1e9, to / 1e9))
    answer(backend, "kernels-top", top)


def test_gpu_metrics(backend, data):
    t0, exp = data["t0"], data["expect"]
    c = backend["client"]
    frm, to = t0 + 10 * SEC, t0 + 70 * SEC
    doc = get_json(c, "/api/v1/gpu/metrics", window(frm / 1e9, to / 1e9))
    answer(backend, "metrics", doc)
    text = json.dumps(doc)
    assert "flamewatch_gpu_utilization_ratio" in text or "utilization" in text, text[:1000]


def test_backends_agree(backend, data):
    """Runs last for each backend; each ClickHouse one answered what SQLite did."""
    name = backend["name"]
    if name == "sqlite":
        return
    diffs = []
    for key, by in ANSWERS.items():
        if "sqlite" in by and name in by and _norm(by["sqlite"]) != _norm(by[name]):
            diffs.append((key, json.dumps(by["sqlite"])[:600], json.dumps(by[name])[:600]))
    assert not diffs, "\n".join(map(str, diffs))
    assert len([k for k, by in ANSWERS.items() if "sqlite" in by and name in by]) >= 10, \
        list(ANSWERS)


def _norm(v):
    """Order-insensitive where the API leaves order to the backend (series ids)."""
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items()}
    if isinstance(v, list):
        items = [_norm(x) for x in v]
        try:
            return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))
        except TypeError:
            return items
    return v


def test_clickhouse_retention_across_servers(flamewatch, clickhouse, data, tmp_path):
    """A server with --retention 12m drops old data for every server on the
    database: after its first retention pass, another server's answers are exactly those of the samples at or after a
    minute boundary 12 minutes before that pass."""
    t0, exp = data["t0"], data["expect"]
    db = "ret_" + uuid.uuid4().hex[:8]
    uri = f"clickhouse://127.0.0.1:{clickhouse}/{db}"
    procs = Procs(tmp_path / "logs")
    try:
        _, a = start_server(procs, flamewatch, ["--store", uri], "server-ch-a")
        ingest([a], data["batches"])
        frm, to = t0, t0 + 13 * MIN
        full = expected_folded(exp, frm, to)
        assert folded(a, frm, to) == full
        started = time.time_ns()
        _, r = start_server(procs, flamewatch, ["--store", uri, "--retention", "12m"], "server-ch-ret")
        deadline = time.monotonic() + 120
        while folded(a, frm, to) == full:
            assert time.monotonic() < deadline, "no retention pass within 120 s"
            time.sleep(1)
        seen = time.time_ns()
        got = folded(a, frm, to)
        lo = (started - 12 * MIN) // MIN * MIN
        hi = (seen - 12 * MIN) // MIN * MIN
        cuts = [c for c in range(lo, hi + MIN, MIN) if expected_folded(exp, c, to) == got]
        assert cuts, f"no minute cutoff in [{lo}, {hi}] explains {got}"
        cut = cuts[0]
        # Every server agrees, also on intervals.
        assert folded(r, frm, to) == got
        doc = get_json(a, "/api/v1/gpu/kernels", window(frm / 1e9, to / 1e9))
        assert sorted(iv["name"] for iv in doc["intervals"]) == \
            sorted(n for ts, n in exp["gpu"] if cut <= ts < to)
        names = get_json(a, "/api/v1/labels/comm/values", window(frm / 1e9, to / 1e9))
        assert names["values"] == ["app", "python3"]
        # Whole days below the watermark are dropped; this data is hours old: nothing yet.
        parts = _ch_query(clickhouse, f"SELECT count() FROM system.parts WHERE database = '{db}'"
                                      " AND table = 'samples' AND active")
        assert int(parts) > 0
    finally:
        procs.close_all()


def test_clickhouse_rollups_of_an_older_database(flamewatch, clickhouse, data, tmp_path):
    """A database written before the hour rollups and sample spans existed
    (made here by dropping them and the retention table) gets them when a
    server opens it, with a watermark past its samples: flame graphs still
    hold exactly each window's samples, and new samples reach them."""
    t0, exp = data["t0"], data["expect"]
    db = "old_" + uuid.uuid4().hex[:8]
    uri = f"clickhouse://127.0.0.1:{clickhouse}/{db}"
    procs = Procs(tmp_path / "logs")
    try:
        p, a = start_server(procs, flamewatch, ["--store", uri], "server-ch-a")
        ingest([a], data["batches"][:len(data["batches"]) // 2])
        p.stop()
        for t in ("samples_1h_mv", "samples_1h", "sample_spans_mv", "sample_spans", "retention"):
            _ch_query(clickhouse, f"DROP TABLE {db}.{t}")
        _, b = start_server(procs, flamewatch, ["--store", uri], "server-ch-b")
        rollups_from = int(_ch_query(clickhouse, f"SELECT max(cutoff) FROM {db}.retention"
                                                 " WHERE what = 'rollups_from'"))
        assert rollups_from > time.time_ns(), rollups_from
        ingest([b], data["batches"][len(data["batches"]) // 2:])
        for w in ((-3 * 3600, 3 * 3600), (-1.5, 779.5), (65.5, 500.25)):
            frm, to = t0 + int(w[0] * SEC), t0 + int(w[1] * SEC)
            doc = get_json(b, "/api/v1/profile", {"format": "json", "max_nodes": "100000",
                                                  **window(frm / 1e9, to / 1e9)})
            assert json_folded(doc) == expected_folded(exp, frm, to), w
    finally:
        procs.close_all()


def test_clickhouse_down_and_back(flamewatch, data, tmp_path):
    """ClickHouse killed (SIGKILL) under a running server: ingest answers 503
    with the reason, queries fail instead of answering empty, nothing the
    server acknowledged is lost, and once ClickHouse is back the same server
    (it reconnects) ingests and answers again."""
    d = tmp_path / "ch"
    d.mkdir()
    port = _clickhouse_config(d)
    procs = Procs(tmp_path / "logs")
    try:
        ch = _clickhouse_start(procs, d, port)
        uri = f"clickhouse://127.0.0.1:{port}/down"
        _, c = start_server(procs, flamewatch, ["--store", uri], "server-ch")
        first, rest = data["batches"][:6], data["batches"][6:12]
        ingest([c], first)
        t0 = data["t0"]
        frm, to = t0, t0 + 13 * MIN
        before = folded(c, frm, to)
        assert sum(before.values()) > 0
        # A batch whose frame, stack and series are new to ClickHouse.
        refused = dict(first[0])
        refused["strings"] = [{"hot": "hot_refused", "100": "9999"}.get(x, x)
                              for x in refused["strings"]]
        body = encode_batch(refused, 0xD0D0, 1)
        ch.stop(signal.SIGKILL)
        r = c.post("/api/v1/ingest", body, headers={"Content-Type": "application/x-protobuf"})
        assert r.status == 503 and "store" in r.text, r.describe()
        r = c.get("/api/v1/profile", {"format": "folded", **window(frm / 1e9, to / 1e9)})
        assert r.status >= 500, r.describe()
        _clickhouse_start(procs, d, port, "clickhouse-server-again")
        assert folded(c, frm, to) == before
        ingest([c], rest)
        # Sent again, as its agent does: what the refused write had read
        # of the session's dictionary is written this time.
        r = c.post("/api/v1/ingest", body, headers={"Content-Type": "application/x-protobuf"})
        assert r.status == 200, r.describe()
        again = folded(c, frm, to, query='{pid="9999"}')
        assert sum(again.values()) == sum(v for _, _, _, _, _, typ, v in refused["samples"]
                                          if typ == 0), again
        assert any(k.endswith(";hot_refused") for k in again), again
        stored = first + rest
        got = {}
        for stack, n in folded(c, frm, to, query='{node="n1",pid!="9999"}').items():
            got[stack.split(";")[0]] = got.get(stack.split(";")[0], 0) + n
        want_n1 = {}
        for b in stored:
            if b["node"] != "n1":
                continue
            names = [b["strings"][i] for i in b["series"][0]]
            comm = dict(zip(names[::2], names[1::2]))["comm"]
            for ts, st, _, _, _, typ, v in b["samples"]:
                if typ == 0:
                    want_n1[comm] = want_n1.get(comm, 0) + v
        assert got == want_n1
    finally:
        procs.close_all()


@pytest.mark.parametrize("store", ["sqlite", "clickhouse"])
def test_a_window_of_many_stacks(flamewatch, store, tmp_path, request):
    """A window that holds more distinct stacks than ClickHouse takes
    elements in one query (max_ast_elements, 50,000 by default) answers
    whole on both backends: every stack, every sample, and none of another
    node's."""
    n = 60_000
    procs = Procs(tmp_path / "logs")
    try:
        if store == "sqlite":
            args = ["--data", str(tmp_path / "data")]
        else:
            port = request.getfixturevalue("clickhouse")
            args = ["--store", f"clickhouse://127.0.0.1:{port}/many_{uuid.uuid4().hex[:8]}"]
        _, c = start_server(procs, flamewatch, args, f"server-{store}")
        t0 = time.time_ns()
        body = "".join(f"many;mod_{i // 1000};leaf_{i} {1 + i % 3}\n" for i in range(n))
        r = c.post("/api/v1/ingest/folded", body.encode(), params={"node": "many"},
                   headers={"Content-Type": "text/plain"})
        assert r.status == 200, r.describe()
        # Stacks of another node, which the window's query must skip when
        # it reads the stacks' table whole.
        other = "".join(f"other;leaf_o{i} 1\n" for i in range(10_000))
        r = c.post("/api/v1/ingest/folded", other.encode(), params={"node": "other"},
                   headers={"Content-Type": "text/plain"})
        assert r.status == 200, r.describe()
        got = folded(c, t0 - MIN, time.time_ns() + MIN, query='{node="many"}')
        assert len(got) == n, (len(got), list(got.items())[:3])
        assert sum(got.values()) == sum(1 + i % 3 for i in range(n))
        assert got["many;mod_59;leaf_59999"] == 1 + 59999 % 3
    finally:
        procs.close_all()


def test_clickhouse_user_and_password(flamewatch, clickhouse, data, tmp_path):
    """USER:PASSWORD@ in the URI (percent-escaped), or the password from
    FLAMEWATCH_CLICKHOUSE_PASSWORD; a wrong one stops the server with
    ClickHouse's reason."""
    db = "auth_" + uuid.uuid4().hex[:8]
    procs = Procs(tmp_path / "logs")
    try:
        _, c = start_server(procs, flamewatch,
                            ["--store", f"clickhouse://fw:s3cr%40t@127.0.0.1:{clickhouse}/{db}"],
                            "server-user")
        ingest([c], data["batches"][:2])
        t0 = data["t0"]
        assert sum(folded(c, t0, t0 + 13 * MIN).values()) > 0
        p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{free_port()}", "--store",
                         f"clickhouse://fw@127.0.0.1:{clickhouse}/{db}"], "server-env",
                        env={**os.environ, "FLAMEWATCH_CLICKHOUSE_PASSWORD": "s3cr@t"})
        assert p.wait_output(r"flamewatch: listening on", START_S), p.describe()
        p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{free_port()}", "--store",
                         f"clickhouse://fw:wrong@127.0.0.1:{clickhouse}/{db}"], "server-wrong")
        assert p.wait(START_S) not in (None, 0), p.describe()
        assert "cannot open the store" in p.text() and "ClickHouse answered HTTP" in p.text(), \
            p.describe()
    finally:
        procs.close_all()


def _refused(procs, flamewatch, uri, name):
    """Starts a server on uri, which must stop it; returns its output."""
    p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{free_port()}", "--store", uri],
                    name)
    assert p.wait(START_S) not in (None, 0), p.describe()
    text = p.text()
    assert "cannot open the store" in text, p.describe()
    return text


def test_clickhouse_tls_failures(flamewatch, clickhouse_env, data, tmp_path):
    """Over HTTPS, a certificate from another CA, a certificate for another
    host, a plain HTTP port with secure=1, the HTTPS port without it and an
    unreadable CA file each stop a new server with the reason; what a good
    server had stored stays there and is still served."""
    env = clickhouse_env
    db = "tlsfail_" + uuid.uuid4().hex[:8]
    procs = Procs(tmp_path / "logs")
    try:
        _, good = start_server(procs, flamewatch, ["--store", tls_uri(env, db)], "server-tls")
        ingest([good], data["batches"][:3])
        t0 = data["t0"]
        before = folded(good, t0, t0 + 13 * MIN)
        assert sum(before.values()) > 0

        other = make_ca(tmp_path / "other", cn="another CA")
        text = _refused(procs, flamewatch, tls_uri(env, db, ca=other[0]), "server-wrong-ca")
        assert "certificate verification failed" in text, text
        assert "flamewatch test CA" in text and str(other[0]) in text, text

        # The certificate names 127.0.0.1 only.
        text = _refused(procs, flamewatch, tls_uri(env, db, host="localhost"), "server-wrong-host")
        assert "certificate verification failed: hostname mismatch" in text, text
        assert "expected host localhost" in text, text

        text = _refused(procs, flamewatch,
                        f"clickhouse://127.0.0.1:{env['port']}/{db}?secure=1&ca={env['ca']}",
                        "server-plain-port")
        assert "TLS handshake with ClickHouse" in text and "does this port speak TLS" in text, text

        text = _refused(procs, flamewatch, f"clickhouse://127.0.0.1:{env['https_port']}/{db}",
                        "server-no-secure")
        assert "add secure=1" in text, text

        text = _refused(procs, flamewatch, tls_uri(env, db, ca=tmp_path / "missing.pem"),
                        "server-no-ca-file")
        assert "cannot load the CA file" in text, text

        # Nothing accepted before was lost, for the old server or a new one.
        assert folded(good, t0, t0 + 13 * MIN) == before
        _, again = start_server(procs, flamewatch, ["--store", tls_uri(env, db)], "server-tls-2")
        assert folded(again, t0, t0 + 13 * MIN) == before
    finally:
        procs.close_all()
