"""How the agent finds libflamewatch-cuda.so in processes
(src/agent/cuda/cuda_tracker.c, src/agent/cuda/lib_watch.c): from the
dynamic loader's _dl_debug_state() hook,
which reports a load of the library as it happens, instead of reading the
maps of every new process for 30 s.

- A process that runs 10 s before it dlopens a copy of the library the
  agent has never seen (the real library, fake CUPTI: what the CUDA driver
  does at a late cuInit) is attached within a second of its dlopen, by the
  loader's event (no periodic scan: it is off), and its GPU time is stored
  to the nanosecond. The same for a process in a new mount namespace on a
  loader file the agent has never seen (a container's own).
- An exec storm (300 processes that live 1 s) costs no /proc/PID/maps
  read, where polling (FLAMEWATCH_CUDA_WATCH=0, the old way, measured
  through the same counter on the agent's /metrics) reads each of them.
"""

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import cuda_fakes
from serverlib import Client, Procs, free_port, window

START_S = 60
STORM = 300


def _env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLAMEWATCH_CUDA", "FAKE_CUPTI"))}
    env.update({k: str(v) for k, v in extra.items()})
    return env


def _top(client, q, frm, to):
    r = client.get("/api/v1/gpu/kernels/top", {"query": q, **window(frm, to)})
    assert r.status == 200, r.describe()
    return r.json()


@pytest.mark.parametrize("where", ["host", "new_loader", "slow_tick"])
def test_late_dlopen_attaches_within_a_second(flamewatch, tmp_path, where):
    """host: a process of this host (its loader hooked at the agent's
    start) loads the library 10 s after its start. new_loader: a process
    in a new mount namespace that runs on a loader file the agent has
    never seen (a copy, as a container brings its own), 3 s after its
    start: its first exec in the namespace makes the agent look for its
    loader once and hook it. slow_tick: host, with the agent's tick at 5 s:
    the load itself wakes the agent, which attaches at once."""
    built, host, cupti = cuda_fakes(flamewatch)
    # A copy: a file the agent did not attach at its start.
    lib = tmp_path / "inject" / "libflamewatch-cuda.so"
    lib.parent.mkdir()
    shutil.copy(built, lib)
    argv, after_ms = [host, "drive", lib, "200", "20000", "0"], 10000
    if where == "new_loader":
        if not shutil.which("unshare"):
            pytest.skip("needs unshare")
        loader = tmp_path / "loader" / "ld-linux-x86-64.so.2"
        loader.parent.mkdir()
        shutil.copy(Path("/lib64/ld-linux-x86-64.so.2").resolve(), loader)
        argv, after_ms = ["unshare", "-m", "--", loader] + argv, 3000
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = ps.start([flamewatch, "run", "-v", "--listen", f"127.0.0.1:{port}", "--data",
                        tmp_path / "data", "-F", "19", "--interval", "1s", "--gpu-interval", "off"],
                       "run", env=_env(FLAMEWATCH_CUDA_SCAN_INTERVAL="off",
                                       **({"FLAMEWATCH_TICK_MS": "5000"} if where == "slow_tick"
                                          else {})))
        assert srv.wait_output(r"profiling this host at", START_S), srv.describe()
        assert re.search(r"watching the library loads of \S*/ld-", srv.text()), srv.describe()
        client.wait_healthy(proc=srv)
        t0 = time.time() - 1
        work = ps.start(argv, "cuda_host",
                        env=_env(FLAMEWATCH_CUPTI_PATH=cupti, FLAMEWATCH_CUDA_DUTY_CYCLE=1,
                                 FLAMEWATCH_CUDA_LAUNCH_BUDGET=100000000,
                                 CUDA_HOST_LOAD_AFTER_MS=after_ms))
        if where == "new_loader":
            assert srv.wait_output("watching the library loads of %s \\(pid %d\\)" %
                                   (re.escape(str(loader)), work.pid), after_ms / 1000), srv.describe()
        loaded = work.wait_output(r"loaded (\d+\.\d+)", 30)
        assert loaded, work.describe()
        attached = re.compile("attached to %s \\(pid %d\\)" % (re.escape(str(lib)), work.pid))
        seen = None
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if attached.search(srv.text()):
                seen = time.time()
                break
            time.sleep(0.05)
        assert seen, f"the agent did not attach to {lib}\n{srv.describe()}"
        delay = seen - float(loaded.group(1))
        print(f"\n{where}: attached {delay * 1000:.0f} ms after the dlopen")
        assert delay < 1.0, f"attached {delay:.2f} s after the dlopen\n{srv.describe()}"

        assert work.wait(60) == 0, work.describe()
        truth = json.loads([ln for ln in work.text().splitlines() if ln.startswith("{")][-1])
        want = truth["kernel_ns"] + truth["memcpy_ns"] + truth["memset_ns"]
        q = '{pid="%d"}' % work.pid
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and _top(client, q, t0, time.time() + 5)["total_ns"] < want:
            time.sleep(0.5)
        time.sleep(1.5)
        top = _top(client, q, t0, time.time() + 5)
        assert top["total_ns"] == want, (truth, top)
        # Found by the loader's event, not by polling: the agent's summary says so.
        srv.stop()
        m = re.search(r"(\d+) loads of the library reported", srv.text())
        assert m and int(m.group(1)) >= 1, srv.describe()
    finally:
        ps.close_all()
        client.close()


def _cuda_metrics(port):
    text = Client(port).get("/metrics").text
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^(flamewatch_agent_cuda_\w+) (\S+)$", text, re.M)}


@pytest.mark.parametrize("mode", ["watch", "polling"])
def test_exec_storm_reads_no_maps(flamewatch, tmp_path, mode):
    ps = Procs(tmp_path / "logs")
    port, mport = free_port(), free_port()
    try:
        srv = ps.start([flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data",
                        tmp_path / "data"], "server")
        assert srv.wait_output(r"flamewatch: listening on", START_S), srv.describe()
        env = _env(FLAMEWATCH_CUDA_SCAN_INTERVAL="off")
        if mode == "polling":
            env["FLAMEWATCH_CUDA_WATCH"] = "0"
        agent = ps.start([flamewatch, "agent", "--server", f"http://127.0.0.1:{port}", "--node",
                          "fwtest-storm", "-F", "19", "--interval", "1s", "--gpu-interval", "off",
                          "--metrics-listen", f"127.0.0.1:{mport}"], "agent", env=env)
        assert agent.wait_output(r"sampling at \d+ Hz", START_S), agent.describe()
        time.sleep(1)
        before = _cuda_metrics(mport)
        assert before.get("flamewatch_agent_cuda_lib_watch") == (1 if mode == "watch" else 0), before
        if mode == "watch":
            assert before["flamewatch_agent_cuda_loaders"] >= 1, before
        storm = subprocess.run(["sh", "-c", f"i=0; while [ $i -lt {STORM} ]; do sleep 1 & "
                                "i=$((i+1)); done; wait"], capture_output=True, text=True, timeout=60)
        assert storm.returncode == 0, storm.stderr
        time.sleep(1)		# ten ticks: whatever the storm makes the agent do is done
        after = _cuda_metrics(mport)
        reads = after["flamewatch_agent_cuda_maps_reads_total"] - before["flamewatch_agent_cuda_maps_reads_total"]
        print(f"\n{mode}: {reads:.0f} maps reads for {STORM} execs")
        assert after["flamewatch_agent_cuda_full_scans_total"] == before["flamewatch_agent_cuda_full_scans_total"]
        if mode == "watch":
            assert reads <= 5, (before, after)
            assert after["flamewatch_agent_cuda_lib_events_total"] == \
                before["flamewatch_agent_cuda_lib_events_total"], (before, after)
        else:
            # The counter sees what polling costs: each process read on every tick it
            # lives (up to 256 at a time), however slow the ticks of a busy machine.
            assert reads >= STORM / 2, (before, after)
    finally:
        ps.close_all()
