"""Helpers for the server/agent system tests (test_server.py): free ports,
background processes whose output goes to files (and is attached to the
report of a failing test), a small HTTP client on http.client, and an
encoder for the agent wire format (src/format/wire.proto) good enough to
build small batches by hand.

Standard library only: the tests run under Debian's python3 + pytest.
"""

import collections
import http.client
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.parse
from pathlib import Path

import pytest

# ---------------------------------------------------------------------------
# diagnostics attached to failing tests
#
# Fixtures register "sources" (callables returning text: a process's stderr
# tail, the last HTTP exchanges); when a test fails, the report gets one
# section per live source. The hook is a plugin registered at run time
# because this module is not a conftest.

_SOURCES = []


def add_source(fn):
    _SOURCES.append(fn)
    return fn


def remove_source(fn):
    if fn in _SOURCES:
        _SOURCES.remove(fn)


def diagnostics():
    parts = []
    for fn in list(_SOURCES):
        try:
            parts.append(fn())
        except Exception as e:  # a broken source must not hide the failure
            parts.append(f"<diagnostics source failed: {e!r}>")
    return "\n".join(p for p in parts if p)


class _DiagPlugin:
    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        rep = outcome.get_result()
        if rep.failed and rep.when in ("setup", "call"):
            text = diagnostics()
            if text:
                rep.sections.append(("flamewatch diagnostics", text))


_PLUGIN = _DiagPlugin()


def register_plugin(config):
    if not config.pluginmanager.is_registered(_PLUGIN):
        config.pluginmanager.register(_PLUGIN, "flamewatch-server-diagnostics")


# ---------------------------------------------------------------------------
# ports and processes


_GIVEN_PORTS = set()


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on right now, and that
    this process has not handed out before: two calls in a row can get the
    same port back from the kernel, and a test that gave one to a server
    and the other to the agent's metrics saw both try to listen on it."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


def port_open(port, host="127.0.0.1"):
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class Proc:
    """A background process with stdout and stderr captured to a file."""

    def __init__(self, argv, log_dir, name, env=None):
        self.argv = [str(a) for a in argv]
        self.name = name
        self.log_path = Path(log_dir) / f"{name}.log"
        n = 1
        while self.log_path.exists():
            n += 1
            self.log_path = Path(log_dir) / f"{name}.{n}.log"
        self._log = open(self.log_path, "wb")
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT, env=env
        )
        self.pid = self.p.pid
        self.returncode = None

    def text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, n=4000):
        t = self.text()
        return t[-n:]

    def describe(self, n=4000):
        state = "running" if self.alive() else f"exited with {self.p.returncode}"
        return (
            f"--- {self.name} (pid {self.pid}, {state}, {time.monotonic() - self.t0:.1f} s): "
            f"{' '.join(self.argv)}\n{self.tail(n)}"
        )

    def alive(self):
        return self.p.poll() is None

    def wait_output(self, pattern, timeout):
        """Waits until the output matches pattern; returns the match or
        None (time-out, or the process ended without printing it)."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.text())
            if m:
                return m
            if not self.alive() or time.monotonic() > deadline:
                # One last look: it may have printed and exited.
                return rx.search(self.text())
            time.sleep(0.1)

    def wait(self, timeout):
        """Waits for the exit; returns the exit status or None on time-out."""
        try:
            self.returncode = self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        return self.returncode

    def wait_cpu(self, timeout):
        """Waits for the exit, reaping the process itself to learn the CPU
        time it used. Returns (exit status, user + system seconds), or
        (None, None) on time-out."""
        deadline = time.monotonic() + timeout
        while True:
            if self.p.returncode is not None:
                return self.p.returncode, getattr(self, "cpu_s", None)
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            if pid:
                self.p.returncode = self.returncode = os.waitstatus_to_exitcode(status)
                self.cpu_s = ru.ru_utime + ru.ru_stime
                return self.returncode, self.cpu_s
            if time.monotonic() > deadline:
                return None, None
            time.sleep(0.05)

    def send(self, sig):
        if self.alive():
            self.p.send_signal(sig)

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Sends sig and waits; kills after timeout. Returns (status,
        seconds it took), status None when it had to be killed."""
        t0 = time.monotonic()
        if not self.alive():
            return self.p.returncode, 0.0
        self.p.send_signal(sig)
        rc = self.wait(timeout)
        took = time.monotonic() - t0
        if rc is None:
            self.p.kill()
            self.p.wait(timeout=10)
        return rc, took

    def close(self):
        if self.alive():
            self.p.kill()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if not self._log.closed:
            self._log.close()


class Procs:
    """Processes of one test (or module); each is a diagnostics source
    until close_all()."""

    def __init__(self, log_dir):
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs = []

    def start(self, argv, name, env=None):
        p = Proc(argv, self.log_dir, name, env=env)
        self.procs.append(p)
        p._source = add_source(lambda p=p: p.describe())
        return p

    def close_all(self):
        for p in reversed(self.procs):
            p.close()
            remove_source(p._source)
        self.procs = []


# ---------------------------------------------------------------------------
# HTTP


class Response:
    def __init__(self, method, url, status, headers, body, elapsed, error=None):
        self.method = method
        self.url = url
        self.status = status
        self.headers = headers
        self.body = body
        self.elapsed = elapsed
        self.error = error

    @property
    def text(self):
        return self.body.decode("utf-8", "replace")

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError as e:
            pytest.fail(f"{self.method} {self.url}: body is not JSON ({e}):\n{self.text[:2000]}", pytrace=False)

    def describe(self, n=1500):
        if self.error:
            return f"{self.method} {self.url} -> {self.error} ({self.elapsed:.2f} s)"
        return f"{self.method} {self.url} -> {self.status} ({self.elapsed:.2f} s, {len(self.body)} bytes): {self.text[:n]!r}"


class Client:
    """HTTP/1.1 client for one server; a new connection per request. The
    last exchanges are kept for diagnostics. With ca (a PEM file), it
    speaks HTTPS and trusts only that CA."""

    def __init__(self, port, host="127.0.0.1", token=None, timeout=30, ca=None):
        self.host = host
        self.ca = ca
        self.port = port
        self.token = token
        self.timeout = timeout
        self.history = collections.deque(maxlen=5)
        self._source = add_source(self._describe)

    def _describe(self):
        if not self.history:
            return ""
        return f"--- last HTTP exchanges with {self.host}:{self.port}\n" + "\n".join(
            r.describe(400) for r in self.history
        )

    def close(self):
        remove_source(self._source)

    @property
    def base(self):
        return f"{'https' if self.ca else 'http'}://{self.host}:{self.port}"

    def request(self, method, path, params=None, body=None, headers=None, token=..., timeout=None):
        """Returns a Response; connection errors are a Response with
        status None and error set (never an exception)."""
        if params:
            path = path + "?" + urllib.parse.urlencode(params)
        hdrs = dict(headers or {})
        tok = self.token if token is ... else token
        if tok is not None:
            hdrs["Authorization"] = f"Bearer {tok}"
        t0 = time.monotonic()
        if self.ca:
            ctx = ssl.create_default_context(cafile=str(self.ca))
            conn = http.client.HTTPSConnection(self.host, self.port, timeout=timeout or self.timeout,
                                               context=ctx)
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout or self.timeout)
        try:
            try:
                conn.request(method, path, body=body, headers=hdrs)
            except (BrokenPipeError, ConnectionResetError):
                # The server may answer (413) and close before it has read
                # a large body: the answer is still there to read.
                pass
            r = conn.getresponse()
            resp = Response(method, path, r.status, dict(r.getheaders()), r.read(), time.monotonic() - t0)
        except (OSError, http.client.HTTPException) as e:
            resp = Response(method, path, None, {}, b"", time.monotonic() - t0, error=repr(e))
        finally:
            conn.close()
        self.history.append(resp)
        return resp

    def get(self, path, params=None, **kw):
        return self.request("GET", path, params=params, **kw)

    def post(self, path, body, params=None, **kw):
        return self.request("POST", path, params=params, body=body, **kw)

    def get_ok(self, path, params=None, **kw):
        r = self.get(path, params, **kw)
        if r.status != 200:
            pytest.fail(f"expected 200:\n{r.describe()}", pytrace=False)
        return r

    def get_json(self, path, params=None, **kw):
        return self.get_ok(path, params, **kw).json()

    def wait_healthy(self, timeout=30, proc=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            r = self.get("/healthz", token=None, timeout=2)
            if r.status == 200:
                return r
            if proc is not None and not proc.alive():
                break
            time.sleep(0.1)
        where = proc.describe() if proc is not None else ""
        pytest.fail(f"{self.base}/healthz did not answer 200 within {timeout} s\n{where}", pytrace=False)


def window(from_s, to_s):
    """from/to query parameters for Unix seconds (floats)."""
    return {"from": f"{from_s:.6f}", "to": f"{to_s:.6f}"}


# ---------------------------------------------------------------------------
# the agent wire format (src/format/wire.proto), for hand-made batches


def _varint(n):
    out = bytearray()
    n &= (1 << 64) - 1
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _key(num, wt):
    return _varint((num << 3) | wt)


def pb_uint(num, v):
    return _key(num, 0) + _varint(v) if v else b""


def pb_bytes(num, b):
    if isinstance(b, str):
        b = b.encode()
    return _key(num, 2) + _varint(len(b)) + b


def pb_fixed64(num, v):
    return _key(num, 1) + int(v).to_bytes(8, "little") if v else b""


def pb_packed(num, values, zigzag=False):
    if not values:
        return b""
    if zigzag:
        values = [(v << 1) ^ (v >> 63) for v in values]
    return pb_bytes(num, b"".join(_varint(v) for v in values))


def wire_batch(session, seq, node, strings, frames, stacks, series, samples, base=(0, 0, 0, 0, 0),
               period_ns=10_101_010, version=1, mappings=()):
    """Encodes a Batch. mappings: [(path string id, build id string id)];
    frames: [(kind, function string id, addr)] or [(kind, function, addr,
    mapping id + 1)]; stacks: [[frame ids root first]]; series: [[name id,
    value id, ...]]; samples: [(ts_ns, stack, series, tid, cpu)], time
    ordered; base: the five dict_base_* fields."""
    out = [pb_uint(1, version), pb_fixed64(2, session), pb_uint(3, seq), pb_bytes(4, node), pb_uint(5, period_ns)]
    for num, b in zip(range(6, 11), base):
        out.append(pb_uint(num, b))
    out += [pb_bytes(11, s) for s in strings]
    out += [pb_bytes(12, pb_uint(1, path) + pb_uint(2, bid)) for path, bid in mappings]
    for f in frames:
        kind, fn, addr, mapping = (tuple(f) + (0,))[:4]
        out.append(pb_bytes(13, pb_uint(1, kind) + pb_uint(2, mapping) + pb_uint(3, addr) + pb_uint(4, fn)))
    out += [pb_bytes(14, pb_packed(1, st)) for st in stacks]
    out += [pb_bytes(15, pb_packed(1, ls)) for ls in series]
    prev, deltas = 0, []
    for ts, *_ in samples:
        deltas.append(ts - prev)
        prev = ts
    out.append(pb_packed(16, deltas, zigzag=True))
    for col, num in ((1, 17), (2, 18), (3, 19), (4, 20)):
        out.append(pb_packed(num, [s[col] for s in samples]))
    return b"".join(out)
