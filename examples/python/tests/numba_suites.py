#!/usr/bin/env python3
"""numba-cuda's `cudadrv` and `cudapy` groups with and without gcpressure.numba
(issue 22's "Done when"), in parallel, as one JSON file.

Each (mode, module) pair is one process of numba_suite.py (which installs
the filecheck stand-in, shows import errors with their traceback and
reports the counts even when stopped at its limit), so a module that hangs
or crashes loses itself only. The pairs are interleaved, mode by mode, so
both modes have run the same modules when the deadline stops the rest;
`both_complete` counts only the modules that finished in both modes.

    python3 numba_suites.py --out DIR [--groups cudadrv,cudapy] [--procs 12]
        [--module-timeout 120] [--deadline 300]
DIR/numba_suites.json: per mode ran/failures/errors/skipped, failing test
names, import errors, modules not finished; DIR/numba/<mode>/<module>.{json,stderr}.
Exit status: 0 when both modes ran with no failure, error or import error.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "numba_suite.py")
MODES = {"default": {}, "gcpressure": {"NUMBA_CUDA_MEMORY_MANAGER": "gcpressure.numba"}}
COUNTS = ("ran", "failures", "errors", "skipped_tests", "expected_failures", "skipped_filecheck")


def list_modules(groups, env):
    p = subprocess.run([sys.executable, SUITE, "--modules", "", "--all-of", groups, "--list"],
                       capture_output=True, text=True, env=env, timeout=120)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return None, p.stdout[-2000:] + p.stderr[-3000:]
    return json.loads(lines[-1]), p.stderr[-3000:]


def launch(mode, mod, args, base_env):
    d = os.path.join(args.out, "numba", mode)
    os.makedirs(d, exist_ok=True)
    env = dict(base_env, **MODES[mode])
    if mode == "gcpressure":
        env.setdefault("GCPRESSURE_HARD_LIMIT", args.limit)
    out = open(os.path.join(d, mod + ".json"), "w")
    err = open(os.path.join(d, mod + ".stderr"), "w")
    p = subprocess.Popen([sys.executable, SUITE, "--modules", mod], stdout=out, stderr=err, env=env)
    return {"p": p, "mode": mode, "mod": mod, "t0": time.monotonic(), "files": (out, err), "dir": d}


def finish(job, timed_out):
    for f in job["files"]:
        f.close()
    path = os.path.join(job["dir"], job["mod"] + ".json")
    lines = [ln for ln in open(path) if ln.startswith("{")]
    res = json.loads(lines[-1]) if lines else {}
    res.update(rc=job["p"].returncode, seconds_wall=round(time.monotonic() - job["t0"], 1))
    if timed_out:
        res["timed_out"] = True
    if not lines:  # crashed or killed before its JSON line: its stderr's tail says why
        res["no_result"] = open(os.path.join(job["dir"], job["mod"] + ".stderr")).read()[-1500:]
    return res


def run_all(pairs, args, env, deadline):
    """Runs the pairs --procs at a time; a pair past --module-timeout gets a
    SIGTERM (numba_suite.py then reports what it ran), 10 s later a SIGKILL;
    at the deadline every running pair is stopped so and no new one starts."""
    results, running, todo = {}, [], list(pairs)
    while todo or running:
        now = time.monotonic()
        while todo and len(running) < args.procs and now < deadline:
            running.append(launch(*todo.pop(0), args, env))
        for j in list(running):
            limit = min(j["t0"] + args.module_timeout, deadline)
            if j["p"].poll() is None and now > limit:
                if "term" not in j:
                    j["p"].terminate()
                    j["term"] = now
                elif now > j["term"] + 10:
                    j["p"].kill()
            if j["p"].poll() is not None:
                running.remove(j)
                results[(j["mode"], j["mod"])] = finish(j, "term" in j)
        if not running and now >= deadline:
            break
        time.sleep(0.2)
    return results, todo


def summarise(results, modules, not_started):
    s = {}
    done_in = {m: {mm for (mm, mod), r in results.items() if mod == m and r.get("ran") is not None
                   and not r.get("interrupted") and not r.get("timed_out")} for m in modules}
    both = [m for m in modules if done_in[m] == set(MODES)]
    for mode in MODES:
        rows = {mod: r for (mm, mod), r in results.items() if mm == mode}
        tot = {k: sum(r.get(k, 0) or 0 for r in rows.values()) for k in COUNTS}
        tot_both = {k: sum(rows[m].get(k, 0) or 0 for m in both) for k in COUNTS}
        s[mode] = {
            "modules_run": len(rows), "totals": tot, "totals_modules_complete_in_both": tot_both,
            "failing": {m: r["failed_names"] for m, r in rows.items() if r.get("failed_names")},
            "import_errors": {m: e for r in rows.values() for m, e in r.get("import_errors", {}).items()},
            "stopped_at_limit": sorted(m for m, r in rows.items() if r.get("interrupted") or r.get("timed_out")),
            "no_result": {m: r["no_result"] for m, r in rows.items() if "no_result" in r},
            "missing": sorted({x for r in rows.values() for x in r.get("missing", [])}),
            "not_started": sorted(m for mm, m in not_started if mm == mode),
            "manager_in_use": sorted({r["manager_in_use"] for r in rows.values() if "manager_in_use" in r}),
        }
    s["modules_complete_in_both"] = len(both)
    return s


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--groups", default="cudadrv,cudapy")
    ap.add_argument("--procs", type=int, default=12)
    ap.add_argument("--module-timeout", type=float, default=120)
    ap.add_argument("--deadline", type=float, default=300, help="seconds from start: no module starts later")
    ap.add_argument("--limit", default="8GiB", help="GCPRESSURE_HARD_LIMIT of the plug-in's processes")
    a = ap.parse_args()
    t0 = time.monotonic()
    os.makedirs(a.out, exist_ok=True)
    env = dict(os.environ)
    listing, err = list_modules(a.groups, env)
    res = {"test": "numba_suites", "groups": a.groups, "procs": a.procs, "module_timeout": a.module_timeout}
    if listing is None or not listing.get("modules"):
        res.update(listed=listing, list_stderr=err, skipped="no test module found (or the listing failed)")
        json.dump(res, open(os.path.join(a.out, "numba_suites.json"), "w"), indent=1)
        print(json.dumps(res), flush=True)
        return 77
    mods = listing["modules"]
    pairs = [(mode, m) for m in mods for mode in MODES]
    results, not_started = run_all(pairs, a, env, t0 + a.deadline)
    res.update(numba=listing.get("numba"), numba_cuda_file=listing.get("numba_cuda_file"), modules=len(mods),
               seconds=round(time.monotonic() - t0, 1), **summarise(results, mods, not_started))
    res["per_module"] = {f"{mm}:{m}": {k: r.get(k) for k in COUNTS + ("rc", "seconds_wall", "interrupted")}
                         for (mm, m), r in sorted(results.items())}
    json.dump(res, open(os.path.join(a.out, "numba_suites.json"), "w"), indent=1)
    brief = {k: v for k, v in res.items() if k != "per_module"}
    for mode in MODES:  # the one line: counts and names, not tracebacks (those are in the file)
        brief[mode] = {k: v for k, v in res[mode].items() if k not in ("import_errors", "no_result")}
        brief[mode]["import_errors"] = sorted(res[mode]["import_errors"])
        brief[mode]["no_result"] = sorted(res[mode]["no_result"])
    print(json.dumps(brief), flush=True)
    bad = any(res[m]["totals"]["failures"] or res[m]["totals"]["errors"] or res[m]["import_errors"]
              or res[m]["no_result"] or res[m]["not_started"] for m in MODES)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
