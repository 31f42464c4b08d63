#!/usr/bin/env python3
"""The one package: its shims (gcpressure_torch, gcpressure_py) are its own
modules, and every framework of a process shares one pool and one policy per
device (Note [Frameworks share the devices]); the settings belong to the
first framework installed. CuPy and Numba are the stand-ins of fakes/, over
the host backend. Each case in its own process."""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _cases import MiB, Node, expect, main, raises  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))


def shims():
    sys.path.insert(0, os.path.join(ROOT, "examples", "torch"))
    sys.path.insert(0, os.path.join(ROOT, "examples", "runtimes", "python"))
    import gcpressure
    import gcpressure.torch
    import gcpressure_py
    import gcpressure_py._capi
    import gcpressure_py.collector
    import gcpressure_torch
    expect(gcpressure_torch is gcpressure.torch, "gcpressure_torch is gcpressure.torch")
    expect(gcpressure_py is gcpressure and gcpressure_py._capi is gcpressure._capi, "gcpressure_py is gcpressure")
    expect(gcpressure_py.collector.CPythonCollector is gcpressure.CPythonCollector, "one collector class")
    for name in ("install", "uninstall", "configure", "stats", "raw_stats", "collect", "iteration", "quiet_moment",
                 "synchronize", "usage", "set_limits", "reset_peaks", "trim", "find_library", "Library",
                 "stats_text", "GcpressureTorchError", "LIB_NAME", "ALLOC_FN", "FREE_FN", "_hook_torch"):
        expect(hasattr(gcpressure_torch, name), f"gcpressure_torch.{name}")
    expect(gcpressure_torch._lib is None, "state read through the shim")
    gcpressure_torch.configure(backend="host", host_capacity="64MiB")
    expect(gcpressure_torch._lib is not None and gcpressure_torch._config["backend"] == "host", "state after configure")


def one_pool_two_frameworks():
    import cupy
    import gcpressure.cupy as gcu
    import gcpressure.numba as gnu
    from numba import cuda
    gcu.install(hard_limit="64MiB", backend="host", host_capacity="256MiB", cupy=cupy)
    e = raises(gcu.GcpressureTorchError, gnu.install, hard_limit="32MiB", backend="host")
    expect("by cupy" in str(e) and "hard_limit" in str(e), e)
    gnu.install(backend="host")  # joins
    a = cupy.empty(MiB // 4)
    hits = gcu.stats()["pool_hits"]
    del a  # CuPy's block goes back to the one pool ...
    d = cuda.device_array(MiB // 4)  # ... and serves Numba's allocation
    s = gcu.stats()
    expect(s["pool_hits"] == hits + 1, "Numba reused the block CuPy freed")
    expect(s["policy_devices"] == 1 and len(s["devices"]) == 1, "one policy, one device")
    fw = s["frameworks"]
    expect(fw["cupy"][0]["live_bytes"] == 0 and fw["numba"][0]["live_bytes"] == MiB, fw)
    import gc
    gc.disable()
    for _ in range(150):  # both in cycles under the one limit
        x, y = Node(), Node()
        x.p, y.p = y, x
        x.c = cupy.empty(MiB)
        x.n = cuda.device_array(MiB)
        del x, y
    s = gcu.stats()
    expect(s["ooms"] == 0 and s["peak_reserved_bytes"] <= 64 * MiB, (s["ooms"], s["peak_reserved_bytes"]))
    expect(s["frameworks"]["cupy"][0]["allocations"] == 151 and s["frameworks"]["numba"][0]["allocations"] == 151,
           s["frameworks"])
    del d


def torch_configure_then_cupy():
    import cupy
    import gcpressure.cupy as gcu
    import gcpressure.torch as gt
    gt.configure(hard_limit="64MiB", backend="host", host_capacity="256MiB")
    raises(gt.GcpressureTorchError, gt.configure, backend="host")  # as always: once per process
    e = raises(gt.GcpressureTorchError, gcu.install, cupy=cupy, backend="cuda_async")
    expect("backend 'host'" in str(e), e)
    gcu.install(cupy=cupy, backend="host")
    L = gt._lib
    p = L.c.gcp_torch_alloc_nothrow(MiB, 0, None)  # PyTorch's entry point: framework "torch"
    a = cupy.empty(MiB // 4)
    fw = gt.stats()["frameworks"]
    expect(fw["torch"][0]["live_bytes"] == MiB and fw["cupy"][0]["live_bytes"] == MiB, fw)
    L.c.gcp_torch_free(p, MiB, 0, None)
    gt.reset_peaks()
    fw = gt.stats()["frameworks"]
    expect(fw["torch"][0]["peak_live_bytes"] == 0 and fw["cupy"][0]["peak_live_bytes"] == MiB, fw)
    del a


def reset_peaks_restarts_reserved():
    # bench_cycles.py runs its variants one after another in one process and
    # reads each one's peak after reset_peaks(): the reserved peak (the
    # limiter's, not only the live one) must restart, at what is reserved now.
    import gcpressure.torch as gt
    gt.configure(hard_limit="256MiB", backend="host", host_capacity="256MiB")
    L = gt._lib
    p = L.c.gcp_torch_alloc_nothrow(64 * MiB, 0, None)
    L.c.gcp_torch_free(p, 64 * MiB, 0, None)
    gt.trim()
    s = gt.stats()
    expect(s["peak_reserved_bytes"] >= 64 * MiB and s["reserved_bytes"] == 0, s["peak_reserved_bytes"])
    gt.reset_peaks()
    s = gt.stats()
    expect(s["peak_reserved_bytes"] == 0 and s["peak_live_bytes"] == 0,
           f"reset_peaks left peak reserved {s['peak_reserved_bytes']}, live {s['peak_live_bytes']}")
    q = L.c.gcp_torch_alloc_nothrow(MiB, 0, None)
    s = gt.stats()
    expect(0 < s["peak_reserved_bytes"] == s["reserved_bytes"] < 64 * MiB, s["peak_reserved_bytes"])
    L.c.gcp_torch_free(q, MiB, 0, None)


def capi_finds_build_release():
    """The C API binding's library search finds build/release/gc_bridge (where
    scripts/test.sh and demo.sh build) as well as build/gc_bridge; it missed
    the first before ('libgcpressure.so not found ... looked in: (nothing)')."""
    import tempfile
    import gcpressure._capi as capi
    os.environ.pop(capi.ENV_VAR, None)
    with tempfile.TemporaryDirectory() as root:
        want = []
        for sub in (("build", "release"), ("build-x",)):
            d = os.path.join(root, *sub, "gc_bridge")
            os.makedirs(d)
            want.append(os.path.join(d, "libgcpressure.so"))
            open(want[-1], "w").close()
        capi.REPO_ROOT = root
        got = capi.candidate_paths()
        for w in want:
            expect(w in got, f"{w} not in {got}")
        expect(capi.find_library() in want or capi.find_library() == os.path.join(capi._HERE, "libgcpressure.so"),
               capi.find_library())


if __name__ == "__main__":
    main({f.__name__: f for f in (shims, one_pool_two_frameworks, torch_configure_then_cupy,
                                      reset_peaks_restarts_reserved, capi_finds_build_release)})
