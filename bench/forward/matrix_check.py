#!/usr/bin/env python3
"""The CI matrix: every policy x workload of the forward loop on the host
backend (asynchronous host compute) at one live host heap size, in one
process, and the accounting identities every run must satisfy:

  collector_collections == collections_minor + collections_full + collections_runtime
      (every collection the collector completed - Boehm's GC_get_gc_no delta -
      was started either by the policy or by the runtime itself)
  exposed_gc_seconds <= gc_seconds_all      (exposed time is part of all GC time)
  hidden_gc_seconds  <= gc_seconds          (hidden time is the policy's)
  0 <= exposed_gc_seconds_untimed <= exposed_gc_seconds  (the part counted whole)
  0 <= exposed_gc_seconds_charged <= gc_seconds_all  (the budget's count, from the
      probe's upper bound less what the lag is known to have hidden: it may
      exceed the measured exposed time, never all GC time)
  ooms == 0 under explicit_free             (the oracle never runs out)
  final_live_bytes == model_bytes under explicit_free, but for promote
                                            (the oracle freed every dead array;
                                            promote's ring still holds some)
  peak_live_bytes >= 0.5 x hard_limit under explicit_free/burst once a
      burst ran (the burst step really holds half the hard limit at once)
  0 <= peak_reserved_iteration <= iterations, and under explicit_free/burst
      once a burst ran it is a burst's iteration (a multiple of the period:
      the key says where the peak was set)
  syncs == device_count x ceil(iterations / K) with --sync-every K (K = 0:
      device_count; the loop waits every K iterations and after the last)
  iterations == --iters, or, for a run cut short by --max-seconds S after
      C seconds of CPU, at least 10 C / S of them (Note [A floor for cut runs])

Extra flags such as --sync-every 8 (issue 20: the host runs up to 8
iterations ahead of the device) are passed to forward_loop.

With --devices N (N > 1; issue 14) the same runs use N replicas of the model
on N simulated devices under one policy, with fewer iterations
(DEVICE_FLAGS), and each run must also satisfy, besides the identities above:

  ooms == 0 for every policy, on every device
  every device's peak_live_bytes and peak_reserved_bytes <= its hard_limit
  device_count == N, one "devices" entry per device, ordinals 0..N-1
  peak_*_bytes == the maximum over the devices; allocations, finalized and
      ooms == the totals over the devices (Note [Figures over several devices])
  reclaimed_bytes > 0 on every device under pressure once each replica has
      allocated more than its device's hard limit (always, unless a slow
      build was stopped early by --max-seconds; one collector frees every
      device's garbage)
  under explicit_free, but for promote: every device's final_live_bytes is
      its replica's model (model_bytes / N)

Usage: matrix_check.py FORWARD_LOOP HEAP_MIB [--devices N] [extra forward_loop flags...]
Exit 0 when every identity holds for every run, 1 otherwise (each failure
named), 2 when forward_loop itself failed. Python 3 standard library only.
"""
import json
import subprocess
import sys

# A small model (about 1 ms per iteration on one core in Release; ~100 ms in
# the Debug sanitizer build), 200 iterations; every run is capped at 6 s of
# loop time (every_iteration collects the whole heap each iteration), and the
# burst workload bursts every 20 iterations so that a capped run of 20 or more
# still has one (the burst check needs one).
BURST_EVERY = 20
FLAGS = ["--backend", "host", "--policy", "all", "--workload", "all", "--iters", "200", "--burst-every", str(BURST_EVERY),
         "--hard-limit", "64MiB", "--max-seconds", "6", "--json", "--quiet"]
# With --devices N: N replicas, so each iteration costs N times as much on the
# host backend; 40 iterations (two bursts) and 3 s per run keep the matrix
# short on a loaded machine. An 8 MiB hard limit is passed through in 40
# iterations (256 KiB per device per iteration), and no small host garbage
# means the runtime's own collections do not free the device garbage first:
# the policy must collect, so each device's reclaimed bytes show it.
DEVICE_FLAGS = ["--iters", "40", "--max-seconds", "3", "--hard-limit", "8MiB", "--host-allocs", "0"]
EPS = 1e-6

# Note [A floor for cut runs]
# --max-seconds S caps a run of N iterations (S/N = 30 ms an iteration here,
# 75 ms over devices; Release takes about 1 ms): a slow build is cut short and
# its run checked over the iterations it did. A cut run must still mean
# something: an iteration may cost at most a tenth of S of the process's CPU
# time on average (0.6 s here, 0.3 s over devices), so a run that got C CPU
# seconds must have done at least 10 C / S iterations (10 when it had a core
# all along). CPU, not wall time: on a loaded machine the process gets a
# share of a core and a wall-time floor fails a healthy run (measured: 8 of
# 40 over 2 devices in 3.8 s of wall but 1.36 s of CPU, 0.17 s each; 9 of 200
# at a 256 MiB host heap under every_iteration, 0.31 s each; Debug + ASan/UBSan,
# 2 cores, load average ~9). What it does not catch: a run stalled without
# using the CPU (waiting); the iteration count alone cannot tell that from a
# starved one.
MAX_CPU_SHARE_PER_ITERATION = 0.1


def min_iterations(run, max_seconds):
    """The fewest iterations a run may have done: all of them, unless cut."""
    n = run["iterations_requested"]
    if not run["stopped_early"]:
        return n
    return min(n, max(1, int(run["cpu_seconds"] / (MAX_CPU_SHARE_PER_ITERATION * max_seconds))))


def check(run, max_seconds):
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
    charged = run["exposed_gc_seconds_charged"]
    if charged < -EPS or charged > run["gc_seconds_all"] + EPS:
        bad.append("exposed_gc_seconds_charged %.6f outside [0, gc_seconds_all %.6f]" % (charged, run["gc_seconds_all"]))
    untimed = run["exposed_gc_seconds_untimed"]
    if untimed < -EPS or untimed > run["exposed_gc_seconds"] + EPS:
        bad.append("exposed_gc_seconds_untimed %.6f outside [0, exposed_gc_seconds %.6f]"
                   % (untimed, run["exposed_gc_seconds"]))
    if run["policy"] == "explicit_free" and run["ooms"] != 0:
        bad.append("%d OOM(s) under explicit_free: %s" % (run["ooms"], run["first_oom"]))
    if run["policy"] == "explicit_free" and run["workload"] != "promote" and \
            run["final_live_bytes"] != run["model_bytes"]:
        bad.append("the oracle left %d live bytes after the loop, its model is %d" % (
            run["final_live_bytes"], run["model_bytes"]))
    if run["policy"] == "explicit_free" and run["workload"] == "burst" and run["iterations"] >= BURST_EVERY and \
            run["peak_live_bytes"] < 0.5 * run["hard_limit"]:
        bad.append("burst: peak live %d < half the hard limit %d" % (run["peak_live_bytes"], run["hard_limit"]))
    pit = run["peak_reserved_iteration"]
    if pit < 0 or pit > run["iterations"]:
        bad.append("peak_reserved_iteration %d outside [0, %d]" % (pit, run["iterations"]))
    if run["policy"] == "explicit_free" and run["workload"] == "burst" and run["iterations"] >= BURST_EVERY and \
            pit % BURST_EVERY != 0:
        bad.append("burst: the oracle's peak set at iteration %d, not at a burst (every %d)" % (pit, BURST_EVERY))
    floor = min_iterations(run, max_seconds)
    if run["iterations"] < floor:
        bad.append("%d of %d iterations%s; at least %d must run (Note [A floor for cut runs])" % (
            run["iterations"], run["iterations_requested"],
            " (cut short by --max-seconds %g after %.2f s of CPU)" % (max_seconds, run["cpu_seconds"])
            if run["stopped_early"] else "", floor))
    k, n = run["sync_every"], run["iterations"]
    points = (n + k - 1) // k if k > 0 else 1
    if run["hint_before_sync"] and n >= 1 and run["syncs"] != run["device_count"] * points:
        bad.append("syncs %d, expected %d x %d sync points at --sync-every %d over %d iterations" % (
            run["syncs"], run["device_count"], points, k, n))
    return bad


def check_devices(run, n):
    """What one run over n devices breaks, as messages."""
    devs = run.get("devices", [])
    if run.get("device_count") != n or len(devs) != n:
        return ["device_count %s and %d device entries, expected %d" % (run.get("device_count"), len(devs), n)]
    bad = []
    if [d["device"] for d in devs] != list(range(n)):
        bad.append("device ordinals %s, expected 0..%d" % ([d["device"] for d in devs], n - 1))
    # runtime_native is the runtime's own mechanism alone (bdwgc's pace here):
    # running out is the finding it exists to show, not a failure.
    may_oom = run["policy"] == "runtime_native"
    if run["ooms"] != 0 and not may_oom:
        bad.append("%d OOM(s): %s" % (run["ooms"], run["first_oom"]))
    for key, combine in (("peak_live_bytes", max), ("peak_reserved_bytes", max), ("allocations", sum),
                         ("finalized", sum), ("ooms", sum)):
        if run[key] != combine(d[key] for d in devs):
            bad.append("%s %d is not the %s over the devices %s" % (
                key, run[key], combine.__name__, [d[key] for d in devs]))
    # Each replica allocates the same: once that is more than a device's hard
    # limit, the policy must have collected and so reclaimed on every device.
    allocated = run["bytes_per_iteration"] * run["iterations"] // n
    for d in devs:
        where = "device %d: " % d["device"]
        if d["ooms"] != 0 and not may_oom:
            bad.append(where + "%d OOM(s)" % d["ooms"])
        for key in ("peak_live_bytes", "peak_reserved_bytes"):
            if d[key] > d["hard_limit"]:
                bad.append(where + "%s %d > hard limit %d" % (key, d[key], d["hard_limit"]))
        if run["policy"] == "pressure" and allocated > d["hard_limit"] and d["reclaimed_bytes"] <= 0:
            bad.append(where + "pressure reclaimed nothing here, though %d bytes went through a %d-byte limit" % (
                allocated, d["hard_limit"]))
        if run["policy"] == "explicit_free" and run["workload"] != "promote" and \
                d["final_live_bytes"] * n != run["model_bytes"]:
            bad.append(where + "the oracle left %d live bytes, its replica's model is %d" % (
                d["final_live_bytes"], run["model_bytes"] // n))
    return bad


def device_count(extra):
    """Takes --devices N (or --devices=N) out of extra: N, or 1 when absent."""
    for i, a in enumerate(extra):
        if a == "--devices" and i + 1 < len(extra):
            n = extra[i + 1]
            del extra[i:i + 2]
            return int(n)
        if a.startswith("--devices="):
            del extra[i]
            return int(a.split("=", 1)[1])
    return 1


def main(argv):
    if len(argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    extra = argv[3:]
    n = device_count(extra)
    flags = FLAGS + (DEVICE_FLAGS + ["--devices", str(n)] if n > 1 else [])
    cmd = [argv[1]] + flags + ["--host-heap-mib", argv[2]] + extra
    # forward_loop takes the last --max-seconds given.
    max_seconds = float([cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "--max-seconds"][-1])
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    runs = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        print("forward_loop failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stderr), file=sys.stderr)
        return 2
    print("%-16s %-8s %7s %6s %5s %5s %6s %8s %8s %8s %5s" % (
        "policy", "workload", "iters", "minor", "full", "rt", "coll", "exposed", "all_gc", "peak_MiB", "ooms"))
    failures = 0
    for run in runs:
        print("%-16s %-8s %7s %6d %5d %5d %6d %8.3f %8.3f %8.1f %5d" % (
            run["policy"], run["workload"], "%d%s" % (run["iterations"], "*" if run["stopped_early"] else ""),
            run["collections_minor"], run["collections_full"],
            run["collections_runtime"], run["collector_collections"], run["exposed_gc_seconds"],
            run["gc_seconds_all"], run["peak_reserved_bytes"] / 2**20, run["ooms"]))
        for msg in check(run, max_seconds) + (check_devices(run, n) if n > 1 else []):
            failures += 1
            print("  FAIL %s/%s: %s" % (run["policy"], run["workload"], msg))
    expected = 6 * 4
    if len(runs) < expected:
        print("FAIL: %d runs, expected at least %d" % (len(runs), expected))
        return 1
    cut = [r for r in runs if r["stopped_early"]]
    if cut:
        fewest = min(cut, key=lambda r: r["iterations"])
        print("* %d run(s) cut short by --max-seconds %g, checked over the iterations they did; each had to do at "
              "least 10 per --max-seconds of CPU it got (Note [A floor for cut runs]); fewest: %d of %d (%s/%s, "
              "floor %d)" % (len(cut), max_seconds, fewest["iterations"], fewest["iterations_requested"],
                             fewest["policy"], fewest["workload"], min_iterations(fewest, max_seconds)))
    print("%d runs, %d failure(s)" % (len(runs), failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
