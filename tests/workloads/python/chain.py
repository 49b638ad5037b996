"""Known Python call chains for the profiler's tests.

main -> outer -> middle -> inner -> {hot_70, cold_30}: the two leaves run
about 7:3 of the time ("chain" prints the measured share). With "thread", the same chain runs in a second thread
while the main thread sleeps; with "ctypes", inner calls libc's qsort with
a Python comparator, so native frames sit under (and between) Python
frames. With "reuse", first_fn runs half the time, is freed, and
second_fn is compiled until CPython puts its code object at first_fn's
old address; second_fn runs the other half.
"""
import random
import sys
import threading
import time


def spin(n):
    x = 0
    for i in range(n):
        x += i * i
    return x


def hot_70(n):
    return spin(7 * n)


def cold_30(n):
    return spin(3 * n)


# CPU time spent in each leaf (the thread's clock): the split the samples
# should show (about 7:3, by the work).
LEAF_NS = {"hot_70": 0, "cold_30": 0}


def inner(deadline):
    clock = time.thread_time_ns
    rng = random.Random(1)
    while time.monotonic() < deadline:
        # A loop of varying length: of a fixed one (~0.6 ms), the sampling
        # period (2 ms at 499 Hz) caught the same phases run after run, and
        # the share the samples showed strayed from 64 % to 75 %.
        n = rng.randint(1000, 3000)
        t0 = clock()
        hot_70(n)
        t1 = clock()
        cold_30(n)
        LEAF_NS["hot_70"] += t1 - t0
        LEAF_NS["cold_30"] += clock() - t1


def middle(deadline):
    inner(deadline)


def outer(deadline):
    middle(deadline)


def ctypes_inner(deadline):
    import ctypes

    libc = ctypes.CDLL(None)
    cmp_t = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p)

    def py_compare(a, b):
        return spin(20) and 0

    compare = cmp_t(py_compare)
    arr = (ctypes.c_int * 200)(*range(200))
    while time.monotonic() < deadline:
        libc.qsort(arr, len(arr), ctypes.sizeof(ctypes.c_int), compare)


REUSE_SRC = """
def {name}(n):
    t = 0
    for i in range(n):
        t += i * i
    return t
"""


def reuse_make(name, pad):
    """A function whose code object has the same size whatever pad is,
    and co_firstlineno pad + 2."""
    ns = {}
    exec(compile("\n" * pad + REUSE_SRC.format(name=name), "<reuse>", "exec"), ns)
    return ns[name]


def reuse_run(f, deadline):
    while time.monotonic() < deadline:
        f(1000)


def reuse(seconds):
    first = reuse_make("first_fn", 1)
    old = id(first.__code__)
    reuse_run(first, time.monotonic() + seconds / 2)
    del first
    for tries in range(1, 10000):
        second = reuse_make("second_fn", 200)
        if id(second.__code__) == old:
            break
    print("code object address reused" if id(second.__code__) == old else "not reused", flush=True)
    reuse_run(second, time.monotonic() + seconds / 2)


def main():
    mode = sys.argv[1]
    seconds = float(sys.argv[2])
    deadline = time.monotonic() + seconds
    if mode == "chain":
        outer(deadline)
        total = sum(LEAF_NS.values())
        print(f"hot_70 cpu share {LEAF_NS['hot_70'] / total if total else 0:.4f}", flush=True)
    elif mode == "thread":
        t = threading.Thread(target=outer, args=(deadline,), name="worker")
        t.start()
        t.join()
    elif mode == "ctypes":
        ctypes_inner(deadline)
    elif mode == "reuse":
        reuse(seconds)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
