#!/usr/bin/env python3
"""Session 15's A/B tables: for each cell (heap, K) and build (base, new),
every pressure repetition's peak / the oracle's peak in the same process and
repetition, time / the oracle's, the iteration of the peak, minors, and
exposed % (probe) / charged %; then the medians over all repetitions of the
cell. Usage: ab_table.py DIR (DIR/ab/{base,new}/HEAP-K/*.jsonl)."""
import glob, json, os, statistics, sys

root = sys.argv[1]
rows = {}
for f in sorted(glob.glob(os.path.join(root, "ab", "*", "*", "*.jsonl"))):
    build, cell = f.split(os.sep)[-3], f.split(os.sep)[-2]
    runs = [json.loads(l) for l in open(f) if l.startswith("{")]
    oracle = [r for r in runs if r["policy"] == "explicit_free"]
    mine = [r for r in runs if r["policy"] == "pressure"]
    for r, o in zip(mine, oracle):  # same repetition order in one process
        rows.setdefault((cell, build), []).append((
            r["peak_reserved_bytes"] / o["peak_reserved_bytes"], r["time_per_iter"] / o["time_per_iter"],
            r["peak_reserved_iteration"], r["collections_minor"], 100 * r["exposed_gc_fraction"],
            100 * r["exposed_gc_fraction_charged"], 1e3 * r["gc_seconds"] / max(1, r["collections_minor"])))
print("| cell | build | peak / oracle: median (each repetition) | time / oracle | peak iteration | minors | exposed % (charged %) | ms / minor |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
key = lambda c: tuple(int(x) for x in c[0].split("-")) + (c[1] != "base",)
for (cell, build) in sorted(rows, key=key):
    v = rows[(cell, build)]
    med = lambda i: statistics.median(x[i] for x in v)
    heap, k = cell.split("-")
    print(f"| {heap} MiB, K = {k} | {build} | {med(0):.2f}x ({'/'.join(f'{x[0]:.2f}' for x in v)}) | {med(1):.3f}x "
          f"| {'/'.join(str(x[2]) for x in v)} | {med(3):.0f} | {med(4):.1f} ({med(5):.1f}) | {med(6):.2f} |")
