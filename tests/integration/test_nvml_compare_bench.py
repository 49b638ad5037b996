"""bench/gpu/nvml_compare.sh, the script the coordinator runs on the H200,
run here end to end against test doubles: the fake libnvidia-ml.so.1, a
stand-in nvidia-smi and a stand-in torch (tests/fakes) whose process joins
GPU 0 of the fake when it starts, as a CUDA process would.

The script once looked for the per-process rows of the `timeout` that runs
the load instead of the python process on the GPU, and reported them absent
on the H200. Here the rows must be found for the load's own pid in every
comparison round, next to nvidia-smi's, and every metric within tolerance.
"""

import os
import re
import subprocess

from conftest import BUILD, REPO

FAKES = REPO / "tests" / "fakes"


def test_nvml_compare_finds_the_load(flamewatch, tmp_path):
    assert (BUILD / "fakes" / "libnvidia-ml.so.1").exists(), "run `make fakes`"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nvidia-smi").symlink_to(FAKES / "nvidia-smi")
    values = tmp_path / "nvml-values"
    values.write_text("gpu0.util 37\n")
    out = tmp_path / "out"
    env = dict(os.environ, PATH=f"{bindir}:{os.environ['PATH']}", PYTHONPATH=str(FAKES),
               LD_LIBRARY_PATH=str(BUILD / "fakes"), FAKE_NVML_VALUES=str(values),
               FAKE_NVML_RELOAD="1", FLAMEWATCH=str(flamewatch), OUT=str(out),
               COST_ROUNDS="2 5")
    res = subprocess.run(["bash", "bench/gpu/nvml_compare.sh", "4"], cwd=REPO, env=env,
                         capture_output=True, text=True, timeout=300)
    text = res.stdout + res.stderr
    assert res.returncode == 0, text

    # The load runs under timeout: its own pid is not timeout's.
    m = re.search(r"^load pid (\d+) \(under timeout, pid (\d+)\)", text, re.M)
    assert m and m.group(1) != m.group(2), text
    pid = m.group(1)
    assert "run is up on port" in text, text
    assert f"nvidia-smi --query-compute-apps listed [{pid}]" in text, text
    assert re.search(rf"our rows named .*\b{pid} \(python3\)", text), text
    for name in ("flamewatch_gpu_process_memory_used_bytes",
                 "flamewatch_gpu_process_utilization_percent"):
        assert re.search(rf"{name} for pid {pid}: 5/5 rounds", text), text
    # Every metric within tolerance but PCIe RX against the stand-in load's
    # copies, which the fake's scripted rate knows nothing about.
    differs = [l.split()[0] for l in text.splitlines() if " DIFFERS " in l]
    assert differs in ([], ["flamewatch_gpu_pcie_rx_bytes_per_second:load"]), text
    assert re.search(r"^flamewatch_gpu_pcie_rx_bytes_per_second:load +[\d.e+]+ +[\d.e+]+ ", text,
                     re.M), text
    # Step 5: one `flamewatch gpu` round beside the load names its pid.
    assert re.search(rf'^   flamewatch_gpu_process_memory_used_bytes\{{.*pid="{pid}"', text, re.M), text
    assert "NO ROW for pid" not in text, text
    # Step 1: the cost of a round and its breakdown by query.
    assert re.search(r"# nvmlDeviceGetFieldValues\s+1\.000", text), text
    assert re.search(r"cpu_us_per_gpu_round [\d.]+", text), text
    # run's own count at exit.
    assert re.search(r"nvml: \d+ rounds, \d+ points", text), text
