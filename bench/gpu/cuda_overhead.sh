#!/bin/sh
# Runs the GPU time profiling overhead benchmark on a CUDA machine from the
# repository root with a prebuilt build/ (make), e.g.
#   OUT=/tmp/out bench/gpu/cuda_overhead.sh [--seconds 4 --repeats 3]
# Needs python3 with PyTorch (CUDA); installs nothing. Bounded to ~4 minutes.
set -eu
cd "$(dirname "$0")/../.."
exec timeout 235 python3 bench/gpu/cuda_overhead.py "$@"
