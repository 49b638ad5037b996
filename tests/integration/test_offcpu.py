"""Off-CPU profiles (issue 30): real BPF on this kernel, the real binary.

tests/workloads/offcpu.c blocks in one known function per mode and prints
the wall time it spent in the blocking calls: the truth. `record --off-cpu`
must find that time (within 10 %) and put >= 90 % of it under the blocking
function; `run` must store it as type=offcpu for every format of
/api/v1/profile, and store none with --no-off-cpu.
"""
import collections
import time

import pytest

from conftest import Pprof
from serverlib import Client, Procs, free_port, register_plugin, window

NS = 1_000_000_000


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


def _truth(stdout):
    return {k: int(v) for k, v in (line.split() for line in stdout.splitlines() if line.strip())}


def _pid_folded(pp, pid):
    """stack (root first, ';'-joined) -> ns for one pid of a pprof."""
    c = collections.Counter()
    for values, labels, frames in pp.samples:
        if labels.get("pid") == pid:
            c[";".join(frames)] += values[0]
    return c


def _record(flamewatch, workloads, tmp_path, *args):
    import subprocess

    out = tmp_path / "offcpu.pb.gz"
    res = subprocess.run([flamewatch, "record", "--off-cpu", "-q", "-o", str(out), "--",
                          str(workloads / "offcpu"), *args], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    truth = _truth(res.stdout)
    pp = Pprof(out.read_bytes())
    assert pp.sample_types == [("off_cpu", "nanoseconds")], pp.sample_types
    return truth, _pid_folded(pp, truth["pid"])


def _under(folded, function):
    return sum(v for k, v in folded.items() if function in k.split(";"))


@pytest.mark.parametrize("mode,function", [
    ("sleep", "block_in_sleep"),
    ("pipe", "block_in_pipe_read"),
    ("futex", "block_in_futex"),
    ("disk", "block_in_disk_read"),
])
def test_blocked_time_under_the_blocking_function(flamewatch, workloads, tmp_path, mode, function):
    truth, folded = _record(flamewatch, workloads, tmp_path, mode, "3")
    if mode == "disk" and truth["blocked_ns"] / truth["blocks"] < 2e6:
        pytest.skip("disk reads here take under 2 ms: mostly below the 1 ms minimum")
    total, under = sum(folded.values()), _under(folded, function)
    msg = f"{mode}: truth {truth['blocked_ns'] / 1e6:.1f} ms, profile {total / 1e6:.1f} ms, " \
          f"under {function} {under / 1e6:.1f} ms; top: {folded.most_common(3)}"
    print(msg)
    assert abs(total - truth["blocked_ns"]) <= 0.10 * truth["blocked_ns"], msg
    assert under >= 0.90 * total, msg
    # Kernel frames end at __schedule(), not in the tracing that saw it.
    leaves = {k.split(";")[-1] for k in folded}
    assert not any("bpf" in leaf or "traceiter" in leaf for leaf in leaves), leaves


def test_process_blocked_80_percent(flamewatch, workloads, tmp_path):
    """Issue 30's bar: >= 90 % under the function, total within 15 %."""
    truth, folded = _record(flamewatch, workloads, tmp_path, "sleep", "4", "2", "9")
    total, under = sum(folded.values()), _under(folded, "block_in_sleep")
    share = truth["blocked_ns"] / truth["total_ns"]
    msg = f"blocked {share:.0%} of the time: truth {truth['blocked_ns'] / 1e6:.1f} ms, " \
          f"profile {total / 1e6:.1f} ms, under block_in_sleep {under / 1e6:.1f} ms"
    print(msg)
    assert 0.7 <= share <= 0.9, msg
    assert abs(total - truth["blocked_ns"]) <= 0.15 * truth["blocked_ns"], msg
    assert under >= 0.90 * total, msg


def _run(ps, flamewatch, client, port, data, *extra):
    srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", data,
                    "--interval", "1s", "--node", "fwtest-offcpu", *extra], "run")
    assert srv.wait_output(r"profiling this host", 60), srv.describe()
    client.wait_healthy(proc=srv)
    return srv


def _profile(client, fmt, pid, frm, to):
    return client.get_ok("/api/v1/profile", {"type": "offcpu", "format": fmt,
                                             "query": f'{{pid="{pid}"}}', **window(frm, to)})


def test_run_stores_offcpu_in_every_format(flamewatch, workloads, tmp_path):
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        _run(ps, flamewatch, client, port, tmp_path / "data", "--off-cpu")
        t0 = time.time()
        work = ps.start([workloads / "offcpu", "futex", "3"], "offcpu")
        assert work.wait(30) == 0, work.describe()
        truth = _truth(work.text())
        pid, t1 = truth["pid"], time.time() + 1
        deadline = time.time() + 20
        while True:
            total = _profile(client, "json", pid, t0 - 1, t1).json()["total"]
            if total >= 0.9 * truth["blocked_ns"] or time.time() > deadline:
                break
            time.sleep(0.5)
        msg = f"truth {truth['blocked_ns']} ns, json total {total}"
        assert abs(total - truth["blocked_ns"]) <= 0.10 * truth["blocked_ns"], msg

        folded = collections.Counter()
        for line in _profile(client, "folded", pid, t0 - 1, t1).text.splitlines():
            stack, n = line.rsplit(" ", 1)
            folded[stack] += int(n)
        assert sum(folded.values()) == total, (sum(folded.values()), total)
        assert _under(folded, "block_in_futex") >= 0.9 * total, folded.most_common(3)

        pp = Pprof(_profile(client, "pprof", pid, t0 - 1, t1).body)
        assert pp.sample_types == [("off_cpu", "nanoseconds")], pp.sample_types
        assert sum(v[0] for v, _, _ in pp.samples) == total

        # The selector keeps other processes out; a bad type is refused.
        other = _profile(client, "json", 1, t0 - 1, t1).json()["total"]
        assert other < total
        r = client.get("/api/v1/profile", {"type": "offcpus", **window(t0 - 1, t1)})
        assert r.status == 400 and "offcpu" in r.text, r.describe()
    finally:
        ps.close_all()
        client.close()


@pytest.mark.parametrize("flag", [None, "--no-off-cpu"])
def test_no_off_cpu_stores_none(flamewatch, workloads, tmp_path, flag):
    """Off by default in run (and agent), and with --no-off-cpu after --off-cpu."""
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        _run(ps, flamewatch, client, port, tmp_path / "data",
             *(["--off-cpu", flag] if flag else []))
        t0 = time.time()
        work = ps.start([workloads / "offcpu", "sleep", "2"], "offcpu")
        assert work.wait(30) == 0, work.describe()
        time.sleep(2.5)
        r = client.get_ok("/api/v1/profile", {"type": "offcpu", "format": "json",
                                              **window(t0 - 1, time.time())})
        assert r.json()["total"] == 0, r.text[:500]
    finally:
        ps.close_all()
        client.close()
