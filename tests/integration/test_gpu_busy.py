"""`flamewatch gpu-busy`: the GPU busy timeline from CUPTI PM sampling.

Runs the real command against the fake CUPTI (tests/fakes/fake_cupti_pm.c)
and the fake libcuda (tests/fakes/fake_cuda_driver.c), which make up
samples for a busy/idle schedule on a clock skewed from CLOCK_REALTIME, and
checks the lines the agent reads: device, busy, covered, error, stats.
"""

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import CRASH_RE, cuda_fakes

INTERVAL_NS = 100_000
# Slack for comparing timestamps mapped at different decodes: the clock
# offset is measured at each one.
JITTER_NS = 20_000
SKEW_NS = -7_000_000_000  # the fake CUPTI clock runs 7 s behind CLOCK_REALTIME
LINE_RE = {
    "device": re.compile(r"^device (\d+) (GPU-[0-9a-f-]{36}) (\S+) (\d+)$"),
    "busy": re.compile(r"^busy (\d+) (\d+) (\d+) (\d+)$"),
    # The fourth number: kernels dispatched inside, where the chip counts them.
    "covered": re.compile(r"^covered (\d+) (\d+) (\d+)(?: (\d+))?$"),
    "error": re.compile(r"^error (\d+|-) (\S+) (-?\d+) (.+)$"),
    "stats": re.compile(
        r"^stats (\d+) samples=(\d+) busy_samples=(\d+) overflows=(\d+) decode_errors=(\d+) decode_cpu_ns=(\d+)"
        r" dispatches=(\d+)$"
    ),
}


@pytest.fixture(scope="module")
def fakes(flamewatch):
    cupti = cuda_fakes(flamewatch)[2]
    cuda = cupti.parent / "libcuda.so.1"
    assert cupti.exists() and cuda.exists()
    return cupti, cuda


class Run:
    def __init__(self, rc, out, err, t0, t1):
        self.rc, self.out, self.err, self.t0, self.t1 = rc, out, err, t0, t1
        self.lines = out.splitlines()

    def describe(self):
        return f"rc={self.rc}\nstdout:\n{self.out[-4000:]}\nstderr:\n{self.err[-2000:]}"

    def parsed(self, kind, dev=None):
        """The fields of every line of kind (for device dev), in order; any
        line that matches no form fails the test."""
        got = []
        for line in self.lines:
            word = line.split(" ", 1)[0]
            assert word in LINE_RE and LINE_RE[word].match(line), f"bad line {line!r}\n{self.describe()}"
            if word != kind:
                continue
            m = LINE_RE[kind].match(line)
            fields = [int(g) if g.isdigit() else g for g in m.groups() if g is not None]
            if dev is None or fields[0] == dev:
                got.append(fields)
        return got

    def check_clean(self):
        assert not CRASH_RE.search(self.err), self.describe()
        # The fake CUPTI says so at exit when a session was left enabled.
        assert "fake CUPTI:" not in self.err, self.describe()


def gpu_busy(flamewatch, fakes, args=(), env=None, seconds=1.5, stop="eof", by_env=False):
    """Runs gpu-busy for seconds, then closes its stdin (stop="eof"), sends
    SIGTERM ("term"), or (None) closes it at once and waits for the exit."""
    cupti, cuda = fakes
    e = dict(os.environ)
    # Every third clock read comes back late, as when preempted on a busy
    # machine: the offset must not move by it, or spans would not join.
    e.update({"FAKE_CUPTI_SKEW_NS": str(SKEW_NS), "FAKE_CUPTI_TS_STALL_EVERY": "3"})
    for k in list(e):
        if k.startswith(("FAKE_PM_", "FAKE_CUDA_")) or k in ("FLAMEWATCH_CUPTI", "FLAMEWATCH_LIBCUDA"):
            del e[k]
    if by_env:
        e.update(FLAMEWATCH_CUPTI=str(cupti), FLAMEWATCH_LIBCUDA=str(cuda))
        argv = [str(flamewatch), "gpu-busy", *args]
    else:
        argv = [str(flamewatch), "gpu-busy", "--cupti", str(cupti), "--cuda", str(cuda), *args]
    e.update(env or {})
    t0 = time.time_ns()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=e, text=True)
    try:
        if stop is not None:
            try:
                p.wait(timeout=seconds)
            except subprocess.TimeoutExpired:
                pass
            if p.poll() is None and stop == "term":
                p.send_signal(signal.SIGTERM)
                # Exits on the signal alone, stdin still open (its output fits the pipe).
                p.wait(timeout=10)
        # Closes stdin: EOF, as when the parent dies.
        out, err = p.communicate(input="", timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    return Run(p.returncode, out, err, t0, time.time_ns())


def merge(spans, slack=JITTER_NS):
    """Touching spans (one running on across decodes) made one."""
    out = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1] + slack:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def test_busy_spans_follow_the_schedule(flamewatch, fakes):
    r = gpu_busy(flamewatch, fakes, env={"FAKE_PM_SCHEDULE": "50:50"}, by_env=True)
    assert r.rc == 0, r.describe()
    r.check_clean()
    assert r.parsed("device") == [[0, "GPU-fa4e0000-0000-4000-8000-000000000000", "GH100", INTERVAL_NS]], \
        r.describe()
    assert r.lines[0].startswith("device 0 "), r.describe()

    covered = [(s, e) for _, s, e, *_ in r.parsed("covered", 0)]
    assert len(covered) >= 10, r.describe()
    # One range per decode, each starting where the last ended: nothing lost.
    for (s0, e0), (s1, e1) in zip(covered, covered[1:]):
        assert s0 < e0 and abs(s1 - e0) <= JITTER_NS, f"hole or overlap {e0}..{s1}\n{r.describe()}"
    # On Unix time, the fake's 7 s skew removed: within the run, to a few ms.
    first, last = covered[0][0], covered[-1][1]
    assert r.t0 - 5_000_000 <= first and last <= r.t1 + 5_000_000, (r.t0, first, last, r.t1)
    assert last - first >= 1_200_000_000, r.describe()

    # Sampling starts at the fake's t0, the first sample's start: busy
    # [t0 + k*100ms, +50ms), cut at the end of coverage.
    t0 = first
    expected = []
    k = 0
    while t0 + k * 100_000_000 < last:
        a = t0 + k * 100_000_000
        b = min(a + 50_000_000, last)
        if b - a >= INTERVAL_NS:
            expected.append((a, b))
        k += 1
    spans = merge([(s, e) for _, s, e, _ in r.parsed("busy", 0)])
    assert len(spans) == len(expected), f"{spans}\n{expected}\n{r.describe()}"
    for (s, e), (a, b) in zip(spans, expected):
        assert abs(s - a) <= INTERVAL_NS + JITTER_NS and abs(e - b) <= INTERVAL_NS + JITTER_NS, \
            f"span {s}..{e} against {a}..{b}"
    # Every span lies within the coverage; busy throughout but for the
    # parts of its edge samples that fell in the idle phase.
    for _, s, e, idle in r.parsed("busy", 0):
        assert first - JITTER_NS <= s < e <= last + JITTER_NS
        assert 0 <= idle <= 2 * INTERVAL_NS, (s, e, idle)


def test_a_little_compute_in_every_sample_is_busy(flamewatch, fakes):
    """A launch-bound loop of tiny kernels keeps compute in flight for a
    small part of every sample (5 % here): busy, as the activity records'
    timeline says of it. A threshold of half the cycles called such a loop
    idle throughout on an H200."""
    r = gpu_busy(flamewatch, fakes, env={"FAKE_PM_SCHEDULE": "300:100:0.05"}, seconds=1.8)
    assert r.rc == 0, r.describe()
    lines = r.parsed("busy", 0)
    spans = merge([(s, e) for _, s, e, _ in lines])
    assert len(spans) >= 3, r.describe()
    inner = spans[1:-1] or spans
    for s, e in inner:
        assert abs((e - s) - 300_000_000) <= 2 * INTERVAL_NS + JITTER_NS, spans
    # Each span says how little of it computed: 95 % of it is idle inside,
    # which the idle answer counts though no gap can place it.
    for _, s, e, idle in lines:
        assert abs(idle - 0.95 * (e - s)) <= 0.1 * INTERVAL_NS + 1000, (s, e, idle)
    assert sum(e - s - idle for _, s, e, idle in lines) > 0


@pytest.mark.parametrize("chip", ["counts", "no_counts"])
def test_kernel_dispatch_edges_are_not_busy(flamewatch, fakes, chip):
    """Compute-active cycles count each kernel's launch and drain, which
    its record does not: on a loop of tiny kernels that reads busier than
    the records. Where the chip counts dispatches, 285 ns each are taken
    back out (the fake adds exactly that per dispatch); a chip without the
    counter is sampled all the same, uncorrected."""
    env = {"FAKE_PM_SCHEDULE": "300:100:0.2", "FAKE_PM_DISPATCH_PER_MS": "200",
           "FAKE_PM_NO_DISPATCH": "1" if chip == "no_counts" else "0"}
    r = gpu_busy(flamewatch, fakes, args=["--stats", "500ms"], env=env, seconds=1.8)
    assert r.rc == 0, r.describe()
    r.check_clean()
    lines = r.parsed("busy", 0)
    assert len(merge([(s, e) for _, s, e, _ in lines])) >= 3, r.describe()
    # 200 dispatches a ms of 285 ns each: 5.7 % of the time on top of the 20 % computed.
    level = 0.2 if chip == "counts" else 0.2 + 200 * 285e-6
    for _, s, e, idle in lines:
        assert abs(idle - (1 - level) * (e - s)) <= 0.1 * INTERVAL_NS + 1000, (s, e, idle, r.describe())
    stats = r.parsed("stats", 0)
    assert stats, r.describe()
    covered = r.parsed("covered", 0)
    if chip == "counts":
        # 20 a busy sample of 100 us; edge samples, partly busy, have fewer.
        busy_samples, dispatches = stats[-1][2], stats[-1][6]
        assert 20 * (busy_samples - 2 * len(stats) * 4) <= dispatches <= 20 * busy_samples, stats
        # The covered lines carry them, for the agent to weigh GPU time by.
        assert covered and all(len(c) == 4 for c in covered), r.describe()
        assert sum(c[3] for c in covered) == dispatches, (covered, stats)
    else:
        assert stats[-1][6] == 0, stats
        assert covered and all(len(c) == 3 for c in covered), r.describe()


def test_sigterm_stops_cleanly_after_a_last_decode(flamewatch, fakes):
    r = gpu_busy(flamewatch, fakes, args=["--decode", "200ms"], env={"FAKE_PM_SCHEDULE": "1000:0"},
                 seconds=0.9, stop="term")
    assert r.rc == 0, r.describe()
    r.check_clean()
    covered = r.parsed("covered", 0)
    assert covered, r.describe()
    # The decode after Stop covers the time up to the signal, not the last period only.
    assert r.t1 - covered[-1][2] < 150_000_000, r.describe()
    busy = merge([(s, e) for _, s, e, _ in r.parsed("busy", 0)])
    assert len(busy) == 1, r.describe()  # always busy: one span once merged
    assert abs(busy[0][0] - covered[0][1]) <= JITTER_NS, r.describe()
    assert abs(busy[0][1] - covered[-1][2]) <= JITTER_NS, r.describe()


def test_eof_on_stdin_stops_it(flamewatch, fakes):
    start = time.monotonic()
    r = gpu_busy(flamewatch, fakes, seconds=0.3)
    assert r.rc == 0, r.describe()
    assert time.monotonic() - start < 2, r.describe()
    r.check_clean()
    assert r.parsed("device") and r.parsed("covered"), r.describe()
    assert not r.parsed("busy"), r.describe()  # no schedule: idle


def test_hardware_busy_is_reported_once_and_retried(flamewatch, fakes):
    r = gpu_busy(flamewatch, fakes, args=["--retry", "200ms"],
                 env={"FAKE_PM_FAIL": "cuptiPmSamplingEnable:26:3"}, seconds=1.5)
    assert r.rc == 0, r.describe()
    r.check_clean()
    errors = r.parsed("error")
    assert errors == [[0, "cuptiPmSamplingEnable", 26, "CUPTI_ERROR_HARDWARE_BUSY"]], r.describe()
    assert r.lines[0].startswith("error 0 cuptiPmSamplingEnable 26 "), r.describe()
    # Three refusals, then the device line, after about three retries.
    dev = [i for i, line in enumerate(r.lines) if line.startswith("device 0 ")]
    assert len(dev) == 1 and r.parsed("covered", 0), r.describe()
    first_cov = r.parsed("covered", 0)[0][1]
    assert first_cov - r.t0 >= 500_000_000, r.describe()


def test_a_device_always_busy_keeps_it_waiting(flamewatch, fakes):
    r = gpu_busy(flamewatch, fakes, args=["--retry", "100ms"],
                 env={"FAKE_PM_FAIL": "cuptiPmSamplingEnable:26", "FAKE_CUDA_DEVICES": "2",
                      "FAKE_PM_FAIL_DEVICE": "1"}, seconds=1.0)
    assert r.rc == 0, r.describe()  # still running when stdin closed
    r.check_clean()
    assert r.parsed("error") == [[1, "cuptiPmSamplingEnable", 26, "CUPTI_ERROR_HARDWARE_BUSY"]], r.describe()
    assert [d[:2] for d in r.parsed("device")] == [[0, "GPU-fa4e0000-0000-4000-8000-000000000000"]], \
        r.describe()
    assert r.parsed("covered", 0) and not r.parsed("covered", 1), r.describe()


def test_overflowed_decodes_have_no_covered_line(flamewatch, fakes):
    r = gpu_busy(flamewatch, fakes, args=["--stats", "500ms"],
                 env={"FAKE_PM_OVERFLOW_EVERY": "3", "FAKE_PM_SCHEDULE": "30:20"}, seconds=1.6)
    assert r.rc == 0, r.describe()
    r.check_clean()
    covered = [(s, e) for _, s, e, *_ in r.parsed("covered", 0)]
    holes = [s1 - e0 for (_, e0), (s1, _) in zip(covered, covered[1:]) if s1 - e0 > JITTER_NS]
    # Every third decode (about 100 ms) is missing, and coverage resumes
    # after each: the session was started again.
    assert len(holes) >= 3, r.describe()
    assert all(h >= 50_000_000 for h in holes), holes
    assert len(covered) >= 6, r.describe()
    stats = r.parsed("stats", 0)
    assert stats and stats[-1][3] >= 2, r.describe()  # overflows=
    assert stats[-1][1] > 0 and 0 < stats[-1][2] < stats[-1][1], r.describe()
    # The overflowed decodes' samples still give busy spans.
    assert r.parsed("busy", 0), r.describe()


def test_no_cupti_exits_1_with_a_load_error(flamewatch, fakes, tmp_path):
    missing = tmp_path / "libcupti.so"
    r = gpu_busy(flamewatch, fakes, args=["--cupti", str(missing)], stop=None)
    assert r.rc == 1, r.describe()
    r.check_clean()
    assert len(r.lines) == 1 and r.lines[0].startswith("error - load 0 cannot load CUPTI"), r.describe()
    assert str(missing) in r.lines[0], r.describe()


def test_nothing_to_sample_exits_1(flamewatch, fakes):
    r = gpu_busy(flamewatch, fakes, env={"FAKE_CUDA_DEVICES": "0"}, stop=None)
    assert r.rc == 1 and r.lines == ["error - devices 0 no CUDA device"], r.describe()
    r = gpu_busy(flamewatch, fakes, env={"FAKE_PM_FAIL": "cuptiProfilerDeviceSupported:0"}, stop=None)
    assert r.rc == 1, r.describe()
    r.check_clean()
    assert len(r.lines) == 1 and r.lines[0].startswith("error 0 cuptiProfilerDeviceSupported 27 not supported"), \
        r.describe()
    r = gpu_busy(flamewatch, fakes, env={"FAKE_PM_FAIL": "cuptiPmSamplingEnable:35"}, stop=None)
    assert r.rc == 1, r.describe()
    r.check_clean()
    assert r.lines == ["error 0 cuptiPmSamplingEnable 35 CUPTI_ERROR_INSUFFICIENT_PRIVILEGES"], r.describe()


@pytest.mark.parametrize("args", [["--interval", "fast"], ["--interval", "0us"], ["--interval", "2s"],
                                  ["--decode", "1ms"], ["--bogus"], ["extra"]])
def test_usage_errors_exit_2(flamewatch, fakes, args):
    r = gpu_busy(flamewatch, fakes, args=args, stop=None)
    assert r.rc == 2, r.describe()
    assert r.out == "" and r.err.strip(), r.describe()


def test_hidden_from_the_command_list(flamewatch):
    out = subprocess.run([str(flamewatch), "--help"], capture_output=True, text=True, timeout=30).stdout
    assert "record" in out and "gpu-busy" not in out, out
