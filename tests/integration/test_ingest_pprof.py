"""pprof from other tools into the server: Go's runtime/pprof (what
net/http/pprof serves) and flamewatch record's own output, then malformed
and oversized profiles, which must be refused without disturbing what is
stored."""

import gzip
import json
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

from conftest import Profile, require
from serverlib import free_port


@pytest.fixture
def server(flamewatch, tmp_path):
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data", str(tmp_path / "data")],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1).read()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("server did not start: " + (tmp_path / "server.log").read_text())
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def _post(url, body, headers=None):
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def _folded(base, query):
    q = urllib.parse.urlencode({"format": "folded", "from": "now-1h", "query": query})
    with urllib.request.urlopen(f"{base}/api/v1/profile?{q}", timeout=30) as r:
        return Profile.parse(r.read().decode())


def test_go_runtime_pprof(server, workloads, tmp_path):
    prof = tmp_path / "go.pb.gz"
    subprocess.run([workloads / "go_pprof", prof], check=True, timeout=60)
    labels = urllib.parse.quote('{service="gosvc"}')
    status, body = _post(f"{server}/api/v1/ingest/pprof?labels={labels}&node=n1", prof.read_bytes())
    assert status == 200, body
    n = json.loads(body)["samples"]
    assert n > 0
    p = _folded(server, '{service="gosvc",node="n1"}')
    spin = p.count_frame("main.goSpin")
    require(p.total > 0 and spin >= 0.8 * p.total,
            f"main.goSpin in {spin} of {p.total} samples", p)
    require(p.count_run(["main.main", "main.goSpin"]) >= 0.8 * p.total, "main.main;main.goSpin missing", p)


def test_flamewatch_record_pprof_round_trip(server, fw, workloads):
    res, out = fw.record(["--", workloads / "cpu_split", "2"], duration=2, out_name="x.pb.gz", fmt="pprof")
    res.check_ok()
    labels = urllib.parse.quote('{service="rt"}')
    status, body = _post(f"{server}/api/v1/ingest/pprof?labels={labels}", out.read_bytes())
    assert status == 200, body
    p = _folded(server, '{service="rt",comm="cpu_split"}')
    hot, cold = p.count_frame("hot_70"), p.count_frame("cold_30")
    require(hot + cold > 0 and 0.62 <= hot / (hot + cold) <= 0.78,
            f"hot_70 {hot} vs cold_30 {cold} after the round trip", p)


def test_bad_pprof_refused_and_nothing_lost(server, workloads, tmp_path):
    prof = tmp_path / "go.pb.gz"
    subprocess.run([workloads / "go_pprof", prof], check=True, timeout=60)
    labels = urllib.parse.quote('{service="keep"}')
    assert _post(f"{server}/api/v1/ingest/pprof?labels={labels}", prof.read_bytes())[0] == 200
    before = _folded(server, '{service="keep"}').total

    status, body = _post(f"{server}/api/v1/ingest/pprof", b"not a profile at all")
    assert status == 400 and "pprof" in json.loads(body)["error"], body
    status, body = _post(f"{server}/api/v1/ingest/pprof", prof.read_bytes()[: len(prof.read_bytes()) // 2])
    assert status == 400, body
    # 200 MB of zeros: the bomb stops at the decompression cap.
    bomb = gzip.compress(b"\0" * (200 << 20), compresslevel=9)
    t0 = time.time()
    status, body = _post(f"{server}/api/v1/ingest/pprof", bomb)
    assert status == 413, body
    assert time.time() - t0 < 20
    status, body = _post(f"{server}/api/v1/ingest/pprof?labels=" + urllib.parse.quote('{a=~"x"}'),
                         prof.read_bytes())
    assert status == 400 and "labels" in body, body

    assert _folded(server, '{service="keep"}').total == before
