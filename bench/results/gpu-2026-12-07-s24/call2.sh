#!/usr/bin/env bash
# Session 24, call 2 (the GPU machine, repository root; the device tool lent a machine again at
# 21:57 UTC): main at 3a95983 (build-gpu) — its CUDA path of Note [Exposed GC time, measured]
# (test_gpu: every Gpu / GpuPool test), then the forward loop (h200_matrix.sh: pressure, CUDA.jl's
# rule, the oracle; steady; 3 repetitions) at heap 256 MiB syncing every iteration and every 8,
# heap 0 every iteration, 1 GiB every 8.                                      -> test_gpu.log, n.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/n
build-gpu/tests/test_gpu --gtest_filter="Gpu.*:GpuPool.*" > $O/test_gpu.log 2>&1; echo "test_gpu rc $?"
grep -E "PASSED|FAILED|SKIPPED|Timed" $O/test_gpu.log | head -8
for cell in "256 1" "256 8" "0 1" "1024 8"; do
  set -- $cell
  left ${LEFT:-300} || break
  env POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=60 \
    bash bench/h200_matrix.sh build-gpu $O/n/m 320 3 2>&1 | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "all done at $(( $(date +%s) - T0 )) s"
