#!/usr/bin/env python3
"""What bounds the cycle variants' peaks (issue 22): the physics of one
collection, measured in the process bench_cycles.py runs in (same framework,
same install()), printed as one JSON line.

Under the pressure policy with no device lag, a minor is due when the young
bytes reach rate x P / gc_budget (Note [One decision over an explicit
model], core/src/pressure_model.hpp); in a loop that makes B bytes of
garbage per iteration of T seconds that is N = P / (gc_budget x T)
iterations of garbage, and the peak is about N x the live array (c2_*), or
live + N x B (c100, ring). P is what the policy times: a fixed part P0 (the
collection over the heap that survives: frozen at install, what the program
made since) plus the freeing of what it finds, p_g per iteration of
garbage. The policy prices the whole of P(N) = P0 + N p_g, so N solves
N = (P0 + N p_g) / (b T): N = P0 / (b T - p_g), and when p_g >= b T no
spacing meets the budget and the young bytes run to the headroom (soft
limit). Priced by P0 alone (freeing is paid whatever the spacing, by
reference counting in an acyclic loop too): N = P0 / (b T).

Measured here:
  collect_us        gc.collect(0/1/2) over this process's heap, no garbage (frozen by install())
  collect_unfrozen_us  gc.collect(2) with the heap unfrozen (then frozen again)
  heap              objects tracked (unfrozen) and frozen
  free_per_iter_us  slope of gc.collect(2)'s time over k iterations of garbage (c2: 2 nodes + one
                    array; c100: 100 nodes + 8 arrays), and its intercept
  policy_P1_us      the policy's seconds per collection when it collects at every allocation of
                    c2_64 (gc_budget 1, a child process), i.e. P0 + one iteration of garbage; and T of
                    that loop without its collections
Usage: probe_gc_cost.py --framework cupy|numba [--options JSON]   (fakes/ on PYTHONPATH for the host)
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
MiB = 1 << 20

ap = argparse.ArgumentParser()
ap.add_argument("--framework", choices=["cupy", "numba"], default="cupy")
ap.add_argument("--options", default="{}")
ap.add_argument("--child-budget-one", action="store_true", help=argparse.SUPPRESS)
args = ap.parse_args()
OPTIONS = json.loads(args.options)


class Node:
    pass


def side():
    if args.framework == "cupy":
        import cupy
        import gcpressure.cupy as g
        g.install(hard_limit=4 << 30, **OPTIONS)
        return g, lambda n: cupy.empty(n // 4, dtype=cupy.float32)
    from numba import cuda
    import gcpressure.numba as g
    g.install(hard_limit=4 << 30, **OPTIONS)
    try:
        import numpy as np
        f32 = np.float32
    except ImportError:  # the host stand-in (fakes/numba) takes any dtype
        f32 = "float32"
    return g, lambda n: cuda.device_array(n // 4, dtype=f32)


def med_us(fn, n=2000, reps=5):
    fn()
    r = []
    for _ in range(reps):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        r.append((time.perf_counter() - t) / n)
    return statistics.median(r) * 1e6


def c2(new, mib=1):
    a, b = Node(), Node()
    a.peer, b.peer = b, a
    a.x = new(mib * MiB)


def c100(new):
    nodes = [Node() for _ in range(100)]
    for k in range(100):
        nodes[k].next = nodes[(k + 1) % 100]
    for k in range(8):
        nodes[k * 12].x = new(MiB)


def free_slope(make, ks=(1, 4, 16, 32)):
    """gc.collect(2)'s seconds over k iterations of garbage: slope, intercept (us)."""
    pts = []
    was = gc.isenabled()
    gc.disable()
    for k in ks:
        ts = []
        for _ in range(15):
            for _ in range(k):
                make()
            t = time.perf_counter()
            gc.collect(2)
            ts.append(time.perf_counter() - t)
        pts.append((k, statistics.median(ts) * 1e6))
    if was:
        gc.enable()
    n = len(pts)
    sx, sy = sum(k for k, _ in pts), sum(y for _, y in pts)
    sxx, sxy = sum(k * k for k, _ in pts), sum(k * y for k, y in pts)
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)
    return {"per_iter_us": slope, "intercept_us": (sy - slope * sx) / n, "points": pts}


def child_budget_one():
    """c2_64 with a collection at every allocation: the policy's P1 and the loop's T without it."""
    g, new = side()
    iters = 1500
    s0 = g.stats()
    t = time.perf_counter()
    for _ in range(iters):
        c2(new, 64)
    dt = time.perf_counter() - t
    s = g.stats()
    n = s["collections_total"] - s0["collections_total"]
    gcs = s["gc_seconds"] - s0["gc_seconds"]
    print(json.dumps({"collections": n, "iterations": iters, "P1_us": gcs / max(n, 1) * 1e6,
                      "T_without_collections_us": (dt - gcs) / iters * 1e6,
                      "peak_over_live": s["peak_reserved_bytes"] / (64 * MiB)}))


def main():
    if args.child_budget_one:
        return child_budget_one()
    g, new = side()
    out = {"framework": args.framework, "options": OPTIONS, "python": sys.version.split()[0],
           "heap": {"tracked": len(gc.get_objects()), "frozen": gc.get_freeze_count()}}
    out["collect_us"] = [med_us(lambda k=k: gc.collect(k)) for k in (0, 1, 2)]
    frozen = gc.get_freeze_count()
    gc.unfreeze()
    out["collect_unfrozen_us"] = med_us(lambda: gc.collect(2), n=20, reps=3)
    if frozen:
        gc.freeze()
    out["free_per_iter_us"] = {"c2": free_slope(lambda: c2(new)), "c100": free_slope(lambda: c100(new), (1, 2, 4, 8))}
    py = g.raw_stats()["python"]
    out["collector_costs_us"] = {"young": py.get("cost_young_us"), "whole": py.get("cost_whole_us")}
    env = dict(os.environ)
    opts = dict(OPTIONS, budget=1.0)
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--framework", args.framework, "--options",
                        json.dumps(opts), "--child-budget-one"], env=env, capture_output=True, text=True, timeout=120)
    line = next((x for x in p.stdout.splitlines() if x.startswith("{")), None)
    out["policy_every_allocation"] = json.loads(line) if line else {"error": p.stderr[-800:]}
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main()
