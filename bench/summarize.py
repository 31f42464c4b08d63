#!/usr/bin/env python3
"""summarize.py — the markdown table of bench/RESULTS.md from forward_loop JSON.

Usage: bench/summarize.py [--brief] FILE.jsonl... (lines that are not JSON
objects are ignored; bench/h200_matrix.sh writes one file per host heap size).

--brief: scripts/demo.sh's table instead, one row per policy: peak reserved
and time per iteration as ratios to the oracle, the collections (the
policy's, and the runtime's own in brackets), exposed GC time as a share of
wall time, and the iterations run (* = stopped by --max-seconds).

A case is (backend, model shape, host heap, --sync-every K, workload, policy);
its oracle is explicit_free with the same backend, shape, host heap, K and
workload. Each cell
is the median over the repetitions with the spread (min-max) in brackets.
Ratios pair repetition i of a policy with repetition i of its oracle (a
process runs the repetitions in turn, each one every policy beside its oracle),
so a ratio's spread is the spread of the per-repetition ratios. Columns:
  peak / oracle       peak reserved device bytes / the oracle's
  time / oracle       time per iteration / the oracle's
  exposed GC s        exposed_gc_seconds (policy's upper bound + the runtime's
                      own time); exposed % wall: its share of the loop's wall time
  raw GC s            gc_seconds_all (every collection, policy's and runtime's)
  ms/coll             the policy's GC seconds per collection it ran (minor or full)
  minor/full          collections the policy ran; rt own: the runtime started
  blk steady          blocking whole-heap collections of any origin after the
                      first 10% of iterations (an upper bound: the runtime's
                      own are counted as blocking)
  OOMs                out_of_memory caught, summed over the repetitions
  iters               iterations run (a time cap stops slow cases early: *)
Python 3 standard library only.
"""
import json
import statistics
import sys
from collections import defaultdict

# Table order only: gcpressure::policy_names() defines the names, and a
# policy missing here is listed after these (order()).
POLICY_ORDER = ["explicit_free", "pressure", "cudajl", "dotnet", "at_limit", "every_iteration"]
WORKLOAD_ORDER = ["steady", "promote", "burst", "varied"]


def load(paths):
    runs = []
    for path in paths:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line.startswith("{"):
                    runs.append(json.loads(line))
    return runs


def shape(r):
    return (r["backend"], r["layers"], r["d"], r["batch"], r["hard_limit"])


def cell(values, fmt):
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1 or min(values) == max(values):
        return fmt % med
    return (fmt + " (" + fmt + "-" + fmt + ")") % (med, min(values), max(values))


def ratios(runs, oracle, key):
    out = []
    for r, o in zip(runs, oracle):
        if o[key] > 0:
            out.append(r[key] / o[key])
    return out


def row(policy, runs, oracle):
    it = [r["iterations"] for r in runs]
    capped = any(r["stopped_early"] for r in runs)
    return "| %s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %d | %s%s | %d |" % (
        policy,
        cell(ratios(runs, oracle, "peak_reserved_bytes"), "%.2f"),
        cell(ratios(runs, oracle, "time_per_iter"), "%.3f"),
        cell([r["exposed_gc_seconds"] for r in runs], "%.3f"),
        cell([100 * r["exposed_gc_fraction"] for r in runs], "%.1f%%"),
        cell([r["gc_seconds_all"] for r in runs], "%.3f"),
        cell([1e3 * r["gc_seconds"] / (r["collections_minor"] + r["collections_full"]) for r in runs
              if r["collections_minor"] + r["collections_full"] > 0], "%.2f"),
        cell([r["collections_minor"] for r in runs], "%g"),
        cell([r["collections_full"] for r in runs], "%g"),
        cell([r["collections_runtime"] for r in runs], "%g"),
        cell([r["collections_full_steady_any"] for r in runs], "%g"),
        sum(r["ooms"] for r in runs),
        cell(it, "%g"), "*" if capped else "",
        len(runs))


def order(name, known):
    return (known.index(name) if name in known else len(known), name)


# --brief: the demo's order (doing nothing first, the oracle last) and what
# each baseline stands for.
BRIEF_ORDER = ["at_limit", "every_iteration", "cudajl", "dotnet", "pressure", "explicit_free"]
BRIEF_LABEL = {
    "at_limit": "at_limit: nothing (collect at the limit)",
    "every_iteration": "every_iteration: GC.gc(true) each iteration",
    "cudajl": "cudajl: CUDA.jl's heuristic",
    "dotnet": "dotnet: .NET AddMemoryPressure",
    "pressure": "pressure: this library",
    "explicit_free": "explicit_free: the oracle",
}


def brief(cases):
    for key in sorted({k[:3] for k in cases}):
        sh, (mib, k), w = key
        backend, layers, d, batch, hard = sh
        oracle = cases.get(key + ("explicit_free",), [])
        n = max(len(v) for kk, v in cases.items() if kk[:3] == key)
        print("%s backend, %d x Dense(%d), batch %d, host heap %d MiB, hard limit %d MiB, workload %s; "
              "medians of %d run(s), (min-max)" % (backend, layers, d, batch, mib, hard // 2**20, w, n))
        if oracle:
            print("oracle: peak reserved %s MiB, %s ms per iteration\n" % (
                cell([o["peak_reserved_bytes"] / 2**20 for o in oracle], "%.1f"),
                cell([1e3 * o["time_per_iter"] for o in oracle], "%.2f")))
        print("| policy | peak reserved / oracle | time per iteration / oracle | collections (runtime's own) "
              "| exposed GC % of wall | iterations |")
        print("| --- | --- | --- | --- | --- | --- |")
        policies = sorted({kk[3] for kk in cases if kk[:3] == key}, key=lambda p: order(p, BRIEF_ORDER))
        for p in policies:
            runs = cases[key + (p,)]
            print("| %s | %s | %s | %s (%s) | %s | %s%s |" % (
                BRIEF_LABEL.get(p, p),
                cell(ratios(runs, oracle, "peak_reserved_bytes"), "%.1f") if oracle else "-",
                cell(ratios(runs, oracle, "time_per_iter"), "%.2f") if oracle else "-",
                cell([r["collections_minor"] + r["collections_full"] for r in runs], "%g"),
                cell([r["collections_runtime"] for r in runs], "%g"),
                cell([100 * r["exposed_gc_fraction"] for r in runs], "%.1f%%"),
                cell([r["iterations"] for r in runs], "%g"), "*" if any(r["stopped_early"] for r in runs) else ""))
        print()


def main(argv):
    args = argv[1:]
    brief_mode = "--brief" in args
    args = [a for a in args if a != "--brief"]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    runs = load(args)
    if not runs:
        print("summarize.py: no JSON results in %s" % " ".join(args), file=sys.stderr)
        return 1
    cases = defaultdict(list)
    for r in runs:
        cases[(shape(r), (r["host_heap_mib"], r.get("sync_every", 1)), r["workload"], r["policy"])].append(r)
    if brief_mode:
        brief(cases)
        return 0
    for sh in sorted({k[0] for k in cases}):
        backend, layers, d, batch, hard = sh
        print("### %s, %d x Dense(%d), batch %d, hard limit %.1f GiB\n" % (backend, layers, d, batch, hard / 2**30))
        for mib in sorted({k[1] for k in cases if k[0] == sh}):
            print("#### host heap %d MiB, sync every %d\n" % mib)
            print("| workload / policy | peak / oracle | time / oracle | exposed GC s | exposed % wall | raw GC s | "
                  "ms/coll | minor / full | rt own | blk steady | OOMs | iters | n |")
            print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
            workloads = sorted({k[2] for k in cases if k[:2] == (sh, mib)}, key=lambda w: order(w, WORKLOAD_ORDER))
            for w in workloads:
                oracle = cases.get((sh, mib, w, "explicit_free"), [])
                if oracle:
                    print("| **%s**: oracle peak %s MiB, %s ms/iter | | | | | | | | | | | | |" % (
                        w, cell([o["peak_reserved_bytes"] / 2**20 for o in oracle], "%.0f"),
                        cell([1e3 * o["time_per_iter"] for o in oracle], "%.2f")))
                else:
                    print("| **%s**: no oracle run (ratios left out) | | | | | | | | | | | | |" % w)
                policies = sorted({k[3] for k in cases if k[:3] == (sh, mib, w)}, key=lambda p: order(p, POLICY_ORDER))
                for p in policies:
                    print(row(p, cases[(sh, mib, w, p)], oracle))
            print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
