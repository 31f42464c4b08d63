#!/usr/bin/env bash
# H200 runs of 2026-12-03 (issue 20): verbose schedules, then the steady
# matrix and the mixed workloads at 256 MiB, K = 1 and 8 (pressure, cudajl, the oracle; heaps 0/256/1024 MiB; K = 1, 8, 32; 3 reps).
# Run on the GPU machine from the repository root with build-gpu carried.
# Run 1: VERBOSE="256,8 1024,8 256,32 1024,1" MIXED_TIMEOUT=75; run 2:
# VERBOSE="256,1 1024,8 1024,1" MIXED_TIMEOUT=95 (heap MiB,K of each verbose run).
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
mkdir -p $OUT/m $OUT/d $OUT/x
S="--backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 --json --quiet --verbose --policy pressure --workload steady"
for c in ${VERBOSE:-256,1 1024,8 1024,1}; do IFS=, read -r heap k <<<"$c"; set -- $heap $k
  timeout 30 build-gpu/examples/forward_loop $S --host-heap-mib $1 --sync-every $2 > $OUT/d/v-h$1-k$2.json 2> $OUT/d/v-h$1-k$2.err; done
gzip $OUT/d/*.err
POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady HEAPS="0 256 1024" SYNC_EVERY="1 8 32" TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $OUT/m 320 3 2>&1 | tail -9
POLICIES=pressure,cudajl,explicit_free WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY="1 8" TIMEOUT=${MIXED_TIMEOUT:-95} bash bench/h200_matrix.sh build-gpu $OUT/x 320 3 2>&1 | tail -2
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/m/gpu.txt
cd $OUT && tar czf all.tgz m d x && rm -rf m d x
