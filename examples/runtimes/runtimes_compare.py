#!/usr/bin/env python3
"""The six runtimes side by side: oracle, pressure and the runtime's own mechanism.

    runtimes_compare.py [--build DIR] [--reps N] [--runtimes cpp,lua,...]
                        [--workloads steady,...] [--json-out FILE]

For each runtime (cpp: the C++ loop over Boehm; lua, guile, python, node,
dotnet) and each workload (steady, promote, burst, varied) it runs the
runtime's forward loop on the host backend under three policies, N times
each (default 3), interleaved (oracle, pressure, native; then again):
  explicit_free   the oracle: every array freed the moment it dies;
  pressure        the library's policy driving the runtime's collector;
  runtime_native  the runtime's own mechanism alone (V8
                  napi_adjust_external_memory, .NET GC.AddMemoryPressure,
                  Guile scm_gc_register_allocation, Lua LUA_GCSTEP by the
                  allocation's KiB, CPython gc.collect() every iteration,
                  bdwgc its own allocation pace); the library asks for no
                  collection.
The sizes are those of each runtime's ctest oracle_* tests (nothing here is
tuned to a policy). It prints one table: the oracle's median peak reserved,
each policy's median peak and time per iteration as ratios to the oracle's,
and the OOMs of all runs (total over the reps, and the earliest iteration
of a first OOM), after the range of the 1-minute load average over the
runs (each run's JSON keeps its own, before and after). The last line is the summary as JSON; --json-out writes
every run's own JSON too. Exit 0 unless a loop failed to run (2).
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
ROOT = os.path.dirname(os.path.dirname(HERE))
POLICIES = ["explicit_free", "pressure", "runtime_native"]
WORKLOADS = ["steady", "promote", "burst", "varied"]


def loops(build: str) -> dict:
    """runtime -> (command, env, {workload: extra args}); the sizes of the ctest oracle_* tests."""
    lib_dir = os.path.join(build, "gc_bridge")
    ctest = {w: ["--workload", w, "--iters", "300", "--hard-limit", "16MiB"] for w in ("steady", "burst", "varied")}
    ctest["promote"] = ["--workload", "promote", "--iters", "400", "--hard-limit", "32MiB"]
    guile = {w: a[:2] + ["--iters", "250"] + a[4:] for w, a in ctest.items()}
    py = {w: ["--workload", w, "--iters", "300"] for w in ("steady", "burst", "varied")}
    py["promote"] = ["--workload", "promote", "--iters", "400", "--hard-limit", "128MiB"]
    # .NET: its tests' smaller model (Mono's JIT computes ~1 GFLOP/s here):
    # d 32, batch 512 (64 KiB arrays) through 4 MiB; promote keeps ~3.2 MiB
    # alive (0.25 x 8 x 25.5 x 64 KiB): 8 MiB, the other loops' ratio.
    small = ["--d", "32", "--batch", "512", "--host-heap-mib", "32"]
    dn = {w: ["--workload", w, "--iters", "300", "--hard-limit", "4MiB"] + small for w in ("steady", "burst", "varied")}
    dn["promote"] = ["--workload", "promote", "--iters", "400", "--hard-limit", "8MiB"] + small
    heap32 = ["--host-heap-mib", "32"]
    return {
        "cpp": ([os.path.join(build, "examples", "forward_loop"), "--backend", "host", "--json", "--quiet"] + heap32,
                {}, ctest),
        "lua": (["lua5.4", os.path.join(HERE, "lua", "forward_loop.lua"), "--backend", "host", "--json", "--quiet"]
                + heap32, {"LUA_CPATH_5_4": os.path.join(build, "examples", "runtimes", "lua", "?.so")}, ctest),
        "guile": ([os.path.join(build, "examples", "runtimes", "guile", "guile-gcpressure"),
                   os.path.join(HERE, "guile", "forward_loop.scm"), "--backend", "host", "--json", "--quiet"], {}, guile),
        "python": ([sys.executable, os.path.join(HERE, "python", "forward_loop.py"), "--lib",
                    os.path.join(lib_dir, "libgcpressure.so"), "--quiet", "--backend", "host"], {}, py),
        "node": (["node", os.path.join(HERE, "node", "forward_loop.js"), "--backend", "host", "--json", "--quiet"]
                 + heap32, {"GCP_NODE_ADDON": os.path.join(build, "examples", "runtimes", "node", "gcpressure.node")},
                 ctest),
        "dotnet": (["mono", os.path.join(build, "examples", "runtimes", "dotnet", "gcpressure_dotnet.exe"), "forward",
                    "--backend", "host", "--json", "--quiet"], {"LD_LIBRARY_PATH": lib_dir}, dn),
    }


def loadavg() -> float:
    """The 1-minute load average (this machine's cores are shared: times depend on it)."""
    try:
        with open("/proc/loadavg") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def run_one(cmd: list, env: dict) -> dict:
    load0 = loadavg()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=dict(os.environ, **env))
    lines = [ln for ln in p.stdout.strip().splitlines() if ln.startswith("{") or ln.startswith("[")]
    if not lines:
        sys.exit(f"runtimes_compare.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    r = json.loads(lines[-1])
    if isinstance(r, list):  # the C++ loop prints a list of runs
        r = r[0]
    r["_rc"] = p.returncode
    r["_loadavg"] = [load0, loadavg()]  # 1-minute load average before and after the run
    return r


def cell(runs: list, oracle: dict) -> dict:
    peak = statistics.median(r["peak_reserved_bytes"] for r in runs)
    t = statistics.median(r["time_per_iter"] for r in runs)
    firsts = [r.get("first_oom_iteration") for r in runs if r.get("first_oom_iteration") is not None]
    return {"peak_reserved_bytes": peak, "time_per_iter": t,
            "peak_ratio": peak / oracle["peak_reserved_bytes"] if oracle["peak_reserved_bytes"] else None,
            "time_ratio": t / oracle["time_per_iter"] if oracle["time_per_iter"] else None,
            "ooms": sum(r["ooms"] for r in runs), "runs_with_ooms": sum(1 for r in runs if r["ooms"]),
            "first_oom_iteration": min(firsts) if firsts else None,
            "peak_spread": [min(r["peak_reserved_bytes"] for r in runs), max(r["peak_reserved_bytes"] for r in runs)],
            "time_spread": [min(r["time_per_iter"] for r in runs), max(r["time_per_iter"] for r in runs)],
            "loadavg": [min(r["_loadavg"][0] for r in runs), max(r["_loadavg"][1] for r in runs)]}


def ooms_text(c: dict) -> str:
    return "0" if not c["ooms"] else f"{c['ooms']} ({c['runs_with_ooms']} runs, first @{c['first_oom_iteration']})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build", "release"))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--runtimes", default="cpp,lua,guile,python,node,dotnet")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--json-out", default=None, help="every run's JSON, one object per line")
    a = ap.parse_args()
    table = loops(os.path.abspath(a.build))
    raw = open(a.json_out, "w") if a.json_out else None
    summary = []
    t0 = time.time()
    for rt in a.runtimes.split(","):
        base, env, sizes = table[rt]
        for w in a.workloads.split(","):
            runs = {p: [] for p in POLICIES}
            for rep in range(a.reps):
                for pol in POLICIES:
                    cmd = base + sizes[w] + ["--policy", pol]
                    r = run_one(cmd, env)
                    runs[pol].append(r)
                    if raw:
                        raw.write(json.dumps({"runtime": rt, "workload": w, "policy": pol, "rep": rep,
                                              "command": cmd, "result": r}, separators=(",", ":")) + "\n")
                        raw.flush()
            oracle = cell(runs["explicit_free"], {"peak_reserved_bytes": 0, "time_per_iter": 0})
            row = {"runtime": rt, "workload": w, "reps": a.reps,
                   "hard_limit": runs["pressure"][0].get("hard_limit_bytes", runs["pressure"][0].get("hard_limit")),
                   "oracle": oracle, "pressure": cell(runs["pressure"], oracle),
                   "runtime_native": cell(runs["runtime_native"], oracle)}
            summary.append(row)
            print(f"[{time.time() - t0:6.0f} s] {rt}/{w} done", file=sys.stderr, flush=True)
    hdr = ("| runtime | workload | limit MiB | oracle peak MiB | pressure peak ÷ oracle | native peak ÷ oracle "
           "| pressure time ÷ oracle | native time ÷ oracle | oracle ms/iter | OOMs pressure | OOMs native |")
    loads = [x for row in summary for k in ("oracle", "pressure", "runtime_native") for x in row[k]["loadavg"]]
    print(f"1-minute load average over the runs: {min(loads):.1f}-{max(loads):.1f} on {os.cpu_count()} CPUs\n")
    print(hdr)
    print("|" + "|".join(["---"] * (hdr.count("|") - 1)) + "|")
    for row in summary:
        o, p, n = row["oracle"], row["pressure"], row["runtime_native"]
        print(f"| {row['runtime']} | {row['workload']} | {row['hard_limit'] / 2**20:.0f} | "
              f"{o['peak_reserved_bytes'] / 2**20:.1f} | {p['peak_ratio']:.2f} | {n['peak_ratio']:.2f} | "
              f"{p['time_ratio']:.2f} | {n['time_ratio']:.2f} | {o['time_per_iter'] * 1e3:.2f} | "
              f"{ooms_text(p)} | {ooms_text(n)} |"
              + ("" if not o["ooms"] else f" (oracle OOMs: {ooms_text(o)})"))
    print(json.dumps(summary, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
