#!/usr/bin/env python3
"""Where a duty-cycled run's records go (issue 25): the library summaries of
cuda_overhead.py's runs, one row each.

On an H100, two tiny-loop runs of five lost most of their windows' records
after the switch from every record to duty-cycled ones: launches were seen
in the windows, but almost none of their records arrived, and the GPU time
came out 92-99 % short. This prints, per run, what the summary says about
it: launches seen and their estimate, records read (kept, carried from
unkept window launches, outside any window), when the switch came and how
many records had been read by then, the CUPTI buffers completed, whether
the flush at exit was made, and the GPU time a step.

    sudo OUT=/tmp/dr python3 bench/gpu/cuda_overhead.py --workloads tiny \\
        --modes fw,fw-pm,fw-cf,fw-agent --repeats 3 --seconds 8 --build build
    python3 bench/gpu/duty_records.py /tmp/dr/cuda_overhead.json [--ref NS_PER_STEP] [--timeline]

--ref: torch.profiler's kernel ns a step for the same workload, to print
each run's GPU time against it. --timeline: under each run, per second
since the library subscribed, launches its windows saw / records read (of
window launches) / buffers CUPTI completed, from the summary's timeline.
"""

import argparse
import json

COLUMNS = ("launches_seen", "launch_weight", "records", "kept", "carried", "outside", "unsampled",
           "activity_switches", "switch_ms", "records_at_switch", "buffers_done", "exit_flushed",
           "exit_records", "buffer_errors", "cupti_dropped", "refused_buffers")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json", help="cuda_overhead.json of the runs")
    ap.add_argument("--ref", type=float, help="reference kernel ns a step (torch.profiler)")
    ap.add_argument("--timeline", action="store_true",
                    help="a row per run under it: per second, launches seen / records (of "
                         "window launches) / buffers")
    a = ap.parse_args()
    runs = json.load(open(a.json))
    print("| mode | steps | " + " | ".join(COLUMNS) + " | kernel ns a step |"
          + (" against ref |" if a.ref else ""))
    print("|---" * (len(COLUMNS) + 3 + bool(a.ref)) + "|")
    for r in runs:
        s = r.get("fw_summary")
        if not s or not r.get("steps"):
            continue
        per_step = s.get("kernel_ns", 0) / r["steps"]
        cells = [str(s.get(k, "-")) for k in COLUMNS]
        line = f"| {r.get('mode')} | {r['steps']} | " + " | ".join(cells) + f" | {per_step:,.0f} |"
        if a.ref:
            line += f" {100 * (per_step / a.ref - 1):+.1f} % |"
        print(line)
        if a.timeline and s.get("timeline"):
            # second: launches seen in windows / records read (of window launches) / buffers
            print("|   | " + ", ".join(f"{t[0]}s {t[1]}/{t[2]}({t[3]})/{t[4]}" for t in s["timeline"])
                  + " |")


if __name__ == "__main__":
    main()
