#!/usr/bin/env bash
# Session 22, first GPU call (issue 20). Builds (sm_90, forward_loop):
#   a = build-gpu:   6dc29d9 (main: Note [Waiting pays only the fixed part] in its slope form)
#   t = build-gpu-t: a + tries with a fitted slope, priced on the device's lag (Note [A smaller
#                    minor is tried]; the working tree at the call, committed after it)
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu --target forward_loop gcpressure_torch   (the same into build-gpu-t)
#   bash ../shared/gpu/bundle-libs.sh build-gpu/runtime-libs build-gpu/examples/forward_loop
# carry build-gpu/runtime-libs, build-gpu/examples/forward_loop, build-gpu-t/examples/forward_loop.
# Phases (each its own tarball, started only while time is left):
#  v: --verbose a, 256 MiB, K = 8 and 32, 2 reps: the start-up peaks (session 20: 1.61-1.80x,
#     set at iterations 2-4; the fake clock's first windows hold one iteration)   -> v.tgz
#  n: steady, pressure + the oracle, 3 reps a process, 320 iterations, a and t interleaved -> n.tgz
#  x: t, varied / promote / burst at 256 MiB K = 1 beside CUDA.jl's rule              -> x.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/v $O/n $O/x
for k in 8 32; do verbose $O/v 256 $k 2; done
gzip -f $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "t 256 1" "a 256 1" "t 1024 8" "a 1024 8" "t 1024 1" "a 1024 1" "t 256 8" "t 256 32" "t 1024 32" \
            "t2 256 1" "a2 256 1" "t 0 1" "t 0 8"; do
  set -- $cell
  left ${LEFT:-430} || break
  B=build-gpu; [ ${1:0:1} = t ] && B=build-gpu-t
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=35 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
left 480 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=60 \
  bash bench/h200_matrix.sh build-gpu-t $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
