"""Shared fixtures and helpers for the flamewatch system tests.

These tests drive the real build/flamewatch binary against the workload
programs in build/workloads (tests/workloads/*), whose call chains are known,
and check what comes out. They need root (BPF) and run from the repository
root: `/usr/bin/python3 -m pytest -q tests/integration`. Set FLAMEWATCH to
test a binary other than build/flamewatch.
"""

import collections
import gzip
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "build"
# FLAMEWATCH=/path/to/binary tests another build (an installed one, say).
FLAMEWATCH = Path(os.environ.get("FLAMEWATCH", BUILD / "flamewatch"))
WORKLOADS = BUILD / "workloads"

# Extra seconds allowed on top of a recording's own duration before a run is
# declared hung: loading BPF, symbolizing and writing take a while on a busy
# 2-core machine.
SLACK_S = 60

# Frames allowed between the comm and `main` in a C/C++ stack: the C runtime's
# start-up code, resolved or not.
LIBC_START_RE = re.compile(
    r"^(_start|__libc_start_main(@\S*|_impl|_alias_\d+)?|__libc_start_call_main"
    r"|(\S*/)?(libc\.so\.6|ld-linux-x86-64\.so\.2)\+0x[0-9a-f]+)$"
)

# Signs that the binary crashed instead of reporting an error.
CRASH_RE = re.compile(
    r"Segmentation fault|core dumped|AddressSanitizer|UndefinedBehaviorSanitizer"
    r"|Traceback \(most recent call last\)|Assertion .* failed|stack smashing|double free",
)


# ---------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def flamewatch():
    """Path to build/flamewatch; the session is skipped without root."""
    if os.geteuid() != 0:
        pytest.skip("flamewatch system tests need root (BPF)")
    if not os.access(FLAMEWATCH, os.X_OK):
        pytest.fail(f"{FLAMEWATCH} is missing: run `make` in {REPO} first", pytrace=False)
    return FLAMEWATCH


@pytest.fixture(scope="session")
def workloads():
    """Path to build/workloads, (re)built with `make workloads` once per session."""
    res = subprocess.run(
        ["make", "-s", "workloads"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    if res.returncode != 0:
        pytest.fail(
            f"`make workloads` failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}",
            pytrace=False,
        )
    return WORKLOADS


@pytest.fixture
def fw(flamewatch, tmp_path):
    """A Runner bound to the binary and a per-test temporary directory."""
    return Runner(flamewatch, tmp_path)


@pytest.fixture
def procs(tmp_path):
    """flamewatch processes (serverlib.Procs) with their logs, stopped afterwards."""
    from serverlib import Procs

    ps = Procs(tmp_path / "logs")
    yield ps
    ps.close_all()


@pytest.fixture
def clients():
    """Makes serverlib.Client(port, ...) objects, all closed afterwards."""
    from serverlib import Client

    made = []

    def _make(port, **kw):
        c = Client(port, **kw)
        made.append(c)
        return c

    yield _make
    for c in made:
        c.close()


@pytest.fixture
def spawn():
    """Starts background workloads and makes sure they are gone afterwards."""
    procs = []

    def _spawn(argv, **kw):
        p = subprocess.Popen([str(a) for a in argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kw)
        procs.append(p)
        return p

    yield _spawn
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
        if p.stderr:
            p.stderr.close()


# ---------------------------------------------------------------------------
# running the binary


class Result:
    """Outcome of one flamewatch run."""

    def __init__(self, argv, returncode, stdout, stderr, wall_s):
        self.argv = argv
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        self.wall_s = wall_s

    def describe(self):
        out = self.stdout if isinstance(self.stdout, str) else self.stdout.decode("utf-8", "replace")
        return (
            f"command: {' '.join(self.argv)}\n"
            f"exit status: {self.returncode}, wall {self.wall_s:.1f} s\n"
            f"--- stderr (last 3000 chars) ---\n{self.stderr[-3000:]}\n"
            f"--- stdout (first 2000 chars) ---\n{out[:2000]}"
        )

    def check_ok(self):
        if self.returncode != 0:
            pytest.fail("flamewatch failed\n" + self.describe(), pytrace=False)
        return self

    def check_error(self, *must_mention):
        """Asserts a clean error exit: non-zero status (not a signal), a
        message on stderr, no crash, and the given words in the message."""
        msg = "expected a clean error exit\n" + self.describe()
        assert self.returncode != 0, msg
        assert 0 < self.returncode < 128, "killed by a signal or crashed\n" + msg
        assert self.stderr.strip(), "no message on stderr\n" + msg
        assert not CRASH_RE.search(self.stderr), "crash report on stderr\n" + msg
        for word in must_mention:
            assert word.lower() in self.stderr.lower(), f"stderr does not mention {word!r}\n" + msg
        return self


class Runner:
    def __init__(self, binary, tmp):
        self.binary = Path(binary)
        self.tmp = Path(tmp)

    def run(self, args, timeout=SLACK_S, binary_output=False, cwd=None, preexec=None):
        argv = [str(self.binary)] + [str(a) for a in args]
        t0 = time.monotonic()
        try:
            res = subprocess.run(
                argv,
                capture_output=True,
                timeout=timeout,
                cwd=cwd or self.tmp,
                preexec_fn=preexec,
            )
        except subprocess.TimeoutExpired as e:
            err = (e.stderr or b"").decode("utf-8", "replace")
            pytest.fail(
                f"flamewatch did not finish within {timeout} s: {' '.join(argv)}\n--- stderr ---\n{err[-3000:]}",
                pytrace=False,
            )
        wall = time.monotonic() - t0
        out = res.stdout if binary_output else res.stdout.decode("utf-8", "replace")
        return Result(argv, res.returncode, out, res.stderr.decode("utf-8", "replace"), wall)

    def record(self, args, duration, out_name="out.folded", fmt="folded", hz=499):
        """Runs `flamewatch record -F hz --format fmt -o OUT ARGS` and returns
        (Result, Path of OUT). `duration` is how long the recording itself
        should take; it only sets the time-out."""
        out = self.tmp / out_name
        pre = ["record", "-F", str(hz)]
        if fmt:
            pre += ["--format", fmt]
        pre += ["-o", str(out)]
        res = self.run(pre + list(args), timeout=duration + SLACK_S)
        return res, out

    def record_folded(self, args, duration, hz=499):
        """Records to a folded file and returns (Result, Profile)."""
        res, out = self.record(args, duration, hz=hz)
        res.check_ok()
        if not out.exists():
            pytest.fail(f"no output file {out}\n" + res.describe(), pytrace=False)
        return res, Profile.parse(out.read_text(errors="replace"), source=str(out))


# ---------------------------------------------------------------------------
# folded profiles

FOLDED_LINE_RE = re.compile(r"^(.+) (\d+)$")


def is_kernel(frame):
    return frame.endswith("_[k]")


def contains_run(seq, run):
    """True when `run` occurs in `seq` as consecutive elements."""
    n = len(run)
    return any(seq[i : i + n] == run for i in range(len(seq) - n + 1))


class Profile:
    """Folded stacks: {"comm;root;...;leaf": count}."""

    def __init__(self, stacks, source="profile"):
        self.stacks = dict(stacks)
        self.source = source

    @classmethod
    def parse(cls, text, source="profile"):
        stacks = collections.Counter()
        bad = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            m = FOLDED_LINE_RE.match(line)
            if not m or ";;" in m.group(1) or m.group(1).startswith(";"):
                bad.append(f"{n}: {line[:200]}")
                continue
            stacks[m.group(1)] += int(m.group(2))
        if bad:
            pytest.fail(
                f"{source}: {len(bad)} line(s) are not `comm;frame;... COUNT`:\n" + "\n".join(bad[:10]),
                pytrace=False,
            )
        return cls(stacks, source)

    @property
    def total(self):
        return sum(self.stacks.values())

    def comms(self):
        c = collections.Counter()
        for s, n in self.stacks.items():
            c[s.split(";", 1)[0]] += n
        return c

    def for_comm(self, comm):
        # The kernel keeps 15 characters of a task's name.
        comm = comm[:15]
        return Profile(
            {s: n for s, n in self.stacks.items() if s.split(";", 1)[0] == comm},
            source=f"{self.source} [comm {comm}]",
        )

    def count(self, pred):
        """Samples whose frame list (comm first, leaf last) satisfies pred."""
        return sum(n for s, n in self.stacks.items() if pred(s.split(";")))

    def count_frame(self, name):
        return self.count(lambda f: name in f)

    def count_run(self, run):
        return self.count(lambda f: contains_run(f, run))

    def fraction(self, pred):
        return self.count(pred) / self.total if self.total else 0.0

    def top(self, n=15):
        lines = [f"{c:7d}  {s}" for s, c in sorted(self.stacks.items(), key=lambda kv: -kv[1])[:n]]
        comms = ", ".join(f"{k}={v}" for k, v in self.comms().most_common(10))
        return (
            f"{self.source}: {self.total} samples, {len(self.stacks)} stacks; by comm: {comms or '-'}\n"
            + "\n".join(lines)
        )


def require(cond, message, profile=None):
    """Fails with the message and the profile's top stacks."""
    if not cond:
        text = message
        if profile is not None:
            text += "\n\ntop stacks:\n" + profile.top()
        pytest.fail(text, pytrace=False)


# ---------------------------------------------------------------------------
# pprof (profile.proto) reader, enough to check what flamewatch writes


def _varint(buf, i):
    shift = result = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7
        if shift > 70:
            raise ValueError("varint too long")


def _fields(buf):
    """Yields (field number, wire type, value) of one message."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
        elif wt == 1:
            v, i = int.from_bytes(buf[i : i + 8], "little"), i + 8
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated length-delimited field")
            v, i = buf[i : i + n], i + n
        elif wt == 5:
            v, i = int.from_bytes(buf[i : i + 4], "little"), i + 4
        else:
            raise ValueError(f"unsupported wire type {wt}")
        yield num, wt, v


def _ints(wt, v, signed=False):
    """A repeated integer field: packed (wire type 2) or not."""
    if wt == 2:
        out, i = [], 0
        while i < len(v):
            x, i = _varint(v, i)
            out.append(x)
    else:
        out = [v]
    if signed:
        out = [x - (1 << 64) if x >= 1 << 63 else x for x in out]
    return out


class Pprof:
    """A decoded profile.proto: sample types, samples with their labels and
    stacks as function names (root first), period."""

    def __init__(self, data):
        if data[:2] == b"\x1f\x8b":
            self.gzipped = True
            data = gzip.decompress(data)
        else:
            self.gzipped = False
        strings, raw_samples, sample_types = [], [], []
        locations, functions = {}, {}
        self.period = 0
        self.period_type = None
        self.duration_nanos = 0
        self.mappings = 0
        for num, wt, v in _fields(data):
            if num == 1:
                sample_types.append(self._value_type(v))
            elif num == 2:
                raw_samples.append(v)
            elif num == 3:
                self.mappings += 1
            elif num == 4:
                lid, fids = 0, []
                for n2, w2, v2 in _fields(v):
                    if n2 == 1:
                        lid = v2
                    elif n2 == 4:
                        for n3, _, v3 in _fields(v2):
                            if n3 == 1:
                                fids.append(v3)
                locations[lid] = fids
            elif num == 5:
                fid, name = 0, 0
                for n2, _, v2 in _fields(v):
                    if n2 == 1:
                        fid = v2
                    elif n2 == 2:
                        name = v2
                functions[fid] = name
            elif num == 6:
                strings.append(v.decode("utf-8", "replace"))
            elif num == 10:
                self.duration_nanos = v
            elif num == 11:
                self.period_type = self._value_type(v)
            elif num == 12:
                self.period = v
        self.strings = strings
        s = lambda i: strings[i] if 0 <= i < len(strings) else f"<bad string {i}>"
        self.sample_types = [(s(t), s(u)) for t, u in sample_types]
        if self.period_type:
            self.period_type = (s(self.period_type[0]), s(self.period_type[1]))
        self.locations_without_function = 0
        self.samples = []
        for raw in raw_samples:
            locs, values, labels = [], [], {}
            for n2, w2, v2 in _fields(raw):
                if n2 == 1:
                    locs += _ints(w2, v2)
                elif n2 == 2:
                    values += _ints(w2, v2, signed=True)
                elif n2 == 3:
                    key, sv, nv = 0, 0, None
                    for n3, _, v3 in _fields(v2):
                        if n3 == 1:
                            key = v3
                        elif n3 == 2:
                            sv = v3
                        elif n3 == 3:
                            nv = v3
                    # proto3 leaves out zero values: a label with neither
                    # str nor num is a num label of 0 (e.g. cpu 0).
                    labels[s(key)] = s(sv) if sv else (nv if nv is not None else 0)
            frames = []
            for lid in reversed(locs):  # location_id[0] is the leaf
                fids = locations.get(lid)
                if fids is None:
                    frames.append(f"<missing location {lid}>")
                    continue
                if not fids:
                    self.locations_without_function += 1
                    frames.append(f"<location {lid}>")
                for fid in reversed(fids):  # the last line is the outermost caller
                    frames.append(s(functions.get(fid, 0)) or f"<function {fid}>")
            self.samples.append((values, labels, frames))

    @staticmethod
    def _value_type(buf):
        t = u = 0
        for n, _, v in _fields(buf):
            if n == 1:
                t = v
            elif n == 2:
                u = v
        return (t, u)

    def folded(self, comm=None):
        """A Profile of sample counts (first value) keyed by comm;stack."""
        c = collections.Counter()
        for values, labels, frames in self.samples:
            cm = str(labels.get("comm", "?"))
            if comm is not None and cm != comm[:15]:
                continue
            c[";".join([cm] + frames)] += values[0] if values else 0
        return Profile(c, source="pprof")


# ---------------------------------------------------------------------------
# misc


def cuda_fakes(flamewatch):
    """The real libflamewatch-cuda.so beside flamewatch, and the fake CUPTI
    host and library it runs against (built first if need be): (lib, host,
    cupti)."""
    build = Path(flamewatch).resolve().parent
    res = subprocess.run(["make", "-s", "fakes"], cwd=build.parent, capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    return (build / "libflamewatch-cuda.so", build / "fakes" / "cuda_host",
            build / "fakes" / "libcupti.so")


def go_env(tmp):
    env = dict(os.environ)
    env.update(HOME=str(tmp), GOCACHE=str(Path(tmp) / "gocache"), PPROF_TMPDIR=str(tmp), GOFLAGS="")
    return env


def go_binary():
    go = shutil.which("go") or "/usr/lib/go/bin/go"
    if not os.access(go, os.X_OK):
        pytest.skip("go is not installed (needed for `go tool pprof`)")
    return go
