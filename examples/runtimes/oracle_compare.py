#!/usr/bin/env python3
"""Runs one runtime's forward loop twice, under the oracle and under a policy,
and reports peak reserved and time per iteration as ratios to the oracle.

    oracle_compare.py [--reps N] [--max-peak-ratio X] -- CMD ARG... --policy P ARG...

CMD is a forward loop of examples/runtimes (Lua, Guile or CPython) whose last
line of output is its JSON summary. The oracle run is the same command with
`--policy explicit_free` (each array freed the moment it dies). With --reps N
both runs are repeated N times and the medians are reported with their
min-max spread.

Asserts (exit 1 otherwise): every oracle run has zero OOMs; every policy run
has zero OOMs and a peak reserved within the hard limit (a bounded peak);
every run, the oracle's too, exits 0 (the loop's own --check /
--assert-bounded held).
--max-peak-ratio X also asserts the median peak ratio is at most X (off by
default: the ratio is a measurement, not a pass mark). Exit 77 when a run
exits 77 (backend not available here; only a test of a GPU backend may treat
that as a skip: the host-backend tests have no SKIP_RETURN_CODE). The last line printed is one JSON
object: the two medians, the ratios and the spreads.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def with_policy(cmd: list[str], policy: str) -> list[str]:
    out = list(cmd)
    if "--policy" in out:
        i = out.index("--policy")
        out[i + 1] = policy
    else:
        out += ["--policy", policy]
    return out


def run(cmd: list[str]) -> dict:
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode == 77:
        print(f"oracle_compare.py: skipped: {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        sys.exit(77)
    lines = [ln for ln in p.stdout.strip().splitlines() if ln.startswith("{")]
    if p.returncode not in (0, 1) or not lines:
        sys.exit(f"oracle_compare.py: {' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    r = json.loads(lines[-1])
    r["_rc"] = p.returncode
    r["_stderr"] = p.stderr
    return r


def hard_limit(r: dict) -> int:
    return r.get("hard_limit_bytes", r.get("hard_limit", 0))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--max-peak-ratio", type=float, default=0.0)
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    if not cmd or "--policy" not in cmd:
        ap.error("give the loop's command after --, with --policy P")
    policy = cmd[cmd.index("--policy") + 1]
    oracle_runs, policy_runs = [], []
    for _ in range(a.reps):
        oracle_runs.append(run(with_policy(cmd, "explicit_free")))
        policy_runs.append(run(cmd))

    fails = []
    for r in oracle_runs:
        if r["ooms"]:
            fails.append(f"oracle: {r['ooms']} OOMs (the workload's live set does not fit the hard limit)")
        if r["_rc"]:
            # The oracle run gets the same --check / --assert-bounded as the
            # policy run: its failure is the comparison's failure too.
            fails.append(f"oracle: the loop's own check failed:\n{r['_stderr']}")
    for r in policy_runs:
        if r["ooms"]:
            fails.append(f"{policy}: {r['ooms']} OOMs")
        if r["peak_reserved_bytes"] > hard_limit(r):
            fails.append(f"{policy}: peak reserved {r['peak_reserved_bytes']} > hard limit {hard_limit(r)}")
        if r["_rc"]:
            fails.append(f"{policy}: the loop's own check failed:\n{r['_stderr']}")

    def med(runs, key):
        v = [r[key] for r in runs]
        return statistics.median(v), min(v), max(v)

    po, lo_o, hi_o = med(oracle_runs, "peak_reserved_bytes")
    pp, lo_p, hi_p = med(policy_runs, "peak_reserved_bytes")
    to, lo_to, hi_to = med(oracle_runs, "time_per_iter")
    tp, lo_tp, hi_tp = med(policy_runs, "time_per_iter")
    out = {
        "runtime": policy_runs[0].get("runtime"), "policy": policy, "workload": policy_runs[0].get("workload", "steady"),
        "reps": a.reps, "hard_limit": hard_limit(policy_runs[0]),
        "oracle_peak_reserved_bytes": po, "oracle_peak_spread": [lo_o, hi_o],
        "peak_reserved_bytes": pp, "peak_spread": [lo_p, hi_p],
        "peak_ratio_to_oracle": pp / po if po else None,
        "oracle_time_per_iter": to, "oracle_time_spread": [lo_to, hi_to],
        "time_per_iter": tp, "time_spread": [lo_tp, hi_tp], "time_ratio_to_oracle": tp / to if to else None,
        "ooms": sum(r["ooms"] for r in policy_runs), "oracle_ooms": sum(r["ooms"] for r in oracle_runs),
    }
    if a.max_peak_ratio and out["peak_ratio_to_oracle"] and out["peak_ratio_to_oracle"] > a.max_peak_ratio:
        fails.append(f"peak ratio {out['peak_ratio_to_oracle']:.2f} > {a.max_peak_ratio}")
    for f in fails:
        print(f"oracle_compare.py: FAILED: {f}", file=sys.stderr)
    print(f"{out['runtime']} {policy}/{out['workload']}: peak {pp / 2**20:.1f} MiB = "
          f"{out['peak_ratio_to_oracle'] or 0:.2f}x the oracle's {po / 2**20:.1f} MiB, time/iter "
          f"{out['time_ratio_to_oracle'] or 0:.2f}x", file=sys.stderr)
    print(json.dumps(out, separators=(",", ":")))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
