"""Known Python call chains for the profiler's tests.

main -> outer -> middle -> inner -> {hot_70, cold_30}: the two leaves run
7:3 of the time. With "thread", the same chain runs in a second thread
while the main thread sleeps; with "ctypes", inner calls libc's qsort with
a Python comparator, so native frames sit under (and between) Python
frames.
"""
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


def inner(deadline):
    while time.monotonic() < deadline:
        hot_70(2000)
        cold_30(2000)


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


def main():
    mode = sys.argv[1]
    seconds = float(sys.argv[2])
    deadline = time.monotonic() + seconds
    if mode == "chain":
        outer(deadline)
    elif mode == "thread":
        t = threading.Thread(target=outer, args=(deadline,), name="worker")
        t.start()
        t.join()
    elif mode == "ctypes":
        ctypes_inner(deadline)
    else:
        raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
