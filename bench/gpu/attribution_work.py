#!/usr/bin/env python3
"""Workloads for bench/gpu/attribution.sh (issue 32): GPU work of every kind,
each from a Python function of its own, so that a GPU flame graph can be
checked against the function that caused each nanosecond.

    python3 attribution_work.py graph_copies|mlp|tiny SECONDS LOG

graph_copies  replays a captured CUDA graph (replay_step) and every 10th
              step copies 64 MB from pinned memory to the GPU (copy_in,
              non_blocking) and back (copy_out)
mlp           an MLP training step with AdamW (train_step)
tiny          100 tiny elementwise kernels a step (tiny_step)

Writes {"pid", "from", "to", "owners"} to LOG: owners maps each Python
function to the work it makes.
"""
import json
import os
import sys
import time

import torch

DEV = torch.device("cuda")


def capture_graph(model, x):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    return g, y


def replay_step(g):
    g.replay()


def copy_in(host):
    return host.to(DEV, non_blocking=True)


def copy_out(dev_tensor):
    return dev_tensor.to("cpu")


def graph_copies(seconds):
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 4096)).to(DEV)
    with torch.no_grad():
        x = torch.randn(2048, 4096, device=DEV)
        g, _ = capture_graph(model, x)
        host = torch.empty(16 << 20, dtype=torch.float32).pin_memory()
        end = time.time() + seconds
        i = 0
        while time.time() < end:
            replay_step(g)
            if i % 10 == 0:
                copy_out(copy_in(host))
            i += 1
    torch.cuda.synchronize()
    return {"replay_step": "graph kernels", "copy_in": "memcpy HtoD", "copy_out": "memcpy DtoH",
            "capture_graph": "warm-up kernels"}


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()


def mlp(seconds):
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
                                torch.nn.Linear(4096, 1024)).to(DEV)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(512, 1024, device=DEV)
    y = torch.randn(512, 1024, device=DEV)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            train_step(model, opt, x, y)
        torch.cuda.synchronize()
    return {"train_step": "forward, backward, AdamW", "mlp": "set-up"}


def tiny_step(t):
    for _ in range(100):
        t.add_(1.0)


def tiny(seconds):
    t = torch.zeros(256, device=DEV)
    end = time.time() + seconds
    while time.time() < end:
        for _ in range(20):
            tiny_step(t)
        torch.cuda.synchronize()
    return {"tiny_step": "elementwise kernels", "tiny": "set-up"}


def main():
    work, seconds, log = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    torch.zeros(1, device=DEV)          # CUDA initialised before the clock starts
    t0 = time.time_ns()
    owners = {"graph_copies": graph_copies, "mlp": mlp, "tiny": tiny}[work](seconds)
    t1 = time.time_ns()
    with open(log, "w") as f:
        json.dump({"pid": os.getpid(), "from": t0, "to": t1, "owners": owners}, f)


if __name__ == "__main__":
    main()
