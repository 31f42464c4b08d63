#!/usr/bin/env bash
# Two tenants on one simulated device (issue 14): forward_loop runs on the
# host backend with a capacity shared through a file (GCPRESSURE_HOST_SHARED)
# and a hard limit of 90% of the memory available to it; once it is running,
# gcpressure_hog takes 50% of the device and holds it past the loop's end.
# The loop must adapt: zero OOMs, its JSON reports the headroom change (the
# iterations at which it saw it) and the least available memory (<= 50%).
#
# Sizes: a 64 MiB device; the loop's model (4 layers, d=256: ~1 MiB) with
# its temporaries and, every 50 iterations, a burst of 30% of its first hard
# limit (17 MiB), has a live set of at most ~22 MiB: it fits in the 28.8 MiB
# hard limit left (90% of the 32 MiB the hog leaves), but only if the limit
# follows the memory left and the pool gives back what it caches above it.
# The same on the H200: bench/tenants_h200.sh.
#
# usage: tenants_forward.sh FORWARD_LOOP GCPRESSURE_HOG WORK_DIR
set -uo pipefail
loop=$1; hog=$2; dir=$3
mkdir -p "$dir"
export GCPRESSURE_HOST_SHARED="$dir/device.shared" GCPRESSURE_HOST_CAPACITY=64MiB
rm -f "$GCPRESSURE_HOST_SHARED" "$dir"/loop.* "$dir"/hog.*
fail() { echo "FAIL: $*"; echo "--- loop stderr"; tail -20 "$dir/loop.err"; echo "--- hog"; cat "$dir/hog.out"; exit 1; }

GCPRESSURE_HARD_LIMIT=90%avail "$loop" --backend host --policy pressure --workload burst --burst-fraction 0.3 \
  --iters 100000000 --max-seconds 6 --json > "$dir/loop.out" 2> "$dir/loop.err" &
loop_pid=$!
# The hog comes once the loop iterates (start-up may be slow on a busy machine).
for _ in $(seq 1200); do
  grep -q '^\[ iter' "$dir/loop.out" 2>/dev/null && break
  kill -0 $loop_pid 2>/dev/null || break
  sleep 0.05
done
"$hog" --backend host --fraction 0.5 --after-seconds 0.5 --hold-seconds 8 > "$dir/hog.out" 2>&1 &
hog_pid=$!
wait $loop_pid; loop_rc=$?
wait $hog_pid; hog_rc=$?
[ $loop_rc -eq 0 ] || fail "forward_loop exited with $loop_rc"
[ $hog_rc -eq 0 ] || fail "gcpressure_hog exited with $hog_rc (it could not take 50% of the device)"

json=$(tail -1 "$dir/loop.out")
key() { echo "$json" | grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2; }
echo "$json" | grep -o '"headroom_change[a-z_]*":[^]]*\]\?'
echo "ooms $(key ooms), iterations $(key iterations), peak live $(key peak_live_bytes), available min" \
  "$(key available_bytes_min), ladder collections $(echo "$json" | grep -o '"ladder":[0-9]*' | head -1)"
grep '^hog:' "$dir/hog.out"
half=$((32 << 20))
[ "$(key ooms)" = 0 ] || fail "the loop ran out of memory"
[ "$(key stopped_early)" = true ] || fail "the loop did not run its full 6 s"
[ "$(key headroom_changes)" -ge 1 ] || fail "no headroom change reported"
echo "$json" | grep -q '"headroom_change_iterations":\[[0-9]' || fail "no iteration of a headroom change reported"
[ "$(key available_bytes_min)" -le $half ] || fail "the hog's 50% was never seen as taken"
[ "$(key peak_live_bytes)" -lt $half ] || fail "the loop's live set does not fit in what the hog leaves (test sizes)"
[ "$(key hard_limit)" -gt $half ] || fail "the first hard limit should be above 50% (90% of the free device)"
echo "PASS"
