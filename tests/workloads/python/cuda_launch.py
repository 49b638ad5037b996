"""Python frames in GPU launch stacks, without a GPU: calls the fake
libflamewatch-cuda.so (build/workloads/cuda, argv[1]) through ctypes from
main -> train_step -> forward, as PyTorch's Python code calls into libtorch,
then from main -> train_step -> backward, which waits while a native thread
of the library ("fw_native") launches, as PyTorch's autograd threads do;
then hands over the launches' records (kernel "_Z6matmulv", 1000 ns each,
weight 1; correlations 1..N forward, N+1..2N backward), works on for 3 s (a training step's CPU side: the agent,
woken by the launches' new code objects, reads them while the process
lives) and exits. Prints "attached" once an agent set the
probes' semaphores, "done" at the end.
"""
import ctypes
import sys
import time


class Record(ctypes.Structure):
    _fields_ = [("correlation", ctypes.c_uint64), ("start_ns", ctypes.c_uint64),
                ("end_ns", ctypes.c_uint64), ("bytes", ctypes.c_uint64),
                ("name_addr", ctypes.c_uint64), ("device", ctypes.c_uint32),
                ("stream", ctypes.c_uint32), ("kind", ctypes.c_uint32),
                ("weight", ctypes.c_uint32)]


LIB = ctypes.CDLL(sys.argv[1])
LIB.fwtest_launch.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
LIB.fwtest_activity.argtypes = [ctypes.c_void_p, ctypes.c_uint32]
LIB.fwtest_launch_on_thread.argtypes = [ctypes.c_uint64, ctypes.c_uint32]
try:
    LIB.fwtest_name.argtypes = [ctypes.c_char_p]
    announce = LIB.fwtest_name
except AttributeError:		# a fake library without the name probe
    def announce(_name):
        pass
NAME = ctypes.create_string_buffer(b"_Z6matmulv")
N = 40


def spin(seconds):
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1
    return x


def forward(corr):
    LIB.fwtest_launch(corr, 1)


def backward(corr):
    if LIB.fwtest_launch_on_thread(corr, 1):
        sys.exit("no thread for the backward launch")


def train_step(corr):
    forward(corr)
    backward(N + corr)


def main():
    for _ in range(6000):
        if LIB.fwtest_attached():
            break
        time.sleep(0.01)
    else:
        sys.exit("no agent attached within 60 s")
    print("attached", flush=True)
    spin(1.5)		# CPU samples: the agent describes this interpreter to BPF
    for corr in range(1, N + 1):
        train_step(corr)
    recs = (Record * (2 * N))()
    t = time.time_ns()
    for i in range(2 * N):
        recs[i] = Record(i + 1, t + i * 2000, t + i * 2000 + 1000, 0,
                         ctypes.cast(NAME, ctypes.c_void_p).value, 0, 7, 0, 1)
    announce(NAME)
    # Two batches: one probe carries at most FW_CUDA_MAX_BATCH (64) records.
    LIB.fwtest_activity(recs, N)
    LIB.fwtest_activity(ctypes.byref(recs, N * ctypes.sizeof(Record)), N)
    spin(3.0)
    print("done", flush=True)


if __name__ == "__main__":
    main()
