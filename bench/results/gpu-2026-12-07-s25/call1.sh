#!/usr/bin/env bash
# Session 25, call 1 (the GPU machine, repository root). Two builds (Release, sm_90; the cmake lines
# of ../gpu-2026-12-07-s24/next.sh's header): m = main at f06a421 (build-gpu), n = main + Note [The
# loop's first sync learns its minor] (build-gpu-n: forward_loop, test_gpu, gcpressure_torch).
# Carry build-gpu/runtime-libs, build-gpu/examples/forward_loop, build-gpu-n/runtime-libs,
# build-gpu-n/examples/forward_loop, build-gpu-n/tests/test_gpu, build-gpu-n/examples/torch/libgcpressure_torch.so.
# Phases, each its own tarball:
#  t: n's test_gpu (every Gpu / GpuPool test)                                        -> test_gpu.log
#  n: steady, pressure + CUDA.jl's rule + the oracle, 3 reps a process, 320 iterations: n over the
#     whole matrix, heap {256, 1024, 0} x K {1, 8, 32}, m beside it at 256 MiB K = 1 and 8    -> n.tgz
#  x: n, varied / promote / burst at 256 MiB K = 1 beside CUDA.jl's rule               -> x.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/n $O/x
LD_LIBRARY_PATH=$PWD/build-gpu-n/runtime-libs build-gpu-n/tests/test_gpu --gtest_filter="Gpu.*:GpuPool.*" > $O/test_gpu.log 2>&1
echo "test_gpu rc $?"; grep -E "PASSED|FAILED|SKIPPED" $O/test_gpu.log | head -8
P="POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady"
for cell in "n 256 1" "m 256 1" "n 256 8" "m 256 8" "n 1024 8" "n 1024 1" "n 1024 32" "n 256 32" "n 0 1" "n 0 8" "n 0 32"; do
  set -- $cell
  left ${LEFT:-450} || break
  B=build-gpu; [ $1 = n ] && B=build-gpu-n
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=45 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
left 500 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=75 \
  bash bench/h200_matrix.sh build-gpu-n $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
