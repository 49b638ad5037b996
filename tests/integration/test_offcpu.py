"""Off-CPU profiles (issue 30): real BPF on this kernel, the real binary.

tests/workloads/offcpu.c blocks in one known function per mode and prints
the wall time it spent in the blocking calls: the truth. `record --off-cpu`
must find that time (within 10 %) and put >= 90 % of it under the blocking
function; `run` must store it as type=offcpu for every format of
/api/v1/profile by default, and store none with --no-off-cpu.

`run` and `agent` walk the stack only of blocks predicted to reach the
minimum (where the thread's last blocks at the same call site did); a long
block that was not walked keeps its time, under one frame,
[off-CPU: stack not taken], and the agent counts it in its metrics.
"""
import collections
import os
import re
import subprocess
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
    # The disk mode's setup (writing and syncing its file) and the exit that
    # frees it block too, outside the span the workload times: not counted.
    timed = {k: v for k, v in folded.items() if not {"_disk_file", "do_exit"} & set(k.split(";"))}
    total, under = sum(timed.values()), _under(timed, function)
    msg = f"{mode}: truth {truth['blocked_ns'] / 1e6:.1f} ms, profile {total / 1e6:.1f} ms, " \
          f"under {function} {under / 1e6:.1f} ms; top: {folded.most_common(3)}"
    print(msg)
    assert abs(total - truth["blocked_ns"]) <= 0.10 * truth["blocked_ns"], msg
    assert under >= 0.90 * total, msg
    # Kernel frames end at __schedule(), not in the tracing that saw it.
    leaves = {k.split(";")[-1] for k in folded}
    assert not any("bpf" in leaf or "traceiter" in leaf for leaf in leaves), leaves


def test_bounded_loops_walk_off_cpu_stacks(flamewatch, workloads, tmp_path, monkeypatch):
    """The stack walk at sched_switch on kernels without bpf_loop() (see
    test_kernel_floor.py): forced here, the same stacks."""
    monkeypatch.setenv("FLAMEWATCH_NO_BPF_LOOP", "1")
    truth, folded = _record(flamewatch, workloads, tmp_path, "sleep", "2")
    total, under = sum(folded.values()), _under(folded, "block_in_sleep")
    msg = f"bounded: truth {truth['blocked_ns'] / 1e6:.1f} ms, profile {total / 1e6:.1f} ms, " \
          f"under block_in_sleep {under / 1e6:.1f} ms"
    print(msg)
    assert abs(total - truth["blocked_ns"]) <= 0.10 * truth["blocked_ns"], msg
    assert under >= 0.90 * total, msg


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


# A kernel frame: folded output marks it with FlameGraph's "_[k]".
NOT_TAKEN = "[off-CPU: stack not taken]_[k]"


def _run(ps, flamewatch, client, port, data, *extra, env=None):
    srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", data,
                    "--interval", "1s", "--node", "fwtest-offcpu", *extra], "run", env=env)
    assert srv.wait_output(r"profiling this host", 60), srv.describe()
    client.wait_healthy(proc=srv)
    return srv


def _profile(client, fmt, pid, frm, to):
    return client.get_ok("/api/v1/profile", {"type": "offcpu", "format": fmt,
                                             "query": f'{{pid="{pid}"}}', **window(frm, to)})


def _folded(client, pid, frm, to):
    folded = collections.Counter()
    for line in _profile(client, "folded", pid, frm, to).text.splitlines():
        stack, n = line.rsplit(" ", 1)
        folded[stack] += int(n)
    return folded


def _wait_folded(client, pid, frm, to, want_ns):
    """The pid's off-CPU profile once it holds want_ns (or 20 s passed)."""
    deadline = time.time() + 20
    while True:
        folded = _folded(client, pid, frm, to)
        if sum(folded.values()) >= want_ns or time.time() > deadline:
            return folded
        time.sleep(0.5)


def _long_stacks(folded):
    """Time under main but not under block_short: the long blocks' own
    stacks. main, not block_in_sleep: a process the unwinder meets first
    at its long blocks has a few walked by frame pointers alone, without
    the leaf functions, until it is described."""
    return sum(v for k, v in folded.items()
               if "main" in k.split(";") and "block_short" not in k.split(";"))


def test_run_stores_offcpu_in_every_format(flamewatch, workloads, tmp_path):
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        _run(ps, flamewatch, client, port, tmp_path / "data")
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

        folded = _folded(client, pid, t0 - 1, t1)
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


def test_run_without_strips_attaches_the_handler_alone(flamewatch, workloads, tmp_path):
    """With CPU strips on, their sched_switch program tail-calls the
    off-CPU handler; with --no-cpu-strips it is attached on its own."""
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        _run(ps, flamewatch, client, port, tmp_path / "data", "--no-cpu-strips")
        t0 = time.time()
        work = ps.start([workloads / "offcpu", "futex", "2"], "offcpu")
        assert work.wait(30) == 0, work.describe()
        truth = _truth(work.text())
        folded = _wait_folded(client, truth["pid"], t0 - 1, time.time() + 1,
                              0.9 * truth["blocked_ns"])
        total = sum(folded.values())
        msg = f"truth {truth['blocked_ns']} ns, profile {total} ns; {folded.most_common(2)}"
        assert abs(total - truth["blocked_ns"]) <= 0.10 * truth["blocked_ns"], msg
        assert _under(folded, "block_in_futex") >= 0.9 * total, msg
    finally:
        ps.close_all()
        client.close()


def test_run_leaves_its_own_blocks_out(flamewatch, workloads, tmp_path):
    """The agent's own threads block between its ticks all along: those
    blocks are left out (each cost a stack walk and a record, issue 31),
    while a workload's blocks beside them are still stored."""
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = _run(ps, flamewatch, client, port, tmp_path / "data")
        t0 = time.time()
        work = ps.start([workloads / "offcpu", "sleep", "2"], "offcpu")
        assert work.wait(30) == 0, work.describe()
        truth = _truth(work.text())
        folded = _wait_folded(client, truth["pid"], t0 - 1, time.time() + 1,
                              0.9 * truth["blocked_ns"])
        total = sum(folded.values())
        assert total >= 0.9 * truth["blocked_ns"], (truth, folded.most_common(2))
        # Its blocks of that window went out with the batch that held the
        # workload's: nothing of them was stored.
        own = _profile(client, "json", srv.pid, t0 - 1, time.time()).json()["total"]
        assert own == 0, _folded(client, srv.pid, t0 - 1, time.time()).most_common(3)
    finally:
        ps.close_all()
        client.close()


@pytest.mark.parametrize("flags", [["--no-off-cpu"], ["--off-cpu", "--no-off-cpu"]])
def test_no_off_cpu_stores_none(flamewatch, workloads, tmp_path, flags):
    """On by default in run (and agent); off with --no-off-cpu, also after
    --off-cpu (the default, still accepted)."""
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        _run(ps, flamewatch, client, port, tmp_path / "data", *flags)
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


@pytest.mark.parametrize("state", ["task_storage", "table"])
def test_run_catches_long_blocks_after_short_ones(flamewatch, workloads, tmp_path, state):
    """1 s of 200 us sleeps, then 10 ms ones from the same call site, under
    run's default: the prediction learns from the first long block, which
    comes without its stack, and walks the rest. The per-thread state of
    Linux 6.1 to 6.3 (a table by tid) is forced on this kernel too."""
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    env = {**os.environ, "FLAMEWATCH_OFFCPU_THREAD_TABLE": "1" if state == "table" else "0"}
    try:
        srv = _run(ps, flamewatch, client, port, tmp_path / "data", env=env)
        assert ("per-thread state in a table" in srv.text()) == (state == "table"), srv.describe()
        t0 = time.time()
        work = ps.start([workloads / "offcpu", "sleep", "3", "0", "10", "0", "1"], "offcpu")
        assert work.wait(30) == 0, work.describe()
        truth = _truth(work.text())
        pid = truth["pid"]
        folded = _wait_folded(client, pid, t0 - 1, time.time() + 1, 0.9 * truth["over_min_ns"])
        total, long_ = sum(folded.values()), _long_stacks(folded)
        msg = (f"{state}: {truth['short_blocks']} short blocks, then {truth['blocks']} long "
               f"({truth['blocked_ns'] / 1e6:.1f} ms); >= 1 ms: {truth['over_min_ns'] / 1e6:.1f} ms; "
               f"profile {total / 1e6:.1f} ms, long blocks' stacks {long_ / 1e6:.1f} ms, "
               f"not taken {_under(folded, NOT_TAKEN) / 1e6:.1f} ms; top: {folded.most_common(3)}")
        print(msg)
        assert abs(total - truth["over_min_ns"]) <= 0.10 * truth["over_min_ns"], msg
        assert long_ >= 0.90 * truth["blocked_ns"], msg
    finally:
        ps.close_all()
        client.close()


def _agent_metrics(port):
    """The agent's /metrics as {name or name{labels}: value}, checked by promtool."""
    import shutil

    c = Client(port, timeout=5)
    try:
        resp = c.get("/metrics")
    finally:
        c.close()
    assert resp.status == 200, resp.describe()
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/install-deps.sh installs Debian's prometheus"
    res = subprocess.run([promtool, "check", "metrics"], input=resp.body, capture_output=True,
                         timeout=60)
    assert res.returncode == 0, f"promtool: {res.stdout.decode()}{res.stderr.decode()}\n{resp.text}"
    return {m[1]: float(m[2]) for m in re.finditer(r"^(flamewatch_agent_offcpu_\S+) (\S+)$",
                                                   resp.text, re.M)}


def test_blocks_not_walked_keep_their_time(flamewatch, workloads, tmp_path):
    """Six 200 us sleeps before each 10 ms one, from the same call site: more
    short blocks than the prediction remembers, so the long ones are not
    walked and the short ones after them are, for nothing. The long blocks'
    time is charged all the same, under [off-CPU: stack not taken] where
    their stack was not taken, and the agent's metrics count both."""
    ps = Procs(tmp_path / "logs")
    port, mport = free_port(), free_port()
    client = Client(port)
    try:
        srv = ps.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data",
                        tmp_path / "data"], "server")
        assert srv.wait_output(r"flamewatch: listening on http://", 60), srv.describe()
        client.wait_healthy(proc=srv)
        agent = ps.start([flamewatch, "agent", "--server", f"http://127.0.0.1:{port}",
                          "--node", "fwtest-offcpu", "--interval", "1s", "--gpu-interval", "off",
                          "--metrics-listen", f"127.0.0.1:{mport}"], "agent")
        assert agent.wait_output(r"sampling at \d+ Hz", 60), agent.describe()
        before = _agent_metrics(mport)
        t0 = time.time()
        work = ps.start([workloads / "offcpu", "sleep", "3", "0", "10", "6"], "offcpu")
        assert work.wait(30) == 0, work.describe()
        truth = _truth(work.text())
        pid = truth["pid"]
        folded = _wait_folded(client, pid, t0 - 1, time.time() + 1, 0.9 * truth["over_min_ns"])
        total, long_ = sum(folded.values()), _long_stacks(folded)
        bare = _under(folded, NOT_TAKEN)
        after = _agent_metrics(mport)
        grew = {k: after[k] - before.get(k, 0) for k in after}
        msg = (f"{truth['blocks']} long blocks ({truth['blocked_ns'] / 1e6:.1f} ms), "
               f"{truth['short_blocks']} short; >= 1 ms: {truth['over_min_ns'] / 1e6:.1f} ms; "
               f"profile {total / 1e6:.1f} ms: not taken {bare / 1e6:.1f} ms, long blocks' "
               f"stacks {long_ / 1e6:.1f} ms; top: {folded.most_common(3)}; metrics grew: {grew}")
        print(msg)
        assert abs(total - truth["over_min_ns"]) <= 0.10 * truth["over_min_ns"], msg
        assert bare > 0.5 * truth["blocked_ns"], msg
        assert bare + long_ >= 0.90 * total, msg
        # The marker stands alone: the thread's time, no frames made up.
        assert all(k.split(";")[-1] == NOT_TAKEN and len(k.split(";")) <= 2
                   for k in folded if NOT_TAKEN in k.split(";")), folded.most_common(5)
        # Host-wide counters: at least this process's share.
        nt = 'flamewatch_agent_offcpu_blocks_total{stack="not_taken"}'
        nts = 'flamewatch_agent_offcpu_blocked_seconds_total{stack="not_taken"}'
        assert grew[nt] >= 0.5 * truth["blocks"], msg
        assert grew[nts] >= 0.9 * bare / 1e9, msg
        assert grew["flamewatch_agent_offcpu_wasted_walks_total"] >= truth["blocks"], msg
        assert 'flamewatch_agent_offcpu_blocks_total{stack="walked"}' in after, after
    finally:
        ps.close_all()
        client.close()
