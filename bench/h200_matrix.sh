#!/usr/bin/env bash
# h200_matrix.sh — the forward-loop matrix of issue 10 on a CUDA machine:
# every policy x host heap {0, 256, 1024} MiB x workload {steady, promote,
# burst, varied} x REPS, on cudaMallocAsync (--backend cuda_async), model
# 8 x Dense(4096), batch 1024 (512 MiB of weights, 256 MiB of temporaries per
# iteration; as bench/h200_forward.sh), hard limit forward_loop's default
# (50% of the GPU). Usage:
#   bench/h200_matrix.sh BUILD_DIR OUT_DIR [ITERS=300] [REPS=3]
# Environment:
#   HEAPS="0 256 1024"  the host heap sizes (one forward_loop process each:
#                       the host heap is built once per process); run one size
#                       per call where a call's time is limited
#   MAX_SECONDS=2       loop-time cap per run: every_iteration at 1024 MiB
#                       costs ~85 ms/iter (a capped run reports
#                       stopped_early and its iterations)
#   TIMEOUT=590         seconds per heap size and K (the runs done by then are kept)
#   BACKEND=cuda_async, SHAPE="--layers 8 --d 4096 --batch 1024"  (e.g. BACKEND=host
#                       SHAPE="" to try the script on a machine without a GPU)
#   SYNC_EVERY="1 8 32" forward_loop --sync-every K: the loop waits for the
#                       device every K iterations (issue 20; one process per
#                       heap x K)
#   POLICIES=all, WORKLOADS=all  forward_loop's --policy / --workload lists
# Writes OUT_DIR/matrix-<date>-heap<MiB>-sync<K>.jsonl (a JSON line per run,
# printed as each run ends) and .err, and OUT_DIR/matrix-<date>.md: bench/summarize.py's
# table, when python3 is there (else run summarize.py on the JSONL files).
# Each process runs the repetitions in turn, and in each one every workload,
# the oracle (explicit_free) beside the other policies.
set -uo pipefail
build=$1; out=$2; iters=${3:-300}; reps=${4:-3}
heaps=${HEAPS:-0 256 1024}
syncs=${SYNC_EVERY:-1 8 32}
cap=${MAX_SECONDS:-2}
shape=${SHAPE-"--layers 8 --d 4096 --batch 1024"}
backend=${BACKEND:-cuda_async}
mkdir -p "$out"
stamp=$(date -u +%Y-%m-%d)
rc=0
for mib in $heaps; do
  for k in $syncs; do
    f="$out/matrix-$stamp-heap$mib-sync$k.jsonl"
    start=$(date +%s)
    timeout "${TIMEOUT:-590}" "$build/examples/forward_loop" --backend "$backend" --policy "${POLICIES:-all}" \
      --workload "${WORKLOADS:-all}" --reps "$reps" --iters "$iters" $shape --host-heap-mib "$mib" \
      --sync-every "$k" --max-seconds "$cap" --json --quiet 2>"$out/matrix-$stamp-heap$mib-sync$k.err" |
      grep '^{' >"$f"
    status=${PIPESTATUS[0]}
    echo "heap $mib MiB, sync every $k: $(wc -l <"$f") runs in $(($(date +%s) - start)) s (exit $status)"
    [ "$status" = 0 ] || rc=1
  done
done
if command -v python3 >/dev/null; then
  python3 "$(dirname "$0")/summarize.py" "$out"/matrix-"$stamp"-heap*-sync*.jsonl >"$out/matrix-$stamp.md" || rc=1
fi
exit $rc
