#!/usr/bin/env python3
"""The adaptors on a GPU (H200): gcpressure.cupy, gcpressure.numba (by
install() and by NUMBA_CUDA_MEMORY_MANAGER), and a mixed PyTorch + CuPy
process exchanging arrays through DLPack, both with reference cycles. Each
case runs in a child interpreter (a framework's allocator is chosen once per
process); a JSON line per case, exit status 1 if any failed, 77 (skipped)
only when there is no GPU or the framework is not installed.

    python3 test_gpu_adaptors.py [--cases cupy,numba,numba_env,mixed]
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
sys.path.insert(0, PKG)
MiB = 1 << 20
GiB = 1 << 30
SKIP = 77


def emit(o):
    print(json.dumps(o, sort_keys=True, default=str), flush=True)


def check(cond, what, out):
    out.setdefault("checks", []).append([what, bool(cond)])
    if not cond:
        out["failed"] = out.get("failed", []) + [what]


class Node:
    pass


def case_cupy(out):
    import cupy
    import gcpressure.cupy as g
    g.install(hard_limit=4 * GiB)
    check(cupy.cuda.get_allocator() is g.malloc, "set_allocator", out)
    cupy.ones(1).sum()  # CuPy's first kernels, outside the counts below

    def live():
        return g.stats()["frameworks"].get("cupy", {}).get(0, {}).get("live_bytes", 0)

    l0 = live()
    a = cupy.arange(1 << 20, dtype=cupy.float32)
    check(float(a.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2), "arithmetic", out)
    check(live() - l0 == 4 * MiB, f"cupy live bytes counted ({live() - l0})", out)
    del a
    check(live() == l0, "dropping the array returns the block", out)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        b = cupy.ones(1 << 20, dtype=cupy.float32)
        c = (b * 2).sum()
    syncs0 = g.raw_stats()["devices"][0]["gc"]["syncs"]
    s.synchronize()  # the hooked synchronize: the policy's hint, then CuPy's
    check(g.raw_stats()["devices"][0]["gc"]["syncs"] == syncs0 + 1, "Stream.synchronize gives the hint", out)
    check(float(c) == 2.0 * (1 << 20), "work on CuPy's current stream", out)
    del s  # the owner keeps the stream alive until b's block is freed
    del b
    gc.collect()
    r0 = g.stats()
    for i in range(300):  # 64 MiB arrays in cycles: 19 GiB through a 4 GiB limit
        x, y = Node(), Node()
        x.p, y.p = y, x
        x.a = cupy.full(16 * MiB, float(i), dtype=cupy.float32)
        del x, y
    cupy.cuda.Device().synchronize()
    r1 = g.stats()
    check(r1["ooms"] == 0, "no OOM in 300 cyclic 64 MiB iterations", out)
    check(r1["peak_reserved_bytes"] <= 4 * GiB, "peak reserved within the limit", out)
    check(r1["collections_total"] > r0["collections_total"], "the policy collected", out)
    try:
        cupy.empty(5 * GiB // 4, dtype=cupy.float32)
        check(False, "5 GiB under a 4 GiB limit raises", out)
    except cupy.cuda.memory.OutOfMemoryError as e:
        m = str(e)
        check("out of memory" in m.lower() and "limit" in m, "CuPy's OutOfMemoryError with the report", out)
        out["oom_message"] = m[:600]
    z = cupy.empty(0, dtype=cupy.float32)
    check(z.size == 0, "zero-size array", out)
    g.synchronize()
    out["stats"] = {k: v for k, v in g.stats().items() if k != "raw"}


def case_numba(out, env_selected=False):
    import numpy as np
    from numba import cuda
    from numba.cuda.cudadrv.driver import CudaAPIError
    if not env_selected:
        import gcpressure.numba as g
        g.install(hard_limit=4 * GiB)
    else:
        import gcpressure.numba as g
    mm = cuda.current_context().memory_manager
    check(type(mm).__name__ == "GcpressureNumbaManager", f"memory manager {type(mm).__name__}", out)

    @cuda.jit
    def twice(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] *= 2

    def live():
        return g.stats()["frameworks"].get("numba", {}).get(0, {}).get("live_bytes", 0)

    h = np.arange(1 << 20, dtype=np.float32)
    l0 = live()
    d = cuda.to_device(h)
    twice[(h.size + 255) // 256, 256](d)
    check(np.array_equal(d.copy_to_host(), h * 2), "kernel on plug-in memory", out)
    check(live() - l0 == 4 * MiB, f"numba live bytes counted ({live() - l0})", out)
    del d
    check(live() == l0, "dropping the array returns the block", out)
    r0 = g.stats()
    for i in range(300):
        x, y = Node(), Node()
        x.p, y.p = y, x
        x.a = cuda.device_array(16 * MiB, dtype=np.float32)
        twice[(16 * MiB + 255) // 256, 256](x.a)
        del x, y
    cuda.synchronize()
    r1 = g.stats()
    check(r1["ooms"] == 0, "no OOM in 300 cyclic 64 MiB iterations", out)
    check(r1["peak_reserved_bytes"] <= 4 * GiB, "peak reserved within the limit", out)
    check(r1["collections_total"] > r0["collections_total"], "the policy collected", out)
    info = cuda.current_context().get_memory_info()
    check(info.total == 4 * GiB, f"get_memory_info total = the limit ({info.total})", out)
    try:
        cuda.device_array(5 * GiB // 4, dtype=np.float32)
        check(False, "5 GiB under a 4 GiB limit raises", out)
    except CudaAPIError as e:
        check("out of memory" in str(e).lower(), "Numba's CudaAPIError (out of memory) with the report", out)
        out["oom_message"] = str(e)[:600]
    s = cuda.stream()
    d2 = cuda.to_device(h, stream=s)
    s.synchronize()  # hooked: the policy's hint, then Numba's
    check(np.array_equal(d2.copy_to_host(stream=s), h), "copies on a Numba stream", out)
    out["stats"] = {k: v for k, v in g.stats().items() if k != "raw"}


def case_mixed(out):
    import torch
    import cupy
    import gcpressure.cupy as gc_
    import gcpressure.torch as gt
    gt.install(hard_limit=4 * GiB)
    gc_.install()  # joins the same devices and policy
    t = torch.ones(16 * MiB, device="cuda")
    c = cupy.from_dlpack(t)  # PyTorch's block, seen by CuPy: accounted once, to torch
    fw = gt.stats()["frameworks"]
    check(fw["torch"][0]["live_bytes"] >= 64 * MiB and "cupy" not in fw, "a DLPack view is not a new allocation",
          out)
    c2 = cupy.arange(1 << 20, dtype=cupy.float32)
    t2 = torch.from_dlpack(c2)
    check(float(t2.sum()) == float((1 << 20) * ((1 << 20) - 1) / 2), "CuPy -> PyTorch through DLPack", out)
    fw = gt.stats()["frameworks"]
    check(fw["cupy"][0]["live_bytes"] == 4 * MiB, "CuPy's block counted to CuPy", out)
    del t, c, c2, t2
    for i in range(300):  # both frameworks, 64 MiB each, in cycles, exchanging through DLPack
        x, y = Node(), Node()
        x.p, y.p = y, x
        x.t = torch.full((16 * MiB,), float(i), device="cuda")
        x.c = cupy.from_dlpack(x.t) + 1  # a CuPy allocation from a PyTorch tensor
        y.t = torch.from_dlpack(x.c)
        del x, y
    torch.cuda.synchronize()
    s = gt.stats()
    check(s["ooms"] == 0, "no OOM in the mixed loop", out)
    check(s["policy_devices"] == 1 and len(s["devices"]) == 1, "one policy, one device", out)
    fw = s["frameworks"]
    check(fw["torch"][0]["allocations"] >= 300 and fw["cupy"][0]["allocations"] >= 300,
          "both frameworks' allocations on device 0", out)
    check(s["peak_reserved_bytes"] <= 4 * GiB, "peak reserved within the limit", out)
    out["stats"] = {k: v for k, v in s.items() if k != "raw"}


CASES = {"cupy": case_cupy, "numba": case_numba, "numba_env": lambda o: case_numba(o, True), "mixed": case_mixed}
NEEDS = {"cupy": ["cupy"], "numba": ["numba.cuda"], "numba_env": ["numba.cuda"], "mixed": ["torch", "cupy"]}


def child(name):
    out = {"case": name}
    try:
        for m in NEEDS[name]:
            __import__(m)
    except Exception as e:  # noqa: BLE001
        out["skipped"] = f"{e.__class__.__name__}: {e}"
        emit(out)
        sys.exit(SKIP)
    try:
        CASES[name](out)
    except Exception as e:  # noqa: BLE001
        import traceback
        out["failed"] = out.get("failed", []) + [f"{e.__class__.__name__}: {e}"]
        out["traceback"] = traceback.format_exc()[-2000:]
    emit(out)
    sys.exit(1 if out.get("failed") else 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cases", default="cupy,numba,numba_env,mixed")
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        return child(a.child)
    bad = skipped = 0
    for name in a.cases.split(","):
        env = dict(os.environ, PYTHONPATH=PKG + os.pathsep + os.environ.get("PYTHONPATH", ""))
        if name == "numba_env":
            env.update(NUMBA_CUDA_MEMORY_MANAGER="gcpressure.numba", GCPRESSURE_HARD_LIMIT="4GiB",
                       GCPRESSURE_BACKEND="cuda_async")
        rc = subprocess.run([sys.executable, __file__, "--child", name], env=env, timeout=300).returncode
        bad += rc not in (0, SKIP)
        skipped += rc == SKIP
    sys.exit(1 if bad else (SKIP if skipped == len(a.cases.split(",")) else 0))


if __name__ == "__main__":
    main()
