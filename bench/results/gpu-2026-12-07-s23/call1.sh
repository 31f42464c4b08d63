#!/usr/bin/env bash
# Session 23, first GPU call (issue 20): main at 5fb91c6 (policy of 00da01d, Note [A pause the
# poll refutes], never run on a GPU before), one build:
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu --target forward_loop gcpressure_torch
#   bash ../shared/gpu/bundle-libs.sh build-gpu/runtime-libs build-gpu/examples/forward_loop
# carry build-gpu/runtime-libs, build-gpu/examples/forward_loop.
# Phases (each its own tarball, started only while time is left):
#  v: --verbose, 256 MiB, K = 8 and 1, 2 reps: the start-up (session 22: 1.80x at K = 8, it 2) -> v.tgz
#  n: steady, pressure + CUDA.jl's rule + the oracle, 3 reps a process, 320 iterations, every
#     heap x K of the matrix                                                              -> n.tgz
#  x: varied / promote / burst at 256 MiB K = 1 beside CUDA.jl's rule                    -> x.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/v $O/n $O/x
verbose $O/v 256 8 2; verbose $O/v 256 1 2
gzip -f $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
P="POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady"
for cell in "256 8" "256 1" "256 32" "1024 8" "1024 1" "1024 32" "0 1" "0 8" "0 32"; do
  set -- $cell
  left ${LEFT:-400} || break
  env $P HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=45 bash bench/h200_matrix.sh build-gpu $O/n/m 320 3 2>&1 | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
left 470 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=80 \
  bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
