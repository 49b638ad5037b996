#!/usr/bin/env python3
"""Names the sites of a heap_sites.so report (bench/heap_sites.c) and sums
them by the first named function that is not an allocation helper.

    python3 bench/heap_sites.py /tmp/heap_sites.PID [--top 30] [--exe PATH]

Runs addr2line on each module+offset (the binaries must be the ones the
process ran; --exe names the main binary where the report's path is gone).
"""

import argparse
import collections
import subprocess

# Wrappers whose caller is the interesting one.
HELPERS = ("_alloc_n", "xmalloc", "xcalloc", "xrealloc", "_grow", "strdup", "strndup",
           "intern__", "vec_", "_push")


def names(module, offsets):
    out = subprocess.run(["addr2line", "-f", "-e", module] + [hex(o - 1) for o in offsets],
                         capture_output=True, text=True).stdout.split("\n")
    return [out[2 * i] if 2 * i < len(out) else "??" for i in range(len(offsets))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("report")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--exe", help="the main binary, where the report names another path")
    a = ap.parse_args()
    reports = []
    for line in open(a.report):
        if line.startswith("#"):
            reports.append((line.strip(), []))
            continue
        f = line.split()
        reports[-1][1].append((int(f[0]), int(f[1]), f[2:]))
    want = collections.defaultdict(set)
    for _, _, frames in (r for _, rows in reports for r in rows):
        for fr in frames:
            if "+0x" in fr:
                mod, off = fr.rsplit("+0x", 1)
                want[mod].add(int(off, 16))
    named = {}
    for mod, offs in want.items():
        offs = sorted(offs)
        binary = a.exe if a.exe and mod.endswith("flamewatch") else mod
        for off, n in zip(offs, names(binary, offs)):
            named[(mod, off)] = n

    def fn(fr):
        if "+0x" not in fr:
            return fr
        mod, off = fr.rsplit("+0x", 1)
        return named.get((mod, int(off, 16)), "??")

    for header, rows in reports:
        by_fn = collections.Counter()
        print(header)
        for i, (nbytes, nblocks, frames) in enumerate(rows):
            chain = [fn(fr) for fr in frames]
            owner = next((c for c in chain if c != "??" and not c.startswith(HELPERS)), chain[0])
            by_fn[owner] += nbytes
            if i < a.top:
                print(f"{nbytes / 1024:9.1f} kB {nblocks:7d}  " + " < ".join(chain))
        print("by owner:")
        for owner, nbytes in by_fn.most_common(a.top):
            print(f"{nbytes / 1024:9.1f} kB  {owner}")
        print()


if __name__ == "__main__":
    main()
