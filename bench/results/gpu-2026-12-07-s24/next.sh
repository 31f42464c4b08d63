#!/usr/bin/env bash
# Prepared in session 24, not run (the device tool lent no machine after call 1): the GPU check of
# main's CUDA path of Note [Exposed GC time, measured] (test_gpu's Gpu.TimedEventsSayHowLongTheStreamHasBeenIdle
# and every Gpu/GpuPool test), then the A/B of charging the measured part (e = main + measured.patch,
# branch s24-measured) against main's policy (m = main at affc41c or later: its decisions are
# 78a9bb4's, its exposed figures measured), interleaved cell by cell (h200_matrix.sh: pressure,
# CUDA.jl's rule, the oracle; steady; 3 repetitions), then one verbose trace of e at a 1 GiB host
# heap, a sync every 32. Build both for sm_90 (e: git worktree add /tmp/e && cd /tmp/e && git apply
# <this folder>/measured.patch):
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu --target forward_loop test_gpu   (and from /tmp/e into build-gpu-e)
#   bash ../shared/gpu/bundle-libs.sh build-gpu/runtime-libs build-gpu/examples/forward_loop build-gpu/tests/test_gpu
# carry build-gpu/runtime-libs, build-gpu/examples/forward_loop, build-gpu/tests/test_gpu,
# build-gpu-e/examples/forward_loop. What it should show if the change holds: the same peaks, time
# per iteration no higher (on the fake clock: equal peaks in 21 cells, 0.5 ms + 0.078 ms/MiB at
# K = 1 3.7% faster), and m's measured exposed time close to its wall time over the oracle's.
#                                                               -> test_gpu.log, n.tgz, v2.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/n $O/v2
build-gpu/tests/test_gpu --gtest_filter="Gpu.*:GpuPool.*" > $O/test_gpu.log 2>&1; echo "test_gpu rc $?"; grep -E "PASSED|FAILED|SKIPPED" $O/test_gpu.log | head -5
for cell in "256 1" "1024 32" "1024 8" "256 8" "0 1"; do
  set -- $cell
  for b in m e; do
    left ${LEFT:-280} || break 2
    B=build-gpu; [ $b = e ] && B=build-gpu-e
    env POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=60 \
      bash bench/h200_matrix.sh $B $O/n/$b 320 3 2>&1 | sed "s/^/$b: /" | grep heap
  done
  (cd $O && tar czf n.tgz n gpu.txt)
done
if left 330; then
  timeout 60 build-gpu-e/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
    --json --quiet --verbose --policy pressure,explicit_free --reps 2 --workload steady --host-heap-mib 1024 --sync-every 32 \
    > $O/v2/v-e-h1024-k32.json 2> $O/v2/v-e-h1024-k32.err
  gzip -f $O/v2/*.err; (cd $O && tar czf v2.tgz v2 gpu.txt)
fi
rm -rf $O/n $O/v2
echo "all done at $(( $(date +%s) - T0 )) s"
