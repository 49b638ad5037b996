# SPDX-License-Identifier: Apache-2.0
# A stand-in for PyTorch, for running bench/gpu/nvml_compare.sh without a GPU:
# importing it puts this process on GPU 0 of the fake NVML (a line in
# FAKE_NVML_VALUES, read again by the fake when FAKE_NVML_RELOAD is set), as
# a process using CUDA would appear; the tensor operations do nothing.
import os, time
_v = os.environ.get("FAKE_NVML_VALUES")
if _v:
    with open(_v, "a") as f:
        f.write(f"proc 0 {os.getpid()} 55 11 1073741824\n")
bfloat16 = float32 = None
class _T:
    def __matmul__(self, o): return self
    def pin_memory(self): return self
    def to(self, *a, **k): return self
def randn(*a, **k): return _T()
class cuda:
    @staticmethod
    def synchronize(): time.sleep(0.05)
