"""The server under many, big or unauthenticated clients (issue 27): what a
client can make `flamewatch server` (and `flamewatch run`) hold, and what it
gets back when the server will not hold more.

  test_idle_connections_*      1,100 idle TCP connections against a server
                               given only 256 (or 24) descriptors: /healthz
                               still answers, the log stays small and the
                               server does not spin
  test_connection_over_cap_503 --max-connections N busy connections: the next
                               client gets 503 with Connection: close
  test_one_token_off_loopback  a non-loopback --listen with one token alone is
                               refused at start, naming the missing flag
  test_decoder_bombs           small pprof, agent and folded bodies that decode
                               to hundreds of MB get 413 and the server's peak
                               RSS stays bounded
  test_concurrent_big_bodies   bodies beyond the in-memory budget get 503 with
                               Retry-After; peak RSS stays near the budget
  test_agent_keeps_batches_*   an agent refused for memory keeps its batches
                               and delivers all of them later
  test_huge_header_and_url     a 112 MB header and a 10 MB URL get 431 and 414

The real binary over real sockets; limits on descriptors come from
prlimit(1), so the server's own raise to the hard limit is a no-op there.
"""

import os
import re
import socket
import threading
import time
import zlib
from pathlib import Path

import pytest

from serverlib import Client, free_port, port_open
# _diagnostics is an autouse fixture: imported, pytest uses it here too.
from test_server import (HZ, START_S, _diagnostics, check_no_crash,  # noqa: F401
                         check_sample_count, folded, our, poll, start_agent, total,
                         wait_stable)

BANNER = r"flamewatch: listening on https?://\S+:%d "


def _start(procs, flamewatch, tmp, extra=(), nofile=None, listen_host="127.0.0.1", name="server"):
    port = free_port()
    argv = [flamewatch, "server", "--listen", f"{listen_host}:{port}", "--data", tmp / f"data-{name}",
            *extra]
    if nofile:
        lim = nofile if isinstance(nofile, str) else f"{nofile}:{nofile}"
        argv = ["prlimit", f"--nofile={lim}", "--"] + argv
    p = procs.start(argv, name)
    if not p.wait_output(BANNER % port, START_S):
        pytest.fail(f"{name} did not start\n{p.describe()}", pytrace=False)
    c = Client(port)
    c.wait_healthy(proc=p)
    return p, port, c


def _status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {key} in /proc/{pid}/status")


def _cpu_s(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def _read_response(s, timeout=30):
    """Reads one HTTP response from a raw socket: (status, headers, body);
    status None if the server closed without one."""
    s.settimeout(timeout)
    buf = b""
    while b"\r\n\r\n" not in buf:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            chunk = b""
        if not chunk:
            return None, {}, buf
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    want = int(headers.get("content-length", "0"))
    while len(body) < want:
        try:
            chunk = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        body += chunk
    return status, headers, body


def _send_then_read(port, parts, timeout=60):
    """Sends parts on a new connection from a thread while this one waits
    for the answer: a server may answer before it has read everything."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    err = []

    def _send():
        try:
            for p in parts:
                s.sendall(p)
        except OSError as e:
            err.append(e)

    t = threading.Thread(target=_send, daemon=True)
    t.start()
    try:
        status, headers, body = _read_response(s, timeout)
    finally:
        t.join(timeout)
        s.close()
    return status, headers, body, err


# ---------------------------------------------------------------------------
# descriptors and connections


def test_descriptor_limit_raised_to_hard(flamewatch, procs, tmp_path):
    p, port, c = _start(procs, flamewatch, tmp_path, nofile="512:4096", extra=["-v"])
    limits = open(f"/proc/{p.pid}/limits").read()
    m = re.search(r"^Max open files\s+(\d+)\s+(\d+)", limits, re.M)
    assert m and m.groups() == ("4096", "4096"), limits
    assert "raised the descriptor limit from 512 to 4096" in p.text(), p.describe()


def test_systemd_units_set_nofile():
    """The units give the server (and the agent) room for its connections;
    the server's syscall filter must let it raise its own soft limit."""
    units = Path(__file__).resolve().parents[2] / "deploy" / "systemd"
    for unit in ("flamewatch-server.service", "flamewatch-agent.service"):
        text = (units / unit).read_text()
        m = re.search(r"^LimitNOFILE=(\d+)$", text, re.M)
        assert m and int(m.group(1)) >= 65536, f"{unit}: no LimitNOFILE of 65536 or more"
    text = (units / "flamewatch-server.service").read_text()
    denied = " ".join(re.findall(r"^SystemCallFilter=~(.*)$", text, re.M))
    assert "@default" not in denied and "prlimit64" not in denied, denied


def _idle_connections(port, n):
    """n connections that connect and then say nothing."""
    socks = []
    for _ in range(n):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    return socks


@pytest.mark.parametrize("nofile", [256, 24])
def test_idle_connections_cannot_take_the_server_down(flamewatch, procs, tmp_path, nofile):
    """With soft = hard the server cannot raise its limit: its connection cap
    (clamped to what the limit allows) and its pause on accept errors must do
    the work. 24 descriptors leave fewer than the store and the loop need
    beside the cap's minimum, so accept() itself runs out."""
    p, port, c = _start(procs, flamewatch, tmp_path, nofile=nofile)
    log0 = p.log_path.stat().st_size
    socks = _idle_connections(port, 1100)
    try:
        time.sleep(1.5)
        cpu0, t0 = _cpu_s(p.pid), time.monotonic()
        time.sleep(3)
        busy = (_cpu_s(p.pid) - cpu0) / (time.monotonic() - t0)
        fds = _fds(p.pid)

        t = time.monotonic()
        r = c.get("/healthz", timeout=10)
        took = time.monotonic() - t
        assert r.status == 200, f"/healthz with 1,100 idle connections open:\n{r.describe()}\n{p.describe(2000)}"
        assert took < 5, f"/healthz took {took:.1f} s with 1,100 idle connections open"
        assert busy < 0.5, f"the server used {busy:.0%} of a core over 3 s while the connections sat idle"
        assert fds <= nofile, fds
        logged = p.log_path.stat().st_size - log0
        assert logged < 16384, f"the server wrote {logged} bytes of log in 4.5 s:\n{p.tail(3000)}"
    finally:
        for s in socks:
            s.close()
    assert p.alive(), p.describe()
    r = c.get("/healthz", timeout=10)
    assert r.status == 200, r.describe()
    check_no_crash(p)


def test_connection_over_cap_gets_503(flamewatch, procs, tmp_path):
    """Connections that are busy (a body in flight) are not closed for a
    newcomer: beyond --max-connections the newcomer gets 503."""
    p, port, c = _start(procs, flamewatch, tmp_path, extra=["--max-connections", "4"])
    busy = []
    try:
        for _ in range(4):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"POST /api/v1/ingest HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100)
            busy.append(s)
        time.sleep(0.5)
        status, headers, body, _ = _send_then_read(port, [b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n"], timeout=10)
        assert status == 503, f"a fifth connection beyond --max-connections 4 got {status}: {body[:300]!r}"
        assert headers.get("connection", "").lower() == "close", headers
        assert int(headers.get("retry-after", "0")) >= 1, headers
        assert b"connections" in body, body
    finally:
        for s in busy:
            s.close()
    # The busy ones gone, the server takes clients again.
    deadline = time.monotonic() + 10
    while True:
        r = c.get("/healthz", timeout=5)
        if r.status == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert r.status == 200, r.describe()
    check_no_crash(p)


# ---------------------------------------------------------------------------
# tokens


def _guards(c):
    """Each token guards its own side."""
    assert c.post("/api/v1/ingest/folded", b"p;main;f 1\n").status == 401
    assert c.post("/api/v1/ingest/folded", b"p;main;f 1\n", token="w").status == 200
    assert c.get("/api/v1/labels").status == 401
    assert c.get("/api/v1/labels", token="r").status == 200


@pytest.mark.parametrize("cmd", ["server", "run"])
def test_one_token_off_loopback(flamewatch, fw, procs, tmp_path, cmd):
    """`run` serves ingest too: both need both tokens off loopback."""
    port = free_port()
    base = [cmd, "--listen", f"0.0.0.0:{port}", "--data", tmp_path / "d"]
    res = fw.run(base + ["--read-token", "r"], timeout=30)
    res.check_error("--write-token", "ingest")
    res = fw.run(base + ["--write-token", "w"], timeout=30)
    res.check_error("--read-token", "API")
    assert not port_open(port), "a refused start left a listener behind"

    p = procs.start([flamewatch] + base + ["--read-token", "r", "--write-token", "w"], cmd)
    assert p.wait_output(r"(listening on|open) http://0\.0\.0\.0:%d" % port, START_S), p.describe()
    c = Client(port)
    try:
        c.wait_healthy(proc=p)
        _guards(c)
    finally:
        c.close()
    rc, _ = p.stop()
    assert rc == 0, p.describe()

    if cmd == "server":
        # --insecure leaves the side without a token open, as asked.
        p = procs.start([flamewatch] + base + ["--read-token", "r", "--insecure"], "insecure")
        assert p.wait_output(r"listening on http://0\.0\.0\.0:%d" % port, START_S), p.describe()
        c = Client(port)
        try:
            c.wait_healthy(proc=p)
            assert c.post("/api/v1/ingest/folded", b"p;main;f 1\n").status == 200
            assert c.get("/api/v1/labels").status == 401
        finally:
            c.close()


# ---------------------------------------------------------------------------
# decoders


def _pb_varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _pb_field(num, payload):
    return _pb_varint(num << 3 | 2) + _pb_varint(len(payload)) + payload


def _pprof_head():
    """string_table "", "samples", "count"; sample_type samples/count; location 1."""
    out = b"".join(_pb_field(6, s) for s in (b"", b"samples", b"count"))
    out += _pb_field(1, b"\x08\x01\x10\x02")
    out += _pb_field(4, b"\x08\x01")
    return out


def _gzip_stream(parts):
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [z.compress(p) for p in parts]
    out.append(z.flush())
    return b"".join(out)


def _one_sample(n_locations):
    """A Profile whose one sample lists location 1 n_locations times, packed:
    one byte of protobuf per id, eight bytes once unpacked."""
    chunk = b"\x01" * (1 << 20)
    ids_len = n_locations
    sample_hdr = _pb_varint(1 << 3 | 2) + _pb_varint(ids_len)
    rest = n_locations
    parts = []
    while rest:
        k = min(rest, len(chunk))
        parts.append(chunk[:k])
        rest -= k
    value = _pb_field(2, b"\x01")
    sample_len = len(sample_hdr) + ids_len + len(value)
    return [_pprof_head(), _pb_varint(2 << 3 | 2) + _pb_varint(sample_len) + sample_hdr] + parts + [value]


def _empty_samples(n):
    """n samples of two bytes each (an empty Sample message): each is a
    whole struct once unpacked."""
    return [_pprof_head(), b"\x12\x00" * n]


def _wire_columns(n):
    """An agent batch (src/format/wire.proto) with n timestamps in its
    ts_delta column: one byte each, packed; eight once unpacked."""
    head = b"\x08\x01" + _pb_field(4, b"bomb-n")
    return [head, _pb_varint(16 << 3 | 2) + _pb_varint(n)] + [b"\x02" * (1 << 20)] * (n >> 20) + \
        [b"\x02" * (n & ((1 << 20) - 1))]


def _folded_lines(n):
    return [b"bomb;f 1\n" * 100_000] * (n // 100_000)


PPROF = ("/api/v1/ingest/pprof", {"Content-Type": "application/octet-stream"})
WIRE = ("/api/v1/ingest", {"Content-Encoding": "gzip"})
FOLDED = ("/api/v1/ingest/folded", {"Content-Encoding": "gzip"})


BOMBS = [
    ("60M packed location ids", PPROF, lambda: _one_sample(60_000_000), ()),
    ("10M location ids in one sample", PPROF, lambda: _one_sample(10_000_000), ("location",)),
    ("2M empty samples", PPROF, lambda: _empty_samples(2_000_000), ("unpacked",)),
    ("30M timestamps in a batch", WIRE, lambda: _wire_columns(30_000_000), ("samples",)),
    ("3M folded lines", FOLDED, lambda: _folded_lines(3_000_000), ("stacks",)),
]


@pytest.mark.parametrize("name,where,parts,words", BOMBS, ids=[b[0].replace(" ", "_") for b in BOMBS])
def test_decoder_bombs(flamewatch, procs, tmp_path, name, where, parts, words):
    """Small bodies that decode into hundreds of MB: refused (413) before
    the decoder allocates for them."""
    body = _gzip_stream(parts())
    assert len(body) < 256 << 10, f"{name}: {len(body)} bytes compressed"
    p, port, c = _start(procs, flamewatch, tmp_path)
    hwm0 = _status_kb(p.pid, "VmHWM")
    r = c.post(where[0], body, headers=where[1], params={"node": "bomb-n"}, timeout=120)
    grew = (_status_kb(p.pid, "VmHWM") - hwm0) >> 10
    assert r.status == 413, f"{name}: {r.describe()}"
    for w in words:
        assert w in r.json()["error"], r.describe()
    assert grew < 48, f"{name} ({len(body) >> 10} KiB gzip) took the server's peak RSS up by {grew} MiB"
    assert c.get("/healthz").status == 200
    check_no_crash(p)


# ---------------------------------------------------------------------------
# request bodies held in memory


def test_concurrent_big_bodies_stay_under_budget(flamewatch, procs, tmp_path):
    """--max-body 16 MiB: the default budget is four such bodies. Twelve
    15 MB bodies in flight at once: four are read, the others get 503 with
    Retry-After once their body has been read past (not kept), and the
    server's peak RSS stays near the budget."""
    size, n = 15_000_000, 12
    p, port, c = _start(procs, flamewatch, tmp_path, extra=["--max-body", str(16 << 20)])
    hwm0 = _status_kb(p.pid, "VmHWM")
    body = bytes(size)
    head = b"POST /api/v1/ingest HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % size
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            s.sendall(head + body[: size - 1000])
            socks.append(s)
        time.sleep(1)
        for s in socks:
            s.sendall(body[size - 1000:])
        answers = [_read_response(s, 60) for s in socks]
    finally:
        for s in socks:
            s.close()
    grew = (_status_kb(p.pid, "VmHWM") - hwm0) >> 10
    statuses = [a[0] for a in answers]
    refused = [a for a in answers if a[0] == 503]
    assert len(refused) >= n - 4, f"statuses {statuses}"
    for status, headers, b in refused:
        assert int(headers.get("retry-after", "0")) >= 1, headers
        assert b"--max-body-memory" in b, b
    assert all(s in (400, 503) for s in statuses), statuses
    assert grew < 100, f"{n} bodies of {size} bytes took the peak RSS up by {grew} MiB"
    # Nothing stays reserved: a body is taken again.
    r = c.post("/api/v1/ingest/folded", b"budgetproc;main;f 3\n", params={"node": "budget-n"})
    assert r.status == 200, r.describe()
    check_no_crash(p)


def _bodies_refused(c):
    m = re.search(r"^flamewatch_http_bodies_refused_total (\d+)", c.get("/metrics").text, re.M)
    return int(m.group(1)) if m else 0


def test_agent_keeps_batches_refused_for_memory(flamewatch, workloads, procs, tmp_path):
    """While another upload holds all of --max-body-memory, the agent's
    batches get 503: it keeps them, and every one arrives once the memory
    is free."""
    p, port, c = _start(procs, flamewatch, tmp_path,
                        extra=["--max-body", str(1 << 20), "--max-body-memory", str(1 << 20)])
    hold = socket.create_connection(("127.0.0.1", port), timeout=10)
    hold.sendall(b"POST /api/v1/ingest HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % (1 << 20)
                 + b"x" * 1024)
    agent = start_agent(procs, flamewatch, port, "budget-agent")
    t_work = time.time()
    work = procs.start([workloads / "cpu_split", "6"], "cpu_split")
    q = our(work.pid, "budget-agent")
    try:
        assert poll(lambda: _bodies_refused(c) >= 2, timeout=20), \
            f"the agent's batches were not refused while the memory was held\n{agent.describe()}"
        assert total(c, q, t_work - 1, time.time() + 1) == 0
    finally:
        hold.close()
    rc, cpu_s = work.wait_cpu(30)
    assert rc == 0, work.describe()
    # Its backoff after a few refusals is up to 8 s (and a quarter of jitter).
    poll(lambda: total(c, q, t_work - 1, time.time() + 1) >= 0.75 * cpu_s * HZ, timeout=30)
    t_end = wait_stable(c, q, t_work - 1)
    check_sample_count(folded(c, q, t_work - 1, t_end), cpu_s)
    assert "HTTP 503" in agent.text(), agent.describe()
    rc, _ = agent.stop()
    assert rc == 0, agent.describe()
    m = re.search(r"dropped (\d+) samples; (\d+) batches left undelivered", agent.text())
    assert m and m.groups() == ("0", "0"), f"summary: {m and m.group(0)}\n{agent.describe()}"
    check_no_crash(p)


# ---------------------------------------------------------------------------
# header and URL sizes


def test_huge_header_and_url(flamewatch, procs, tmp_path):
    p, port, c = _start(procs, flamewatch, tmp_path)
    hwm0 = _status_kb(p.pid, "VmHWM")

    big = b"a" * (1 << 20)
    url = [b"GET /healthz?x="] + [big] * 10 + [b" HTTP/1.1\r\nHost: t\r\n\r\n"]
    status, headers, body, _ = _send_then_read(port, url)
    assert status == 414, f"a 10 MB URL got {status}: {body[:300]!r}"
    assert headers.get("connection", "").lower() == "close", headers

    hdr = [b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: "] + [big] * 112 + [b"\r\n\r\n"]
    status, headers, body, _ = _send_then_read(port, hdr)
    assert status == 431, f"a 112 MB header got {status}: {body[:300]!r}"
    assert headers.get("connection", "").lower() == "close", headers

    grew = (_status_kb(p.pid, "VmHWM") - hwm0) >> 10
    assert grew < 16, f"the server's peak RSS grew by {grew} MiB skipping a huge URL and header"
    assert c.get("/healthz").status == 200
    check_no_crash(p)
