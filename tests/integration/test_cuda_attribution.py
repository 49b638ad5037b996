"""Every GPU nanosecond under the CPU stack that caused it.

The real libflamewatch-cuda.so, in its default configuration (launches
duty-cycled in windows of 10 ms, one in 30, and sampled within them),
against the fake CUPTI (build/fakes) in `cuda_host attrib`, which makes
each kind of GPU work from a function of its own: kernels, a driver-only
launch, a graph launch, an asynchronous copy in, a synchronous copy out
longer than a window, a set, and a rare kernel among many frequent ones
whose records come seconds late. `flamewatch run` must store all of its
GPU time, each kind under the function that made it, and say how the
records found their stacks.
"""

import json
import os
import re
import time

from conftest import cuda_fakes
from serverlib import Client, Procs, free_port, window

# leaf frame -> the host function whose stack it must sit under
OWNER = {
    "kernel(float*)": "host_kernels",
    "driver_kernel(float*)": "host_kernels",
    "graph_node()": "host_graph",
    "[memcpy HtoD]": "host_copy_in",
    "[memcpy DtoH]": "host_copy_out",
    "[memset]": "host_zero",
    "late_kernel()": "host_late",
    "filler()": "host_filler",
}


def _get(client, path, params):
    r = client.get(path, params)
    assert r.status == 200, r.describe()
    return r


def _folded(client, q, frm, to):
    r = _get(client, "/api/v1/profile", {"type": "gpu_time", "format": "folded", "query": q,
                                         **window(frm, to)})
    out = {}
    for line in r.text.splitlines():
        if line.strip():
            stack, value = line.rsplit(" ", 1)
            out[stack] = out.get(stack, 0) + int(value)
    return out


def _total(client, q, frm, to):
    return _get(client, "/api/v1/gpu/kernels/top", {"query": q, **window(frm, to)}).json()["total_ns"]


def test_every_kind_of_work_under_its_stack(flamewatch, tmp_path):
    lib, host, cupti = cuda_fakes(flamewatch)
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data",
                        tmp_path / "data", "-F", "19", "--interval", "1s"], "run")
        assert srv.wait_output(r"profiling this host at", 60), srv.describe()
        assert srv.wait_output("GPU time profiling: attached to " + re.escape(str(lib)), 10), \
            srv.describe()
        client.wait_healthy(proc=srv)
        t0 = time.time() - 5
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("FLAMEWATCH_CUDA", "FAKE_CUPTI"))}
        # Waits for the first window's callbacks: activity is on from then.
        env.update(FLAMEWATCH_CUPTI_PATH=str(cupti), CUDA_HOST_WAIT_CALLBACKS="1")
        work = ps.start([host, "attrib", lib, "4"], "cuda_host", env=env)
        assert work.wait(60) == 0, work.describe()
        truth = [json.loads(ln) for ln in work.text().splitlines() if ln.startswith("{")][0]
        want = truth["kernel_ns"] + truth["memcpy_ns"] + truth["memset_ns"]
        q = '{pid="%d"}' % work.pid
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _total(client, q, t0, time.time() + 5) < want:
            time.sleep(0.5)
        time.sleep(1.5)
        to = time.time() + 5
        got = _folded(client, q, t0, to)
        text = "\n".join(f"{v:>12} {k}" for k, v in sorted(got.items(), key=lambda kv: -kv[1]))
        text += "\n\n" + srv.text()[-3000:]
        assert sum(got.values()) == want, f"want {want}\n{text}"

        by_leaf, owned, marked = {}, {}, 0
        for stack, v in got.items():
            frames = stack.split(";")
            leaf = frames[-1]
            assert leaf in OWNER, f"unexpected leaf {leaf}\n{text}"
            by_leaf[leaf] = by_leaf.get(leaf, 0) + v
            if OWNER[leaf] in frames:
                owned[leaf] = owned.get(leaf, 0) + v
            if any(f.startswith("[launch not seen") for f in frames):
                marked += v
        assert set(by_leaf) == set(OWNER), text
        for leaf, ns in by_leaf.items():
            # Under the right function, whether the stack is the work's own
            # launch's or an earlier launch's of the same kernel.
            assert owned.get(leaf, 0) == ns, f"{leaf}: {owned.get(leaf, 0)} of {ns}\n{text}"
        # Most of it under its own launch (the rest: the carried time's last
        # remainder, under an earlier launch of its kernel).
        assert marked <= want // 100, f"{marked} of {want} under a stack not its own\n{text}"

        # The graph's kernels carry its id as a label.
        gq = '{pid="%d", graph="42"}' % work.pid
        assert _total(client, gq, t0, to) == by_leaf["graph_node()"], text

        # The join says what it did, in the log.
        srv.stop()
        log = srv.text()
        m = re.findall(r"GPU time join: (\d+) launches .*?(\d+) records: .*"
                       r"of the GPU time (\d+\.\d)% under a stack not its own and "
                       r"(\d+\.\d)% under none", log)
        assert m, log[-3000:]
        launches, records, other, none = m[-1]
        assert int(launches) > 0 and int(records) > 0, log[-3000:]
        assert float(none) == 0.0, log[-3000:]
        assert float(other) <= 1.0, log[-3000:]
    finally:
        ps.close_all()
        client.close()
