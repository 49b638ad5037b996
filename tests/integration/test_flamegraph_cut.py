"""The flame graph the server cuts to max_nodes against one built whole and
trimmed here, from the same folded stacks.

The server's JSON route cuts the tree before it names any frame (issue 28);
this reference builds every node of the merged tree, then keeps the
heaviest max_nodes as the API documents it (ties at the cut all cut, every
kept node's parent kept) and counts what was cut. Names repeat at many
depths and counts are small, so that merges and ties at the cut are
common."""

import json
import random
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from serverlib import free_port


@pytest.fixture
def server(flamewatch, tmp_path):
    port = free_port()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen(
        [flamewatch, "server", "--listen", f"127.0.0.1:{port}", "--data", str(tmp_path / "data")],
        stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/healthz", timeout=1).read()
            break
        except OSError:
            time.sleep(0.05)
    else:
        proc.kill()
        pytest.fail("server did not start: " + (tmp_path / "server.log").read_text())
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def _folded_lines(rng, n):
    lines = []
    for _ in range(n):
        comm = rng.choice(["app", "db", "worker"])
        depth, slot, frames = rng.randint(1, 9), rng.randint(0, 2), []
        for j in range(depth):
            slot = slot * 3 + rng.randint(0, 1 if j < 3 else 3)
            frames.append(f"fn{slot % 11}")
        lines.append((comm, tuple(frames), rng.randint(1, 4)))
    return lines


def _reference(lines, max_nodes):
    """{path: [total, self]} of the whole tree, then the cut as the API says."""
    nodes = {(): [0, 0]}
    for comm, frames, count in lines:
        path = ()
        nodes[()][0] += count
        for name in (comm,) + frames:
            path += (name,)
            nodes.setdefault(path, [0, 0])[0] += count
        nodes[path][1] += count
    totals = sorted((v[0] for v in nodes.values()), reverse=True)
    th = 0
    if len(totals) > max_nodes:
        v = totals[max_nodes - 1]
        above = sum(1 for t in totals if t >= v)
        th = v + 1 if above > max_nodes else v
    kept = {p: tuple(v) for p, v in nodes.items() if v[0] >= th}
    cut_value = sum(v[0] for p, v in nodes.items() if v[0] < th and nodes[p[:-1]][0] >= th)
    return kept, len(nodes) - len(kept), cut_value


def _server_tree(fg):
    """{path: (total, self)} from the preorder arrays."""
    names, n = fg["names"], fg["nodes"]
    out, stack = {}, []
    for i in range(len(n["n"])):
        d = n["d"][i]
        del stack[d:]
        stack.append(names[n["n"][i]])
        path = tuple(stack[1:])
        assert path not in out, f"{path} twice"
        out[path] = (n["v"][i], n["s"][i])
    return out


def test_cut_equals_whole_then_trimmed(server):
    rng = random.Random(28)
    lines = []
    # Two posts: the second repeats stacks of the first, which must sum.
    for _ in range(2):
        batch = _folded_lines(rng, 600)
        text = "".join(f"{c};{';'.join(f)} {k}\n" for c, f, k in batch)
        req = urllib.request.Request(f"{server}/api/v1/ingest/folded?node=n1", data=text.encode(),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200
        lines += batch
    for max_nodes in (1, 2, 3, 7, 25, 120, 400, 1000000):
        q = urllib.parse.urlencode({"format": "json", "from": "now-1h",
                                    "max_nodes": max_nodes})
        with urllib.request.urlopen(f"{server}/api/v1/profile?{q}", timeout=30) as r:
            fg = json.loads(r.read())
        kept, cut_nodes, cut_value = _reference(lines, max_nodes)
        got = _server_tree(fg)
        assert len(got) <= max_nodes
        assert got == kept, f"max_nodes={max_nodes}: {sorted(set(got.items()) ^ set(kept.items()))[:5]}"
        assert fg["total"] == sum(k for _, _, k in lines)
        assert fg["trimmed"] == {"nodes": cut_nodes, "value": cut_value}, (max_nodes, fg["trimmed"])
