#!/usr/bin/env python3
"""A training loop with a deliberate CPU-side data-loading stall, for the
timeline demo (bench/gpu/timeline_demo.sh): ROUNDS times, TRAIN seconds of
matrix multiplications on the GPU, then STALL seconds in load_batch,
during which no kernel runs: pure Python work (--stall-kind cpu), or
reads of a data file that bypass the page cache (--stall-kind read, in
read_shard: O_DIRECT reads of 8 MiB, the thread blocked in the kernel as a
loader on a slow disk or network file system is). Writes the stalls' wall
times (Unix ns) as JSON to --log so the demo can compare them with what
flamewatch saw.

    python3 stall_train.py --rounds 10 --train 1.5 --stall 1.0 --log stalls.json
    python3 stall_train.py --stall-kind read --data /var/tmp/shard.bin ...
"""
import argparse
import json
import mmap
import os
import time

import torch


def decode_sample(i):
    # Stands for JPEG decoding or tokenising: CPU work in Python.
    return sum((i * k) % 7 for k in range(300))


def load_batch(seconds):
    end = time.time() + seconds
    batch = []
    while time.time() < end:
        batch.append(decode_sample(len(batch)))
    return batch


CHUNK = 8 << 20


class Shard:
    """A data file read with O_DIRECT (page-aligned buffer); where the file
    system refuses O_DIRECT, plain reads after dropping its cached pages."""

    def __init__(self, path, size_mb):
        if not os.path.exists(path) or os.path.getsize(path) < size_mb << 20:
            with open(path, "wb") as f:
                block = os.urandom(CHUNK)
                for _ in range(size_mb * (1 << 20) // CHUNK):
                    f.write(block)
                f.flush()
                os.fsync(f.fileno())
        self.size = os.path.getsize(path) // CHUNK * CHUNK
        self.buf = mmap.mmap(-1, CHUNK)
        self.pos = 0
        try:
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
            self.direct = True
        except OSError:
            self.fd = os.open(path, os.O_RDONLY)
            self.direct = False

    def read_shard(self):
        if not self.direct:
            os.posix_fadvise(self.fd, self.pos, CHUNK, os.POSIX_FADV_DONTNEED)
        os.preadv(self.fd, [self.buf], self.pos)
        self.pos = (self.pos + CHUNK) % self.size


def load_batch_from_disk(shard, seconds):
    end = time.time() + seconds
    while time.time() < end:
        shard.read_shard()


def train_step(w, x, seconds):
    end = time.time() + seconds
    while time.time() < end:
        y = x
        for _ in range(16):
            y = torch.relu(y @ w)
        torch.cuda.synchronize()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--train", type=float, default=1.5)
    ap.add_argument("--stall", type=float, default=1.0)
    ap.add_argument("--log", default="stalls.json")
    ap.add_argument("--stall-kind", choices=("cpu", "read"), default="cpu")
    ap.add_argument("--data", default="/var/tmp/stall_train_shard.bin",
                    help="--stall-kind read: the data file (made if missing)")
    ap.add_argument("--data-mb", type=int, default=2048)
    # The agent finds the injected library by a /proc scan every 5 s at worst:
    # the measured loop starts once it surely has.
    ap.add_argument("--warmup", type=float, default=6.0)
    a = ap.parse_args()
    shard = Shard(a.data, a.data_mb) if a.stall_kind == "read" else None
    dev = torch.device("cuda")
    w = torch.randn(4096, 4096, device=dev) / 64
    x = torch.randn(4096, 4096, device=dev)
    train_step(w, x, a.warmup)          # cuBLAS handles, clocks, the agent attaching
    stalls, trains = [], []
    t0 = time.time_ns()
    for _ in range(a.rounds):
        s = time.time_ns()
        train_step(w, x, a.train)
        trains.append([s, time.time_ns()])
        s = time.time_ns()
        if shard:
            load_batch_from_disk(shard, a.stall)
        else:
            load_batch(a.stall)
        stalls.append([s, time.time_ns()])
    with open(a.log, "w") as f:
        json.dump({"pid": os.getpid(), "from": t0, "to": time.time_ns(), "stalls": stalls,
                   "trains": trains, "stall_kind": a.stall_kind,
                   "direct": shard.direct if shard else None}, f)
    print(f"stall_train: pid {os.getpid()}, {a.rounds} rounds done")


if __name__ == "__main__":
    main()
