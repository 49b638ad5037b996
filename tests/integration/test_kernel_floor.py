"""System tests for the stack walks of kernels without bpf_loop() (before
Linux 5.17): bounded loops over global BPF functions instead.

This machine's kernel has bpf_loop(), so the fallback is forced with
FLAMEWATCH_NO_BPF_LOOP=1, which the sampler honours exactly as it would a
failed probe: the same BPF object is loaded with have_bpf_loop = false.
What this cannot show is that a 5.15 verifier accepts the object; see
docs/install.md.
"""

import subprocess

import pytest

from conftest import contains_run, require
from test_python import CHAIN, SCRIPT, VERSIONS, interpreter, python_samples, user
from test_unwind import HZ, _cgo_chain_ok, user_frames

DEPTH = 100  # >= 64 frames, as issue 10 asks; + main, leaf, libc's start-up: 106 in all
MODES = {"bpf_loop": "0", "bounded": "1"}


@pytest.fixture(params=list(MODES))
def mode(request, monkeypatch):
    monkeypatch.setenv("FLAMEWATCH_NO_BPF_LOOP", MODES[request.param])
    return request.param


def test_check_names_the_walk(flamewatch, mode):
    res = subprocess.run([flamewatch, "check"], capture_output=True, text=True, timeout=60)
    require(res.returncode == 0, f"`flamewatch check` failed:\n{res.stdout}\n{res.stderr}")
    want = "stack walks: bpf_loop()" if mode == "bpf_loop" else "stack walks: bounded loops"
    require(want in res.stdout, f"`flamewatch check` does not say `{want}`:\n{res.stdout}")


def test_deep_stack(fw, workloads, mode):
    """main;descend x 100;leaf, all from unwind tables, in >= 90 % of the
    samples in leaf, with either walk."""
    res, prof = fw.record_folded(["-v", "--", workloads / "nofp" / "recurse", "3", str(DEPTH)], duration=3)
    if mode == "bounded":
        require("stack walks use bounded loops" in res.stderr, "the fallback was not used\n" + res.describe())
    w = prof.for_comm("recurse")
    require(w.total >= 0.5 * 2 * HZ, f"only {w.total} samples of recurse, expected ~{2 * HZ}+", prof)
    run = ["main"] + ["descend"] * DEPTH + ["leaf"]
    in_leaf = w.count(lambda f: user_frames(f)[-1:] == ["leaf"])
    n = w.count(lambda f: contains_run(user_frames(f), run))
    pct = n / in_leaf if in_leaf else 0.0
    print(f"\nrecurse {DEPTH} ({mode}): main;descend x {DEPTH};leaf in {n}/{in_leaf} samples in leaf = {pct:.1%}")
    require(in_leaf >= 0.8 * w.total, f"only {in_leaf} of {w.total} samples are in leaf", w)
    require(pct >= 0.90, f"{n} of {in_leaf} samples in leaf ({pct:.1%}) hold all {DEPTH + 2} frames; expected >= 90 %", w)


def test_bounded_cgo(fw, workloads, monkeypatch):
    """The Go stack switches work in the fallback too."""
    monkeypatch.setenv("FLAMEWATCH_NO_BPF_LOOP", "1")
    _, prof = fw.record_folded(["--", workloads / "cgo_hot", "3"], duration=3)
    w = prof.for_comm("cgo_hot")
    require(w.total >= 0.5 * 3 * HZ, f"only {w.total} samples of cgo_hot, expected ~{3 * HZ}", prof)
    n = w.count(_cgo_chain_ok)
    print(f"\ncgo_hot (bounded): full chain in {n}/{w.total} = {n / w.total:.1%}")
    require(n >= 0.9 * w.total, f"{n} of {w.total} cgo_hot samples hold the whole chain; expected >= 90 %", w)


def test_bounded_python(fw, monkeypatch):
    """The CPython walk has the same fallback: the newest installed version."""
    monkeypatch.setenv("FLAMEWATCH_NO_BPF_LOOP", "1")
    exe = None
    for version in reversed(VERSIONS):
        try:
            exe = interpreter(version)
            break
        except pytest.skip.Exception:
            continue
    if exe is None:
        pytest.skip("no pyenv CPython installed")
    # 5 s, as test_chain_and_split: the samples taken before the agent
    # described the process carry no Python frames, and on a loaded CI
    # host they were over 10 % of a 3-s run (89.7 % full chains, 3.13).
    seconds = 5
    _, prof = fw.record_folded(["--", exe, SCRIPT, "chain", seconds], duration=seconds, hz=HZ)
    w = python_samples(prof)
    require(w.total >= 0.2 * seconds * HZ, f"only {w.total} samples of {exe}", prof)
    n = sum(w.count(lambda f, leaf=leaf: contains_run(user(f), ["<module>"] + CHAIN + [leaf]))
            for leaf in ("hot_70", "cold_30"))
    print(f"\n{exe.name} (bounded): full Python chain in {n}/{w.total} = {n / w.total:.1%}")
    require(n >= 0.9 * w.total, f"{n} of {w.total} samples show <module>;main;outer;middle;inner;leaf", w)
