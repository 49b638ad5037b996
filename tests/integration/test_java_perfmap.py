"""`flamewatch record --java-perfmap-interval`: the agent runs
`jcmd PID Compiler.perfmap` itself, so a JVM started without any perf map
option gets its JIT-compiled frames named. Off by default."""

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import require

SRC = Path(__file__).resolve().parent.parent / "workloads" / "java" / "Hot.java"


@pytest.fixture
def hot_class(tmp_path):
    for tool in ("java", "javac", "jcmd"):
        if not shutil.which(tool):
            pytest.skip(f"{tool} is not installed")
    subprocess.run(["javac", "-d", str(tmp_path / "classes"), str(SRC)], check=True, timeout=120)
    return tmp_path / "classes"


def test_jcmd_names_jit_frames(fw, hot_class):
    res, prof = fw.record_folded(
        ["--java-perfmap-interval", "1", "--", "java", "-cp", hot_class, "Hot", "4"], duration=4, hz=199
    )
    w = prof.for_comm("java")
    named = w.count(lambda f: any("Hot.hotLoop(long)" in x for x in f))
    print(f"java: {named} of {w.total} samples in Hot.hotLoop")
    require(named >= 0.5 * w.total, f"only {named} of {w.total} java samples name Hot.hotLoop", w)


def test_off_by_default(fw, hot_class):
    res, prof = fw.record_folded(["--", "java", "-cp", hot_class, "Hot", "3"], duration=3, hz=199)
    w = prof.for_comm("java")
    require(w.count(lambda f: any("Hot.hotLoop" in x for x in f)) == 0, "no perf map was asked for, yet Java frames have names", w)
    require(w.count(lambda f: any(x.startswith("[jit pid") for x in f)) > 0.3 * w.total, "the hot loop should show as unnamed JIT code", w)


def test_bad_interval(fw):
    res = fw.run(["record", "--java-perfmap-interval", "0.1s", "--", "true"])
    res.check_error("--java-perfmap-interval")
