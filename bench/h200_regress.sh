#!/usr/bin/env bash
# h200_regress.sh — after a change to the policy core, on a CUDA machine: the
# GPU tests, the stream-ordered-free reliability tests under
# compute-sanitizer memcheck, and the steady forward loop (pressure, cudajl and
# the explicit-free oracle; host heaps 0 and 256 MiB; REPS repetitions) to
# compare with the matrix in bench/RESULTS.md. Usage:
#   bench/h200_regress.sh BUILD_DIR OUT_DIR [ITERS=300] [REPS=3]
# Writes OUT_DIR/ctest-gpu.log, memcheck-streamorderedfree.log and
# regress-heap<MiB>.jsonl (a JSON line per run).
set -uo pipefail
build=$1; out=$2; iters=${3:-300}; reps=${4:-3}
mkdir -p "$out"
rc=0
ctest --test-dir "$build" -L gpu --output-on-failure >"$out/ctest-gpu.log" 2>&1 || rc=1
tail -3 "$out/ctest-gpu.log"
timeout 300 compute-sanitizer --tool memcheck --leak-check full "$build/tests/reliability/test_gpu_reliability" \
  --gtest_filter='StreamOrderedFree.*' >"$out/memcheck-streamorderedfree.log" 2>&1 || rc=1
grep -E "ERROR SUMMARY|PASSED|FAILED|intact" "$out/memcheck-streamorderedfree.log" | head -20
for mib in 0 256; do
  timeout 240 "$build/examples/forward_loop" --backend cuda_async --policy explicit_free,pressure,cudajl \
    --workload steady --reps "$reps" --iters "$iters" --layers 8 --d 4096 --batch 1024 --host-heap-mib "$mib" \
    --json --quiet 2>"$out/regress-heap$mib.err" | grep '^{' >"$out/regress-heap$mib.jsonl" || rc=1
  echo "heap $mib MiB: $(wc -l <"$out/regress-heap$mib.jsonl") runs"
done
exit $rc
