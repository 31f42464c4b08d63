#!/usr/bin/env python3
"""gcpressure.numba without a GPU: the EMM plug-in against the Numba-CUDA
stand-in (fakes/numba: set_memory_manager, NUMBA_CUDA_MEMORY_MANAGER, the
manager base classes, MemoryPointer's finalizer, CudaAPIError, as
numba_cuda/numba/cuda/cudadrv/driver.py has them) over the plug-in library's
host backend (real host memory). Each case in its own process."""
from __future__ import annotations

import ctypes
import gc
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _cases import MiB, cycle_loop, expect, main, raises  # noqa: E402


def setup(**kw):
    import gcpressure.numba as g
    from numba import cuda
    kw.setdefault("hard_limit", "64MiB")
    g.install(backend="host", host_capacity="256MiB", **kw)
    return cuda, g


def live(g):
    return g.stats()["frameworks"].get("numba", {}).get(0, {})


def memalloc_and_finalizer():
    cuda, g = setup()
    mm = cuda.current_context().memory_manager
    expect(type(mm).__name__ == "GcpressureNumbaManager", type(mm))
    a = cuda.device_array(MiB // 4)
    p = a.gpu_data.device_pointer_value
    ctypes.memset(p, 0x33, MiB)
    expect(ctypes.string_at(p + MiB - 1, 1) == b"\x33", "the block is writable memory")
    expect(live(g)["live_bytes"] == MiB and p in mm.allocations, "counted, and its owner held by the manager")
    del a
    expect(live(g)["live_bytes"] == 0 and not mm.allocations, "the MemoryPointer's finalizer gave the block back")
    z = mm.memalloc(0)
    expect(z.size == 0 and not z.is_managed and live(g)["allocations"] == 1, "zero bytes allocate nothing")


def third_party_context():
    # Note [A third party's context] (gcpressure/numba.py): a context whose
    # device is the driver's raw CUdevice (int-like, no .id), as Numba makes
    # when it attaches to a primary context someone else retained; the H200's
    # numba-cuda suite failed 2 tests there with AttributeError before.
    cuda, g = setup()
    from numba.cuda.cudadrv import driver

    class RawCUdevice:  # cuda.bindings.driver.CUdevice: int() and no .id
        def __int__(self):
            return 0

    ctx = driver.Context(RawCUdevice())
    p = ctx.memory_manager.memalloc(MiB)
    expect(p.size == MiB and live(g)["live_bytes"] >= MiB, "allocated on device 0 through the raw device")
    del p
    try:
        driver.Context(object())
    except Exception as e:  # noqa: BLE001 - the message is what is tested
        expect("cannot tell the device" in str(e), e)
    else:
        expect(False, "a device that is neither a Device nor int-like is an error")


def reset_frees_all():
    cuda, g = setup()
    ctx = cuda.current_context()
    keep = [cuda.device_array(MiB // 4) for _ in range(4)]
    expect(live(g)["live_bytes"] == 4 * MiB, live(g))
    ctx.reset()  # a context reset: everything the context holds goes
    c = live(g)
    expect(c["live_bytes"] == 0 and c["frees"] == 4, f"reset() freed the blocks: {c}")
    del keep  # their finalizers find nothing left: no double free
    gc.collect()
    c = live(g)
    expect(c["frees"] == 4 and c["live_bytes"] == 0, f"no double free: {c}")


def cycles_collected():
    cuda, g = setup()
    cycle_loop(lambda n: cuda.device_array(n // 4))
    s = g.stats()
    expect(s["ooms"] == 0 and s["peak_reserved_bytes"] <= 64 * MiB and s["collections_total"] > 0, s)


def control_runs_out():
    cuda, g = setup(policy="explicit_free")
    from numba.cuda.cudadrv.driver import CudaAPIError
    from numba.cuda.cudadrv import enums
    try:
        cycle_loop(lambda n: cuda.device_array(n // 4))
    except CudaAPIError as e:
        expect(e.code == enums.CUDA_ERROR_OUT_OF_MEMORY, f"Numba's out-of-memory code ({e.code})")
        expect("tried to allocate 8.00 MiB" in e.msg and "hard limit 64.00 MiB" in e.msg, e.msg)
        return
    raise AssertionError("the control did not run out of memory")


def env_selected():
    # NUMBA_CUDA_MEMORY_MANAGER=gcpressure.numba and GCPRESSURE_* only (see env below).
    from numba import cuda
    import gcpressure.numba as g
    mm = cuda.current_context().memory_manager
    expect(type(mm) is g.GcpressureNumbaManager, type(mm))
    a = cuda.device_array(MiB // 4)
    s = g.stats()
    expect(s["backend"] == "host" and s["hard_limit"] == 32 * MiB, (s["backend"], s["hard_limit"]))
    info = cuda.current_context().get_memory_info()
    expect(info.total == 32 * MiB and info.free == 31 * MiB, info)
    raises(Exception, cuda.device_array, 33 * MiB // 4)
    del a


def synchronize_hooks():
    cuda, g = setup()
    from numba.cuda.cudadrv import driver
    a = cuda.device_array(MiB // 4)

    def syncs():
        return g.raw_stats()["devices"][0]["gc"]["syncs"]

    s0 = syncs()
    cuda.synchronize()
    cuda.stream(0).synchronize()
    expect(syncs() == s0 + 2 and driver.synchronized == [None, 0], (syncs() - s0, driver.synchronized))
    g.uninstall()
    cuda.synchronize()
    expect(syncs() == s0 + 2, "uninstall() removed the hooks")
    del a


def defer_cleanup_frees_anyway():
    cuda, g = setup()
    ctx = cuda.current_context()
    with ctx.defer_cleanup():
        expect(ctx.memory_manager.deallocations.disabled == 1, "the host-side cleanup is deferred")
        a = cuda.device_array(MiB // 4)
        del a
        expect(live(g)["live_bytes"] == 0, "device frees are not deferred (stream-ordered returns to the pool)")


def filecheck_stand_in():
    # Note [A stand-in for filecheck] (numba_suite.py): the imports numba-cuda's
    # testing.py makes work, a test that uses FileCheck skips visibly, one that
    # does not runs, a filecheck that exists is never shadowed, and the suite's
    # JSON says it installed the stand-in.
    import json
    import subprocess
    import tempfile
    import unittest
    import numba_suite as ns
    expect(ns.install_filecheck_stub({"filecheck": object()}) is False, "a loaded filecheck is kept")
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "filecheck"))
        open(os.path.join(d, "filecheck", "__init__.py"), "w").close()
        sys.path.insert(0, d)
        try:
            expect(ns.install_filecheck_stub({}) is False, "an importable filecheck is not shadowed")
        finally:
            sys.path.remove(d)
    expect(ns.install_filecheck_stub() is True and sys.modules["filecheck"].__gcpressure_stand_in__, "installed")
    from filecheck.matcher import Matcher
    from filecheck.options import Options
    from filecheck.parser import Parser, pattern_for_opts
    from filecheck.finput import FInput

    class T(unittest.TestCase):
        def test_uses_filecheck(self):  # as CUDATestCase.assertFileCheckMatches begins
            opts = Options(match_filename="-", check_prefixes=["CHECK"])
            Matcher(opts, FInput(fname="-", content=""), Parser(opts, None, *pattern_for_opts(opts))).run()

        def test_plain(self):
            self.assertEqual(1 + 1, 2)

    r = unittest.TextTestRunner(stream=open(os.devnull, "w")).run(unittest.defaultTestLoader.loadTestsFromTestCase(T))
    expect(r.testsRun == 2 and not r.failures and not r.errors, (r.failures, r.errors))
    expect(len(r.skipped) == 1 and ns.FILECHECK_STUB in r.skipped[0][1], r.skipped)
    for c in (Matcher.from_opts, lambda: pattern_for_opts(None)):
        raises(unittest.SkipTest, c)
    # The suite against the Numba stand-in (no numba.cuda.tests there): its JSON line says so.
    p = subprocess.run([sys.executable, ns.__file__, "--modules", "cudadrv.test_emm_plugins"], capture_output=True,
                       text=True, timeout=60)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    expect(p.returncode == ns.SKIP and out.get("filecheck_stub") is True, (p.returncode, out))


if __name__ == "__main__":
    env = {"env_selected": {"NUMBA_CUDA_MEMORY_MANAGER": "gcpressure.numba", "GCPRESSURE_BACKEND": "host",
                            "GCPRESSURE_HARD_LIMIT": "32MiB", "GCPRESSURE_HOST_CAPACITY": "256MiB"}}
    main({f.__name__: f for f in (memalloc_and_finalizer, reset_frees_all, cycles_collected, control_runs_out,
                                  env_selected, synchronize_hooks, defer_cleanup_frees_anyway, filecheck_stand_in,
                                  third_party_context)}, env)
