"""Hostile query parameters (issue 27): every number and duration a route
reads, sent zero where zero means nothing, negative, past its range, past
int64, NaN and infinite, empty and with trailing junk, to the real
`flamewatch server` (and once to `flamewatch run`). Each must be a 400 whose
message names the parameter, and the server must still answer /healthz
afterwards. `step=0s` used to divide by zero and kill the server."""

import time

import pytest

from serverlib import Client, Procs, diagnostics, free_port, register_plugin, window

START_S = 60
W = None  # the window holding the fixture's samples, set by the fixture

INT64_OVER = "9223372036854775808"
UINT64_OVER = "18446744073709551616"

# (path, {param: value}, the word the error must name). Windows are added
# where the case has no from/to of its own.
DURATION_BAD = ["0s", "0ms", "0m", "0h00m", "9223372036s", "106751d", "-1s", "1.5s", "", "1s ", "1sx", "s"]
COUNT_BAD = ["0", "-1", "+1", " 1", "1x", "", "0x10", "1e3", UINT64_OVER, INT64_OVER]

CASES = []
for v in DURATION_BAD:
    CASES.append(("/api/v1/series", {"step": v}, "step"))
for v in ["0s", "0ms", "9223372036s", "-1s", "", "1s?", "1", "nan"]:
    CASES.append(("/api/v1/gpu/metrics", {"step": v}, "step"))
for v in ["0", "0s", "-5", "9223372036854775807", "9223372036s", "", "abc", "10ms ", "1.5"]:
    CASES.append(("/api/v1/cpu/strips", {"resolution": v}, "resolution"))
for v in COUNT_BAD:
    CASES.append(("/api/v1/cpu/strips", {"max_intervals": v}, "max_intervals"))
    CASES.append(("/api/v1/profile", {"max_nodes": v}, "max_nodes"))
    CASES.append(("/api/v1/profile", {"hz": v}, "hz"))
    CASES.append(("/api/v1/flamechart", {"max_samples": v}, "max_samples"))
    CASES.append(("/api/v1/flamechart", {"hz": v}, "hz"))
    CASES.append(("/api/v1/gpu/kernels", {"limit": v}, "limit"))
    CASES.append(("/api/v1/gpu/kernels/top", {"limit": v}, "limit"))
    CASES.append(("/api/v1/gpu/idle", {"pid": "7", "max_nodes": v}, "max_nodes"))
CASES += [
    ("/api/v1/profile", {"max_nodes": "1000001"}, "max_nodes"),
    ("/api/v1/profile", {"hz": "100001"}, "hz"),
    ("/api/v1/flamechart", {"max_samples": "5000001"}, "max_samples"),
    ("/api/v1/gpu/kernels", {"limit": "1000001"}, "limit"),
    ("/api/v1/cpu/strips", {"max_intervals": "99999999999"}, "max_intervals"),
    ("/api/v1/series", {"align": "maybe", "step": "1m"}, "align"),
    ("/api/v1/series", {"align": "", "step": "1m"}, "align"),
    ("/api/v1/flamechart", {"type": "offcpus"}, "type"),
    ("/api/v1/flamechart", {"type": ""}, "type"),
    ("/api/v1/flamechart", {"with": "gpu_time"}, "with"),
    ("/api/v1/flamechart", {"with": "offcpu,cpu"}, "with"),
]
for v in ["", "0", "-7", "4294967296", UINT64_OVER, "7x", "7.0", " 7"]:
    CASES.append(("/api/v1/gpu/idle", {"pid": v}, "pid"))
CASES.append(("/api/v1/gpu/idle", {}, "pid"))
for v in ["nan", "NaN", "inf", "-inf", "infinity", "-1", "100.5", "1e999", "", "5%", "0x10", " 5", "5 "]:
    CASES.append(("/api/v1/gpu/idle", {"pid": "7", "threshold": v}, "threshold"))
for v in ["-1s", "", "9223372036s", "1", "1ms!"]:
    CASES.append(("/api/v1/gpu/idle", {"pid": "7", "min_gap": v}, "min_gap"))
CASES += [
    ("/api/v1/gpu/idle", {"pid": "7", "node": "n" * 300}, "node"),
    ("/api/v1/gpu/idle", {"pid": "7", "node": "a\nb"}, "node"),
]
# The window: times past what later arithmetic can take, empty, junk.
WINDOW_ROUTES = ["/api/v1/profile", "/api/v1/flamechart", "/api/v1/series", "/api/v1/labels",
                 "/api/v1/labels/comm/values", "/api/v1/cpu/strips", "/api/v1/gpu/kernels",
                 "/api/v1/gpu/kernels/top", "/api/v1/gpu/metrics"]
for path in WINDOW_ROUTES:
    for params, word in (({"from": "0", "to": "9223372036"}, "to"),
                         ({"from": "0", "to": "2262-04-11T23:47:16Z"}, "to"),
                         ({"to": "now+12000w"}, "to"),
                         ({"from": "", "to": "1700000000"}, "from"),
                         ({"from": "1700000000", "to": ""}, "to"),
                         ({"from": "1700000000x", "to": "1700000060"}, "from"),
                         ({"to": "0"}, "from")):
        CASES.append((path, dict(params), word))
# Ingest's own parameters.
CASES += [
    ("POST /api/v1/ingest/folded", {"node": "n" * 300}, "node"),
    ("POST /api/v1/ingest/folded", {"node": "bad\x01node"}, "node"),
    ("POST /api/v1/ingest/pprof", {"node": "n" * 300}, "node"),
]


def _id(case):
    path, params, _ = case
    return path.rsplit("/", 1)[-1] + ":" + ",".join(f"{k}={v[:24]!r}" for k, v in params.items())


class Server:
    """One `flamewatch server` holding a few known samples; started again
    when a case has killed it, so that each case stands on its own."""

    def __init__(self, flamewatch, tmp):
        self.flamewatch = flamewatch
        self.tmp = tmp
        self.procs = Procs(tmp / "logs")
        self.proc = None
        self.client = None
        self.start()

    def start(self):
        if self.client:
            self.client.close()
        port = free_port()
        self.proc = self.procs.start([self.flamewatch, "server", "--listen", f"127.0.0.1:{port}",
                                      "--data", self.tmp / "data"], "server")
        self.client = Client(port)
        self.client.wait_healthy(timeout=START_S, proc=self.proc)

    def ensure(self):
        if not self.proc.alive():
            self.start()

    def close(self):
        self.procs.close_all()
        if self.client:
            self.client.close()


@pytest.fixture(scope="module")
def server(request, flamewatch, tmp_path_factory):
    register_plugin(request.config)
    s = Server(flamewatch, tmp_path_factory.mktemp("hostile"))
    try:
        t0 = time.time()
        r = s.client.post("/api/v1/ingest/folded", b"seven;main;train 30\nseven;main;wait 12\n",
                          params={"node": "hostile", "labels": '{pid="7"}'})
        assert r.status == 200, r.describe()
        s.window = window(t0 - 1, time.time() + 1)
    except (Exception, pytest.fail.Exception) as e:
        text = diagnostics()
        s.close()
        pytest.fail(f"setting up the server failed: {e}\n\n{text}", pytrace=False)
    yield s
    s.close()


def _send(c, path, params):
    if path.startswith("POST "):
        return c.post(path[5:], b"seven;main;train 1\n", params=params)
    return c.get(path, params)


@pytest.mark.parametrize("case", CASES, ids=[_id(c) for c in CASES])
def test_bad_parameter_is_400(server, case):
    path, params, word = case
    server.ensure()
    c = server.client
    if "from" not in params and "to" not in params:
        params = {**server.window, **params}
    r = _send(c, path, params)
    alive = c.get("/healthz", timeout=5)
    assert alive.status == 200, (
        f"{path} {params} killed the server or left it unable to answer\n{r.describe()}\n"
        f"{alive.describe()}\n{server.proc.describe()}")
    assert r.status == 400, f"expected 400\n{r.describe()}"
    err = r.json().get("error", "")
    assert err.startswith(word + ":") or f"{word} " in err or f"{word}:" in err, (
        f"the error does not name {word!r}: {err!r}")
    assert "store:" not in err, err


def test_good_parameters_still_answer(server):
    """The limits of each range are accepted: the checks refuse only what
    is outside."""
    server.ensure()
    c, w = server.client, server.window
    for path, params in (
        ("/api/v1/series", {"step": "1ms", "from": "1700000000", "to": "1700000001"}),
        ("/api/v1/series", {"step": "3650d", "from": "0", "to": "now"}),
        ("/api/v1/series", {"step": "1m", "align": "false", **w}),
        ("/api/v1/series", {"step": "1m", "align": "1", **w}),
        ("/api/v1/gpu/metrics", {"step": "0", **w}),
        ("/api/v1/gpu/metrics", {"step": "500ms", **w}),
        ("/api/v1/cpu/strips", {"resolution": "1000000", **w}),
        ("/api/v1/cpu/strips", {"resolution": "10ms", "max_intervals": "5000000", **w}),
        ("/api/v1/profile", {"max_nodes": "1000000", "hz": "100000", **w}),
        ("/api/v1/profile", {"max_nodes": "1", "hz": "1", **w}),
        ("/api/v1/flamechart", {"max_samples": "5000000", **w}),
        ("/api/v1/flamechart", {"type": "offcpu", "format": "trace", **w}),
        ("/api/v1/flamechart", {"type": "offcpu", "with": "offcpu", **w}),
        ("/api/v1/flamechart", {"type": "gpu_time", "with": "offcpu", "format": "trace", **w}),
        ("/api/v1/flamechart", {"with": "", "from": "0", "to": "now"}),
        ("/api/v1/gpu/kernels", {"limit": "1000000", **w}),
        ("/api/v1/gpu/kernels/top", {"limit": "1", **w}),
        ("/api/v1/gpu/idle", {"pid": "4294967295", "threshold": "0", "min_gap": "0s", **w}),
        ("/api/v1/gpu/idle", {"pid": "7", "threshold": "100", "node": "hostile", **w}),
        ("/api/v1/gpu/idle", {"pid": "7", "threshold": "2.5", **w}),
        ("/api/v1/labels", {"from": "0", "to": "2199-12-31T23:59:59Z"}),
        ("/api/v1/labels", {"to": "now+5000w"}),
        # Node names as long as the wire allows.
        ("/api/v1/gpu/idle", {"pid": "7", "node": "n" * 255, **w}),
    ):
        r = c.get(path, params)
        assert r.status == 200, r.describe()
    r = c.get("/api/v1/profile", {"format": "folded", **w})
    assert r.status == 200 and "seven;main;train 30" in r.text, r.describe()


def test_run_survives_step_zero(flamewatch, tmp_path, request):
    """`flamewatch run` serves the same routes in the agent's process: a bad
    step must not take the profiler down with it."""
    register_plugin(request.config)
    ps = Procs(tmp_path / "logs")
    c = None
    try:
        port = free_port()
        run = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", tmp_path / "data",
                        "--node", "hostile-run"], "run")
        assert run.wait_output(r"profiling this host", START_S), run.describe()
        c = Client(port)
        c.wait_healthy(proc=run)
        for step in ("0s", "0ms", "0m", "0h00m", "9223372036s"):
            r = c.get("/api/v1/series", {"step": step})
            assert r.status == 400, f"{r.describe()}\n{run.describe()}"
            assert "step" in r.json()["error"], r.describe()
        assert c.get("/healthz").status == 200, run.describe()
        assert run.alive(), run.describe()
    finally:
        ps.close_all()
        if c:
            c.close()
