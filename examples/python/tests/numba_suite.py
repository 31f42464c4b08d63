#!/usr/bin/env python3
"""numba-cuda's own tests, with or without gcpressure.numba (issue 22: select
the plug-in with NUMBA_CUDA_MEMORY_MANAGER=gcpressure.numba), as one JSON line.

Where the tests live depends on how Numba-CUDA is installed: the numba-cuda
wheel puts its code in numba_cuda/numba/cuda and redirects `numba.cuda` to it,
so its tests are `numba.cuda.tests` (through the redirect) or
`numba_cuda.numba.cuda.tests`; some releases leave the tests out of the wheel.
Each module is looked up under every candidate root. A module found nowhere
is a visible skip ("missing"), one that is found but fails to import is an
import error with its traceback's tail (the H200 run of 2026-12-02 lost that
log), and the rest run under unittest in this process. Where the Python FileCheck
is not installed (numba-cuda's testing.py imports it for every module), a
stand-in is, and the tests that use it skip (Note [A stand-in for filecheck]).

    python3 numba_suite.py [--modules cudadrv.test_emm_plugins,...] [--all-of cudadrv]
Exit status: 0 when every found module imported and its tests passed, 1
otherwise, 77 when Numba-CUDA or its tests are not there at all.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import pkgutil
import sys
import time
import traceback
import unittest

ROOTS = ("numba.cuda.tests", "numba_cuda.numba.cuda.tests")
# Memory-heavy modules: allocation, deallocation, the EMM interface, streams, arrays.
DEFAULT = ("cudadrv.test_emm_plugins,cudadrv.test_cuda_memory,cudadrv.test_deallocations,cudadrv.test_cuda_ndarray,"
           "cudadrv.test_streams,cudapy.test_array,cudapy.test_sync")
SKIP = 77
FILECHECK_STUB = "filecheck is not installed (numba_suite.py's stand-in)"


# Note [A stand-in for filecheck]
# numba-cuda's numba/cuda/testing.py (0.30.4, line 25) imports the Python
# FileCheck (filecheck.matcher.Matcher, filecheck.options.Options,
# filecheck.parser.Parser and pattern_for_opts, filecheck.finput.FInput) at
# module level, for its assertFileCheck* methods alone; every test module
# imports testing.py, so without filecheck no test of the suite imports (the
# H200, 2026-12-03: all four memory modules were import errors; the GPU
# machine has no package registry). None of the memory modules calls
# assertFileCheck* (only cudapy's test_debuginfo, test_debuginfo_types and
# test_inspect do). Where filecheck cannot be found, these five names come
# from stand-in modules whose every class and function raises
# unittest.SkipTest naming the stand-in: a test that uses FileCheck is a
# visible skip (skipped_filecheck in the JSON), never a pass, and the JSON
# says the stand-in was installed. A real filecheck is never shadowed.
def _skip_filecheck(*_args, **_kwargs):
    raise unittest.SkipTest(FILECHECK_STUB)


class _FileCheckStandIn:
    def __init__(self, *args, **kwargs):
        _skip_filecheck()

    @classmethod
    def from_opts(cls, *args, **kwargs):
        _skip_filecheck()


def install_filecheck_stub(modules=None) -> bool:
    """Installs the stand-in filecheck (Note [A stand-in for filecheck]) into
    `modules` (default sys.modules) unless a filecheck is importable; True
    when it did."""
    modules = sys.modules if modules is None else modules
    if "filecheck" in modules or find_spec("filecheck") is not None:
        return False
    import types
    names = {"matcher": ("Matcher",), "options": ("Options",), "parser": ("Parser",), "finput": ("FInput",)}
    pkg = types.ModuleType("filecheck", FILECHECK_STUB)
    pkg.__path__ = []  # a package: its submodules come from `modules`
    pkg.__gcpressure_stand_in__ = True
    modules["filecheck"] = pkg
    for sub, classes in names.items():
        m = types.ModuleType(f"filecheck.{sub}", FILECHECK_STUB)
        m.__gcpressure_stand_in__ = True
        for c in classes:
            setattr(m, c, type(c, (_FileCheckStandIn,), {"__module__": m.__name__}))
        setattr(pkg, sub, m)
        modules[m.__name__] = m
    modules["filecheck.parser"].pattern_for_opts = _skip_filecheck
    modules["filecheck.options"].parse_argv_options = _skip_filecheck
    return True


def find_spec(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None


def live_roots():
    """The roots whose package is already imported. Probing the other one
    imports the same files again under a second name: on the H200 (numba-cuda
    wheel, numba.cuda redirected), find_spec("numba_cuda.numba.cuda.tests")
    ran numba_cuda/numba/cuda/__init__.py a second time and numba raised
    "key already in dictionary: <class '...CUDA'>" before any test ran."""
    return tuple(r for r in ROOTS if r.rsplit(".", 1)[0] in sys.modules)


def locate(mod: str):
    """The first root under which `mod` exists (its full name), or None."""
    for root in live_roots():
        if find_spec(root) is not None and find_spec(f"{root}.{mod}") is not None:
            return f"{root}.{mod}"
    return None


def run_until_term(suite, out):
    """Runs `suite`; a SIGTERM (timeout(1), numba_suites.py's per-module
    limit) stops it between tests' lines and the counts so far are still
    reported, with `interrupted` set: a module stopped at its limit says
    what it ran instead of nothing."""
    import signal

    def on_term(*_):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    r = unittest.TextTestRunner(stream=sys.stderr, verbosity=2)._makeResult()
    try:
        suite(r)
    except KeyboardInterrupt:
        out["interrupted"] = True
    r.printErrors()  # every failure's traceback, in the module's .stderr
    return r


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--modules", default=DEFAULT)
    ap.add_argument("--all-of", default="", help="every test_* module of these groups (e.g. cudadrv,cudapy)")
    ap.add_argument("--list", action="store_true", help="print the modules found as one JSON line, run nothing")
    a = ap.parse_args()
    out = {"test": "numba_suite", "memory_manager": os.environ.get("NUMBA_CUDA_MEMORY_MANAGER", "default")}
    try:
        from numba import cuda
        out["numba_cuda_file"] = cuda.__file__
        import numba
        out["numba"] = numba.__version__
    except Exception as e:  # noqa: BLE001
        out["skipped"] = f"numba.cuda does not import: {e.__class__.__name__}: {e}"
        print(json.dumps(out), flush=True)
        return SKIP
    out["roots"] = {r: find_spec(r) is not None for r in live_roots()}
    mods = [m for m in a.modules.split(",") if m]
    for grp in filter(None, a.all_of.split(",")):
        for root in live_roots():
            spec = find_spec(f"{root}.{grp}")
            if spec is not None and spec.submodule_search_locations:
                mods += [f"{grp}.{m.name}" for m in pkgutil.iter_modules(spec.submodule_search_locations)
                         if m.name.startswith("test_")]
                break
    if a.list:
        out["modules"] = [m for m in dict.fromkeys(mods) if locate(m) is not None]
        print(json.dumps(out), flush=True)
        return 0
    out["filecheck_stub"] = install_filecheck_stub()  # Note [A stand-in for filecheck]
    suite = unittest.TestSuite()
    out["missing"], out["import_errors"], out["modules"] = [], {}, []
    for m in dict.fromkeys(mods):
        full = locate(m)
        if full is None:
            out["missing"].append(m)
            continue
        try:
            suite.addTests(unittest.defaultTestLoader.loadTestsFromModule(importlib.import_module(full)))
            out["modules"].append(full)
        except Exception:  # noqa: BLE001
            out["import_errors"][m] = traceback.format_exc()[-1500:]
    if not out["modules"] and not out["import_errors"]:
        out["skipped"] = f"none of the test modules is installed (looked under {', '.join(ROOTS)})"
        print(json.dumps(out), flush=True)
        return SKIP
    t0 = time.monotonic()
    r = run_until_term(suite, out)
    out.update(seconds=round(time.monotonic() - t0, 1), ran=r.testsRun, failures=len(r.failures),
               errors=len(r.errors), skipped_tests=len(r.skipped), expected_failures=len(r.expectedFailures),
               skipped_filecheck=sum(FILECHECK_STUB in str(why) for _, why in r.skipped),
               failed_names=[str(t) for t, _ in r.failures + r.errors][:40],
               failed_tails=[why[-600:] for _, why in (r.failures + r.errors)[:3]])
    if "NUMBA_CUDA_MEMORY_MANAGER" in os.environ:
        try:
            mm = type(cuda.current_context().memory_manager).__name__
            out["manager_in_use"] = mm
        except Exception as e:  # noqa: BLE001
            out["manager_in_use"] = f"? {e}"
    print(json.dumps(out), flush=True)
    return 0 if r.wasSuccessful() and not out["import_errors"] and not out.get("interrupted") else 1


if __name__ == "__main__":
    sys.exit(main())
