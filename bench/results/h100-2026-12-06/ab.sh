#!/usr/bin/env bash
# H200 call 1 of 2026-12-06 (issue 20): which part of policy-next
# (bench/results/h200-2026-12-03/policy-next.patch) moves which cell.
# build-exp = main (d29e327) + the patch, each of its three parts behind a
# switch read once from the environment (scratch build, not on main):
#   GCP_X_YIELD=1  set-up minors teach no yield/futility
#   GCP_X_FLOOR=1  the floor's "loop began" test counts bytes the runtime freed
#   GCP_X_RET=1    the lag's start bound = the end of the hint that queued it
#   GCP_X_EST=1    the budget charges a minor pause - lag at its start, not the
#                  whole minor when the device finished inside it (upper bound)
# all 0 = main's policy. Every run verbose (schedules in d/), 3 reps per
# process (the regime flip was seen in later reps), oracle in the same process.
export LD_LIBRARY_PATH=$PWD/build-exp/runtime-libs
B=build-exp/examples/forward_loop
S="--backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 --json --quiet --verbose --policy pressure,explicit_free --reps 3"
mkdir -p $OUT/r
run() {  # name env... -- args
  local name=$1; shift; local envs=(); while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  local t0=$(date +%s.%N)
  env "${envs[@]}" timeout 60 $B $S "$@" 2> >(gzip > $OUT/r/$name.err.gz) | grep '^{' > $OUT/r/$name.jsonl
  echo "$name rc=${PIPESTATUS[0]} $(wc -l < $OUT/r/$name.jsonl) runs $(echo "$(date +%s.%N) - $t0" | bc) s"
}
for v in "M GCP_X_YIELD=0" "Y GCP_X_YIELD=1" "E GCP_X_EST=1" "YE GCP_X_YIELD=1 GCP_X_EST=1" "A GCP_X_YIELD=1 GCP_X_FLOOR=1 GCP_X_RET=1"; do
  set -- $v; n=$1; shift
  run $n-h256-k1 "$@" -- --host-heap-mib 256 --sync-every 1 --workload steady,varied
  run $n-h1024-k1 "$@" -- --host-heap-mib 1024 --sync-every 1 --workload steady
  run $n-h1024-k8 "$@" -- --host-heap-mib 1024 --sync-every 8 --workload steady
done
run M-h1024-k32 GCP_X_YIELD=0 -- --host-heap-mib 1024 --sync-every 32 --workload steady
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/r/gpu.txt
