"""Runs test cases each in a child interpreter (the library is configured
once per process, as a framework's allocator is chosen once): the parent
runs `python3 <test file> --case NAME` for every case, with the package and
the CuPy/Numba stand-ins (fakes/) on sys.path and GCPRESSURE_TORCH_LIB
pointing at --lib. A case is a function that raises on failure. Exit status:
0 all passed, 1 any failed (no skips: nothing here needs a GPU; a timing
case the machine's load denied its premise is retried, see Loaded)."""
from __future__ import annotations

import argparse
import faulthandler
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.dirname(HERE)
FAKES = os.path.join(HERE, "fakes")
for p in (FAKES, PKG):
    if p not in sys.path:
        sys.path.insert(0, p)
MiB = 1 << 20


class Node:
    pass


def cycle_loop(new, iters=300, nbytes=8 * MiB):
    """`iters` iterations, each keeping one block of `nbytes` (new(nbytes))
    in a 2-object cycle that becomes garbage at once: with CPython's
    collector off, only collections the policy asks for free them."""
    import gc
    gc.disable()
    for _ in range(iters):
        a, b = Node(), Node()
        a.p, b.p = b, a
        a.x = new(nbytes)
        del a, b


def expect(cond, what):
    if not cond:
        raise AssertionError(what)


class Loaded(Exception):
    """A timing case whose premise the machine did not give it (its loop got
    less than its share of a CPU): the case is run again in a new process,
    up to LOADED_TRIES times, and fails only if every try was loaded."""


LOADED_TRIES = 5
LOADED_EXIT = 75  # EX_TEMPFAIL


def cpu_share(fn):
    """Runs fn(); returns (its result, the process's CPU seconds / wall
    seconds over it): ~1 for a busy loop that had a core to itself."""
    w, c = time.perf_counter(), time.process_time()
    r = fn()
    return r, (time.process_time() - c) / max(time.perf_counter() - w, 1e-9)


def raises(exc, fn, *a, **kw):
    try:
        fn(*a, **kw)
    except exc as e:
        return e
    raise AssertionError(f"{getattr(fn, '__name__', fn)} did not raise {exc}")


def main(cases: dict, env_for=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--case")
    a = ap.parse_args()
    if a.case:
        faulthandler.dump_traceback_later(120, exit=True)
        try:
            cases[a.case]()
        except Loaded as e:
            print(f"{a.case}: loaded: {e}", flush=True)
            sys.exit(LOADED_EXIT)
        print(f"{a.case}: ok", flush=True)
        return
    failed = []
    for name in cases:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([FAKES, PKG]), PYTHONDONTWRITEBYTECODE="1")
        if a.lib:
            env["GCPRESSURE_TORCH_LIB"] = a.lib
        env.update((env_for or {}).get(name, {}))
        t = time.monotonic()
        for _ in range(LOADED_TRIES):
            p = subprocess.run([sys.executable, sys.argv[0], "--case", name], env=env, capture_output=True, text=True,
                               timeout=200)
            if p.returncode != LOADED_EXIT:
                break
            print(f"RETRY {name}: {p.stdout.strip()[-300:]}", flush=True)
        ok = p.returncode == 0
        print(f"{'PASS' if ok else 'FAIL'} {name} ({time.monotonic() - t:.1f} s)", flush=True)
        if not ok:
            failed.append(name)
            sys.stdout.write(p.stdout[-3000:] + p.stderr[-3000:])
    print(f"{len(cases) - len(failed)} of {len(cases)} passed" + (f"; failed: {failed}" if failed else ""))
    sys.exit(1 if failed else 0)


__all__ = ["Node", "cycle_loop", "expect", "raises", "main", "MiB", "traceback"]
