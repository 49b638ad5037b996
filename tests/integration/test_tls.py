"""TLS between agents and the server: `flamewatch server --tls-cert/--tls-key`
serves HTTPS, `flamewatch agent --server https://... --ca-file` verifies
the server's certificate (chain and host name) before it sends anything.

  test_agent_ships_over_tls   an agent trusting the server's CA delivers,
                              also after the server restarted;
                              one trusting another CA says why it cannot,
                              keeps its batches, and delivers all of them
                              once the server has a certificate it trusts
  test_server_tls_setup       what the server and the agent refuse at start,
                              and what a plain HTTP client gets

Certificates come from a CA the test makes with the openssl command line
(tlslib.py). Real binary, real BPF, real SQLite store.
"""

import re
import signal
import time

import pytest

from serverlib import Client, free_port
# _diagnostics is an autouse fixture: imported, pytest uses it here too.
from test_server import (HZ, INTERVAL, START_S, _diagnostics, check_no_crash,  # noqa: F401
                         check_sample_count, folded, our, poll, total, wait_stable)
from tlslib import make_ca, make_cert

TOKEN = "tls-test-token"


@pytest.fixture
def pki(tmp_path):
    """Two CAs, each with a server certificate for 127.0.0.1 and localhost."""
    d = tmp_path / "pki"
    ca1 = make_ca(d, "ca1", "flamewatch test CA one")
    ca2 = make_ca(d, "ca2", "flamewatch test CA two")
    sans = ["IP:127.0.0.1", "DNS:localhost"]
    return {"ca1": ca1[0], "ca2": ca2[0],
            "cert1": make_cert(d, ca1, "server1", sans), "cert2": make_cert(d, ca2, "server2", sans)}


def start_tls_server(procs, flamewatch, port, data, cert, ca, name="server"):
    """`flamewatch server` on HTTPS; returns (Proc, Client trusting ca)."""
    p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data", str(data),
                     "--token", TOKEN, "--tls-cert", str(cert[0]), "--tls-key", str(cert[1])], name)
    if not p.wait_output(rf"flamewatch: listening on https://127\.0\.0\.1:{port} ", START_S):
        pytest.fail(f"{name} did not print its https banner\n{p.describe()}", pytrace=False)
    c = Client(port, token=TOKEN, ca=ca)
    c.wait_healthy(proc=p)
    return p, c


def start_tls_agent(procs, flamewatch, port, node, ca, host="127.0.0.1"):
    p = procs.start([flamewatch, "agent", "--server", f"https://{host}:{port}", "--ca-file", str(ca),
                     "--token", TOKEN, "--node", node, "-F", HZ, "--interval", INTERVAL], node)
    if not p.wait_output(r"sampling at \d+ Hz", START_S):
        pytest.fail(f"{node} did not start sampling\n{p.describe()}", pytrace=False)
    return p


def test_agent_ships_over_tls(flamewatch, workloads, procs, pki, tmp_path):
    port, data = free_port(), tmp_path / "data"
    srv, c = start_tls_server(procs, flamewatch, port, data, pki["cert1"], pki["ca1"], "server-ca1")
    good = start_tls_agent(procs, flamewatch, port, "tls-good", pki["ca1"])
    # Trusts CA two, so the server's certificate (from CA one) does not verify.
    bad = start_tls_agent(procs, flamewatch, port, "tls-bad", pki["ca2"])
    t_work = time.time()
    work = procs.start([workloads / "cpu_split", "12"], "cpu_split")

    q_good, q_bad = our(work.pid, "tls-good"), our(work.pid, "tls-bad")
    assert poll(lambda: total(c, q_good, t_work - 1, time.time() + 1), timeout=20), \
        f"no samples from the agent that trusts the server's CA\n{good.describe()}"
    m = bad.wait_output(r"cannot deliver to the server \((certificate verification failed[^\n]*)\)",
                        20)
    assert m, f"the agent with the wrong CA does not say why it cannot deliver\n{bad.describe()}"
    why = m.group(1)
    assert "unable to get local issuer certificate" in why, why
    assert "flamewatch test CA one" in why and str(pki["ca2"]) in why, why
    assert "expected host 127.0.0.1" in why, why
    assert bad.alive(), f"the agent with the wrong CA exited\n{bad.describe()}"
    assert total(c, q_bad, t_work - 1, time.time() + 1) == 0

    # A server restart closes the good agent's kept-alive TLS connection:
    # it connects again with a new session and goes on delivering.
    rc, _ = srv.stop(signal.SIGTERM, timeout=15)
    assert rc == 0, srv.describe()
    t_restart = time.time()
    srv, c = start_tls_server(procs, flamewatch, port, data, pki["cert1"], pki["ca1"], "server-ca1b")
    assert poll(lambda: total(c, q_good, t_restart, time.time() + 1), timeout=20), \
        f"the good agent delivered nothing sampled after the server restarted\n{good.describe()}"

    # Fix the setup: the server now shows a certificate from CA two, which
    # the waiting agent trusts; everything it kept arrives.
    good.stop(signal.SIGTERM, timeout=15)
    t_fix = time.time()
    rc, _ = srv.stop(signal.SIGTERM, timeout=15)
    assert rc == 0, srv.describe()
    srv, c = start_tls_server(procs, flamewatch, port, data, pki["cert2"], pki["ca2"], "server-ca2")
    # The agent's backoff is at most a few seconds by now (1, 2, 4 s, ...).
    assert poll(lambda: total(c, q_bad, t_work - 1, t_fix), timeout=30), \
        f"the buffered batches did not arrive after the fix\n{bad.describe()}"
    rc, cpu_s = work.wait_cpu(30)
    assert rc == 0, work.describe()
    t_end = wait_stable(c, q_bad, t_work - 1)
    # Nothing the agent sampled while it could not deliver was lost.
    check_sample_count(folded(c, q_bad, t_work - 1, t_end), cpu_s)
    rc, _ = bad.stop(signal.SIGTERM, timeout=15)
    assert rc == 0, bad.describe()
    m = re.search(r"dropped (\d+) samples; (\d+) batches left undelivered", bad.text())
    assert m and m.group(1) == "0" and m.group(2) == "0", f"summary: {m and m.group(0)}\n{bad.describe()}"
    for p in (good, bad, srv):
        check_no_crash(p)


def test_server_tls_setup(flamewatch, procs, pki, tmp_path):
    port = free_port()
    srv, c = start_tls_server(procs, flamewatch, port, tmp_path / "data", pki["cert1"], pki["ca1"])
    # The right CA and host name: fine, by name and by address.
    assert Client(port, host="localhost", ca=pki["ca1"]).get("/healthz").status == 200
    # Another CA: the client refuses the server.
    r = Client(port, ca=pki["ca2"]).get("/healthz")
    assert r.status is None and "CERTIFICATE_VERIFY_FAILED" in r.error, r.describe()
    # Plain HTTP on the TLS port gets no HTTP answer.
    r = Client(port).get("/healthz", timeout=5)
    assert r.status is None, r.describe()
    assert srv.alive(), srv.describe()

    def refused(argv, name, pattern):
        p = procs.start([flamewatch, *argv], name)
        rc = p.wait(START_S)
        assert rc not in (None, 0), p.describe()
        assert re.search(pattern, p.text()), p.describe()

    cert1, cert2 = pki["cert1"], pki["cert2"]
    listen = ["server", "--listen", f"127.0.0.1:{free_port()}", "--data", str(tmp_path / "d2")]
    refused(listen + ["--tls-cert", str(cert1[0]), "--tls-key", str(cert2[1])], "server-key-mismatch",
            r"does not belong to the certificate")
    refused(listen + ["--tls-cert", str(cert1[0])], "server-no-key", r"--tls-cert and --tls-key go together")
    refused(listen + ["--tls-cert", str(tmp_path / "nope.pem"), "--tls-key", str(cert1[1])],
            "server-no-cert", r"cannot load the certificate .*nope\.pem")
    refused(["agent", "--server", f"https://127.0.0.1:{port}", "--ca-file", str(tmp_path / "nope.pem")],
            "agent-no-ca", r"cannot load the CA file .*nope\.pem")
    refused(["agent", "--server", f"http://127.0.0.1:{port}", "--ca-file", str(pki["ca1"])],
            "agent-ca-http", r"--ca-file needs an https:// --server")


def test_run_serves_https(flamewatch, procs, pki, tmp_path):
    """`flamewatch run --tls-cert/--tls-key`: the UI and API over HTTPS,
    with its own samples in them."""
    port = free_port()
    cert = pki["cert1"]
    p = procs.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", str(tmp_path / "data"),
                     "--interval", "1s", "--node", "fwtest-run-tls",
                     "--tls-cert", str(cert[0]), "--tls-key", str(cert[1])], "run-tls")
    if not p.wait_output(rf"profiling this host at \d+ Hz; open https://127\.0\.0\.1:{port}/", START_S):
        pytest.fail(f"run did not print its https banner\n{p.describe()}", pytrace=False)
    c = Client(port, ca=pki["ca1"])
    c.wait_healthy(proc=p)
    r = c.get("/")
    assert r.status == 200 and b"<html" in r.body.lower(), r.describe()
    # Samples of this host reach the store and come back over TLS.
    values = "/api/v1/labels/node/values"
    got = poll(lambda: "fwtest-run-tls" in c.get(values).text, timeout=30)
    assert got, c.get(values).describe()
    assert Client(port).get("/healthz", timeout=5).status is None  # plain HTTP: no answer
    rc, _ = p.stop(signal.SIGTERM)
    assert rc == 0, p.describe()
