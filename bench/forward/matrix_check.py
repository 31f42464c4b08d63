#!/usr/bin/env python3
"""The CI matrix: every policy x workload of the forward loop on the host
backend (asynchronous host compute) at one live host heap size, in one
process, and the accounting identities every run must satisfy:

  collector_collections == collections_minor + collections_full + collections_runtime
      (every collection the collector completed - Boehm's GC_get_gc_no delta -
      was started either by the policy or by the runtime itself)
  exposed_gc_seconds <= gc_seconds_all      (exposed time is part of all GC time)
  hidden_gc_seconds  <= gc_seconds          (hidden time is the policy's)
  ooms == 0 under explicit_free             (the oracle never runs out)
  final_live_bytes == model_bytes under explicit_free, but for promote
                                            (the oracle freed every dead array;
                                            promote's ring still holds some)
  peak_live_bytes >= 0.5 x hard_limit under explicit_free/burst once a
      burst ran (the burst step really holds half the hard limit at once)

Usage: matrix_check.py FORWARD_LOOP HEAP_MIB [extra forward_loop flags...]
Exit 0 when every identity holds for every run, 1 otherwise (each failure
named), 2 when forward_loop itself failed. Python 3 standard library only.
"""
import json
import subprocess
import sys

# A small model (about 1 ms per iteration on one core in Release; ~100 ms in
# the Debug sanitizer build), 200 iterations; every run is capped at 6 s of
# loop time (every_iteration collects the whole heap each iteration), and the
# burst workload bursts every 20 iterations so that a capped run still has one.
BURST_EVERY = 20
FLAGS = ["--backend", "host", "--policy", "all", "--workload", "all", "--iters", "200", "--burst-every", str(BURST_EVERY),
         "--hard-limit", "64MiB", "--max-seconds", "6", "--json", "--quiet"]
EPS = 1e-6


def check(run):
    """The identities one run breaks, as messages."""
    bad = []
    started = run["collections_minor"] + run["collections_full"] + run["collections_runtime"]
    if run["collector_collections"] != started:
        bad.append("collector_collections %d != policy minor %d + policy full %d + runtime's own %d" % (
            run["collector_collections"], run["collections_minor"], run["collections_full"],
            run["collections_runtime"]))
    if run["exposed_gc_seconds"] > run["gc_seconds_all"] + EPS:
        bad.append("exposed_gc_seconds %.6f > gc_seconds_all %.6f" % (run["exposed_gc_seconds"], run["gc_seconds_all"]))
    if run["hidden_gc_seconds"] > run["gc_seconds"] + EPS:
        bad.append("hidden_gc_seconds %.6f > gc_seconds %.6f" % (run["hidden_gc_seconds"], run["gc_seconds"]))
    if run["policy"] == "explicit_free" and run["ooms"] != 0:
        bad.append("%d OOM(s) under explicit_free: %s" % (run["ooms"], run["first_oom"]))
    if run["policy"] == "explicit_free" and run["workload"] != "promote" and \
            run["final_live_bytes"] != run["model_bytes"]:
        bad.append("the oracle left %d live bytes after the loop, its model is %d" % (
            run["final_live_bytes"], run["model_bytes"]))
    if run["policy"] == "explicit_free" and run["workload"] == "burst" and run["iterations"] >= BURST_EVERY and \
            run["peak_live_bytes"] < 0.5 * run["hard_limit"]:
        bad.append("burst: peak live %d < half the hard limit %d" % (run["peak_live_bytes"], run["hard_limit"]))
    if run["iterations"] < 1:
        bad.append("no iteration ran")
    return bad


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = [argv[1]] + FLAGS + ["--host-heap-mib", argv[2]] + argv[3:]
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        print("forward_loop failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stderr), file=sys.stderr)
        return 2
    print("%-16s %-8s %6s %6s %5s %5s %6s %8s %8s %8s %5s" % (
        "policy", "workload", "iters", "minor", "full", "rt", "coll", "exposed", "all_gc", "peak_MiB", "ooms"))
    failures = 0
    for run in runs:
        print("%-16s %-8s %6d %6d %5d %5d %6d %8.3f %8.3f %8.1f %5d" % (
            run["policy"], run["workload"], run["iterations"], run["collections_minor"], run["collections_full"],
            run["collections_runtime"], run["collector_collections"], run["exposed_gc_seconds"],
            run["gc_seconds_all"], run["peak_reserved_bytes"] / 2**20, run["ooms"]))
        for msg in check(run):
            failures += 1
            print("  FAIL %s/%s: %s" % (run["policy"], run["workload"], msg))
    expected = 6 * 4
    if len(runs) < expected:
        print("FAIL: %d runs, expected at least %d" % (len(runs), expected))
        return 1
    print("%d runs, %d failure(s)" % (len(runs), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
