"""Shared pieces of the PyTorch tests (test_cycle_loop, test_training,
test_threads_torch; run_cases: test_cpu_api, test_cpu_devices): skipping without torch or a GPU (exit 77, ctest's skip
code), the watchdog, JSON lines, and running one configuration per child
process (PyTorch's allocator can be chosen only before CUDA's first
allocation, so every configuration gets a fresh interpreter)."""
from __future__ import annotations

import faulthandler
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
MODDIR = os.path.dirname(HERE)
if MODDIR not in sys.path:
    sys.path.insert(0, MODDIR)

SKIP = 77

# GCP_TORCH_SMOKE=cpu: run the scripts' logic on the CPU with any torch (for
# checking them on a machine without a GPU): "cuda" becomes "cpu", install()
# becomes configure(backend="host") — PyTorch then does not use the library,
# so the numbers mean nothing; only that every path runs.
SMOKE = os.environ.get("GCP_TORCH_SMOKE") == "cpu"
DEV = "cpu" if SMOKE else "cuda"


def emit(obj: dict) -> None:
    print(json.dumps(obj, sort_keys=True, default=str), flush=True)


def need_torch_gpu(test: str):
    """Returns torch, or exits 77 with a JSON line saying why not."""
    try:
        import torch
    except Exception as e:  # noqa: BLE001
        emit({"test": test, "skipped": f"no torch in {sys.executable}: {e.__class__.__name__}: {e}"})
        sys.exit(SKIP)
    if not torch.cuda.is_available() and not SMOKE:
        emit({"test": test, "skipped": "torch sees no CUDA device"})
        sys.exit(SKIP)
    return torch


def install(gcp, **kw):
    """gcp.install(**kw); in smoke mode gcp.configure on the host backend."""
    if SMOKE:
        return gcp.configure(backend="host", host_capacity="64GiB", oom="null", **kw)
    return gcp.install(**kw)


def sync(torch) -> None:
    if not SMOKE:
        torch.cuda.synchronize()


def stream(torch):
    """A new CUDA stream's context (smoke: nothing) and its handle."""
    import contextlib
    if SMOKE:
        return contextlib.nullcontext(), None
    s = torch.cuda.Stream()
    return torch.cuda.stream(s), s


def current_stream_handle(torch):
    return None if SMOKE else torch.cuda.current_stream().cuda_stream


def max_reserved(torch) -> int:
    return 0 if SMOKE else torch.cuda.max_memory_reserved()


def max_allocated(torch) -> int:
    return 0 if SMOKE else torch.cuda.max_memory_allocated()


def limit_torch(torch, limit: int) -> None:
    """PyTorch's own allocator limited to `limit` bytes (the baseline's 4 GiB)."""
    if not SMOKE:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(limit / total)


def watchdog(seconds: float) -> None:
    """The deadlock check: after `seconds`, dump every thread's stack and exit 1."""
    faulthandler.dump_traceback_later(seconds, exit=True)


def gc_counts() -> list[int]:
    import gc
    return [s["collections"] for s in gc.get_stats()]


def is_oom(e: BaseException) -> bool:
    return "out of memory" in str(e).lower()


def result(obj: dict) -> None:
    """A child's result, for run_child()."""
    print("RESULT " + json.dumps(obj, sort_keys=True, default=str), flush=True)


def run_child(script: str, argv: list[str], timeout: float) -> dict:
    """Runs `script argv` in a fresh interpreter; returns its RESULT dict plus
    rc (and the stderr tail when it failed). A child that hangs past
    `timeout` is killed and reported as a deadlock."""
    cmd = [sys.executable, script] + argv
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        return {"rc": None, "timed_out": True, "stderr_tail": err[-4000:], "argv": argv}
    out: dict = {}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            out = json.loads(line[7:])
    out["rc"] = r.returncode
    if r.returncode != 0 or not out:
        out["stderr_tail"] = r.stderr[-4000:]
        out["stdout_tail"] = r.stdout[-2000:]
    return out


def lib_arg() -> str | None:
    """The --lib argument of a CPU test (None: find_library's search)."""
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--lib")
    return p.parse_args().lib


def run_cases(test: str, prelude: str, cases: dict, timeout: float = 120, after: dict | None = None) -> None:
    """Runs each case (a code snippet that sets `out`) after `prelude` in a
    fresh interpreter (the library configures once per process); prints one
    JSON line per case, and exits 1 if any failed. after[name](stdout), if
    given, checks what the case's process printed (after its RESULT line:
    at exit); it returns None or why the case failed."""
    import textwrap
    failed = 0
    for name, body in cases.items():
        code = prelude + textwrap.dedent(body) + "\nprint('RESULT ' + json.dumps(out), flush=True)\n"
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
        res = None
        for line in r.stdout.splitlines():
            if line.startswith("RESULT "):
                res = json.loads(line[7:])
        ok = r.returncode == 0 and res is not None
        why = after[name](r.stdout) if ok and after and name in after else None
        if why:
            ok = False
            r.stderr += f"\n{name}: {why}\n"
        print(json.dumps({"case": name, "ok": ok, "rc": r.returncode, "result": res}))
        if not ok:
            failed += 1
            sys.stderr.write(f"--- {name} failed (rc {r.returncode})\n{r.stdout}\n{r.stderr}\n")
    if failed:
        sys.exit(1)
    print(f"{test}: {len(cases)} cases OK")
