#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The CPU cost of the agent's NVML rounds on a real GPU machine (issue 7),
# beside a PyTorch matmul load on GPU 0:
#
#   bench/gpu/nvml_cost.sh [BUILD_DIR]      (about 90 s)
#
# 1. `flamewatch gpu --rounds 20 --interval 1s --breakdown`: the agent's
#    defaults (PCIe counters every 5 s, per-process utilisation every second);
# 2. the same, 10 rounds, everything every round (the previous behaviour);
# 3. bench/gpu/nvml_probe.py: the CPU time of each costly query and what
#    the per-process query returns for a 10 s window; where that query
#    spends its time (user or kernel) by buffer size, and ten seconds of the
#    device's utilisation beside each pid's.
# Needs BUILD_DIR/flamewatch (prebuilt), python3 with PyTorch. Logs under $OUT.
set -u
B=${1:-build}
OUTDIR=${OUT:-$(mktemp -d /tmp/nvml_cost.XXXXXX)}
mkdir -p "$OUTDIR"
for d in /usr/lib /usr/lib/x86_64-linux-gnu /usr/lib64; do
	[ -e "$d/libnvidia-ml.so.1" ] && { export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; break; }
done
timeout 120 python3 -c '
import torch, time
a = torch.randn(4096, 4096, device="cuda"); h = torch.randn(64 << 20 >> 2)
end = time.time() + 110
while time.time() < end:
    for _ in range(20):
        a = a @ a; a /= a.norm()
    a.add_(h[:4096 * 4096 // 64].to("cuda").mean())
    torch.cuda.synchronize()
' > "$OUTDIR/load.log" 2>&1 &
LOAD=$!
sleep 6
echo "== defaults (PCIe every 5 s, per-process every 10 s), 20 rounds at 1 s"
timeout 60 "$B/flamewatch" gpu --rounds 20 --interval 1s --breakdown --quiet 2>&1 | tee "$OUTDIR/default.txt" | grep "^#"
echo "== everything every round, 10 rounds at 1 s"
timeout 30 "$B/flamewatch" gpu --rounds 10 --interval 1s --breakdown --quiet --pcie-interval 0 \
	--process-interval 0 2>&1 | tee "$OUTDIR/every.txt" | grep "^#"
echo "== the costly queries one by one"
timeout 90 python3 "$(dirname "$0")/nvml_probe.py" 2>&1 | tee "$OUTDIR/probe.txt"
kill "$LOAD" 2>/dev/null
wait "$LOAD" 2>/dev/null
exit 0
