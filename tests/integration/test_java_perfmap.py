"""`flamewatch record --java-perfmap-interval`: the agent runs
`jcmd PID Compiler.perfmap` itself, so a JVM started without any perf map
option gets a perf map. Off by default. HotSpot frames are named from the
JVM's vmStructs either way (test_java.py), so the perf map is what is
checked here: written when asked for, never otherwise."""

import shutil
import subprocess
import time
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


def perf_maps_since(t0):
    """Perf maps written since t0 that name Hot.hotLoop (jcmd writes "Hot.hotLoop(long)")."""
    found = []
    for p in Path("/tmp").glob("perf-*.map"):
        try:
            if p.stat().st_mtime >= t0 and "Hot.hotLoop(long)" in p.read_text(errors="replace"):
                found.append(p)
        except OSError:
            pass
    return found


def test_jcmd_writes_perf_map(fw, hot_class):
    t0 = time.time()
    res, prof = fw.record_folded(
        ["--java-perfmap-interval", "1", "--", "java", "-cp", hot_class, "Hot", "4"], duration=4, hz=199
    )
    w = prof.for_comm("java")
    named = w.count(lambda f: any(x.startswith("Hot.hotLoop") for x in f))
    maps = perf_maps_since(t0)
    print(f"java: {named} of {w.total} samples in Hot.hotLoop; perf maps {maps}")
    require(maps, "no perf map naming Hot.hotLoop was written: jcmd was not run", w)
    require(named >= 0.5 * w.total, f"only {named} of {w.total} java samples name Hot.hotLoop", w)
    for p in maps:
        p.unlink(missing_ok=True)


def test_off_by_default(fw, hot_class):
    t0 = time.time()
    res, prof = fw.record_folded(["--", "java", "-cp", hot_class, "Hot", "3"], duration=3, hz=199)
    w = prof.for_comm("java")
    require(not perf_maps_since(t0), "no perf map was asked for, yet one was written", w)
    require(w.count(lambda f: any("Hot.hotLoop(long)" in x for x in f)) == 0, "perf map names without a perf map", w)


def test_bad_interval(fw):
    res = fw.run(["record", "--java-perfmap-interval", "0.1s", "--", "true"])
    res.check_error("--java-perfmap-interval")
