#!/usr/bin/env python3
"""The synchronize hint on the H200 (issue 11): a GPU-bound loop (a 4096^3
matmul, ~3 ms of device work, per iteration) that leaves a 64 MiB tensor in a
reference cycle every iteration and calls torch.cuda.synchronize() at the
end of each — the call install() wraps. Exit 77 without torch or a GPU.

Checks: every torch.cuda.synchronize reached the policy (its sync count),
the policy measured slack (the device still worked when the host arrived),
zero OOMs, peak reserved within the 4 GiB hard limit. Reports how much GC
time was hidden in device time and how much was exposed (the policy's
estimate, Note [Exposed GC time] in core/src/policy.cpp), and the same loop
with gcpressure_torch.synchronize() called directly."""
from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import SMOKE, emit, need_torch_gpu, watchdog  # noqa: E402


class Holder:
    def __init__(self, t):
        self.t = t
        self.me = self  # a reference cycle: only CPython's collector frees it


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    if a.lib:
        os.environ["GCPRESSURE_TORCH_LIB"] = a.lib
    if SMOKE:
        emit({"test": "sync", "skipped": "needs a GPU"})
        return 77
    torch = need_torch_gpu("sync")
    watchdog(300)
    import gcpressure_torch as gcp
    limit = 4 << 30
    gcp.install(hard_limit=limit)
    iters = 100 if a.quick else 300
    x = torch.randn(4096, 4096, device="cuda")
    failures = []
    out = {"test": "sync", "iterations": iters}
    for mode in ("torch.cuda.synchronize", "gcpressure_torch.synchronize"):
        base = gcp.raw_stats()["devices"][0]["gc"]
        t0 = time.perf_counter()
        for _ in range(iters):
            y = x @ x
            Holder(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
            del y
            if mode == "torch.cuda.synchronize":
                torch.cuda.synchronize()
            else:
                gcp.synchronize()
        wall = time.perf_counter() - t0
        g = gcp.raw_stats()["devices"][0]["gc"]
        syncs = g["syncs"] - base["syncs"]
        row = {"mode": mode, "ms_per_iter": wall / iters * 1e3, "syncs": syncs,
               "slack_ms": g["slack_seconds"] * 1e3, "sync_wait_s": g["sync_wait_seconds"] - base["sync_wait_seconds"],
               "hidden_gc_s": g["hidden_gc_seconds"] - base["hidden_gc_seconds"],
               "exposed_gc_s": g["exposed_gc_seconds"] - base["exposed_gc_seconds"],
               "collections": sum(g["by_kind"].values()) - sum(base["by_kind"].values())}
        emit({"test": "sync", **row})
        out[mode] = row
        if syncs < iters:
            failures.append(f"{mode}: {syncs} syncs reached the policy, expected {iters}")
        if not g["slack_seconds"] > 0:
            failures.append(f"{mode}: no slack measured at a GPU-bound sync")
    s = gcp.stats()
    if s["ooms"]:
        failures.append(f"{s['ooms']} OOMs")
    if s["peak_reserved_bytes"] > limit:
        failures.append(f"peak reserved {s['peak_reserved_bytes']} > hard limit {limit}")
    emit({**out, "summary": True, "passed": not failures, "failures": failures, "ooms": s["ooms"],
          "peak_reserved": s["peak_reserved_bytes"], "collections": s["collections"]})
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
