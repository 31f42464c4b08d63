#!/usr/bin/env python3
"""Session 17's per-repetition table: for each JSONL of DIRS (h200_matrix.sh
output, one process per heap x K), every non-oracle policy's repetitions:
peak / the oracle's peak in the same process and repetition, time / the
oracle's, the iteration of the peak, minors, exposed % (probe) and charged %,
ms per minor. Usage: table.py DIR [DIR...]"""
import glob, json, os, re, statistics, sys

print("| dir | heap MiB, K | policy | peak / oracle: median (each rep) | time / oracle | peak iter | minors | exposed % (charged %) | ms / minor |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for d in sys.argv[1:]:
    files = sorted(glob.glob(os.path.join(d, "*.jsonl")),
                   key=lambda f: tuple(int(x) for x in re.findall(r"heap(\d+)-sync(\d+)", f)[0]))
    for f in files:
        heap, k = re.findall(r"heap(\d+)-sync(\d+)", f)[0]
        runs = [json.loads(l) for l in open(f) if l.startswith("{")]
        for wl in sorted({r["workload"] for r in runs}):
            oracle = [r for r in runs if r["policy"] == "explicit_free" and r["workload"] == wl]
            for pol in sorted({r["policy"] for r in runs} - {"explicit_free"}):
                mine = [r for r in runs if r["policy"] == pol and r["workload"] == wl]
                v = [(r["peak_reserved_bytes"] / o["peak_reserved_bytes"], r["time_per_iter"] / o["time_per_iter"],
                      r["peak_reserved_iteration"], r["collections_minor"], 100 * r["exposed_gc_fraction"],
                      100 * r["exposed_gc_fraction_charged"], 1e3 * r["gc_seconds"] / max(1, r["collections_minor"]))
                     for r, o in zip(mine, oracle)]
                if not v: continue
                med = lambda i: statistics.median(x[i] for x in v)
                print(f"| {os.path.basename(d.rstrip('/'))} {wl} | {heap}, {k} | {pol} | {med(0):.2f}x ({'/'.join(f'{x[0]:.2f}' for x in v)}) "
                      f"| {med(1):.3f}x | {'/'.join(str(x[2]) for x in v)} | {med(3):.0f} | {med(4):.1f} ({med(5):.1f}) | {med(6):.2f} |")
