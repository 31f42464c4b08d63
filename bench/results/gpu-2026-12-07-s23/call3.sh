#!/usr/bin/env bash
# Session 23, third GPU call (issue 20): a second process of t (3dfb8f0, build-gpu-t; as call2.sh)
# for the 256 MiB cells, and heap 0 at K = 8 / 32, steady, pressure + CUDA.jl's rule + the oracle,
# 3 reps a process. Carry build-gpu/runtime-libs, build-gpu-t/examples/forward_loop.      -> n3.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/n3
P="POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady"
for cell in "t3 256 1" "t3 256 8" "t3 256 32" "t3 0 8" "t3 0 32" "t4 256 1"; do
  set -- $cell
  left ${LEFT:-200} || break
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=40 bash bench/h200_matrix.sh build-gpu-t $O/n3/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n3.tgz n3 gpu.txt)
done
rm -rf $O/n3
echo "all done at $(( $(date +%s) - T0 )) s"
