"""System tests for Java frames without JVM flags: `flamewatch record` (real
BPF) on HotSpot 17 running tests/workloads/java/Chains.java, whose call
chains are known. The JVM gets no option at all: its frames are named from
the vmStructs tables libjvm.so exports (src/agent/interp/hotspot.c).

Interpreted frames: Cold.inner is generated here with more bytecode than
HotSpot's HugeMethodLimit, so the JIT never compiles it and its samples
stay in the interpreter (its callers do get compiled: the walk crosses
compiled -> interpreted frames). Compiled frames: outer -> middle ->
{hotA, hotB} is compiled (and inlined) by C2 after a few ms.
"""

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import require

HZ = 199
SECONDS = 3
SRC = Path(__file__).resolve().parent.parent / "workloads" / "java" / "Chains.java"
COLD_CHAIN = ["Chains.main", "Chains.coldOuter", "Chains.coldMiddle", "Cold.inner"]
JIT_CHAIN = ["Chains.main", "Chains.outer", "Chains.middle"]


COLD = SRC.parent / "cold.py"


@pytest.fixture(scope="module")
def classes(tmp_path_factory):
    for tool in ("java", "javac"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    d = tmp_path_factory.mktemp("java")
    (d / "Cold.java").write_text(subprocess.run(["/usr/bin/python3", str(COLD)], capture_output=True,
                                                text=True, check=True).stdout)
    shutil.copy(SRC, d / "Chains.java")
    subprocess.run(["javac", "-d", str(d / "classes"), str(d / "Chains.java"), str(d / "Cold.java")],
                   check=True, timeout=120)
    return d / "classes"


def java_frames(frames):
    """The Java frames of a stack (comm first, leaf last), in order."""
    return [f for f in frames if f.startswith("Chains.") or f.startswith("Cold.")]


def ends_with(frames, chain):
    return java_frames(frames)[-len(chain):] == chain


def record_running(fw, classes, mode):
    """Starts `java Chains MODE`, waits until it is warm, records it with -p."""
    # It runs until killed: starting the recorder can take many seconds on a loaded machine.
    proc = subprocess.Popen(["java", "-cp", str(classes), "Chains", mode, "600"],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if line.strip() != "ready":
            pytest.fail(f"java Chains {mode} did not start: {line!r}", pytrace=False)
        res, prof = fw.record_folded(["-v", "-p", str(proc.pid), "-d", str(SECONDS)],
                                     duration=SECONDS, hz=HZ)
    finally:
        proc.kill()
        proc.wait()
    return res, prof.for_comm("java")


def test_interpreted_chain(fw, classes):
    res, w = record_running(fw, classes, "interp")
    good = w.count(lambda f: ends_with(f, COLD_CHAIN))
    print(f"interpreted: {good} of {w.total} samples end in {' -> '.join(COLD_CHAIN)}")
    require(w.total >= 30, f"only {w.total} samples of the Java thread", w)
    require(good >= 0.9 * w.total, f"only {good} of {w.total} samples show the interpreted chain in order", w)
    require(w.count(lambda f: any(x.startswith("[jit pid") for x in f)) == 0,
            "JVM code left unnamed as anonymous JIT memory", w)


def test_compiled_chain_and_split(fw, classes):
    res, w = record_running(fw, classes, "jit")
    a = w.count(lambda f: ends_with(f, JIT_CHAIN + ["Chains.hotA"]))
    b = w.count(lambda f: ends_with(f, JIT_CHAIN + ["Chains.hotB"]))
    print(f"compiled: hotA {a}, hotB {b} of {w.total} samples")
    require(w.total >= 30, f"only {w.total} samples of the Java thread", w)
    require(a + b >= 0.9 * w.total, f"only {a + b} of {w.total} samples show outer -> middle -> hotA|hotB", w)
    # hotA runs three times as many iterations as hotB: 75 %.
    share = a / (a + b) if a + b else 0
    require(0.6 <= share <= 0.9, f"hotA has {share:.0%} of the chain's samples, expected about 75 %", w)
    # The agent's own count: frames the BPF walk unwound by their nmethod's frame size.
    m = re.search(r"hotspot: .* (\d+) compiled, ", res.stderr)
    require(m and int(m.group(1)) > 0, "no frame was unwound as compiled code:\n" + (m.group(0) if m else "no hotspot line"), w)


def test_started_under_flamewatch(fw, classes):
    """`record -- java ...`: the JVM is described while it starts, with no -p."""
    res, prof = fw.record_folded(["--", "java", "-cp", str(classes), "Chains", "jit", str(SECONDS)],
                                 duration=SECONDS + 5, hz=HZ)
    w = prof.for_comm("java")
    rooted = w.count(lambda f: "JavaMain" in f and "Chains.main" in f)
    good = w.count(lambda f: "JavaMain" in f and java_frames(f)[:3] == JIT_CHAIN)
    print(f"started under flamewatch: {good} of {rooted} samples under Chains.main "
          f"(of {w.total}) show outer -> middle")
    # Samples taken before the agent first read the JVM's tables stop at
    # the first compiled frame (no JavaMain): how many depends on how fast
    # the agent gets to it (the JVM starts while libjvm.so's unwind table is
    # being built), so only the ones walked after are held to the chain.
    require(rooted >= 10, f"only {rooted} samples reach Chains.main from JavaMain", w)
    require(good >= 0.9 * rooted, f"only {good} of {rooted} samples under Chains.main show outer -> middle", w)
