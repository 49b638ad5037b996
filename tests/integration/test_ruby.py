"""System tests for CRuby stacks: `flamewatch record` (real BPF) on the
system's ruby (Debian's ruby 3.1) running tests/workloads/ruby/chain.rb,
whose call chains are known. Nothing is asked of the interpreter: no flags,
no gems, no environment.
"""

import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import contains_run, go_binary, go_env, is_kernel, require

HZ = 499
# Other work on a shared 2-core machine can halve the samples a process gets;
# the thresholds below are about shares, so a tenth of the nominal count will do.
SECONDS = 4
SCRIPT = Path(__file__).resolve().parent.parent / "workloads" / "ruby" / "chain.rb"
CHAIN = ["<main>", "main", "outer", "middle", "inner"]
SUPPORTED = ("3.1.",)


def ruby():
    """The system ruby, if it is a version the unwinder has tables for."""
    exe = shutil.which("ruby")
    if not exe:
        pytest.skip("ruby is not installed (Debian: apt-get install ruby)")
    ver = subprocess.run([exe, "-e", "print RUBY_VERSION"], capture_output=True, text=True,
                         timeout=30).stdout.strip()
    if not ver.startswith(SUPPORTED):
        pytest.skip(f"ruby {ver}: no struct tables for it (docs/ruby.md)")
    return exe


STARTUP = (";ruby_options;", ";<internal:gem_prelude>;", ";_dl_start;", ";dl_main;")


def ruby_samples(prof):
    """The interpreter's samples once it runs the script: its main thread's
    comm is ruby, a Thread's the file:line that created it (chain.rb:57).
    Start-up (the dynamic linker; ruby_options: parsing, loading rubygems
    through gem_prelude; a tenth of a 3 s run) is left out by frames that
    show it, native or Ruby: a sample the Ruby walk failed on stays in."""
    return type(prof)(
        {s: n for s, n in prof.stacks.items()
         if (s.split(";", 1)[0] == "ruby" or s.split(";", 1)[0].startswith("chain.rb"))
         and not any(x in s for x in STARTUP)},
        source=f"{prof.source} [ruby]",
    )


def misses(w, pred):
    """The samples that fail pred, to show in a failure message."""
    return type(w)({s: n for s, n in w.stacks.items() if not pred(s.split(";"))},
                   source=f"{w.source} [not matching]")


def user(frames):
    return [f for f in frames[1:] if not is_kernel(f)]


def in_order(frames, names):
    """names occur in frames in this order (not necessarily adjacent)."""
    i = 0
    for f in frames:
        if i < len(names) and f == names[i]:
            i += 1
    return i == len(names)


def test_chain_and_split(fw):
    exe = ruby()
    res, prof = fw.record_folded(["--", exe, SCRIPT, "chain", SECONDS], duration=SECONDS, hz=HZ)
    w = ruby_samples(prof)
    require(w.total >= 0.1 * SECONDS * HZ, f"only {w.total} samples of ruby", prof)

    def full(f):
        return any(contains_run(user(f), CHAIN + [leaf, "spin"]) for leaf in ("hot_70", "cold_30"))

    chain_pct = w.count(full) / w.total
    print(f"ruby: {w.total} samples, full chain in {chain_pct:.1%}")
    require(
        chain_pct >= 0.90,
        f"ruby: only {chain_pct:.1%} of {w.total} samples show "
        f"<main>;main;outer;middle;inner;hot_70|cold_30;spin; expected >= 90 %",
        misses(w, full),
    )
    hot, cold = w.count_frame("hot_70"), w.count_frame("cold_30")
    ratio = hot / (hot + cold)
    print(f"ruby: hot_70 share {ratio:.1%} (hot_70 {hot}, cold_30 {cold})")
    require(0.65 <= ratio <= 0.75, f"ruby: hot_70 share is {ratio:.1%}; expected 70 % +- 5 %", w)
    # The VM's entry frame is replaced, not left beside the Ruby ones; only
    # the first samples, before the process is described to BPF, keep it.
    execs = w.count_frame("rb_vm_exec")
    require(execs <= 0.10 * w.total, f"ruby: {execs} samples still show rb_vm_exec", w)
    # Native frames stay in place: the start-up ones below the Ruby frames.
    native_root = w.count(lambda f: in_order(user(f), ["_start", "__libc_start_call_main", "ruby_run_node",
                                                       "<main>", "inner"]))
    require(native_root >= 0.9 * w.total, "ruby: native start-up frames missing under <main>", w)
    # Native code a Ruby frame runs (the VM's arithmetic helpers,
    # Process.clock_gettime) stays leafward of that frame, and no Ruby frame
    # ends up under native code it did not call.
    names = set(CHAIN + ["hot_70", "cold_30", "spin"])
    bad = w.count(lambda f: _ruby_under_native(user(f), names))
    require(bad == 0, f"ruby: {bad} samples with Ruby frames under native ones past <main>", w)
    leafy = w.count(lambda f: contains_run(user(f), ["inner", "hot_70", "spin"]) and user(f)[-1] not in names)
    print(f"ruby: {leafy} of {w.total} samples end in native code under spin")
    require(leafy >= 1, "ruby: no sample shows native code leafward of spin", w)


def _ruby_under_native(frames, names):
    """Past <main>, a Ruby frame of the chain after a native frame."""
    past_main = native = False
    for f in frames:
        if f == "<main>":
            past_main = True
        elif past_main and f in names and native:
            return True
        elif past_main and f not in names:
            native = True
    return False


def test_thread(fw):
    exe = ruby()
    res, prof = fw.record_folded(["--", exe, SCRIPT, "thread", SECONDS], duration=SECONDS, hz=HZ)
    w = ruby_samples(prof)
    require(w.total >= 0.1 * SECONDS * HZ, f"only {w.total} samples of ruby", prof)
    # The main thread sleeps in join; the samples are the Thread's.
    def in_thread(f):
        return "start_thread" in f and contains_run(user(f), ["block in main", "outer", "middle", "inner"])

    worker = w.count(in_thread)
    pct = worker / w.total
    print(f"ruby: Thread chain in {pct:.1%} of {w.total} samples")
    require(pct >= 0.90, f"ruby: only {pct:.1%} of samples show start_thread..block in main;outer;middle;inner",
            misses(w, in_thread))
    require(
        w.count(lambda f: in_order(f, ["start_thread", "block in main", "outer", "inner"])) == worker,
        "Ruby frames must sit under the thread's native start frames",
        w,
    )


def test_block_through_c(fw):
    """Ruby -> Integer#times (C) -> a Ruby block: the two groups of Ruby
    frames, run by two rb_vm_exec calls, come out in order."""
    exe = ruby()
    res, prof = fw.record_folded(["--", exe, SCRIPT, "block", SECONDS], duration=SECONDS, hz=HZ)
    w = ruby_samples(prof)
    require(w.total >= 0.1 * SECONDS * HZ, f"only {w.total} samples of ruby", prof)
    chain = ["<main>", "main", "block_outer", "block_inner", "block in block_inner"]
    def full(f):
        return contains_run(user(f), chain) and (contains_run(user(f), ["hot_70", "spin"])
                                                 or contains_run(user(f), ["cold_30", "spin"]))

    pct = w.count(full) / w.total
    print(f"ruby: block chain in {pct:.1%} of {w.total} samples")
    require(pct >= 0.90, f"ruby: only {pct:.1%} of samples show {';'.join(chain)};hot_70|cold_30;spin",
            misses(w, full))


def source_line(text):
    """The line number of the first source line of chain.rb containing text."""
    for n, line in enumerate(SCRIPT.read_text().splitlines(), 1):
        if text in line:
            return n
    raise AssertionError(f"{text!r} not in {SCRIPT}")


def test_lines(fw, tmp_path):
    """Each Ruby frame's line is the line of its call site (or the leaf's
    current line), from the iseq's instruction info table; checked through
    `go tool pprof -raw`, whose locations carry file:line. A frame that
    calls another of the script's functions must be at its call site; the
    deepest of the script's frames may be anywhere in its function (hot_70
    runs its own `leave`, on the `end` line, between spin's return and its
    own)."""
    exe = ruby()
    go = go_binary()
    res, out = fw.record(["--", exe, SCRIPT, "chain", 2], duration=2, out_name="rb.pb.gz", fmt="pprof", hz=HZ)
    res.check_ok()
    raw = subprocess.run([go, "tool", "pprof", "-raw", str(out)], capture_output=True, text=True,
                         env=go_env(tmp_path), timeout=120)
    assert raw.returncode == 0, raw.stderr
    calls = {
        "hot_70": {source_line("spin(7 * n)")},
        "cold_30": {source_line("spin(3 * n)")},
        "middle": {source_line("  inner(deadline)")},
        "outer": {source_line("  middle(deadline)")},
        "inner": {source_line("hot_70(2000)"), source_line("cold_30(2000)")},
    }
    script_fns = set(calls) | {"spin"}
    bodies = {fn: function_lines(fn) for fn in calls}
    seen, wrong = {}, []
    for stack in raw_stacks(raw.stdout):
        frames = [(fn, f, ln) for fn, f, ln in stack if fn in script_fns]  # leaf first
        for i, (fn, f, ln) in enumerate(frames):
            if fn not in calls:
                continue
            seen.setdefault(fn, set()).add((f, ln))
            ok = f == str(SCRIPT) and (ln in calls[fn] if i > 0 else ln in bodies[fn])
            if not ok:
                wrong.append((fn, f, ln, "calling" if i > 0 else "leaf"))
    for fn in calls:
        assert seen.get(fn), f"ruby: no {fn} frame with a line; seen {sorted(seen)}"
    assert not wrong, f"ruby: frames off their lines (expected {calls}, bodies {bodies}): {wrong[:10]}"
    assert {ln for _, ln in seen["inner"]} >= calls["inner"]


def raw_stacks(text):
    """The samples of `go tool pprof -raw`, each a list of (function, file,
    line) leaf first; a location's inlined lines count as frames too."""
    locs, cur, samples, in_locs = {}, None, [], False
    for line in text.splitlines():
        if line.startswith("Locations"):
            in_locs = True
            continue
        if line.startswith("Mappings"):
            break
        if in_locs:
            m = re.match(r"\s*(\d+): 0x[0-9a-f]+ M=\d+ (.*) (\S*):(\d+) s=\d+$", line)
            if m:
                cur = int(m.group(1))
                locs[cur] = [(m.group(2), m.group(3), int(m.group(4)))]
                continue
            m = re.match(r"\s+(.*) (\S*):(\d+) s=\d+$", line)
            if m and cur is not None:
                locs[cur].append((m.group(1), m.group(2), int(m.group(3))))
            continue
        m = re.match(r"\s+\d+\s+\d+: ([\d ]+)$", line)
        if m:
            samples.append([int(x) for x in m.group(1).split()])
    return [[fr for loc in s for fr in locs.get(loc, [])] for s in samples]


def function_lines(name):
    """The lines of chain.rb from `def name` to its `end`."""
    lines = SCRIPT.read_text().splitlines()
    first = next(n for n, line in enumerate(lines, 1) if re.match(rf"def {name}\b", line))
    last = next(n for n, line in enumerate(lines[first:], first + 1) if line == "end")
    return set(range(first, last + 1))


def test_process_started_before(fw):
    """`record -p` of an interpreter that was already running: its TLS
    module and layout are found from its live mappings and memory."""
    exe = ruby()
    proc = subprocess.Popen([exe, str(SCRIPT), "chain", "60"])
    try:
        time.sleep(1.0)
        res, prof = fw.record_folded(["-p", str(proc.pid), "-d", "2"], duration=2, hz=HZ)
    finally:
        proc.kill()
        proc.wait()
    w = ruby_samples(prof)
    require(w.total >= 100, f"only {w.total} samples of ruby", prof)
    full = w.count(lambda f: contains_run(user(f), CHAIN))
    require(full >= 0.9 * w.total, f"ruby: only {full} of {w.total} samples show the chain", w)
