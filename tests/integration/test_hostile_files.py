"""Files the agent opens because of what another process did (issue 27):
a process that runs code from anonymous memory makes the agent read its
/tmp/perf-PID.map, and every process makes it open the binaries it maps.
Any local user decides what lies at those paths. Here they put a FIFO
there (the agent must not freeze), a link to a file only root may read
(its lines must not become frame names), a map of another user (ignored),
and another binary over the one a process runs (its symbols must not name
the process's frames).

Each test runs `flamewatch run -v`, agent and server in one process, and
reads what it stored through the API. jit_perfmap with "wait" writes no
perf map of its own: it waits until the test has put one in place.
"""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import Profile, is_kernel, require
from serverlib import Client, Procs, free_port, register_plugin, window

NODE = "hostile"
NOBODY = 65534
START_S = 60


@pytest.fixture(scope="module", autouse=True)
def _diagnostics(request):
    register_plugin(request.config)


@pytest.fixture
def start_run(flamewatch, tmp_path):
    """start_run(*prefix) starts `[prefix] flamewatch run -v` and returns (Proc, Client)."""
    procs, clients = Procs(tmp_path / "logs"), []

    def start(*prefix):
        port = free_port()
        srv = procs.start([*prefix, flamewatch, "run", "-v", "--listen", f"127.0.0.1:{port}",
                           "--data", tmp_path / "data", "--interval", "1s", "--node", NODE,
                           "-F", "99"], "run")
        assert srv.wait_output(r"profiling this host", START_S), srv.describe()
        c = Client(port)
        clients.append(c)
        c.wait_healthy(proc=srv)
        return srv, c

    yield start
    for c in clients:
        c.close()
    procs.close_all()


@pytest.fixture
def public_dir():
    """A directory any user can read and traverse (tmp_path is root's only)."""
    d = Path(tempfile.mkdtemp(prefix="fw-hostile-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def public_jit(workloads, public_dir):
    """jit_perfmap where user nobody can run it."""
    return Path(shutil.copy(workloads / "jit_perfmap", public_dir / "jit_perfmap"))


@pytest.fixture
def cleanup():
    """Paths to remove and processes to kill after the test, whatever happens."""
    paths, procs = [], []
    yield paths, procs
    for p in procs:
        if p.poll() is None:
            p.kill()
        p.wait(timeout=10)
    for p in paths:
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink()
        except FileNotFoundError:
            pass


def stored(c, pid, t0):
    """The stored folded profile of pid since t0, or None when the API does not answer."""
    r = c.get("/api/v1/profile", {"format": "folded", "query": f'{{node="{NODE}",pid="{pid}"}}',
                                  **window(t0 - 1, time.time() + 1)}, timeout=10)
    if r.status != 200:
        return None
    return Profile.parse(r.text, source=f"pid {pid}")


def wait_stored(c, pid, t0, want, timeout=30):
    """Waits until want(profile) holds; returns the last profile (None: no answer)."""
    deadline = time.monotonic() + timeout
    p = stored(c, pid, t0)
    while p is not None and not want(p) and time.monotonic() < deadline:
        time.sleep(1)
        p = stored(c, pid, t0)
    return p


def as_user(uid):
    def pre():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    return pre


def start_jit(exe, cleanup, seconds, preexec=None):
    """exe SECONDS wait (exe: jit_perfmap); returns (Popen, pid, code address, size)."""
    p = subprocess.Popen([str(exe), str(seconds), "wait"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         preexec_fn=preexec)
    cleanup[1].append(p)
    line = p.stdout.readline().split()
    assert len(line) == 3, f"jit_perfmap printed {line!r}, exit {p.poll()}"
    pid, addr, size = int(line[0]), int(line[1], 16), int(line[2], 16)
    cleanup[0].append(Path(f"/tmp/perf-{pid}.map"))
    return p, pid, addr, size


def go(p):
    p.stdin.write("go\n")
    p.stdin.flush()


def jit_samples(p, names=()):
    """Samples whose innermost user frame is the JIT code: unnamed, or one of names."""
    def in_jit(f):
        user = [x for x in f[1:] if not is_kernel(x)]
        return bool(user) and (user[-1].startswith("[jit pid") or user[-1] in names)
    return p.count(in_jit)


def test_perf_map_fifo(start_run, workloads, cleanup):
    """A FIFO as perf map: opening it for reading would wait for a writer
    forever. The agent must go on sampling and `run` on answering."""
    srv, c = start_run()
    t0 = time.time()
    jit, pid, _, _ = start_jit(workloads / "jit_perfmap", cleanup, 30)
    os.mkfifo(f"/tmp/perf-{pid}.map", 0o666)
    go(jit)
    # The agent names JIT frames from the map within a second or two.
    seen = srv.wait_output(rf"perf map /tmp/perf-{pid}\.map of pid {pid}: not a regular file", 30)
    r = c.get("/healthz", token=None, timeout=5)
    require(r.status == 200, f"`flamewatch run` stopped answering once the FIFO was there: "
            f"{r.describe()}\n{srv.describe()}")
    require(seen, f"the agent never looked at the FIFO perf map\n{srv.describe()}")

    # Other processes are still sampled and stored.
    t1 = time.time()
    other = subprocess.Popen([str(workloads / "syscall_loop"), "3"], stdout=subprocess.DEVNULL)
    cleanup[1].append(other)
    other.wait(timeout=30)
    p = wait_stored(c, other.pid, t1, lambda p: p.total >= 10)
    require(p is not None, f"the API stopped answering\n{srv.describe()}")
    require(p.total >= 10, f"only {p.total} samples of a process started after the FIFO", p)
    p = stored(c, pid, t0)
    require(p is not None and jit_samples(p) > 0, "no samples of the JIT process", p)
    assert srv.alive(), srv.describe()


@pytest.mark.parametrize("where", ["tmp", "own_tmp"])
def test_perf_map_link_to_root_only_file(start_run, workloads, tmp_path, cleanup, public_dir,
                                         public_jit, where):
    """A process of user nobody makes its perf map a symbolic link to a
    file only root may read, whose lines look like a perf map covering its
    code. Those lines must not become frame names.

    tmp: in the shared /tmp (where fs.protected_symlinks=1 already stops a
    root reader following another user's link); own_tmp: in a /tmp of the
    process's own mount namespace, which `unshare -Urm` gives any user, so
    that no sysctl stops it."""
    secret_dir = tmp_path / "root_only"
    secret_dir.mkdir(mode=0o700)
    secret = secret_dir / "secret.map"
    srv, c = start_run()
    t0 = time.time()
    if where == "tmp":
        jit, pid, addr, size = start_jit(public_jit, cleanup, 8, preexec=as_user(NOBODY))
        link = Path(f"/tmp/perf-{pid}.map")
    else:
        own = public_dir / "tmp"
        own.mkdir()
        os.chown(own, NOBODY, NOBODY)
        shutil.copy(workloads / "jit_perfmap", own / "jit_perfmap")  # /tmp/jit_perfmap there
        p = subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             f"mount --bind '{own}' /tmp && exec setpriv --reuid {NOBODY} --regid {NOBODY} "
             "--clear-groups /tmp/jit_perfmap 8 wait"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        cleanup[1].append(p)
        line = p.stdout.readline().split()
        assert len(line) == 3, f"jit_perfmap printed {line!r}, exit {p.poll()}"
        jit, pid, addr, size = p, int(line[0]), int(line[1], 16), int(line[2], 16)
        link = own / f"perf-{pid}.map"
    names = [f"fw_secret_root_only_{i}" for i in range(3)]
    secret.write_text("".join(f"{addr:x} {size:x} {n}\n" for n in names))
    secret.chmod(0o600)
    os.symlink(secret, link)
    os.lchown(link, NOBODY, NOBODY)
    cleanup[0].append(link)
    go(jit)
    seen = srv.wait_output(rf"perf map /tmp/perf-{pid}\.map of pid {pid}: a symbolic link", 30)
    jit.wait(timeout=30)
    p = wait_stored(c, pid, t0, lambda p: jit_samples(p, names) >= 50)
    require(p is not None, f"the API does not answer\n{srv.describe()}")
    require(jit_samples(p, names) >= 50, f"only {jit_samples(p, names)} samples in the JIT code", p)
    leaked = [n for n in names if n in "\n".join(p.stacks)]
    require(not leaked, f"lines of a root-only file became frame names: {leaked}", p)
    require(seen, f"the agent never looked at the perf map\n{srv.describe()}")


def test_perf_map_owner(start_run, cleanup, public_jit):
    """perf's rule: a perf map names frames only when it belongs to the
    process's user. Another user's map, root's included, is ignored; the
    process's own works."""
    srv, c = start_run()
    t0 = time.time()
    cases = {"other": (4321, "fw_planted_by_other"), "root": (0, "fw_planted_by_root"),
             "own": (NOBODY, "fw_owned_by_process")}
    procs = {}
    for case, (owner, name) in cases.items():
        jit, pid, addr, size = start_jit(public_jit, cleanup, 6, preexec=as_user(NOBODY))
        m = Path(f"/tmp/perf-{pid}.map")
        m.write_text(f"{addr:x} {size:x} {name}\n")
        os.chown(m, owner, owner)
        procs[case] = (jit, pid)
    for jit, _ in procs.values():
        go(jit)
    for jit, _ in procs.values():
        jit.wait(timeout=30)
    for case, (jit, pid) in procs.items():
        owner, name = cases[case]
        p = wait_stored(c, pid, t0, lambda p: jit_samples(p, [name]) >= 50 and
                        (case != "own" or p.count_frame(name) > 0))
        require(p is not None, f"the API does not answer\n{srv.describe()}")
        n = jit_samples(p, [name])
        require(n >= 50, f"{case}: only {n} samples in the JIT code", p)
        named = p.count_frame(name)
        if case == "own":
            require(named >= 0.8 * n, f"the process's own perf map named only {named} of {n} "
                    f"samples in the JIT code", p)
        else:
            require(named == 0, f"a perf map of uid {owner} named {named} frames of a process "
                    f"of uid {NOBODY}", p)
            require(srv.wait_output(rf"perf map /tmp/perf-{pid}\.map of pid {pid}: not owned", 5),
                    f"{case}: the refusal is not logged\n{srv.describe()}")


def _tmpfs(path):
    """A fresh tmpfs: its first file gets the same inode number as another's first."""
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "fw-hostile", str(path)], check=True)
    return path


@pytest.mark.parametrize("via", ["map_files", "path"])
def test_binary_replaced_after_mapping(start_run, workloads, tmp_path, cleanup, via):
    """A process runs a/prog; then, in its mount namespace, b/prog, a
    different program with the same inode number on another file system,
    is mounted over that path (what `unshare -Urm` lets any user do). Its
    symbols must not name the process's frames.

    map_files: the agent opens /proc/PID/map_files/..., the very file
    mapped; path: without CAP_CHECKPOINT_RESTORE and CAP_SYS_ADMIN it
    cannot, opens the path and must see that the device is not the one
    /proc/PID/maps names."""
    a, b = tmp_path / "a", tmp_path / "b"
    try:
        _tmpfs(a)
        _tmpfs(b)
        shutil.copy(workloads / "replaced_bin", a / "prog")
        shutil.copy(workloads / "replaced_bin_imposter", b / "prog")
        sa, sb = os.stat(a / "prog"), os.stat(b / "prog")
        assert sa.st_ino == sb.st_ino and sa.st_dev != sb.st_dev, (
            f"precondition: same inode on two file systems, got {sa} and {sb}")
        p = subprocess.Popen(["unshare", "-m", "--propagation", "private", str(a / "prog"), "6"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        cleanup[1].append(p)
        assert p.stdout.readline().strip() == "ready", p.poll()
        subprocess.run(["nsenter", "-t", str(p.pid), "-m", "mount", "--bind", str(b / "prog"),
                        str(a / "prog")], check=True)

        # The agent starts now: the path leads to b/prog by the time it first looks.
        prefix = []
        if via == "path":
            drop = "-checkpoint_restore,-sys_admin"
            prefix = ["setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}"]
        srv, c = start_run(*prefix)
        t0 = time.time()
        go(p)
        p.wait(timeout=30)
        prof = wait_stored(c, p.pid, t0, lambda q: q.total >= 100)
        require(prof is not None, f"the API does not answer\n{srv.describe()}")
        require(prof.total >= 100, f"only {prof.total} samples of prog", prof)
        wrong = prof.count_frame("spin_imposter")
        require(wrong == 0, f"{wrong} samples named from the file now at the path, not the "
                f"one mapped", prof)
        right = prof.count_frame("spin_original")
        if via == "map_files":
            require(right >= 0.8 * prof.total, f"only {right} of {prof.total} samples name "
                    f"spin_original, from the mapped file", prof)
        else:
            require(right == 0, "spin_original named without map_files: which file was read?", prof)
            require(srv.wait_output(r"cannot open .*/prog of pid \d+: Stale file handle", 5),
                    f"the mismatch is not logged\n{srv.describe()}")
    finally:
        for d in (a, b):
            subprocess.run(["umount", "-l", str(d)], check=False)
