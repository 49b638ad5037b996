#!/usr/bin/env python3
"""Turns pm_probe's files into the numbers of bench/README.md (issue 25).

    analyze.py DIR            everything run.sh left in DIR, a table at the end

Plain Python (no numpy): it runs on the GPU machine and here.

Truth is the spin kernels' own %globaltimer stamps (PREFIX.truth.csv). A PM
sample's busy fraction is an "active cycles" metric over the elapsed cycles
of its domain. Busy intervals come from thresholding that fraction at 0.5;
the "area" estimate sums fraction x duration and needs no threshold.
"""
import bisect
import csv
import glob
import json
import os
import statistics
import sys

# active metric -> normaliser (elapsed cycles of the same clock domain)
NORMALISER = {
    "gr__compute_cycles_active.sum": "gr__cycles_elapsed.max",
    "gr__cycles_active.sum": "gr__cycles_elapsed.max",
    "gpu__cycles_active.sum": "gr__cycles_elapsed.max",
    "gpu__engine_cycles_active_any_syncce.sum": "gr__cycles_elapsed.max",
    "gpu__scheduler_engine_asyncce0_cycles_active.sum": "gr__cycles_elapsed.max",
    "sm__cycles_active.avg": "sm__cycles_elapsed.max",
    "sm__cycles_active.max": "sm__cycles_elapsed.max",
    "gr__compute_cycles_active.avg.pct_of_peak_sustained_elapsed": 100.0,
}
THRESHOLD = 0.5


def read_meta(path):
    meta, clock = {}, []
    if not os.path.exists(path):
        return meta, clock
    with open(path) as f:
        for line in f:
            parts = line.split()
            if not parts:
                continue
            if parts[0] in ("clock_gpu", "clock_cupti", "mem"):
                clock.append(parts)
            else:
                meta.setdefault(parts[0], " ".join(parts[1:]))
    return meta, clock


def clock_offset(clock, kind):
    """Offset (other clock - CLOCK_REALTIME) from the narrowest bracket, and its half-width."""
    best = None
    for p in clock:
        if p[0] != kind:
            continue
        r0, r1, v = int(p[2]), int(p[3]), int(p[4])
        if v == 0:
            continue
        w = r1 - r0
        if best is None or w < best[1]:
            best = (v - (r0 + r1) // 2, w)
    return (best[0], best[1] / 2) if best else (None, None)


def read_samples(path):
    with open(path) as f:
        r = csv.reader(f)
        head = next(r)
        rows = []
        for row in r:
            if len(row) != len(head):
                continue  # a line cut short by an exit
            rows.append([int(row[0]), int(row[1])] + [float(x) for x in row[2:]])
    return head, Rows(rows)


def read_truth(path):
    out = []
    with open(path) as f:
        for row in csv.DictReader(f):
            s, e = int(row["start"]), int(row["end"])
            if s == 2**64 - 1 or e == 0:
                continue
            out.append((row["phase"], s, e))
    return out


def union(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def clip(intervals, lo, hi):
    return [[max(s, lo), min(e, hi)] for s, e in intervals if e > lo and s < hi]


def length(intervals):
    return sum(e - s for s, e in intervals)


def intersect_len(a, b):
    i = j = 0
    tot = 0
    while i < len(a) and j < len(b):
        s, e = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if e > s:
            tot += e - s
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return tot


def iou(a, b):
    inter = intersect_len(a, b)
    uni = length(a) + length(b) - inter
    return inter / uni if uni else 1.0


def complement(intervals, lo, hi):
    out, t = [], lo
    for s, e in intervals:
        if s > t:
            out.append([t, min(s, hi)])
        t = max(t, e)
    if t < hi:
        out.append([t, hi])
    return [x for x in out if x[1] > x[0]]


def fractions(head, rows, metric):
    """Per-sample busy fraction of metric, or None when it cannot be normalised."""
    if metric not in head:
        return None
    k = head.index(metric)
    norm = NORMALISER.get(metric)
    if isinstance(norm, float):
        return [min(1.0, max(0.0, r[k] / norm)) for r in rows]
    if norm in head:
        n = head.index(norm)
        return [min(1.0, max(0.0, r[k] / r[n])) if r[n] > 0 else 0.0 for r in rows]
    return None


def busy_from(rows, frac, shift=0):
    return union([[r[0] + shift, r[1] + shift] for r, f in zip(rows, frac) if f >= THRESHOLD])


def shifted(intervals, sh):
    return [[s + sh, e + sh] for s, e in intervals]


def area(rows, frac, lo, hi, shift=0):
    """Sum of fraction x overlap with [lo, hi); rows are in time order."""
    starts = [r[0] for r in rows] if not hasattr(rows, "starts") else rows.starts
    i = max(0, bisect.bisect_left(starts, lo - shift) - 1)
    tot = 0.0
    while i < len(rows) and rows[i][0] + shift < hi:
        s, e = max(rows[i][0] + shift, lo), min(rows[i][1] + shift, hi)
        if e > s:
            tot += frac[i] * (e - s)
        i += 1
    return tot


class Rows(list):
    """Samples in time order, with their start times kept for bisect."""

    def __init__(self, rows):
        super().__init__(sorted(rows))
        self.starts = [r[0] for r in self]


def classify(rows, truth_u):
    """1: the sample lies inside one truth interval; 0: it touches none; -1: partly."""
    ts = [t[0] for t in truth_u]
    out = []
    for r in rows:
        j = bisect.bisect_right(ts, r[0]) - 1
        if j >= 0 and truth_u[j][1] >= r[1]:
            out.append(1)
        elif (j >= 0 and truth_u[j][1] > r[0]) or (j + 1 < len(ts) and ts[j + 1] < r[1]):
            out.append(-1)
        else:
            out.append(0)
    return out


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else 0


def cadence(rows, interval):
    """Sample lengths, periods and gaps; the first sample, which reaches back
    to when sampling was set up, is reported apart."""
    first = rows[0][1] - rows[0][0] if rows else 0
    rows = rows[1:]
    d = [r[1] - r[0] for r in rows]
    per = [b[0] - a[0] for a, b in zip(rows, rows[1:])]
    gaps = [b[0] - a[1] for a, b in zip(rows, rows[1:])]
    span = rows[-1][1] - rows[0][0] if rows else 0
    missing = sum(g for g in gaps if g > interval // 2)
    return {
        "n": len(rows),
        "dur_med": statistics.median(d) if d else 0,
        "dur_p01": pct(d, 0.01), "dur_p99": pct(d, 0.99),
        "per_med": statistics.median(per) if per else 0,
        "per_sd": statistics.pstdev(per) if len(per) > 1 else 0,
        "per_p99": pct(per, 0.99), "per_max": max(per) if per else 0,
        "gaps_over_half": sum(1 for g in gaps if g > interval // 2),
        "missing_frac": missing / span if span else 0,
        "overlaps": sum(1 for g in gaps if g < 0),
        "first": first,
    }


def best_shift(rows, frac, truth_u, lo, hi, interval, centres=(0,)):
    """Shift of the sample clock (ns) that best matches truth, searched around each centre."""
    step = max(interval // 2, 1000)
    busy0 = busy_from(rows, frac, 0)
    best = (iou(clip(busy0, lo, hi), truth_u), 0)
    for c in centres:
        for sh in range(c - 20 * step, c + 20 * step + 1, step):
            v = iou(clip(shifted(busy0, sh), lo, hi), truth_u)
            if v > best[0]:
                best = (v, sh)
    return best[1], best[0]


def analyse_truth(prefix, out):
    meta, clock = read_meta(prefix + ".meta.txt")
    res = {"prefix": os.path.basename(prefix), "meta": meta}
    if "open_error" in meta or "start_error" in meta:
        res["error"] = meta.get("open_error") or meta.get("start_error")
        return res
    if not os.path.exists(prefix + ".samples.csv"):
        res["error"] = "no samples file"
        return res
    head, rows = read_samples(prefix + ".samples.csv")
    truth = read_truth(prefix + ".truth.csv")
    interval = int(meta.get("interval_ns", 100000))
    res["cadence"] = cadence(rows, interval) if rows else None
    og, wg = clock_offset(clock, "clock_gpu")
    oc, wc = clock_offset(clock, "clock_cupti")
    res["gpu_minus_rt"], res["gpu_halfwidth"] = og, wg
    res["cupti_minus_rt"], res["cupti_halfwidth"] = oc, wc
    if not rows or not truth:
        res["error"] = "no samples" if not rows else "no truth"
        return res
    lo = min(s for _, s, _ in truth) - 50_000_000
    hi = max(e for _, _, e in truth) + 50_000_000
    truth_u = clip(union([[s, e] for _, s, e in truth]), lo, hi)
    res["sample_span_vs_truth"] = (rows[0][0] - lo, rows[-1][1] - hi)
    phases = []
    for name, s, e in truth:
        if not phases or phases[-1][0] != name:
            phases.append([name, s, e])
        else:
            phases[-1][2] = e
    bounds = []
    for i, (name, s, e) in enumerate(phases):
        nxt = phases[i + 1][1] if i + 1 < len(phases) else hi
        bounds.append((name, s, nxt))
    res["metrics"] = {}
    for m in head[2:]:
        frac = fractions(head, rows, m)
        if frac is None:
            continue
        r = {}
        centres = (0,) if oc is None or og is None else (0, og - oc)
        shift, biou = best_shift(rows, frac, truth_u, lo, hi, interval, centres)
        r["iou0"] = iou(clip(busy_from(rows, frac, 0), lo, hi), truth_u)
        r["best_shift"], r["iou_best"] = shift, biou
        busy = clip(busy_from(rows, frac, 0), lo, hi)
        r["idle_iou0"] = iou(complement(busy, lo, hi), complement(truth_u, lo, hi))
        r["busy_frac_truth"] = length(truth_u) / (hi - lo)
        r["busy_frac_thr"] = length(busy) / (hi - lo)
        r["busy_frac_area"] = area(rows, frac, lo, hi) / (hi - lo)
        r["phases"] = {}
        for name, s, e in bounds:
            tu = clip(truth_u, s, e)
            r["phases"][name] = (length(tu) / (e - s), area(rows, frac, s, e) / (e - s),
                                 iou(clip(busy, s, e), tu))
        res["metrics"][m] = r
    # Raw values in samples wholly inside a kernel and wholly outside any.
    cls = classify(rows, truth_u)
    raw = {}
    for k, m in enumerate(head[2:]):
        busy_v = [r[2 + k] for r, c in zip(rows, cls) if c == 1]
        idle_v = [r[2 + k] for r, c in zip(rows, cls) if c == 0 and lo <= r[0] and r[1] <= hi]
        raw[m] = (statistics.median(busy_v) if busy_v else None, statistics.median(idle_v) if idle_v else None)
    res["raw"] = raw
    if os.path.exists(prefix + ".activity.csv"):
        res["activity"] = analyse_activity(prefix, head, rows, truth_u, lo, hi, og, oc)
    if os.path.exists(prefix + ".copies.csv"):
        res["copies"] = analyse_copies(prefix, head, rows)
    return res


def read_activity(path):
    out = {"kernel": [], "memcpy": []}
    with open(path) as f:
        for row in csv.DictReader(f):
            out.setdefault(row["kind"], []).append([int(row["start"]), int(row["end"])])
    return out


def fine_shift(a, b, lo, hi, centres, span=50_000, step=1000):
    """Shift of a (ns) that best overlaps b, in step around each centre."""
    best = (-1.0, 0)
    for c in centres:
        for sh in range(c - span, c + span + 1, step):
            v = iou(clip(shifted(a, sh), lo, hi), clip(b, lo, hi))
            if v > best[0]:
                best = (v, sh)
    return best[1], best[0]


def analyse_activity(prefix, head, rows, truth_u, lo, hi, og, oc):
    act = read_activity(prefix + ".activity.csv")
    ku = union(act["kernel"])
    res = {"kernels": len(act["kernel"]), "memcpys": len(act["memcpy"])}
    # truth is on %globaltimer, records on CUPTI's clock: og - oc apart
    centres = [0] if og is None or oc is None else [0, og - oc]
    res["act_minus_gpu"], res["act_iou_truth"] = fine_shift(ku, truth_u, lo, hi, centres)
    res["act_iou_truth0"] = iou(clip(ku, lo, hi), truth_u)
    res["pm_vs_act"] = {}
    for m in head[2:]:
        frac = fractions(head, rows, m)
        if frac is None:
            continue
        busy = clip(busy_from(rows, frac), lo, hi)
        kc = clip(ku, lo, hi)
        res["pm_vs_act"][m] = (iou(busy, kc), length(kc) / (hi - lo), area(rows, frac, lo, hi) / (hi - lo))
    return res


def analyse_copies(prefix, head, rows):
    cps = []
    with open(prefix + ".copies.csv") as f:
        for row in csv.DictReader(f):
            cps.append((int(row["to_device"]), int(row["rt_start"]), int(row["rt_end"]), float(row["event_ms"])))
    act = read_activity(prefix + ".activity.csv") if os.path.exists(prefix + ".activity.csv") else {"memcpy": []}
    mu = union(act["memcpy"])
    out = {}
    for d in (1, 0):
        sel = [c for c in cps if c[0] == d]
        if not sel:
            continue
        ev = sum(c[3] for c in sel) * 1e6
        r = {"event_ns": ev, "bracket_ns": sum(c[2] - c[1] for c in sel),
             "activity_ns": sum(length(clip(mu, c[1], c[2])) for c in sel)}
        for m in head[2:]:
            frac = fractions(head, rows, m)
            k = head.index(m)
            if frac is not None:
                r[m] = sum(area(rows, frac, c[1], c[2]) for c in sel) / ev
            else:
                # counters without a normaliser (bytes): their sum over the copies
                r[m] = sum(x[k] for x in rows if any(c[1] <= x[0] and x[1] <= c[2] for c in sel))
        out["h2d" if d else "d2h"] = r
    return out


def analyse_shared(hold, work):
    meta, _ = read_meta(hold + ".meta.txt")
    if "open_error" in meta or not os.path.exists(hold + ".samples.csv"):
        return {"error": meta.get("open_error", "no samples")}
    head, rows = read_samples(hold + ".samples.csv")
    truth = read_truth(work + ".truth.csv") if os.path.exists(work + ".truth.csv") else []
    if not rows or not truth:
        return {"error": "no samples" if not rows else "no truth"}
    lo = min(s for _, s, _ in truth) - 50_000_000
    hi = max(e for _, _, e in truth) + 50_000_000
    truth_u = clip(union([[s, e] for _, s, e in truth]), lo, hi)
    out = {}
    for m in head[2:]:
        frac = fractions(head, rows, m)
        if frac is None:
            continue
        busy = clip(busy_from(rows, frac), lo, hi)
        out[m] = (iou(busy, truth_u), length(truth_u) / (hi - lo), area(rows, frac, lo, hi) / (hi - lo))
    return out


def analyse_inject(prefix, stalls_path, gpu_minus_cupti, to_gpu):
    meta, clock = read_meta(prefix + ".meta.txt")
    res = {"meta": meta}
    if "open_error" in meta or "start_error" in meta:
        res["error"] = meta.get("open_error") or meta.get("start_error")
        return res
    if not os.path.exists(prefix + ".samples.csv") or not os.path.exists(stalls_path):
        res["error"] = "missing samples or stall log"
        return res
    head, rows = read_samples(prefix + ".samples.csv")
    with open(stalls_path) as f:
        st = json.load(f)
    oc, wc = clock_offset(clock, "clock_cupti")
    res["cupti_halfwidth"] = wc
    # sample clock -> %globaltimer (to_gpu, found by the truth runs) ->
    # CUPTI's clock -> CLOCK_REALTIME: a process without kernels of its own
    # can read only CUPTI's clock beside CLOCK_REALTIME.
    shift = (to_gpu or 0) - (oc + (gpu_minus_cupti or 0))
    res["shift"] = shift
    trains = [[a, b] for a, b in st["trains"]]
    stalls = [[a, b] for a, b in st["stalls"]]
    lo, hi = trains[0][0], stalls[-1][1]
    res["rounds"] = len(trains)
    for m in head[2:]:
        frac = fractions(head, rows, m)
        if frac is None:
            continue
        busy = clip(busy_from(rows, frac, shift), lo, hi)
        idle = complement(busy, lo, hi)
        res[m] = {
            "idle_iou_stalls": iou(idle, clip(stalls, lo, hi)),
            "busy_in_trains": area(rows, frac, lo, hi, shift) and
            sum(area(rows, frac, a, b, shift) for a, b in trains) / length(trains),
            "busy_in_stalls": sum(area(rows, frac, a, b, shift) for a, b in stalls) / length(stalls),
            "idle_frac_pm": length(idle) / (hi - lo),
            "idle_frac_truth": length(clip(stalls, lo, hi)) / (hi - lo),
        }
    return res


def analyse_cost(path):
    runs = []
    with open(path) as f:
        for line in f:
            kv = dict(x.split("=", 1) for x in line.split() if "=" in x)
            if "tiny_med_us" in kv:
                runs.append(kv)
    pairs = []
    i = 0
    while i + 1 < len(runs):
        a, b = runs[i], runs[i + 1]
        if {a["pm"], b["pm"]} == {"on", "off"}:
            on, off = (a, b) if a["pm"] == "on" else (b, a)
            pairs.append(on_off(on, off))
            i += 2
        else:
            i += 1
    return runs, pairs


def on_off(on, off):
    r = {}
    for k in ("tiny_med_us", "fma_med_us"):
        r[k] = float(on[k]) / float(off[k])
    r["cpu_ratio"] = (float(on["cpu_ms"]) / float(on["wall_ms"])) / (float(off["cpu_ms"]) / float(off["wall_ms"]))
    r["decode_cpu_per_s_ms"] = float(on.get("decode_cpu_ms", 0)) / (float(on["wall_ms"]) / 1e3)
    return r


def fmt_ns(v):
    if v is None:
        return "-"
    v = float(v)
    if abs(v) >= 1e6:
        return "%.2f ms" % (v / 1e6)
    if abs(v) >= 1e3:
        return "%.1f us" % (v / 1e3)
    return "%d ns" % v


def main():
    d = sys.argv[1] if len(sys.argv) > 1 else "."
    lines = []
    p = lines.append
    gpu_minus_cupti = to_gpu = None
    truths = sorted(glob.glob(os.path.join(d, "truth_*.meta.txt")),
                    key=lambda x: (x.split("_")[-2], int(x.split("_")[-1].split(".")[0])))
    p("== truth runs: sampling beside spin kernels of known span (metric: busy fraction = active/elapsed)")
    for mp in truths:
        prefix = mp[: -len(".meta.txt")]
        r = analyse_truth(prefix, d)
        meta = r["meta"]
        tag = r["prefix"]
        if "error" in r:
            p("%s: ERROR %s" % (tag, r["error"]))
            continue
        c = r["cadence"]
        wall = int(meta.get("decode_wall_ns", 1)) or 1
        p("%s: %d samples, duration med %s [p1 %s, p99 %s], period med %s sd %s p99 %s max %s, "
          "first sample %s, gaps>interval/2 %d (%.2f%% of span), overflow %s, decode errors %s, decode CPU %.1f%% of a core "
          "(evaluation %.0f%% of it), %.1f us CPU/sample, open %s ms, counter data image %s B, config image %s B" % (
              tag, c["n"], fmt_ns(c["dur_med"]), fmt_ns(c["dur_p01"]), fmt_ns(c["dur_p99"]),
              fmt_ns(c["per_med"]), fmt_ns(c["per_sd"]), fmt_ns(c["per_p99"]), fmt_ns(c["per_max"]),
              fmt_ns(c["first"]), c["gaps_over_half"], 100 * c["missing_frac"], meta.get("overflow"), meta.get("decode_errors"),
              100 * int(meta.get("decode_cpu_ns", 0)) / wall,
              100 * int(meta.get("eval_ns", 0)) / max(1, int(meta.get("decode_cpu_ns", 1))),
              int(meta.get("decode_cpu_ns", 0)) / 1e3 / max(1, c["n"]), meta.get("open_ms"),
              meta.get("counter_data_bytes"), meta.get("config_image_bytes")))
        p("   clocks: globaltimer-realtime %s (+-%s), cupti-realtime %s (+-%s), cupti-globaltimer %s" % (
            fmt_ns(r["gpu_minus_rt"]), fmt_ns(r["gpu_halfwidth"]), fmt_ns(r["cupti_minus_rt"]),
            fmt_ns(r["cupti_halfwidth"]),
            fmt_ns(r["cupti_minus_rt"] - r["gpu_minus_rt"]) if r["cupti_minus_rt"] is not None else "-"))
        if r["cupti_minus_rt"] is not None and r["gpu_minus_rt"] is not None:
            gpu_minus_cupti = r["gpu_minus_rt"] - r["cupti_minus_rt"]
        # The run with the injection's settings says how the sample clock
        # sits against %globaltimer.
        if r["metrics"] and (to_gpu is None or tag == "truth_min_100000"):
            to_gpu = next(iter(r["metrics"].values()))["best_shift"]
        mems = [x for x in read_meta(mp)[1] if x[0] == "mem"]
        if mems:
            p("   memory: " + "; ".join("%s rss %s kB gpu_free %s MiB" % (m[1], m[3], int(m[5]) >> 20) for m in mems))
        for m, v in r["metrics"].items():
            ph = " ".join("%s %.3f/%.3f" % (k, a, b) for k, (a, b, _) in v["phases"].items())
            p("   %-58s IoU %.3f (shift %s: %.3f) idle IoU %.3f busy truth %.3f thr %.3f area %.3f | phase truth/area: %s" % (
                m, v["iou0"], fmt_ns(v["best_shift"]), v["iou_best"], v["idle_iou0"], v["busy_frac_truth"],
                v["busy_frac_thr"], v["busy_frac_area"], ph))
        if "activity" in r:
            a = r["activity"]
            p("   activity records in the same process: %d kernels, %d memcpys; kernel records vs globaltimer truth: "
              "IoU %.4f at 0, %.4f shifted by %s" % (a["kernels"], a["memcpys"], a["act_iou_truth0"],
                                                    a["act_iou_truth"], fmt_ns(a["act_minus_gpu"])))
            for m, (i, bt, ba) in a["pm_vs_act"].items():
                p("      PM %-50s vs kernel records (same clock, no shift): IoU %.4f, busy records %.4f, PM area %.4f" % (
                    m, i, bt, ba))
        if "copies" in r:
            for d, v in r["copies"].items():
                p("   copies %s: events %s, host brackets %s, memcpy records %s; metric area / event time: %s" % (
                    d, fmt_ns(v["event_ns"]), fmt_ns(v["bracket_ns"]), fmt_ns(v["activity_ns"]),
                    ", ".join("%s %.3g" % (k, x) for k, x in v.items() if k not in ("event_ns", "bracket_ns", "activity_ns"))))
        p("   raw medians busy/idle: " + ", ".join("%s %s/%s" % (m, "%.4g" % a if a is not None else "-",
                                                                  "%.4g" % b if b is not None else "-")
                                                  for m, (a, b) in r["raw"].items()))
    for mp in sorted(glob.glob(os.path.join(d, "hwbuf_*.meta.txt")), key=lambda x: int(x.split("_")[-1].split(".")[0])):
        meta, clk = read_meta(mp)
        mems = [x for x in clk if x[0] == "mem"]
        prefix = mp[: -len(".meta.txt")]
        n = 0
        if os.path.exists(prefix + ".samples.csv"):
            rows = read_samples(prefix + ".samples.csv")[1]
            n = len(rows)
            c = cadence(rows, int(meta.get("interval_ns", 1))) if rows else None
        p("%s: interval %s, hwbuf %s B, decode every %s ms: %d samples, max %s per decode, overflow %s, "
          "decode errors %s, gaps %s, %s" % (
              os.path.basename(prefix), meta.get("interval_ns"), meta.get("hwbuf_bytes"), meta.get("decode_ms"),
              n, meta.get("max_per_decode"), meta.get("overflow"), meta.get("decode_errors"),
              c["gaps_over_half"] if n else "-", meta.get("last_error", meta.get("open_error", ""))))
        if mems:
            p("   memory: " + "; ".join("%s rss %s kB" % (m[1], m[3]) for m in mems))
    if os.path.exists(os.path.join(d, "shared_hold.meta.txt")):
        p("== per device: process A samples while process B (no CUPTI) runs the schedule")
        r = analyse_shared(os.path.join(d, "shared_hold"), os.path.join(d, "shared_work"))
        if "error" in r:
            p("   ERROR %s" % r["error"])
        else:
            for m, (a, b, c) in r.items():
                p("   %-45s IoU %.3f, busy truth %.3f, area %.3f" % (m, a, b, c))
    if os.path.exists(os.path.join(d, "inject.meta.txt")):
        p("== PyTorch stall_train.py with libpm_inject.so (enabled from cuInit), sample clock->realtime via CUPTI")
        r = analyse_inject(os.path.join(d, "inject"), os.path.join(d, "stalls.json"), gpu_minus_cupti, to_gpu)
        if "error" in r:
            p("   ERROR %s" % r["error"])
        else:
            p("   rounds %s, sample clock -> realtime %s, open %s ms, decode CPU %.2f%% of a core, overflow %s" % (
                r["rounds"], fmt_ns(r["shift"]), r["meta"].get("open_ms"),
                100 * int(r["meta"].get("decode_cpu_ns", 0)) / max(1, int(r["meta"].get("decode_wall_ns", 1))),
                r["meta"].get("overflow")))
            for m, v in r.items():
                if isinstance(v, dict) and "idle_iou_stalls" in v:
                    p("   %-45s idle IoU with stalls %.3f, idle fraction %.3f (truth %.3f), busy in trains %.3f, in stalls %.3f" % (
                        m, v["idle_iou_stalls"], v["idle_frac_pm"], v["idle_frac_truth"], v["busy_in_trains"],
                        v["busy_in_stalls"]))
    cost = os.path.join(d, "cost.txt")
    if os.path.exists(cost):
        runs, pairs = analyse_cost(cost)
        p("== cost: %d runs, %d on/off pairs (per-pair ratio on/off: median [min, max])" % (len(runs), len(pairs)))
        for k in ("tiny_med_us", "fma_med_us", "cpu_ratio", "decode_cpu_per_s_ms"):
            v = [x[k] for x in pairs]
            if v:
                p("   %-22s %.4f [%.4f, %.4f]" % (k, statistics.median(v), min(v), max(v)))
        for kind in ("tiny", "fma"):
            for pm in ("off", "on"):
                v = [float(x[kind + "_med_us"]) for x in runs if x["pm"] == pm]
                if v:
                    p("   %s step, pm %s: median of medians %.1f us [%.1f, %.1f]" % (kind, pm, statistics.median(v),
                                                                                   min(v), max(v)))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(d, "summary.txt"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
