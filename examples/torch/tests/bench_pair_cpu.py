#!/usr/bin/env python3
"""The library's own cost of an allocation + free pair, host backend, no
torch (issue 14, Note [Where the microseconds go]): one native thread runs
gcp_torch_alloc / gcp_torch_free pairs of 4 KiB (gcp_torch_selftest_native:
the path PyTorch's CUDAPluggableAllocator calls, without PyTorch). Each
configuration runs in a fresh process, 3 times; the median ns per pair is
printed, then one profiled run (GCP_TORCH_PROFILE=1: ns per call of each
part; the clock reads themselves inflate those). Configurations: the
pressure policy, explicit_free (a policy whose hook does nothing: the
difference is the pressure policy's per-allocation hook), pressure with
capture_check=off.

    python3 examples/torch/tests/bench_pair_cpu.py --lib build/h7/libgcpressure_torch.so [--pairs N]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))


def child(a) -> None:
    import gcpressure_torch as gcp
    L = gcp.configure(hard_limit="1GiB", backend="host", host_capacity="2GiB", oom="null", lib=a.lib,
                      policy=a.policy, capture_check=a.capture_check)
    L.c.gcp_torch_selftest_native(1, 2000, 4096, 1, 0)  # warm: the segment, the policy's first decisions
    t0 = time.perf_counter()
    bad = L.c.gcp_torch_selftest_native(1, a.pairs, 4096, 1, 0)
    ns = (time.perf_counter() - t0) / a.pairs * 1e9
    prof = gcp.raw_stats()["profile"]
    out = {"ns_per_pair": ns, "failed": bad}
    if prof["enabled"]:
        out["ns_per_call"] = {k: round(v["ns"] / max(1, v["calls"])) for k, v in prof.items() if isinstance(v, dict)}
    print(json.dumps(out))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--pairs", type=int, default=200000)
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--policy", default="pressure")
    ap.add_argument("--capture-check", default="on")
    a = ap.parse_args()
    if a.child:
        child(a)
        return 0
    base = [sys.executable, os.path.abspath(__file__), "--child", "--pairs", str(a.pairs)] + (
        ["--lib", a.lib] if a.lib else [])

    def run(extra, profile=False):
        env = dict(os.environ, GCP_TORCH_PROFILE="1" if profile else "0")
        r = subprocess.run(base + extra, env=env, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise SystemExit(r.stderr[-2000:])
        return json.loads(r.stdout.strip().splitlines()[-1])

    rows = {}
    for name, extra in (("pressure", []), ("explicit_free", ["--policy", "explicit_free"]),
                        ("pressure_capture_check_off", ["--capture-check", "off"])):
        runs = [run(extra) for _ in range(3)]
        assert all(r["failed"] == 0 for r in runs), runs
        rows[name] = round(statistics.median(r["ns_per_pair"] for r in runs))
    prof = run([], profile=True)
    print(json.dumps({"bench": "pair_cpu", "pairs": a.pairs, "ns_per_pair_median": rows,
                      "pressure_hook_ns": rows["pressure"] - rows["explicit_free"],
                      "profiled_ns_per_call": prof.get("ns_per_call")}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
