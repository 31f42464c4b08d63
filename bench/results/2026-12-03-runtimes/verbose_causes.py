#!/usr/bin/env python3
"""Why each pressure collection ran, what it cost, and how much was exposed.

    BUILD=build/release verbose_causes.py OUT RUNTIMES WORKLOADS [VAR=VALUE ...]

Runs each runtime's forward loop (the sizes of runtimes_compare.py) once
under --policy pressure (POLICY=... for another) with GCPRESSURE_VERBOSE=1
and any extra variables given; writes OUT/RUNTIME-WORKLOAD.{json,err} and
prints one line per run: peak, time per iteration, the collections by kind
and reason, their median cost, exposed and hidden time from the verbose
lines, and the median lag and slack the policy saw."""
import collections
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(ROOT, "examples", "runtimes"))
import runtimes_compare as rc  # noqa: E402

out, rts, wls = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(",")
extra_env = dict(kv.split("=", 1) for kv in sys.argv[4:])
table = rc.loops(os.path.abspath(os.environ.get("BUILD", os.path.join(ROOT, "build", "release"))))
os.makedirs(out, exist_ok=True)
med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
for rt in rts:
    base, env, sizes = table[rt]
    for w in wls:
        cmd = base + sizes[w] + ["--policy", os.environ.get("POLICY", "pressure")]
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env=dict(os.environ, **env, GCPRESSURE_VERBOSE="1", **extra_env))
        tag = f"{rt}-{w}" + "".join(f"-{k}={v}" for k, v in extra_env.items())
        with open(f"{out}/{tag}.err", "w") as f:
            f.write(p.stderr)
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{") or ln.startswith("[")]
        r = json.loads(lines[-1])
        r = r[0] if isinstance(r, list) else r
        with open(f"{out}/{tag}.json", "w") as f:
            json.dump({"command": cmd, "env": extra_env, "result": r}, f)
        done = re.findall(r"(\w+) collection \((\w+)\) ([0-9.]+) ms", p.stderr)
        reasons = collections.Counter(f"{k}({why})" for k, why, _ in done)
        costs = collections.defaultdict(list)
        for k, _, ms in done:
            costs[k].append(float(ms))
        hidden = sum(float(x) for x in re.findall(r"([0-9.]+) ms hidden", p.stderr))
        exposed = sum(float(x) for x in re.findall(r"([0-9.]+) ms exposed", p.stderr))
        lags = [float(x) for x in re.findall(r"lag ([0-9.]+) us", p.stderr)]
        slacks = [float(x) for x in re.findall(r"slack ([0-9.]+) ms", p.stderr)]
        wall_ms = r["wall_seconds"] * 1e3
        print(f"{tag}: peak {r['peak_reserved_bytes'] / 2**20:.1f} MiB, {r['time_per_iter'] * 1e3:.2f} ms/iter, "
              f"ooms {r['ooms']}, collections {dict(reasons)}, median cost "
              + ", ".join(f"{k} {med(v):.3f} ms (n={len(v)})" for k, v in costs.items())
              + f", exposed {exposed:.1f} ms, hidden {hidden:.1f} ms of {wall_ms:.0f} ms wall "
              f"({100 * exposed / wall_ms:.1f}% exposed), median lag {med(lags)} us, median slack {med(slacks)} ms",
              flush=True)
