#!/usr/bin/env python3
"""Issue 22's cycle variants for CuPy and Numba-CUDA (H200), each under a
4 GiB limit, with gcpressure (--mode gcpressure) or the framework's own
memory management (--mode own: CuPy's MemoryPool with set_limit(4 GiB);
Numba's default manager with the device capped at 4 GiB by a ballast
allocation of the rest of its free memory, cuMemAlloc'd before Numba's first
allocation). One process per framework and mode (the allocator is chosen
once per process); every variant runs --reps times in it, with everything
freed between runs. Prints one JSON line per run, then a summary line.

Variants (every iteration fills its new arrays on the device):
  c2_4, c2_64, c2_512  one array of 4 / 64 / 512 MiB per iteration in a
                       2-object cycle (live: one array)
  c100_8x8             a 100-object cycle holding 8 arrays of 8 MiB (live: 64 MiB)
  thread_c2_64         c2_64 in the main thread and in a second Python thread
                       at once (live: two arrays)
  ring                 a 64 MiB array per iteration kept in a cyclic ring for
                       1..50 iterations (lifetime 1 + (7919 i mod 50)); the
                       live set is counted exactly every iteration
  acyclic_64           c2_64 without the cycle (refcounting frees): the time
                       per iteration of the fast path
  hinted_c2_64         diagnostic, not a target (it changes the workload): c2_64
                       with gcpressure's iteration() hint after every iteration
                       (the policy then knows the device's lag); --mode own: c2_64
  pair                 alloc + free of 1 MiB from Python, 20000 times
                       (CuPy: cupy.cuda.alloc and cupy.empty; Numba:
                       cuda.device_array)
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # examples/python: the gcpressure package

MiB = 1 << 20
p = argparse.ArgumentParser()
p.add_argument("--framework", choices=["cupy", "numba"], required=True)
p.add_argument("--mode", choices=["gcpressure", "own"], required=True)
p.add_argument("--limit-gib", type=float, default=4.0)
p.add_argument("--reps", type=int, default=3)
p.add_argument("--variants", default="c2_4,c2_64,c2_512,c100_8x8,thread_c2_64,ring,acyclic_64,pair")
p.add_argument("--scale", type=float, default=1.0, help="iteration counts times this")
p.add_argument("--options", default="{}", help="JSON: more install() arguments for --mode gcpressure, e.g. "
               '\'{"minor_generation": "2", "freeze": true}\' (Note [A minor promotes the owner it runs beside])')
p.add_argument("--freeze-after-setup", action="store_true",
               help="diagnostic: gc.collect() + gc.freeze() once the framework is set up (Numba: its first kernel "
                    "compiled), then 40 cheap collections so that the collector's cost estimate learns the frozen "
                    "heap (Note [Choosing the minor's generation])")
p.add_argument("--grow-heap", type=int, default=0,
               help="diagnostic: this many long-lived tracked objects made once the framework is set up (a stand-in "
                    "for numba-cuda's compiler state, ~100-200k objects on the H200; Note [Freezing again after the "
                    "heap grew])")
p.add_argument("--host-work-us", type=float, default=0.0,
               help="busy host work per iteration (the host backend's loop has no device time; this gives it a pace)")
args = p.parse_args()
LIMIT = int(args.limit_gib * (1 << 30))
OPTIONS = json.loads(args.options)
ITERS = {"c2_4": 3000, "c2_64": 300, "c2_512": 48, "c100_8x8": 150, "thread_c2_64": 150, "ring": 300,
         "acyclic_64": 300, "hinted_c2_64": 300}


class Node:
    pass


def work():
    """--host-work-us of busy time (GIL held, like a kernel launch loop that waits on the device)."""
    if args.host_work_us > 0:
        end = time.perf_counter() + args.host_work_us * 1e-6
        while time.perf_counter() < end:
            pass


def emit(o):
    print(json.dumps(o, sort_keys=True, default=str), flush=True)


# --- the framework side -----------------------------------------------------------

class CupySide:
    def __init__(self, mode):
        import cupy
        self.cp = cupy
        self.mode = mode
        if mode == "gcpressure":
            import gcpressure.cupy as g
            g.install(hard_limit=LIMIT, **OPTIONS)
            self.g = g
        else:
            self.pool = cupy.get_default_memory_pool()
            self.pool.set_limit(size=LIMIT)
        self.OOM = cupy.cuda.memory.OutOfMemoryError
        cupy.empty(1, dtype=cupy.float32).fill(0)
        cupy.cuda.Device().synchronize()

    def new(self, nbytes, value):
        x = self.cp.empty(nbytes // 4, dtype=self.cp.float32)
        x.fill(value)
        return x

    def sync(self):
        self.cp.cuda.Device().synchronize()

    def reserved(self):
        return self.pool.total_bytes() if self.mode == "own" else self.g.usage()[1]

    def reset(self):
        gc.collect()
        self.sync()
        if self.mode == "own":
            self.pool.free_all_blocks()
        else:
            self.g.trim()
            self.g.reset_peaks()

    def pair(self, n=20000):
        alloc = self.cp.cuda.alloc
        out = {}
        for name, fn in (("alloc", lambda: alloc(MiB)), ("empty", lambda: self.cp.empty(MiB // 4, self.cp.float32))):
            for _ in range(200):
                fn()
            t = time.perf_counter()
            for _ in range(n):
                fn()
            out[name] = (time.perf_counter() - t) / n
        return out


class NumbaSide:
    def __init__(self, mode):
        from numba import cuda
        self.cuda = cuda
        self.mode = mode
        self.ballast = None
        if mode == "gcpressure":
            import gcpressure.numba as g
            g.install(hard_limit=LIMIT, **OPTIONS)
            self.g = g
        ctx = cuda.current_context()
        if mode == "own":  # cap the device: leave LIMIT free (and what is in use now)
            free, total = ctx.get_memory_info()
            from numba.cuda.cudadrv.driver import driver as drv
            self.ballast = drv.cuMemAlloc(free - LIMIT)
            self.base_used = total - LIMIT
        from numba.cuda.cudadrv.driver import CudaAPIError
        self.OOM = (CudaAPIError, MemoryError)

        @cuda.jit
        def fill(a, v):
            i = cuda.grid(1)
            if i < a.size:
                a[i] = v

        self.fill = fill
        self.new(MiB, 0.0)
        cuda.synchronize()

    def new(self, nbytes, value):
        import numpy as np
        n = nbytes // 4
        x = self.cuda.device_array(n, dtype=np.float32)
        self.fill[(n + 255) // 256, 256](x, value)
        return x

    def sync(self):
        self.cuda.synchronize()

    def reserved(self):
        if self.mode == "gcpressure":
            return self.g.usage()[1]
        free, total = self.cuda.current_context().get_memory_info()
        return total - free - self.base_used

    def reset(self):
        gc.collect()
        self.sync()
        if self.mode == "own":
            self.cuda.current_context().deallocations.clear()
        else:
            self.g.trim()
            self.g.reset_peaks()

    def pair(self, n=20000):
        import numpy as np
        da = self.cuda.device_array
        for _ in range(200):
            da(MiB // 4, np.float32)
        t = time.perf_counter()
        for _ in range(n):
            da(MiB // 4, np.float32)
        return {"device_array": (time.perf_counter() - t) / n}


# --- the variants -------------------------------------------------------------------

def loop_c2(fw, mib, iters, cyclic=True, sample=True, state=None, hint=False):
    """One array of `mib` per iteration in a 2-object cycle."""
    st = state if state is not None else {"peak": 0, "ooms": 0, "oom": None}
    hint_fn = fw.g.iteration if hint and fw.mode == "gcpressure" else None
    for i in range(iters):
        if hint_fn is not None:
            hint_fn()
        try:
            a, b = Node(), Node()
            a.peer, b.peer = b, a
            a.x = fw.new(mib * MiB, float(i))
            if not cyclic:
                a.peer = b.peer = None
            del a, b
            work()
        except fw.OOM as e:
            st["ooms"] += 1
            st["oom"] = str(e)[:400]
            break
        if sample:
            st["peak"] = max(st["peak"], fw.reserved())
    return st


def loop_c100(fw, iters):
    st = {"peak": 0, "ooms": 0, "oom": None}
    for i in range(iters):
        try:
            nodes = [Node() for _ in range(100)]
            for k in range(100):
                nodes[k].next = nodes[(k + 1) % 100]
            for k in range(8):
                nodes[k * 12].x = fw.new(8 * MiB, float(i))
            del nodes
            work()
        except fw.OOM as e:
            st["ooms"] += 1
            st["oom"] = str(e)[:400]
            break
        st["peak"] = max(st["peak"], fw.reserved())
    return st


def loop_ring(fw, iters, mib=64):
    st = {"peak": 0, "ooms": 0, "oom": None, "live_max": 0}
    ring = []  # (expiry, node): the node is in a cycle with its partner
    for i in range(iters):
        try:
            ring = [(e, n) for e, n in ring if e > i]  # expired nodes become cyclic garbage
            a, b = Node(), Node()
            a.peer, b.peer = b, a
            a.x = fw.new(mib * MiB, float(i))
            ring.append((i + 1 + (7919 * i) % 50, a))
            del a, b
            work()
        except fw.OOM as e:
            st["ooms"] += 1
            st["oom"] = str(e)[:400]
            break
        st["live_max"] = max(st["live_max"], len(ring) * mib * MiB)
        st["peak"] = max(st["peak"], fw.reserved())
    ring.clear()
    return st


def run_variant(fw, v, rep):
    iters = max(1, int(ITERS.get(v, 0) * args.scale))
    gc.collect()
    fw.sync()
    s0 = fw.g.stats() if fw.mode == "gcpressure" else None
    g0 = [s["collections"] for s in gc.get_stats()]
    t0 = time.perf_counter()
    live = None
    if v.startswith("c2_"):
        mib = int(v[3:])
        st = loop_c2(fw, mib, iters)
        live = mib * MiB
    elif v == "c100_8x8":
        st = loop_c100(fw, iters)
        live = 64 * MiB
    elif v == "thread_c2_64":
        other = {"peak": 0, "ooms": 0, "oom": None}
        th = threading.Thread(target=loop_c2, args=(fw, 64, iters), kwargs={"state": other, "sample": False})
        th.start()
        st = loop_c2(fw, 64, iters)
        th.join()
        st["ooms"] += other["ooms"]
        st["oom"] = st["oom"] or other["oom"]
        live = 128 * MiB
    elif v == "ring":
        st = loop_ring(fw, iters)
        live = st.pop("live_max")
    elif v == "hinted_c2_64":
        st = loop_c2(fw, 64, iters, hint=True)
        live = 64 * MiB
    elif v == "acyclic_64":
        st = loop_c2(fw, 64, iters, cyclic=False, sample=False)
        live = 64 * MiB
    elif v == "pair":
        out = fw.pair()
        return {"variant": v, "rep": rep, "seconds_per_pair": out}
    fw.sync()
    dt = time.perf_counter() - t0
    g1 = [s["collections"] for s in gc.get_stats()]
    r = {"variant": v, "rep": rep, "iterations": iters, "seconds_per_iter": dt / iters, "ooms": st["ooms"],
         "oom_message": st["oom"], "live_bytes": live, "python_collections": [b - a for a, b in zip(g0, g1)]}
    if fw.mode == "gcpressure":
        s = fw.g.stats()  # this run's share: the counters are the process's
        r["peak_reserved_bytes"] = s["peak_reserved_bytes"]
        # Live vs reserved: what the collections held apart from the pool's segments and pending frees
        # (4 MiB blocks share 20 MiB segments: Note [Segments near the limit], core/src/pool_resource.cpp).
        r["peak_live_bytes"] = s["peak_live_bytes"]
        r["gcpressure_collections"] = {k: n - s0["collections"][k] for k, n in s["collections"].items()}
        r["gcpressure_ooms"] = s["ooms"] - s0["ooms"]
        r["gc_seconds"] = s["gc_seconds"] - s0["gc_seconds"]
    else:
        r["peak_reserved_bytes"] = st["peak"]
    if v != "acyclic_64" and live:
        r["peak_over_live"] = r["peak_reserved_bytes"] / live
    return r


def main():
    fw = (CupySide if args.framework == "cupy" else NumbaSide)(args.mode)
    grown = [[Node() for _ in range(9)] for _ in range(args.grow_heap // 10)]  # 10 tracked objects each
    if args.freeze_after_setup:
        gc.collect()
        gc.freeze()
        for _ in range(40):
            gc.collect()
    runs = []
    for v in args.variants.split(","):
        for rep in range(args.reps):
            fw.reset()
            r = run_variant(fw, v, rep)
            r.update(framework=args.framework, mode=args.mode, options=OPTIONS)
            emit(r)
            runs.append(r)
    summary = {"summary": True, "framework": args.framework, "mode": args.mode, "limit": LIMIT, "options": OPTIONS,
               "python": sys.version.split()[0], "host_work_us": args.host_work_us,
               "freeze_after_setup": args.freeze_after_setup, "frozen": gc.get_freeze_count(),
               "grow_heap": args.grow_heap, "unfrozen": len(gc.get_objects())}
    if fw.mode == "gcpressure":
        summary["refreeze"] = fw.g.raw_stats()["python"].get("refreeze")
    del grown
    try:
        mod = __import__(args.framework if args.framework == "cupy" else "numba")
        summary["version"] = mod.__version__
    except Exception:  # noqa: BLE001
        pass
    by = {}
    for r in runs:
        by.setdefault(r["variant"], []).append(r)
    for v, rs in by.items():
        if v == "pair":
            summary[v] = {k: statistics.median(r["seconds_per_pair"][k] for r in rs) for k in rs[0]["seconds_per_pair"]}
            continue
        summary[v] = {"ooms": sum(r["ooms"] for r in rs),
                      "seconds_per_iter_median": statistics.median(r["seconds_per_iter"] for r in rs),
                      "seconds_per_iter_spread": [min(r["seconds_per_iter"] for r in rs),
                                                  max(r["seconds_per_iter"] for r in rs)],
                      "peak_reserved_median": statistics.median(r["peak_reserved_bytes"] for r in rs),
                      "live_bytes": max(r["live_bytes"] for r in rs)}
        if "gc_seconds" in rs[0]:
            summary[v]["gc_seconds_per_iter_median"] = statistics.median(r["gc_seconds"] / r["iterations"] for r in rs)
            summary[v]["collections_median"] = statistics.median(sum(r["gcpressure_collections"].values())
                                                                 for r in rs)
        if "peak_over_live" in rs[0]:
            summary[v]["peak_over_live_median"] = statistics.median(r["peak_over_live"] for r in rs)
        if "peak_live_bytes" in rs[0] and rs[0]["live_bytes"]:
            summary[v]["peak_live_over_live_median"] = statistics.median(r["peak_live_bytes"] / r["live_bytes"]
                                                                         for r in rs)
    emit(summary)


if __name__ == "__main__":
    main()
