#!/usr/bin/env python3
"""The allocation fast path from Python, CuPy (issue 22: an alloc + free
pair against CuPy's pool, target <= 1.2x). One process, allocators switched
with cupy.cuda.set_allocator between rounds, interleaved: CuPy's
MemoryPool.malloc, gcpressure.cupy.malloc (the C builtin) and malloc_py (its
Python reference), --rounds rounds of --n pairs each, for
cupy.cuda.alloc(1 MiB) (the allocator alone) and cupy.empty (an ndarray
around it); the pool's cache and ours are warm. Prints one JSON line: per
allocator and kind the median and spread of microseconds per pair, and the
ratios to the pool's median, and the library's profile (GCP_TORCH_PROFILE=1:
Note [Where the microseconds go] in examples/torch/torch_profile.hpp).

--backend host runs it on the CPU against the CuPy stand-in (tests/fakes on
PYTHONPATH), which has no pool: only gcpressure's two allocators, whose
absolute figures there include the stand-in's Python classes."""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=20000)
ap.add_argument("--rounds", type=int, default=7)
ap.add_argument("--backend", default="cuda_async")
a = ap.parse_args()

import cupy  # noqa: E402
import gcpressure.cupy as g  # noqa: E402

host = a.backend == "host"
g.install(hard_limit="4GiB", backend=a.backend, **({"host_capacity": "8GiB", "cupy": cupy} if host else {}))
allocators = {} if host else {"cupy_pool": cupy.get_default_memory_pool().malloc}
allocators.update(gcpressure=g.malloc, gcpressure_py=g.malloc_py)
MiB = 1 << 20
kinds = {"alloc": lambda: cupy.cuda.alloc(MiB), "empty": lambda: cupy.empty(MiB // 4, dtype=cupy.float32)}
res = {name: {k: [] for k in kinds} for name in allocators}
for r in range(a.rounds):
    for name, al in allocators.items():
        cupy.cuda.set_allocator(al)
        for k, fn in kinds.items():
            for _ in range(500):
                fn()
            t = time.perf_counter()
            for _ in range(a.n):
                fn()
            res[name][k].append((time.perf_counter() - t) / a.n * 1e6)
out = {"test": "pair_cupy", "n": a.n, "rounds": a.rounds, "cupy": cupy.__version__, "backend": a.backend,
       "us_per_pair": {}, "profile": g.raw_stats().get("profile")}
for name in allocators:
    out["us_per_pair"][name] = {k: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                                for k, v in res[name].items()}
for name in ("gcpressure", "gcpressure_py") if not host else ():
    out[f"ratio_{name}"] = {k: out["us_per_pair"][name][k]["median"] / out["us_per_pair"]["cupy_pool"][k]["median"]
                            for k in kinds}
print(json.dumps(out), flush=True)
