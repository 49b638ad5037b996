"""System tests for `flamewatch record`, run against the real binary and real
BPF as root. Each test profiles a workload from tests/workloads whose call
chain is known and checks the stacks that come out.

Sampling at 499 Hz gives ~2000 samples for a 4 s workload, so the 70/30 split
is measured to well under a percent of statistical error; the ±5 % tolerance
is for a noisy 2-core machine.
"""

import os
import re
import signal
import subprocess
import threading
import time

import pytest

from conftest import (
    LIBC_START_RE,
    SLACK_S,
    Pprof,
    Profile,
    Result,
    contains_run,
    go_binary,
    go_env,
    is_kernel,
    require,
)

HZ = 499
NCPU = os.cpu_count() or 1


def user_frames(frames):
    """Frames below the comm that are not kernel frames, root first."""
    return [f for f in frames[1:] if not is_kernel(f)]


def ends_with_chain(chain):
    """Predicate: the user part of the stack is exactly <C start-up frames>
    followed by `chain` (so nothing missing or extra between main and the leaf)."""

    def pred(frames):
        user = user_frames(frames)
        if user[-len(chain) :] != chain:
            return False
        return all(LIBC_START_RE.match(f) for f in user[: -len(chain)])

    return pred


# ---------------------------------------------------------------------------
# call chains, per language


def test_c_split_70_30(fw, workloads):
    res, prof = fw.record_folded(["--", workloads / "cpu_split", "4"], duration=4)
    w = prof.for_comm("cpu_split")
    expected = 4 * HZ
    require(w.total >= 0.5 * expected, f"only {w.total} samples of cpu_split, expected ~{expected}", prof)

    hot, cold = w.count_frame("hot_70"), w.count_frame("cold_30")
    require(hot + cold >= 0.9 * w.total, f"hot_70 ({hot}) + cold_30 ({cold}) are < 90 % of {w.total} samples", w)
    ratio = hot / (hot + cold)
    require(
        0.65 <= ratio <= 0.75,
        f"hot_70 share is {ratio:.1%} (hot_70 {hot}, cold_30 {cold}); expected 70 % +- 5 %",
        w,
    )

    with_main = w.count_frame("main")
    require(
        with_main >= 0.95 * w.total,
        f"only {with_main} of {w.total} cpu_split samples ({with_main / w.total:.1%}) reach main; expected >= 95 %",
        w,
    )

    for leaf, n in (("hot_70", hot), ("cold_30", cold)):
        chain = ["main", "run", "work_loop", leaf]
        exact = w.count(ends_with_chain(chain))
        require(
            exact >= 0.9 * n,
            f"only {exact} of {n} samples in {leaf} have the exact stack "
            f"cpu_split;[C start-up frames;]{';'.join(chain)}",
            w,
        )
    # `-- CMD` prints a one-line summary on stderr unless --quiet.
    assert res.stderr.strip(), "no summary on stderr after `record -- CMD`\n" + res.describe()


CPP_CHAIN = ["main", "launch(double)", "drive(int)", "ns::Widget<int>::spin()"]


def test_cpp_demangled_chain(fw, workloads):
    _, prof = fw.record_folded(["--", workloads / "chain", "3"], duration=3)
    w = prof.for_comm("chain")
    require(w.total >= 0.5 * 3 * HZ, f"only {w.total} samples of chain, expected ~{3 * HZ}", prof)
    n = w.count_run(CPP_CHAIN)
    hint = ""
    if any(f.startswith("_Z") for s in w.stacks for f in s.split(";")):
        hint = " (some frames are still mangled)"
    require(
        n >= 0.9 * w.total,
        f"{n} of {w.total} samples ({n / w.total:.1%}) contain {';'.join(CPP_CHAIN)} in that order; "
        f"expected >= 90 %{hint}",
        w,
    )


def test_go_chain(fw, workloads):
    _, prof = fw.record_folded(["--", workloads / "hot_go", "3"], duration=3)
    w = prof.for_comm("hot_go")
    require(w.total >= 0.5 * 3 * HZ, f"only {w.total} samples of hot_go, expected ~{3 * HZ}", prof)
    run = ["main.outer", "main.hotLoop"]
    n = w.count_run(run)
    require(
        n >= 0.8 * w.total,
        f"{n} of {w.total} samples ({n / w.total:.1%}) contain {';'.join(run)}; expected >= 80 %",
        w,
    )


def test_rust_chain(fw, workloads):
    _, prof = fw.record_folded(["--", workloads / "hot_rs", "3"], duration=3)
    w = prof.for_comm("hot_rs")
    require(w.total >= 0.5 * 3 * HZ, f"only {w.total} samples of hot_rs, expected ~{3 * HZ}", prof)
    run = ["hot::outer", "hot::hot_loop"]
    n = w.count_run(run)
    hint = ""
    if any(re.search(r"hot::hot_loop::h[0-9a-f]{16}", s) for s in w.stacks):
        hint = " (the legacy-mangling hash ::h<16 hex> is not stripped)"
    elif any(f.startswith(("_ZN", "_R")) for s in w.stacks for f in s.split(";")):
        hint = " (some frames are still mangled)"
    require(
        n >= 0.8 * w.total,
        f"{n} of {w.total} samples ({n / w.total:.1%}) contain {';'.join(run)}; expected >= 80 %{hint}",
        w,
    )


def test_kernel_frames_below_user_frames(fw, workloads):
    _, prof = fw.record_folded(["--", workloads / "syscall_loop", "3"], duration=3)
    w = prof.for_comm("syscall_loop")
    require(w.total >= 0.5 * 3 * HZ, f"only {w.total} samples of syscall_loop, expected ~{3 * HZ}", prof)

    has_kernel = lambda f: any(is_kernel(x) for x in f[1:])
    mixed = lambda f: has_kernel(f) and user_frames(f)
    kernel = w.count(has_kernel)
    require(
        kernel >= 0.2 * w.total,
        f"only {kernel} of {w.total} samples have kernel (_[k]) frames; this workload spends most of its time in read(2)",
        w,
    )
    n_mixed = w.count(mixed)
    require(
        n_mixed >= 0.8 * kernel,
        f"only {n_mixed} of {kernel} samples with kernel frames also have the user stack that made the system call",
        w,
    )

    def misordered(f):
        seen_kernel = False
        for x in f[1:]:
            if is_kernel(x):
                seen_kernel = True
            elif seen_kernel:
                return True
        return False

    bad = w.count(misordered)
    require(bad == 0, f"{bad} samples have user frames after (leafward of) kernel frames", w)

    reaches = w.count(lambda f: has_kernel(f) and contains_run(user_frames(f), ["main", "do_syscalls"]))
    require(
        reaches >= 0.5 * n_mixed,
        f"only {reaches} of {n_mixed} user+kernel samples contain main;do_syscalls",
        w,
    )
    named = w.count(lambda f: any(is_kernel(x) and "read" in x for x in f))
    require(named > 0, "no kernel frame mentions `read` (read_zero, vfs_read, ...): kernel symbols not resolved?", w)


# ---------------------------------------------------------------------------
# targets: -- CMD with children, -p, -a


def test_cmd_follows_children(fw, workloads):
    _, prof = fw.record_folded(["--", workloads / "forker", "3"], duration=3)
    w = prof.for_comm("forker")
    n = w.count_frame("child_work")
    expected = 3 * HZ * min(2, NCPU)
    require(
        n >= 0.3 * expected,
        f"{n} samples in child_work of the forked children, expected ~{expected}: are children followed?",
        prof,
    )
    chain = w.count_run(["main", "spawn", "child_work"])
    require(chain >= 0.9 * n, f"only {chain} of {n} child_work samples have main;spawn;child_work", w)


def test_pid_follows_threads(fw, workloads, spawn):
    # Long enough to outlive record's start (BPF loading: seconds) on a busy host.
    target = spawn([workloads / "threads", "60"])
    time.sleep(0.5)
    res, prof = fw.record_folded(["-p", str(target.pid), "-d", "2"], duration=2)
    assert target.poll() is None, "the workload ended before the recording did"
    require(
        1.5 <= res.wall_s <= 2 + SLACK_S,
        f"`-d 2` took {res.wall_s:.1f} s",
        prof,
    )
    others = {c: n for c, n in prof.comms().items() if c != "threads"}
    require(not others, f"`-p {target.pid}` recorded other processes too: {others}", prof)

    w = prof.for_comm("threads")
    expected = 2 * HZ * min(3, NCPU)
    require(w.total >= 0.4 * expected, f"only {w.total} samples of pid {target.pid}, expected ~{expected}", prof)
    workers = w.count_run(["thread_entry", "thread_spin"])
    main = w.count_run(["main", "main_spin"])
    require(workers >= 0.25 * w.total, f"thread_entry;thread_spin in only {workers} of {w.total} samples", w)
    require(main >= 0.1 * w.total, f"main;main_spin in only {main} of {w.total} samples", w)


def test_pid_list(fw, workloads, spawn):
    a = spawn([workloads / "cpu_split", "10"])
    b = spawn([workloads / "chain", "10"])
    time.sleep(0.5)
    _, prof = fw.record_folded(["-p", f"{a.pid},{b.pid}", "-d", "2"], duration=2)
    comms = prof.comms()
    require(set(comms) <= {"cpu_split", "chain"}, f"`-p {a.pid},{b.pid}` recorded other processes: {dict(comms)}", prof)
    for comm, leaf in (("cpu_split", "hot_70"), ("chain", "ns::Widget<int>::spin()")):
        n = prof.for_comm(comm).count_frame(leaf)
        require(n >= 0.2 * 2 * HZ, f"only {n} samples of {comm} in {leaf}", prof)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_pid_stops_on_signal_and_writes(fw, workloads, spawn, sig):
    target = spawn([workloads / "cpu_split", "30"])
    out = fw.tmp / "sig.folded"
    argv = [str(fw.binary), "record", "-F", str(HZ), "--format", "folded", "-o", str(out), "-p", str(target.pid), "-d", "60"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=fw.tmp)
    t0 = time.monotonic()
    # Loading the BPF programs takes seconds (more on a busy host): the
    # signal comes 3 s after record says it samples, not 3 s after start.
    err = []
    reader = threading.Thread(target=lambda: err.extend(iter(proc.stderr.readline, b"")), daemon=True)
    reader.start()
    deadline = time.monotonic() + SLACK_S
    while not any(b"sampling at" in line for line in list(err)):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            reader.join(5)
            pytest.fail(f"record did not say it samples within {SLACK_S} s\n{b''.join(err).decode(errors='replace')}")
        time.sleep(0.05)
    time.sleep(3)
    proc.send_signal(sig)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        reader.join(5)
        pytest.fail(f"flamewatch did not exit within 30 s of {sig.name}\n{b''.join(err).decode(errors='replace')[-3000:]}")
    reader.join(5)
    stdout = proc.stdout.read()
    res = Result(argv, proc.returncode, stdout.decode(errors="replace"), b"".join(err).decode(errors="replace"),
                 time.monotonic() - t0)
    res.check_ok()
    assert out.exists(), f"no output written after {sig.name}\n" + res.describe()
    prof = Profile.parse(out.read_text(errors="replace"), source=str(out))
    n = prof.for_comm("cpu_split").count_frame("hot_70")
    require(n >= 100, f"only {n} samples in hot_70 after ~3 s at {HZ} Hz", prof)


@pytest.mark.parametrize("mode", [["-a"], []], ids=["-a", "default"])
def test_all_host(fw, workloads, spawn, mode):
    spawn([workloads / "cpu_split", "10"])
    time.sleep(0.5)
    res, prof = fw.record_folded(mode + ["-d", "2"], duration=2)
    require(1.5 <= res.wall_s <= 2 + SLACK_S, f"`-d 2` took {res.wall_s:.1f} s", prof)
    w = prof.for_comm("cpu_split")
    n = w.count_run(["work_loop", "hot_70"])
    require(n >= 0.3 * 2 * HZ * 0.7, f"host-wide recording has only {n} samples of cpu_split in work_loop;hot_70", prof)


# ---------------------------------------------------------------------------
# output formats


def test_pprof(fw, workloads, tmp_path):
    res, out = fw.record(["--", workloads / "cpu_split", "3"], duration=3, out_name="x.pb.gz", fmt=None)
    res.check_ok()
    data = out.read_bytes()
    assert data[:2] == b"\x1f\x8b", f"{out} is not gzip (starts with {data[:8]!r})"
    pp = Pprof(data)

    assert pp.sample_types == [("samples", "count"), ("cpu", "nanoseconds")], f"sample types {pp.sample_types}"
    assert pp.samples, "no samples in the profile"
    missing = {}
    for _, labels, _ in pp.samples:
        for key in ("pid", "tid", "comm", "cpu"):
            if key not in labels:
                missing[key] = missing.get(key, 0) + 1
    assert not missing, f"samples without labels (label: samples missing it) {missing} of {len(pp.samples)}"

    count = sum(v[0] for v, _, _ in pp.samples)
    nanos = sum(v[1] for v, _, _ in pp.samples)
    per = nanos / count if count else 0
    assert abs(per - 1e9 / HZ) <= 0.02 * 1e9 / HZ, f"cpu/nanoseconds per sample is {per:.0f}, expected {1e9 / HZ:.0f} at {HZ} Hz"

    w = pp.folded("cpu_split")
    hot, cold = w.count_frame("hot_70"), w.count_frame("cold_30")
    require(hot + cold > 0.5 * 3 * HZ * 0.9, f"hot_70 {hot} + cold_30 {cold} samples in the pprof profile", w)
    require(0.65 <= hot / (hot + cold) <= 0.75, f"hot_70 share {hot / (hot + cold):.1%} in the pprof profile", w)
    require(w.count(ends_with_chain(["main", "run", "work_loop", "hot_70"])) > 0, "no exact main;run;work_loop;hot_70 stack", w)
    pids = {labels["pid"] for _, labels, frames in pp.samples if "hot_70" in frames}
    assert len(pids) == 1, f"hot_70 samples carry pid labels {pids}, expected the one workload pid"

    go, env = go_binary(), go_env(tmp_path)
    for view in ("-raw", "-top"):
        r = subprocess.run(
            [go, "tool", "pprof", "-symbolize=none", view, str(out)],
            capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path,
        )
        assert r.returncode == 0, f"go tool pprof {view} failed ({r.returncode}):\n{r.stderr[-3000:]}"
        assert "hot_70" in r.stdout, f"go tool pprof {view} does not show hot_70:\n{r.stdout[:3000]}"
        if view == "-raw":
            assert "samples/count" in r.stdout and "cpu/nanoseconds" in r.stdout, r.stdout[:2000]


def _check_kind(path, kind):
    data = path.read_bytes()
    if kind == "pprof":
        assert data[:2] == b"\x1f\x8b", f"{path.name}: expected gzipped pprof, got {data[:40]!r}"
        pp = Pprof(data)
        assert pp.folded("cpu_split").count_frame("hot_70") > 0, f"{path.name}: no hot_70 samples in pprof"
    else:
        assert data[:2] != b"\x1f\x8b", f"{path.name}: expected folded text, got gzip"
        prof = Profile.parse(data.decode("utf-8", "replace"), source=path.name)
        require(prof.for_comm("cpu_split").count_frame("hot_70") > 0, f"{path.name}: no hot_70 samples", prof)


@pytest.mark.parametrize(
    "name,fmt,kind",
    [
        ("out.folded", None, "folded"),
        ("out.txt", None, "folded"),
        ("out.prof", None, "pprof"),
        ("out.folded", "pprof", "pprof"),
        ("out.pb.gz", "folded", "folded"),
    ],
)
def test_format_selection(fw, workloads, name, fmt, kind):
    res, out = fw.record(["--", workloads / "cpu_split", "1"], duration=1, out_name=name, fmt=fmt)
    res.check_ok()
    assert out.exists(), f"{out} not written\n" + res.describe()
    _check_kind(out, kind)


def test_stdout_output(fw, workloads):
    res = fw.run(["record", "-F", HZ, "--format", "folded", "-o", "-", "--", workloads / "cpu_split", "1"], timeout=1 + SLACK_S)
    res.check_ok()
    prof = Profile.parse(res.stdout, source="stdout")
    require(prof.for_comm("cpu_split").count_frame("hot_70") > 0, "no hot_70 samples on stdout", prof)


def test_default_output_name(fw, workloads):
    res = fw.run(["record", "-F", HZ, "--", workloads / "cpu_split", "1"], timeout=1 + SLACK_S)
    res.check_ok()
    out = fw.tmp / "profile.pb.gz"
    assert out.exists(), f"no profile.pb.gz in the working directory; it has {os.listdir(fw.tmp)}\n" + res.describe()
    _check_kind(out, "pprof")


def test_quiet(fw, workloads):
    res, out = fw.record(["--quiet", "--", workloads / "cpu_split", "1"], duration=1)
    res.check_ok()
    assert out.exists()
    assert res.stderr.strip() == "", "--quiet still printed on stderr\n" + res.describe()


# ---------------------------------------------------------------------------
# errors


def test_error_unknown_pid(fw):
    res = fw.run(["record", "-p", "999999999", "-d", "1", "-o", fw.tmp / "x.folded"], timeout=30)
    res.check_error("999999999")


def test_error_unwritable_output(fw):
    res = fw.run(["record", "-a", "-d", "1", "-o", "/nonexistent/dir/x"], timeout=1 + SLACK_S)
    res.check_error("/nonexistent/dir/x")


@pytest.mark.parametrize("freq", ["0", "-1", "abc"])
def test_error_bad_frequency(fw, freq):
    res = fw.run(["record", "-F", freq, "-a", "-d", "1", "-o", fw.tmp / "x.folded"], timeout=1 + SLACK_S)
    res.check_error()
    assert re.search(r"-F|freq|hz", res.stderr, re.I), "message does not say what is wrong\n" + res.describe()


def test_error_unknown_option(fw):
    res = fw.run(["record", "--no-such-option", "-d", "1", "-o", fw.tmp / "x.folded"], timeout=30)
    res.check_error("no-such-option")


def test_error_command_not_found(fw):
    res = fw.run(["record", "-o", fw.tmp / "x.folded", "--", "/nonexistent/command"], timeout=30)
    res.check_error("/nonexistent/command")


def test_error_not_root(fw):
    argv = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all",
            str(fw.binary), "record", "-a", "-d", "1", "--format", "folded", "-o", "/dev/null"]
    t0 = time.monotonic()
    r = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd="/")
    res = Result(argv, r.returncode, r.stdout, r.stderr, time.monotonic() - t0)
    res.check_error()
    assert re.search(r"root|privilege|permission|CAP_|not permitted", res.stderr, re.I), (
        "message does not say that root (or capabilities) are needed\n" + res.describe()
    )


def test_jit_frames_from_perf_map(fw, workloads):
    """Anonymous executable code is named from /tmp/perf-PID.map. The workload
    deletes its map file when it exits, so this also checks that the map is
    read while the process is alive... or, failing that, that the frame keeps
    its address instead of vanishing."""
    _, prof = fw.record_folded(["--", workloads / "jit_perfmap", "3"], duration=3)
    w = prof.for_comm("jit_perfmap")
    require(w.total > 0, "no samples of jit_perfmap", prof)
    jit = w.count_frame("jit_spin_loop")
    require(jit >= 0.8 * w.total, f"jit_spin_loop in only {jit} of {w.total} samples", w)


def test_vdso_frames_named_and_unwound(fw, workloads):
    """The vDSO is symbolized from the kernel's image and unwound through its
    .eh_frame: clock_gettime's caller is not lost although the vDSO has no
    frame pointers."""
    _, prof = fw.record_folded(["--", workloads / "vdso_loop", "3"], duration=3)
    w = prof.for_comm("vdso_loop")
    # The vDSO's internal helpers have no symbols: they read [vdso]+0x...
    in_vdso = {
        s: c for s, c in w.stacks.items()
        if any(f == "clock_gettime" or f.startswith("[vdso]+") for f in s.split(";")[-2:])
    }
    total = sum(in_vdso.values())
    require(total >= 0.3 * w.total, f"only {total} of {w.total} samples are in the vDSO", w)
    named = sum(c for s, c in in_vdso.items() if "clock_gettime;clock_gettime" in s)
    require(named >= 0.5 * total, f"only {named} of {total} vDSO samples name the vDSO's clock_gettime", w)
    with_caller = sum(c for s, c in in_vdso.items() if contains_run(s.split(";"), ["main", "poll_clock"]))
    require(
        with_caller >= 0.9 * total,
        f"only {with_caller} of {total} vDSO samples keep main;poll_clock above the vDSO frame",
        w,
    )
