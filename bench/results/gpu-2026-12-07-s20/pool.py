#!/usr/bin/env python3
"""Session 20's pooled figures: for each argument NAME=GLOB[,GLOB...] (JSONL
or JSON files of forward_loop runs, pressure and explicit_free in the same
process), pressure's peak reserved / the oracle's and time / the oracle's,
repetition by repetition (paired in order within a file), pooled over the
files: median (min-max), the 90th percentile, how many repetitions were over
2x, and the median exposed GC share (the probe's). Run from this folder:
  python3 pool.py 'u=call3/n/u*/*heap256-sync1.jsonl,call4/n/u*/*heap256-sync1.jsonl' \\
                  's=call3/n/s*/*heap256-sync1.jsonl,call4/n/s*/*heap256-sync1.jsonl'"""
import glob
import json
import statistics
import sys


def reps(files):
    out = []
    for f in files:
        runs = [json.loads(line) for line in open(f) if line.startswith("{")]
        oracle = [r for r in runs if r["policy"] == "explicit_free"]
        mine = [r for r in runs if r["policy"] == "pressure"]
        out += [(a["peak_reserved_bytes"] / b["peak_reserved_bytes"], a["time_per_iter"] / b["time_per_iter"],
                 a["exposed_gc_fraction"]) for a, b in zip(mine, oracle)]
    return out


for arg in sys.argv[1:]:
    name, globs = arg.split("=", 1)
    files = sorted(f for g in globs.split(",") for f in glob.glob(g))
    r = reps(files)
    if not r:
        print(f"{name}: no runs")
        continue
    peaks = sorted(x[0] for x in r)
    times = [x[1] for x in r]
    print(f"{name}: n = {len(r)}, peak {statistics.median(peaks):.2f}x ({peaks[0]:.2f}-{peaks[-1]:.2f}), "
          f"p90 {peaks[int(0.9 * (len(peaks) - 1))]:.2f}, {sum(p > 2 for p in peaks)} over 2x; "
          f"time {statistics.median(times):.3f}x ({min(times):.3f}-{max(times):.3f}); "
          f"exposed {100 * statistics.median(x[2] for x in r):.1f}%; peaks {' '.join(f'{x[0]:.2f}' for x in r)}")
