#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""What a flame graph query costs the server, cold and warm, on a kept store.

    build/ingest_bench --stacks 3125 --depth 20-60 --jitter-us 50 --hours 1 --keep
    /usr/bin/python3 bench/profile_query.py --data /var/tmp/ingest_bench.XXXX/data \\
        [--server build/flamewatch] [--server OLD/flamewatch] [--reps 5]

For each server binary and each window (the last hour and the last day
before the newest sample), a fresh `flamewatch server` is started on the
data directory and asked GET /api/v1/profile?format=json: once right after
it starts ("cold": nothing cached in the server; the OS page cache is warm
from earlier runs), then --reps more times ("warm"). Prints wall time per
request (client side, reply read whole) and the server's CPU time for it
(/proc/PID/stat), min and median; and what the reply holds (total, nodes,
trimmed), which must agree between binaries. Needs nothing but Python 3.
"""
import argparse
import json
import os
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
import urllib.request

TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def newest_ns(data):
    db = sqlite3.connect(f"file:{data}/flamewatch.db?mode=ro", uri=True)
    try:
        return db.execute("SELECT max(t_max) FROM sample_blocks").fetchone()[0]
    finally:
        db.close()


def start(server, data, port, log):
    p = subprocess.Popen([server, "server", "--listen", f"127.0.0.1:{port}", "--data", data,
                          "--retention", "3650d"], stdout=log, stderr=log)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/labels", timeout=5).read()
            return p
        except OSError:
            time.sleep(0.05)
    p.kill()
    sys.exit("server did not start")


def ask(pid, url):
    c0, t0 = cpu_s(pid), time.monotonic()
    with urllib.request.urlopen(url, timeout=600) as r:
        body = r.read()
    t1 = time.monotonic()
    # The reply is sent before the handler returns: let the CPU count settle.
    time.sleep(0.05)
    return t1 - t0, cpu_s(pid) - c0, json.loads(body)


def summary(reply):
    return (reply["total"], len(reply["nodes"]["v"]), reply["trimmed"]["nodes"],
            reply["trimmed"]["value"], sum(reply["nodes"]["v"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", required=True)
    ap.add_argument("--server", action="append")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--max-nodes", type=int, default=20000)
    a = ap.parse_args()
    servers = a.server or ["build/flamewatch"]
    end = newest_ns(a.data) // 1000000000 + 1
    windows = [("1 h", end - 3600), ("24 h", end - 86400)]
    print("| server | window | cold wall | cold CPU | warm wall min / median |"
          " warm CPU min / median | total, nodes, trimmed nodes, trimmed value, sum |")
    print("|---|---|---|---|---|---|---|")
    with open(os.devnull, "w") as log:
        for server in servers:
            for label, frm in windows:
                port = free_port()
                p = start(server, a.data, port, log)
                url = (f"http://127.0.0.1:{port}/api/v1/profile?format=json&from={frm}"
                       f"&to={end}&max_nodes={a.max_nodes}")
                try:
                    cw, cc, reply = ask(p.pid, url)
                    warm = [ask(p.pid, url) for _ in range(a.reps)]
                finally:
                    p.send_signal(signal.SIGTERM)
                    p.wait()
                ww = [w for w, _, _ in warm]
                wc = [c for _, c, _ in warm]
                sums = {summary(r) for _, _, r in warm} | {summary(reply)}
                print(f"| {server} | {label} | {cw:.3f} s | {cc:.2f} s | "
                      f"{min(ww):.3f} / {statistics.median(ww):.3f} s | "
                      f"{min(wc):.2f} / {statistics.median(wc):.2f} s | "
                      f"{'; '.join(str(s) for s in sorted(sums))} |", flush=True)


if __name__ == "__main__":
    main()
