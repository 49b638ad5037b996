#!/usr/bin/env python3
"""A training loop with a deliberate CPU-side data-loading stall, for the
timeline demo (bench/gpu/timeline_demo.sh): ROUNDS times, TRAIN seconds of
matrix multiplications on the GPU, then STALL seconds in load_batch, pure
Python work during which no kernel runs. Writes the stalls' wall times
(Unix ns) as JSON to --log so the demo can compare them with what
flamewatch saw.

    python3 stall_train.py --rounds 10 --train 1.5 --stall 1.0 --log stalls.json
"""
import argparse
import json
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
    # The agent finds the injected library by a /proc scan every 5 s at worst:
    # the measured loop starts once it surely has.
    ap.add_argument("--warmup", type=float, default=6.0)
    a = ap.parse_args()
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
        load_batch(a.stall)
        stalls.append([s, time.time_ns()])
    with open(a.log, "w") as f:
        json.dump({"pid": os.getpid(), "from": t0, "to": time.time_ns(), "stalls": stalls,
                   "trains": trains}, f)
    print(f"stall_train: pid {os.getpid()}, {a.rounds} rounds done")


if __name__ == "__main__":
    main()
