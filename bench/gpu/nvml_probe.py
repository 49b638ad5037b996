#!/usr/bin/env python3
"""What the costly NVML queries cost and return, on a real GPU (issue 7).

  python3 bench/gpu/nvml_probe.py [GPU_INDEX]

Beside a GPU load (another process), prints per query the median and best
thread CPU time of 20 calls, and for nvmlDeviceGetProcessUtilization how
many samples each pid gets for lastSeenTimeStamp 0, now-10s and now-1s:
whether the driver keeps a history per process or only the latest sample,
which decides how often the agent must ask. NVML through ctypes, nothing
else needed.
"""
import ctypes as C
import statistics
import sys
import time

nv = C.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0, "nvmlInit_v2 failed"
dev = C.c_void_p()
assert nv.nvmlDeviceGetHandleByIndex_v2(int(sys.argv[1]) if len(sys.argv) > 1 else 0, C.byref(dev)) == 0


class PUS(C.Structure):
    _fields_ = [("pid", C.c_uint), ("timeStamp", C.c_ulonglong), ("smUtil", C.c_uint),
                ("memUtil", C.c_uint), ("encUtil", C.c_uint), ("decUtil", C.c_uint)]


class FV(C.Structure):
    _fields_ = [("fieldId", C.c_uint), ("scopeId", C.c_uint), ("timestamp", C.c_longlong),
                ("latencyUsec", C.c_longlong), ("valueType", C.c_int), ("nvmlReturn", C.c_int),
                ("value", C.c_ulonglong)]


def cpu(fn, n=20):
    ts = []
    for _ in range(n):
        t0 = time.thread_time_ns()
        fn()
        ts.append(time.thread_time_ns() - t0)
    return statistics.median(ts) / 1e3, min(ts) / 1e3


arr = (PUS * 512)()


def putil(last):
    n = C.c_uint(512)
    r = nv.nvmlDeviceGetProcessUtilization(dev, arr, C.byref(n), C.c_ulonglong(last))
    return r, [(arr[i].pid, arr[i].timeStamp, arr[i].smUtil) for i in range(n.value)] if r == 0 else []


now_us = int(time.time() * 1e6)
print("# nvmlDeviceGetProcessUtilization samples by lastSeenTimeStamp")
for name, last in (("0", 0), ("now-10s", now_us - 10_000_000), ("now-1s", now_us - 1_000_000)):
    r, s = putil(last)
    per = {}
    for pid, ts, sm in s:
        per.setdefault(pid, []).append((ts, sm))
    desc = "; ".join(f"pid {p}: {len(v)} samples, ages {[(now_us - t) // 1000 for t, _ in v][:8]} ms, sm {[x for _, x in v][:8]}"
                     for p, v in per.items())
    print(f"last={name:8s} ret={r} samples={len(s)} {desc}")


def fv(ids):
    a = (FV * len(ids))()
    for i, f in enumerate(ids):
        a[i].fieldId = f
    return lambda: nv.nvmlDeviceGetFieldValues(dev, len(ids), a)


u = C.c_uint()
ull = C.c_ulonglong()
queries = {
    "GetProcessUtilization(last=now-1s)": lambda: putil(int(time.time() * 1e6) - 1_000_000),
    "GetFieldValues(PCIe TX+RX+energy)": fv([197, 198, 83]),
    "GetFieldValues(PCIe TX+RX)": fv([197, 198]),
    "GetFieldValues(PCIe TX)": fv([197]),
    "GetFieldValues(energy)": fv([83]),
    "GetTotalEnergyConsumption": lambda: nv.nvmlDeviceGetTotalEnergyConsumption(dev, C.byref(ull)),
    "GetMaxClockInfo(SM)": lambda: nv.nvmlDeviceGetMaxClockInfo(dev, 1, C.byref(u)),
    "GetEnforcedPowerLimit": lambda: nv.nvmlDeviceGetEnforcedPowerLimit(dev, C.byref(u)),
    "GetTemperatureThreshold(slowdown)": lambda: nv.nvmlDeviceGetTemperatureThreshold(dev, 1, C.byref(u)),
    "GetMigMode": lambda: nv.nvmlDeviceGetMigMode(dev, C.byref(u), C.byref(C.c_uint())),
    "GetPowerUsage": lambda: nv.nvmlDeviceGetPowerUsage(dev, C.byref(u)),
    "GetTemperature": lambda: nv.nvmlDeviceGetTemperature(dev, 0, C.byref(u)),
}
if hasattr(nv, "nvmlDeviceGetProcessesUtilizationInfo"):
    class PUI(C.Structure):
        _fields_ = [("timeStamp", C.c_ulonglong), ("pid", C.c_uint), ("smUtil", C.c_uint),
                    ("memUtil", C.c_uint), ("encUtil", C.c_uint), ("decUtil", C.c_uint),
                    ("jpgUtil", C.c_uint), ("ofaUtil", C.c_uint)]

    class PUInfo(C.Structure):
        _fields_ = [("version", C.c_uint), ("processSamplesCount", C.c_uint),
                    ("lastSeenTimeStamp", C.c_ulonglong), ("procUtilArray", C.POINTER(PUI))]
    buf = (PUI * 512)()

    def pui():
        info = PUInfo(C.sizeof(PUInfo) | (1 << 24), 512, int(time.time() * 1e6) - 1_000_000,
                      C.cast(buf, C.POINTER(PUI)))
        return nv.nvmlDeviceGetProcessesUtilizationInfo(dev, C.byref(info))
    print(f"# nvmlDeviceGetProcessesUtilizationInfo ret={pui()}")
    queries["GetProcessesUtilizationInfo(last=now-1s)"] = pui
print("# query                                     cpu_us median   best")
for name, fn in queries.items():
    try:
        med, best = cpu(fn)
    except AttributeError as e:  # a function this driver lacks
        print(f"{name:44s} missing: {e}")
        continue
    print(f"{name:44s} {med:10.1f} {best:8.1f}")

# Where GetProcessUtilization's time goes (user or kernel), and whether a
# smaller buffer makes it cheaper: the answer decides whether the agent can
# ask less of the driver, or only ask less often.
import resource  # noqa: E402


def split(fn, n=20):
    r0 = resource.getrusage(resource.RUSAGE_THREAD)
    for _ in range(n):
        fn()
    r1 = resource.getrusage(resource.RUSAGE_THREAD)
    return (r1.ru_utime - r0.ru_utime) / n * 1e6, (r1.ru_stime - r0.ru_stime) / n * 1e6


def putil_n(cap):
    rets = []

    def call():
        n = C.c_uint(cap)
        r = nv.nvmlDeviceGetProcessUtilization(dev, arr if cap else None, C.byref(n),
                                               C.c_ulonglong(int(time.time() * 1e6) - 1_000_000))
        rets.append((r, n.value))
    return call, rets


print("# GetProcessUtilization, user/sys CPU per call (us) by buffer size; ret and count it gave")
n0 = C.c_uint(0)
r0 = nv.nvmlDeviceGetProcessUtilization(dev, None, C.byref(n0), C.c_ulonglong(0))
print(f"size query: ret={r0} count={n0.value}")
for cap in sorted({0, 1, 4, n0.value, n0.value + 4, 32, 128, 512}):
    call, rets = putil_n(cap)
    us, ss = split(call)
    print(f"cap={cap:4d} user={us:8.1f} sys={ss:8.1f} ret,count={sorted(set(rets))}")

# With one process on the GPU, is its smUtil the GPU's utilisation? If so,
# the costly call can be skipped while the running-process lists hold one pid.


class UR(C.Structure):
    _fields_ = [("gpu", C.c_uint), ("memory", C.c_uint)]


print("# each second: device gpu/mem util, then each pid's sm/mem from GetProcessUtilization")
ur = UR()
for _ in range(10):
    time.sleep(1)
    nv.nvmlDeviceGetUtilizationRates(dev, C.byref(ur))
    n = C.c_uint(512)
    r = nv.nvmlDeviceGetProcessUtilization(dev, arr, C.byref(n),
                                           C.c_ulonglong(int(time.time() * 1e6) - 1_000_000))
    rows = [(arr[i].pid, arr[i].smUtil, arr[i].memUtil) for i in range(n.value)] if r == 0 else []
    print(f"device gpu={ur.gpu:3d} mem={ur.memory:3d} | ret={r} " +
          " ".join(f"pid {p}: sm={s} mem={m}" for p, s, m in rows))
