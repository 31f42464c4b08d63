#!/usr/bin/env python3
"""bench_cycles.py end to end against the CuPy stand-in (fakes/) on the host
backend, as h200_python.sh runs it on the GPU: each variant once at a tenth
of its iterations, with the defaults and with freeze=False (generational
minors), and probe_gc_cost.py once. Fails if a run exits non-zero, a variant is missing from the
summary, a run ran out of memory, or a figure the GPU run reports is absent.
No figure is checked against a target here (the host backend's loop has no
device time; the figures belong to the H200)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
VARIANTS = "c2_4,c2_64,c2_512,c100_8x8,thread_c2_64,ring,acyclic_64,hinted_c2_64,pair"
HOST = {"backend": "host", "host_capacity": "5GiB", "cupy": None}

ap = argparse.ArgumentParser()
ap.add_argument("--lib", required=True)
a = ap.parse_args()
env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(HERE, "fakes"), os.path.dirname(HERE)]),
           GCPRESSURE_TORCH_LIB=a.lib)
bad = []
# The defaults (Note [Choosing the minor's generation]) and the control h200_python.sh runs beside
# them: freeze=False, whose auto minors are generational (the package's defaults before 22bb5a5).
# And --freeze-after-setup, the diagnostic step h200_python.sh runs for Numba.
for name, extra, flags in (("default", {}, []), ("young", {"freeze": False}, []),
                           ("frozen_after_setup", {}, ["--freeze-after-setup"]),
                           # Note [Freezing again after the heap grew]: 200k long-lived objects after set-up
                           ("grown_heap", {}, ["--grow-heap", "200000"])):
    cmd = [sys.executable, os.path.join(HERE, "bench_cycles.py"), "--framework", "cupy", "--mode", "gcpressure",
           "--reps", "1", "--scale", "0.1", "--variants", VARIANTS, "--options", json.dumps({**HOST, **extra})] + flags
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")]
    summary = next((x for x in lines if x.get("summary")), None)
    if p.returncode != 0 or summary is None:
        bad.append(f"{name}: rc {p.returncode}, no summary: {p.stderr[-1500:]}")
        continue
    if name == "grown_heap" and (summary.get("refreeze") or {}).get("done", 0) < 1:
        bad.append(f"grown_heap: the grown heap was not frozen again: {summary.get('refreeze')}")
    for v in VARIANTS.split(","):
        if v not in summary:
            bad.append(f"{name}: variant {v} missing from the summary")
        elif v != "pair" and (summary[v]["ooms"] or "peak_reserved_median" not in summary[v]):
            bad.append(f"{name}: {v}: {summary[v]}")
    runs = [x for x in lines if not x.get("summary") and x["variant"] not in ("pair", "acyclic_64")]
    if any("peak_over_live" not in r or "gcpressure_collections" not in r or "peak_live_bytes" not in r for r in runs):
        bad.append(f"{name}: a run lacks peak_over_live, peak_live_bytes or its collections")
    print(name, {v: round(summary[v].get("peak_over_live_median", 0), 1) for v in VARIANTS.split(",")
                 if v in summary and "peak_over_live_median" in summary[v]}, flush=True)
# probe_gc_cost.py, as h200_python.sh runs it: one JSON line with every figure RESULTS.md's bounds use.
p = subprocess.run([sys.executable, os.path.join(HERE, "probe_gc_cost.py"), "--framework", "cupy", "--options",
                    json.dumps(HOST)], env=env, capture_output=True, text=True, timeout=120)
probe = next((json.loads(x) for x in p.stdout.splitlines() if x.startswith("{")), None)
keys = ("collect_us", "collect_unfrozen_us", "free_per_iter_us", "policy_every_allocation", "heap")
if p.returncode != 0 or probe is None or any(k not in probe for k in keys) or "P1_us" not in probe[keys[3]]:
    bad.append(f"probe_gc_cost: rc {p.returncode}: {p.stdout[-800:]} {p.stderr[-1500:]}")
else:
    print("probe", {k: probe[k] for k in ("collect_us", "policy_every_allocation")}, flush=True)
print("\n".join(bad) if bad else "ok")
sys.exit(1 if bad else 0)
