#!/usr/bin/env python3
"""m (main) beside n (the change): per runtime and workload, pressure's peak and time as ratios to the
oracle of the same round (median over every run of both rounds: 2 x 3), and the runtime's own
mechanism's. Run in this folder after ab.sh."""
import glob, json, statistics
from collections import defaultdict
runs = defaultdict(list)  # (build, runtime, workload, policy) -> [(round, peak, time)]
for f in sorted(glob.glob("runs-*.jsonl")):
    build, rnd = f[5:-6].split("-")
    for line in open(f):
        r = json.loads(line)
        res = r["result"]
        runs[(build, r["runtime"], r["workload"], r["policy"])].append((rnd, res["peak_reserved_bytes"], res["time_per_iter"]))
def ratios(build, rt, wl, pol):
    orc = {rnd: (p, t) for rnd, p, t in runs[(build, rt, wl, "explicit_free")]}
    po = statistics.median(p for _, p, _ in runs[(build, rt, wl, "explicit_free")])
    to = {rnd: statistics.median(t for r2, _, t in runs[(build, rt, wl, "explicit_free")] if r2 == rnd) for rnd in orc}
    xs = runs[(build, rt, wl, pol)]
    pk = sorted(p / po for _, p, _ in xs)
    tm = [t / to[rnd] for rnd, _, t in xs]
    return f"{statistics.median(pk):.2f} ({pk[0]:.2f}-{pk[-1]:.2f}) at {statistics.median(tm):.2f}"
print("| runtime | workload | m pressure | n pressure | own (n's runs) |")
print("|---|---|---|---|---|")
for rt in ["cpp", "lua", "guile", "python", "node", "dotnet"]:
    for wl in ["steady", "promote", "burst", "varied"]:
        if ("m", rt, wl, "pressure") not in runs: continue
        print(f"| {rt} | {wl} | {ratios('m', rt, wl, 'pressure')} | {ratios('n', rt, wl, 'pressure')} | {ratios('n', rt, wl, 'runtime_native')} |")
