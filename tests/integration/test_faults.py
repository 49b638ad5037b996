"""Fault tests: the agent and the server under conditions that break
profilers in production (issue 12).

  test_ringbuf_overflow_counted     the agent stops draining (SIGSTOP): the
                                    BPF ring buffer overflows, the loss is
                                    counted and reported, nothing crashes
  test_process_churn_memory_flat    1,000 short-lived processes a second: the
                                    agent keeps up and its memory stays flat
  test_unwind_tables_stay_in_cap    many binaries with distinct build ids
                                    and big tables: unwind-table memory stays
                                    within --unwind-table-mb and late
                                    processes still get full stacks
  test_disk_full                    the server's disk fills up: clear errors,
                                    nothing accepted is lost, ingest works
                                    again once there is space

The server killed mid-ingest and the agent buffering while the server is
down are in test_server.py.
"""

import os
import re
import signal
import subprocess
import time

import pytest

from conftest import CRASH_RE, Profile, require
from serverlib import Client, free_port, register_plugin, window

START_S = 60


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


def _start_server(procs, flamewatch, data, extra=()):
    port = free_port()
    p = procs.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data", str(data),
                     *extra], "server")
    if not p.wait_output(r"listening on http://", START_S):
        pytest.fail(f"server did not start\n{p.describe()}", pytrace=False)
    c = Client(port)
    c.wait_healthy(proc=p)
    return p, port, c


def _start_agent(procs, flamewatch, port, node, extra=()):
    p = procs.start([flamewatch, "agent", "--server", f"http://127.0.0.1:{port}", "--node", node,
                     "--interval", "1s", *extra], "agent")
    if not p.wait_output(r"sampling at \d+ Hz", START_S):
        pytest.fail(f"agent did not start sampling\n{p.describe()}", pytrace=False)
    return p


def _rss_kib(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _check_no_crash(p):
    m = CRASH_RE.search(p.text())
    assert not m, f"{m.group(0)!r} in the output of {p.name}\n{p.describe()}"


def test_ringbuf_overflow_counted(flamewatch, workloads, procs, tmp_path):
    srv, port, c = _start_server(procs, flamewatch, tmp_path / "data")
    agent = _start_agent(procs, flamewatch, port, "overflow", extra=("-F", "999"))
    work = [procs.start([workloads / "cpu_split", "18"], f"cpu_split{i}") for i in range(2)]
    time.sleep(2)
    # Stopped, the agent drains nothing while BPF keeps sampling both CPUs at
    # 999 Hz: the ring buffer (sized for a few seconds of that) fills.
    agent.send(signal.SIGSTOP)
    time.sleep(10)
    agent.send(signal.SIGCONT)
    time.sleep(3)
    assert agent.alive(), f"the agent died after SIGCONT\n{agent.describe()}"
    rc, _ = agent.stop(signal.SIGTERM, timeout=30)
    assert rc == 0, f"agent exit {rc}\n{agent.describe()}"
    m = re.search(r"(\d+) samples lost: the ring buffer was full", agent.text())
    assert m and int(m.group(1)) > 0, f"no ring-buffer loss reported\n{agent.describe()}"
    # It went on sampling after the overflow: samples from after SIGCONT are stored.
    r = c.get_json("/api/v1/series", {"query": '{node="overflow"}', "step": "1s",
                                      **window(time.time() - 20, time.time() + 1)})
    pts = [p for s in r["series"] for p in s["points"]]
    assert pts, f"nothing stored from the agent: {r}"
    for w in work:
        w.stop()
    _check_no_crash(agent)
    _check_no_crash(srv)


def test_process_churn_memory_flat(flamewatch, workloads, procs, tmp_path):
    srv, port, c = _start_server(procs, flamewatch, tmp_path / "data")
    agent = _start_agent(procs, flamewatch, port, "churn", extra=("-F", "99"))
    # Warm-up: the first batches load kallsyms and the tables of what runs.
    idle = []
    for _ in range(7):
        time.sleep(1)
        idle.append(_rss_kib(agent.pid, "RssAnon"))
    spawner = procs.start([workloads / "spawner", "1000", "24"], "spawner")
    rss = []
    t0 = time.monotonic()
    while spawner.alive() and time.monotonic() - t0 < 40:
        time.sleep(1)
        # Anonymous memory: what the agent allocates. File pages it maps for
        # a moment (libdw maps debug files to read them) come and go.
        rss.append(_rss_kib(agent.pid, "RssAnon"))
    rc = spawner.wait(30)
    assert rc == 0, spawner.describe()
    # Settling: the last batch is shipped and the agent's sweep (every 5 s)
    # forgets the processes that are gone, at the second sweep that finds
    # each gone: 10 s at most.
    settled = []
    for _ in range(13):
        time.sleep(1)
        settled.append(_rss_kib(agent.pid, "RssAnon"))
    m = re.search(r"spawned (\d+) in ([\d.]+) s", spawner.text())
    assert m, spawner.describe()
    rate = int(m.group(1)) / float(m.group(2))
    # The machine has 2 CPUs shared with the agent and the server: accept a
    # spawner that got close to its target.
    assert rate > 300, f"the spawner managed only {rate:.0f} processes/s"
    assert agent.alive(), f"the agent died under process churn\n{agent.describe()}"
    # Flat: compare floors, not peaks. Peaks are working sets that come and
    # go (a batch of 1,000 new series a second, the unwind table of a large
    # binary another process started on this shared host); what stays is
    # the floor. After the warm-up (tables for the spawner and libc,
    # kallsyms, caches; the spawner's tables come with its first samples,
    # so they count) it may rise only by the wire session dictionary,
    # which holds each process's series until its cap (2 MiB, see
    # src/agent/shipper.c) starts a new session. Before the sweep
    # (proc_table__sweep) a process looked up after its exit stayed for
    # good: measured 6.7 -> 23.8 MiB over 16,000 processes.
    warm = min(idle[3:])
    after = min(settled)
    nproc = int(m.group(1))
    assert after - warm < 3 * 1024, (
        f"agent anonymous memory went from a floor of {warm} KiB to {after} KiB after {nproc} "
        f"processes came and went (the session dictionary cap is 2 MiB): {idle}, {rss}, {settled}")
    # It kept up: the spawner's processes were sampled and stored, about as
    # much CPU as they used (each child spins ~1 ms; the parent forks).
    def spawner_samples():
        return Profile.parse(c.get_ok("/api/v1/profile", {
            "format": "folded", "query": '{node="churn",comm="spawner"}',
            **window(time.time() - 90, time.time() + 1)}).text).total
    deadline = time.monotonic() + 10
    while spawner_samples() < 0.2 * 99 * 24 and time.monotonic() < deadline:
        time.sleep(1)
    n = spawner_samples()
    require(n >= 0.2 * 99 * 24, f"only {n} samples of the spawner's processes reached the store")
    rc, _ = agent.stop(signal.SIGTERM, timeout=30)
    assert rc == 0, agent.describe()
    lost = re.search(r"(\d+) samples lost", agent.text())
    assert not lost, f"the agent lost samples under churn: {lost.group(0)}\n{agent.describe()}"
    _check_no_crash(agent)


@pytest.mark.xfail(strict=True, reason=(
    "known gap: a process that lives ~1 ms is gone before the agent reads its "
    "/proc/PID/maps, so its frames stay [unknown]+0x...; needs mappings from BPF "
    "(bpf_find_vma) at sample time"))
def test_short_lived_process_frames_named(fw, workloads, spawn):
    # Host-wide, as the agent runs: processes are not followed from their
    # fork, so the maps are read only when a sample of them is seen.
    spawn([workloads / "spawner", "300", "5"])
    _, prof = fw.record_folded(["-a", "-d", "4"], duration=4, hz=499)
    kids = prof.count(lambda f: f[0] == "spawner" and not any(x.startswith("fork") for x in f))
    named = prof.count_frame("child_spin")
    require(kids > 50, f"only {kids} samples of the children", prof)
    require(named >= 0.5 * kids, f"{named}/{kids} samples of the children name child_spin", prof)


MANY_FUNCS = 3000
COPIES = 40


def _many_funcs_source():
    """A program with MANY_FUNCS distinct functions (so a big unwind table)
    and a hot chain main -> outer -> leaf without frame pointers."""
    out = ["#include <stdlib.h>", "#include <time.h>", "volatile unsigned long sink;"]
    # Non-leaf functions with frames of different sizes: rows that the
    # table builder cannot merge with their neighbours'.
    out.append("__attribute__((noinline)) unsigned long use(volatile char *p) { return p[0]; }")
    for i in range(MANY_FUNCS):
        out.append(f"__attribute__((noinline)) unsigned long f{i}(unsigned long x)"
                   f" {{ volatile char buf[{16 + (i % 5) * 16}]; buf[0] = (char)x;"
                   f" return use(buf) + {i}; }}")
    out.append("""
static double now_s(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9; }
__attribute__((noinline)) void leaf_spin(double s) {
    double end = now_s() + s; while (now_s() < end) sink += f0(sink) + f1(sink); }
__attribute__((noinline)) void outer(double s) { leaf_spin(s); sink++; }
int main(int argc, char **argv) { outer(atof(argv[1])); return 0; }
""")
    return "\n".join(out)


def test_unwind_tables_stay_in_cap(flamewatch, workloads, tmp_path):
    src = tmp_path / "many.c"
    src.write_text(_many_funcs_source())
    obj = tmp_path / "many.o"
    subprocess.run(["gcc", "-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables", "-c",
                    "-o", obj, src], check=True, timeout=120)
    bins = []
    for i in range(COPIES):
        b = tmp_path / f"many{i:03d}"
        # A distinct build id per copy: the agent keys tables by build id.
        subprocess.run(["gcc", "-o", b, obj, f"-Wl,--build-id=0x{0xf1a3e000 + i:08x}{i:024x}"],
                       check=True, timeout=60)
        bins.append(b)
    runner = tmp_path / "run_all.sh"
    runner.write_text("#!/bin/sh\nfor b in " + " ".join(str(b) for b in bins) +
                      "; do \"$b\" 0.25; done\n")
    runner.chmod(0o755)
    out = tmp_path / "out.folded"
    res = subprocess.run([flamewatch, "record", "-F", "499", "--unwind-table-mb", "1", "-v",
                          "-o", out, "--", runner], capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stderr[-4000:]
    m = re.search(r"unwind tables: (\d+) files, (\d+) rows, ([\d.]+) KiB of BPF maps \(cap (\d+) MiB\);"
                  r" (\d+) files without CFI, (\d+) chunks put off", res.stderr)
    assert m, f"no unwind table report\n{res.stderr[-4000:]}"
    kib, cap_mib = float(m.group(3)), int(m.group(4))
    assert cap_mib == 1
    assert kib <= 1024, f"unwind tables hold {kib} KiB over a 1 MiB cap: {m.group(0)}"
    # Each copy's table alone is tens of KiB, so the copies together are
    # far over the cap: it was the cap, not their size, that kept it low.
    # readelf prints one line per CFI row: an upper bound of a table's rows.
    cfi = subprocess.run(["readelf", "--debug-dump=frames-interp", bins[0]], capture_output=True,
                         text=True, timeout=60).stdout
    rows_one = len(re.findall(r"^[0-9a-f]{16} ", cfi, re.M))
    assert rows_one * 8 * COPIES > 2 * 1024 * 1024, (
        f"{rows_one} CFI rows per copy: too small to test the cap")
    # Eviction made room: the last copies (run when the cap had long been
    # reached) still unwind from main through the frame-pointer-less chain.
    prof = Profile.parse(out.read_text())
    late = [f"many{i:03d}" for i in range(COPIES - 6, COPIES)]
    def in_leaf(f):
        return f[0] in late and any(x.startswith("leaf_spin") for x in f)
    total = prof.count(in_leaf)
    full = prof.count(lambda f: in_leaf(f) and "main" in f and "outer" in f)
    require(total > 50, f"only {total} samples in leaf_spin of the last copies", prof)
    require(full >= 0.8 * total, f"{full}/{total} late samples reach main through outer", prof)


def _post_folded(c, text, batch):
    return c.post("/api/v1/ingest/folded", text.encode(),
                  params={"labels": f'{{test="diskfull",batch="{batch}"}}', "node": "diskfull"})


def _batch_text(batch, lines=400):
    # Distinct frames per batch so that every batch needs new pages.
    return "".join(f"diskproc;main;b{batch}_f{i};leaf_{batch}_{i}_{'x' * 40} {i + 1}\n"
                   for i in range(lines))


def test_disk_full(flamewatch, procs, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", mnt], check=True)
    try:
        srv, port, c = _start_server(procs, flamewatch, mnt / "data")
        accepted, refused, errors = {}, 0, []
        for batch in range(400):
            r = _post_folded(c, _batch_text(batch), batch)
            if r.status == 200:
                accepted[batch] = sum(i + 1 for i in range(400))
            else:
                refused += 1
                errors.append((r.status, r.text[:200]))
                if refused >= 5:
                    break
        assert refused, f"4 MiB never filled after {len(accepted)} batches"
        assert accepted, f"nothing was accepted before the disk filled: {errors}"
        status, text = errors[0]
        assert status in (503, 507), f"disk full answered {status}: {text}"
        assert re.search(r"space|full|disk", text, re.I), f"the error does not say the disk is full: {text}"
        assert srv.alive(), f"the server died when the disk filled\n{srv.describe()}"
        assert c.get("/healthz").status == 200

        def stored():
            prof = Profile.parse(c.get_ok("/api/v1/profile", {
                "format": "folded", "query": '{node="diskfull"}',
                **window(time.time() - 600, time.time() + 1)}).text)
            return prof.total
        want = sum(accepted.values())
        assert stored() == want, f"after the disk filled: {stored()} samples stored, {want} accepted"

        # Space returns: ingest works again, and nothing was corrupted.
        subprocess.run(["mount", "-o", "remount,size=64m", mnt], check=True)
        r = _post_folded(c, _batch_text(9999), 9999)
        assert r.status == 200, f"ingest after space returned: {r.describe()}"
        want += sum(i + 1 for i in range(400))
        assert stored() == want, f"after recovery: {stored()} samples stored, {want} accepted"
        rc, _ = srv.stop(signal.SIGTERM, timeout=30)
        assert rc == 0, srv.describe()
        srv2, port2, c2 = _start_server(procs, flamewatch, mnt / "data")
        c = c2
        assert stored() == want, "after a restart the store does not hold what it accepted"
        _check_no_crash(srv)
        srv2.stop()
    finally:
        procs.close_all()
        subprocess.run(["umount", "-l", mnt], check=False)
