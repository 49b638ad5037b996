"""System tests for CPython stacks: `flamewatch record` (real BPF) on the
pyenv-installed CPython 3.10-3.13 running tests/workloads/python/chain.py,
whose call chains are known. The interpreters are found through `pyenv root`
(or $PYENV_ROOT); a missing version is skipped, saying which.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import contains_run, go_binary, go_env, is_kernel, require

HZ = 499
# Other work on a shared 2-core machine can halve the samples a process gets;
# the thresholds below are about shares, so a fifth of the nominal count will do.
SECONDS = 3
VERSIONS = ["3.10", "3.11", "3.12", "3.13"]
SCRIPT = Path(__file__).resolve().parent.parent / "workloads" / "python" / "chain.py"
CHAIN = ["main", "outer", "middle", "inner"]


def pyenv_root():
    root = os.environ.get("PYENV_ROOT")
    if not root and shutil.which("pyenv"):
        try:
            root = subprocess.run(["pyenv", "root"], capture_output=True, text=True, timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            root = None
    return Path(root) if root else None


def interpreter(version):
    """The newest pyenv CPython `version`.x, or a skip saying what is missing."""
    root = pyenv_root()
    if root is None:
        pytest.skip(f"CPython {version}: pyenv is not installed (no `pyenv root`, no $PYENV_ROOT)")
    pat = re.compile(re.escape(version) + r"\.(\d+)$")
    found = []
    for d in (root / "versions").glob(version + ".*"):
        m = pat.match(d.name)
        exe = d / "bin" / f"python{version}"
        if m and exe.exists():
            found.append((int(m.group(1)), exe))
    if not found:
        pytest.skip(f"CPython {version}: not installed under {root}/versions")
    return max(found)[1]


def python_samples(prof):
    """The interpreter's samples: its comm is python3 or python3.x."""
    return type(prof)(
        {s: n for s, n in prof.stacks.items() if s.split(";", 1)[0].startswith("python")},
        source=f"{prof.source} [python]",
    )


def user(frames):
    return [f for f in frames[1:] if not is_kernel(f)]


def in_order(frames, names):
    """names occur in frames in this order (not necessarily adjacent)."""
    i = 0
    for f in frames:
        if i < len(names) and f == names[i]:
            i += 1
    return i == len(names)


@pytest.mark.parametrize("version", VERSIONS)
def test_chain_and_split(fw, version):
    exe = interpreter(version)
    # Longer than the others: the samples taken before the agent described
    # the process show no Python frames, and on a loaded CI host they were
    # 0.38 s of CPU, 12.6 % of a 3-s run (clean clone of 8203377).
    seconds = 5
    res, prof = fw.record_folded(["--", exe, SCRIPT, "chain", seconds], duration=seconds, hz=HZ)
    w = python_samples(prof)
    require(w.total >= 0.2 * seconds * HZ, f"only {w.total} samples of CPython {version}", prof)

    full = {leaf: w.count(lambda f, leaf=leaf: contains_run(user(f), ["<module>"] + CHAIN + [leaf]))
            for leaf in ("hot_70", "cold_30")}
    chain_pct = (full["hot_70"] + full["cold_30"]) / w.total
    print(f"CPython {version}: {w.total} samples, full chain in {chain_pct:.1%}")
    require(
        chain_pct >= 0.90,
        f"CPython {version}: only {chain_pct:.1%} of {w.total} samples show "
        f"<module>;main;outer;middle;inner;hot_70|cold_30; expected >= 90 %",
        w,
    )
    # Against the CPU time the script measured in each leaf, not a fixed
    # 70 %: that split moved from 64 % to 74 % between runs on a loaded host.
    m = re.search(r"hot_70 cpu share ([0-9.]+)", res.stdout)
    assert m, res.describe()
    truth = float(m.group(1))
    hot, cold = w.count_frame("hot_70"), w.count_frame("cold_30")
    ratio = hot / (hot + cold)
    print(f"CPython {version}: hot_70 share {ratio:.1%} (hot_70 {hot}, cold_30 {cold}); "
          f"measured by the script {truth:.1%}")
    require(abs(ratio - truth) <= 0.05,
            f"CPython {version}: hot_70 share is {ratio:.1%}; the script measured {truth:.1%} (+- 5 %)", w)
    # The interpreter loop's own frames are replaced, not left beside the Python ones.
    # Only the first samples, taken before the process was described to BPF
    # (kept, not dropped: 5.7 % of them in one clean-clone run), may show it:
    # the same 10 % the full-chain bar above allows.
    evals = w.count_frame("_PyEval_EvalFrameDefault")
    require(evals <= 0.10 * w.total, f"CPython {version}: {evals} samples still show _PyEval_EvalFrameDefault", w)
    # Native frames below the interpreter's root stay: the process starts in main().
    native_root = w.count(lambda f: "Py_RunMain" in f or "Py_BytesMain" in f)
    require(native_root >= 0.9 * w.total, f"CPython {version}: native start-up frames missing", w)


def test_code_cache_cap(fw, monkeypatch):
    """The cache of code objects' names and line tables starts afresh past
    its byte cap (FLAMEWATCH_PY_CODE_CACHE_KB; 2 MiB by default): with a
    1-KB cap it does so again and again, and the chain is named as without."""
    exe = interpreter("3.12")
    monkeypatch.setenv("FLAMEWATCH_PY_CODE_CACHE_KB", "1")
    res, prof = fw.record_folded(["--", exe, SCRIPT, "chain", SECONDS], duration=SECONDS, hz=HZ)
    m = re.search(r"the cache started afresh (\d+) times", res.stderr)
    assert m and int(m.group(1)) > 0, res.describe()
    w = python_samples(prof)
    require(w.total >= 0.2 * SECONDS * HZ, f"only {w.total} samples", prof)
    full = w.count(lambda f: any(contains_run(user(f), CHAIN + [leaf]) for leaf in ("hot_70", "cold_30")))
    require(full >= 0.9 * w.total, f"only {full} of {w.total} samples show {CHAIN} and a leaf", w)


@pytest.mark.parametrize("version", VERSIONS)
def test_code_object_address_reused(fw, version):
    """CPython gives a freed code object's memory to the next one it makes
    (start-up modules' code is freed, the script's is made next). Names are
    cached by address: second_fn, at first_fn's old address, must not be
    named first_fn (the old agent named all 743 of its samples so)."""
    exe = interpreter(version)
    res, prof = fw.record_folded(["--", exe, SCRIPT, "reuse", SECONDS], duration=SECONDS, hz=HZ)
    assert "code object address reused" in res.stdout, res.describe()
    w = python_samples(prof)
    first, second = w.count_frame("first_fn"), w.count_frame("second_fn")
    print(f"CPython {version}: first_fn {first}, second_fn {second}")
    require(first + second >= 0.2 * SECONDS * HZ, f"only {first + second} samples in the two functions", w)
    share = second / (first + second)
    require(0.35 <= share <= 0.65, f"CPython {version}: second_fn has {share:.1%} of the two functions' "
            f"samples; expected about half", w)


@pytest.mark.parametrize("version", VERSIONS)
def test_thread(fw, version):
    exe = interpreter(version)
    res, prof = fw.record_folded(["--", exe, SCRIPT, "thread", SECONDS], duration=SECONDS, hz=HZ)
    w = python_samples(prof)
    require(w.total >= 0.2 * SECONDS * HZ, f"only {w.total} samples of CPython {version}", prof)
    # The main thread sleeps in join(); the samples are the worker's.
    worker = w.count(lambda f: "start_thread" in f and contains_run(user(f), CHAIN[1:]))
    pct = worker / w.total
    print(f"CPython {version}: worker thread chain in {pct:.1%} of {w.total} samples")
    require(pct >= 0.90, f"CPython {version}: only {pct:.1%} of samples show start_thread..outer;middle;inner", w)
    require(
        w.count(lambda f: in_order(f, ["start_thread", "outer", "middle", "inner"])) == worker,
        "Python frames must sit under the thread's native start frames",
        w,
    )


@pytest.mark.parametrize("version", VERSIONS)
def test_ctypes_native_under_python(fw, version):
    exe = interpreter(version)
    res, prof = fw.record_folded(["--", exe, SCRIPT, "ctypes", SECONDS], duration=SECONDS, hz=HZ)
    w = python_samples(prof)
    require(w.total >= 0.2 * SECONDS * HZ, f"only {w.total} samples of CPython {version}", prof)
    # Python calls libc's qsort through ctypes, which calls back into Python.
    mixed = w.count(
        lambda f: in_order(user(f), ["main", "ctypes_inner", "qsort_r", "closure_fcn"])
        and any(x.endswith("py_compare") for x in f)
    )
    under = w.count(lambda f: in_order(user(f), ["main", "ctypes_inner", "_ctypes_callproc", "ffi_call"]))
    print(f"CPython {version}: python->qsort->python in {mixed / w.total:.1%}, "
          f"native under ctypes_inner in {under / w.total:.1%} of {w.total} samples")
    require(under >= 0.8 * w.total, f"CPython {version}: native ctypes frames are not under ctypes_inner", w)
    require(mixed >= 0.5 * w.total, f"CPython {version}: too few main;ctypes_inner;..qsort_r;..;py_compare stacks", w)


@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_perf_trampoline_names(fw, version):
    """`python -X perf` writes /tmp/perf-PID.map for its trampolines; the
    existing perf map support names them."""
    exe = interpreter(version)
    res, prof = fw.record_folded(["--", exe, "-X", "perf", SCRIPT, "chain", 2], duration=2, hz=HZ)
    w = python_samples(prof)
    # The leaf's trampoline, in anonymous memory, is named from the perf map.
    named = w.count(lambda f: any(x.startswith("py::spin:") and x.endswith("chain.py") for x in f))
    require(named >= 0.8 * w.total, f"CPython {version} -X perf: only {named} of {w.total} samples name py::spin", w)
    # The BPF walk still gives the real Python frames next to the trampolines.
    require(w.count_run(["inner"]) >= 0.8 * w.total, "Python frames missing under -X perf", w)


def source_line(text):
    """The line number of the first source line of chain.py containing text."""
    for n, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        if text in line:
            return n
    raise AssertionError(f"{text!r} not in {SCRIPT}")


@pytest.mark.parametrize("version", VERSIONS)
def test_lines(fw, version, tmp_path):
    """Each Python frame's line is the line of its call site (or the leaf's
    current line), computed from co_linetable/co_lnotab for that version;
    checked through `go tool pprof -raw`, whose locations carry file:line."""
    exe = interpreter(version)
    go = go_binary()
    res, out = fw.record(["--", exe, SCRIPT, "chain", 2], duration=2, out_name="py.pb.gz", fmt="pprof", hz=HZ)
    res.check_ok()
    raw = subprocess.run([go, "tool", "pprof", "-raw", str(out)], capture_output=True, text=True,
                         env=go_env(tmp_path), timeout=120)
    assert raw.returncode == 0, raw.stderr
    want = {
        "hot_70": source_line("return spin(7 * n)"),
        "cold_30": source_line("return spin(3 * n)"),
        "middle": source_line("    inner(deadline)"),
        "outer": source_line("    middle(deadline)"),
    }
    seen = {}
    for line in raw.stdout.splitlines():
        m = re.search(r" (hot_70|cold_30|middle|outer) (\S+):(\d+)", line)
        if m:
            seen.setdefault(m.group(1), set()).add((m.group(2), int(m.group(3))))
    # A sample can catch a frame between two instructions of its call (its
    # entry line, the next line): the expected line must be there, and at
    # most one other.
    for fn, ln in want.items():
        got = seen.get(fn, set())
        assert (str(SCRIPT), ln) in got and len(got) <= 2, (
            f"CPython {version}: {fn} at {sorted(got)}, expected {SCRIPT}:{ln}"
        )


def test_statically_linked_python(fw):
    """A python3 with the interpreter linked into the executable (Debian's
    /usr/bin/python3), found through the executable's own symbols."""
    exe = shutil.which("python3", path="/usr/bin:/bin")
    if not exe:
        pytest.skip("no system python3")
    exe = os.path.realpath(exe)
    ldd = subprocess.run(["ldd", exe], capture_output=True, text=True).stdout
    ver = subprocess.run([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
                         capture_output=True, text=True).stdout.strip()
    if "libpython" in ldd or ver not in VERSIONS:
        pytest.skip(f"{exe} ({ver}) links libpython or is not 3.10-3.13")
    res, prof = fw.record_folded(["--", exe, SCRIPT, "chain", 2], duration=2, hz=HZ)
    w = python_samples(prof)
    full = w.count(lambda f: contains_run(user(f), ["<module>"] + CHAIN))
    require(full >= 0.9 * w.total, f"{exe}: only {full} of {w.total} samples show the full chain", w)


@pytest.mark.parametrize("version", ["3.11", "3.13"])
def test_process_started_before(fw, version):
    """`record -p` of an interpreter that was already running: its layout
    is found from its live mappings and memory."""
    exe = interpreter(version)
    proc = subprocess.Popen([str(exe), str(SCRIPT), "chain", "6"])
    try:
        import time

        time.sleep(1.0)
        res, prof = fw.record_folded(["-p", str(proc.pid), "-d", "2"], duration=2, hz=HZ)
    finally:
        proc.kill()
        proc.wait()
    w = python_samples(prof)
    require(w.total >= 100, f"only {w.total} samples of CPython {version}", prof)
    full = w.count(lambda f: contains_run(user(f), ["<module>"] + CHAIN))
    require(full >= 0.9 * w.total, f"CPython {version}: only {full} of {w.total} samples show the chain", w)


def test_agent_process_exits_after_burst(flamewatch, tmp_path):
    """Through the agent (`flamewatch run`, which describes a Python process
    on its first sample and names frames as it drains its ring buffer every
    100 ms): short Python processes that exit right after a burst of work,
    as a short training script does. The samples of the work must be named
    with the chain, never with a `[python code 0x...]` placeholder, up to
    the process's exit: the code objects are read while the process lives
    (a sample with a code object not read yet wakes the agent), and a
    failed read is tried again. Startup is another matter: a module's
    `<module>` code object is freed as soon as the module has run, often
    before any reader gets to it, so import-time samples may keep a
    placeholder (a few %, here; most of a short `import torch` script)."""
    from serverlib import Client, Procs, free_port, window

    import time

    exe = interpreter("3.12")
    ps = Procs(tmp_path / "logs")
    port = free_port()
    client = Client(port)
    try:
        srv = ps.start([flamewatch, "run", "--listen", f"127.0.0.1:{port}", "--data", tmp_path / "data",
                        "-F", "99", "--interval", "1s", "--no-cpu-strips"], "run")
        assert srv.wait_output(r"profiling this host at", 60), srv.describe()
        # Its first unwind tables take seconds on a busy machine, the tick waits for them.
        srv.wait_output(r"unwind tables: ", 60)
        client.wait_healthy(proc=srv)
        t0 = time.time() - 1
        pids = []
        for _ in range(3):
            p = ps.start([exe, SCRIPT, "chain", "1.5"], "python")
            assert p.wait(60) == 0, p.describe()
            pids.append(p.pid)
        time.sleep(3)		# two flushes
        total = placeholders = chained = work_placeholders = 0
        text = []
        for pid in pids:
            r = client.get("/api/v1/profile", {"type": "cpu", "format": "folded",
                                               "query": '{pid="%d"}' % pid, **window(t0, time.time() + 1)})
            assert r.status == 200, r.describe()
            for line in r.text.splitlines():
                stack, _, n = line.rpartition(" ")
                total += int(n)
                if "[python code" in stack:
                    placeholders += int(n)
                    text.append(line[-600:])
                    if in_order(stack.split(";"), ["main", "outer"]):
                        work_placeholders += int(n)
                chained += int(n) if in_order(stack.split(";"), CHAIN) else 0
        msg = f"{total} samples, {placeholders} with a placeholder, {chained} with the chain\n" + "\n".join(text)
        require(total >= 30, msg)
        assert work_placeholders == 0, msg
        assert placeholders <= total // 10, msg
        assert chained >= total // 2, msg
    finally:
        ps.close_all()
        client.close()


def test_python_in_container(fw):
    """A CPython in a container: its own pid and mount namespaces and root,
    the interpreter and its libpython at /py (a path the host does not
    have). The agent finds and reads them through /proc/PID/root; the
    chain must be named as on the host."""
    if os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("chroot"):
        pytest.skip("needs root, unshare and chroot")
    exe = interpreter("3.12")
    script = Path(__file__).resolve().parent.parent / "workloads" / "python" / "container.sh"
    res, prof = fw.record_folded(["--", "sh", script, exe.parent.parent, SCRIPT, SECONDS],
                                 duration=SECONDS, hz=HZ)
    w = python_samples(prof)
    require(w.total >= 0.2 * SECONDS * HZ, f"only {w.total} samples of the contained CPython", prof)
    chained = sum(n for s, n in w.stacks.items() if in_order(s.split(";"), CHAIN))
    placeholders = sum(n for s, n in w.stacks.items() if "[python code" in s)
    require(chained >= 0.8 * w.total, f"{chained} of {w.total} samples with the chain", prof)
    require(placeholders <= 0.05 * w.total, f"{placeholders} of {w.total} with a placeholder", prof)
