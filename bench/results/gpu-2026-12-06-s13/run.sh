#!/usr/bin/env bash
# GPU call of 2026-12-06, session 13 (issue 20): Note [Finishing a cycle costs
# its rest] and the peak's iteration (forward_loop's peak_reserved_iteration).
# Run on the GPU machine from the repository root, carrying
# build-gpu/examples/forward_loop, build-gpu/runtime-libs and
# build-gpu-base/examples/forward_loop (main at 9e20329, before the change).
#  1. verbose runs (fresh process, pressure only): $VERBOSE, workload,heap,K
#  2. promote at 256 MiB, K = 1 ($AB_K): base and head interleaved, 3 runs each
#     (one process per run; pressure and the oracle in each)
#  3. the matrix of head: steady 256/1024 x K 1/8/32, promote/burst/varied at
#     256 x K 1/8, steady heap 0 K = 8 (pressure, cudajl, explicit_free; 3 reps)
# Writes $OUT/all.tgz (d ab m x).
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/m $O/d $O/x $O/ab
T0=$(date +%s)
SH="--backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 --json --quiet"
for c in ${VERBOSE:-steady,256,8 steady,1024,8 promote,256,1}; do IFS=, read -r w heap k <<<"$c"
  timeout 30 build-gpu/examples/forward_loop $SH --verbose --policy pressure --workload $w --host-heap-mib $heap \
    --sync-every $k > $O/d/v-$w-h$heap-k$k.json 2> $O/d/v-$w-h$heap-k$k.err; done
gzip $O/d/*.err
echo "verbose done at $(( $(date +%s) - T0 )) s"
for k in ${AB_K:-1}; do for r in 1 2 3; do for b in build-gpu-base build-gpu; do
  timeout 40 $b/examples/forward_loop $SH --policy pressure,explicit_free --workload promote --host-heap-mib 256 \
    --sync-every $k 2>/dev/null | grep '^{' >> $O/ab/promote-k$k-${b#build-gpu}.jsonl
done; done; done
echo "a/b done at $(( $(date +%s) - T0 )) s"
M="POLICIES=pressure,cudajl,explicit_free"
env $M WORKLOADS=steady HEAPS="256 1024" SYNC_EVERY="1 8 32" TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $O/m 320 3 2>&1 | grep heap
env $M WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY="1 8" TIMEOUT=${MIXED_TIMEOUT:-85} bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
echo "matrix done at $(( $(date +%s) - T0 )) s"
[ $(( $(date +%s) - T0 )) -lt ${HEAP0_BEFORE:-500} ] &&
  env $M WORKLOADS=steady HEAPS=0 SYNC_EVERY=8 TIMEOUT=30 bash bench/h200_matrix.sh build-gpu $O/m 320 3 2>&1 | grep heap
python3 bench/summarize.py $O/m/matrix-*.jsonl > $O/m/matrix.md
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/m/gpu.txt
(cd $O && tar czf all.tgz m d x ab && rm -rf m d x ab)
echo "all done at $(( $(date +%s) - T0 )) s"
