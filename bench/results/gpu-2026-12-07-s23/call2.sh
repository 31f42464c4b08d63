#!/usr/bin/env bash
# Session 23, second GPU call (issue 20): A/B of main at the session's start (a = 5fb91c6, build-gpu)
# and t = 3dfb8f0 (build-gpu-t; the same cmake lines into build-gpu-t): Note [Tries are paced in
# syncs] (c6215f1) and Note [A pause the device outlasted is not credited] (3dfb8f0). Carry build-gpu/runtime-libs, build-gpu/examples/forward_loop,
# build-gpu-t/examples/forward_loop. Phases:
#  v: --verbose t, 256 MiB K = 1, pressure + CUDA.jl's rule + the oracle, 3 reps; K = 8, 2 reps -> v.tgz
#  n: steady, pressure + CUDA.jl's rule + the oracle, 3 reps a process, 320 iterations: a and t
#     interleaved at 256 MiB K = 1 (call 1: 8.89x) and K = 8 (1.80x), then t over the matrix                -> n.tgz
#  x: t, varied / promote / burst at 256 MiB K = 1 beside CUDA.jl's rule                 -> x.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/v $O/n $O/x
timeout 40 build-gpu-t/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 \
  --json --quiet --verbose --policy pressure,cudajl,explicit_free --reps 3 --workload steady --host-heap-mib 256 --sync-every 1 \
  > $O/v/v-t-h256-k1.json 2> $O/v/v-t-h256-k1.err
timeout 40 build-gpu-t/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 \
  --json --quiet --verbose --policy pressure,explicit_free --reps 2 --workload steady --host-heap-mib 256 --sync-every 8 \
  > $O/v/v-t-h256-k8.json 2> $O/v/v-t-h256-k8.err
gzip -f $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
P="POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady"
for cell in "a 256 1" "t 256 1" "a2 256 1" "t2 256 1" "a 256 8" "t 256 8" "t 1024 1" "t 1024 8" "t 0 1" "t 256 32" "t 1024 32" "t 0 8"; do
  set -- $cell
  left ${LEFT:-400} || break
  B=build-gpu; [ ${1:0:1} = t ] && B=build-gpu-t
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=45 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
left 470 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=75 \
  bash bench/h200_matrix.sh build-gpu-t $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
