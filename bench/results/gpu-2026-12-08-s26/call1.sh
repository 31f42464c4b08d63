#!/usr/bin/env bash
# Session 26, call 1 (the GPU machine, repository root). One build: n = main at e8ebc9b (build-gpu-n,
# Release, sm_90: forward_loop, test_gpu; the cmake line of ../../../README's GPU section).
# Carry build-gpu-n/runtime-libs, build-gpu-n/examples/forward_loop, build-gpu-n/tests/test_gpu.
# Phases, each its own tarball:
#  t: test_gpu (every Gpu / GpuPool test)                                              -> test_gpu.log
#  v: the K = 8 / 32 start-up at 256 MiB with --verbose (pressure + the oracle, 3 reps)  -> v.tgz
#  n: steady, pressure + CUDA.jl's rule + the oracle, 3 reps a process, 320 iterations,
#     heap {256, 1024, 0} x K {1, 8, 32}                                                 -> n.tgz
#  p: the README picture's traces (bench/h200_picture.sh, 1500 iterations)              -> picture.tar
#  x: varied / promote / burst at 256 MiB K = 1 beside CUDA.jl's rule                    -> x.tgz
#  c: the host's clock source and the cost of a clock read (the allocation fast path reads one)
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
export LD_LIBRARY_PATH=$PWD/build-gpu-n/runtime-libs
mkdir -p $O/v $O/n $O/x
{ cat /sys/devices/system/clocksource/clocksource0/current_clocksource; lscpu | grep -E "Model name|MHz"
  python3 -c "import time; t=time.perf_counter_ns; a=t(); [time.monotonic_ns() for _ in range(1000000)]; print('monotonic_ns from python:', (t()-a)/1e6, 'ns per call')"; } > $O/clock.txt 2>&1
build-gpu-n/tests/test_gpu --gtest_filter="Gpu.*:GpuPool.*" > $O/test_gpu.log 2>&1
echo "test_gpu rc $?"; grep -E "PASSED|FAILED|SKIPPED" $O/test_gpu.log | head -8
for k in 8 32; do
  timeout 50 build-gpu-n/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
    --json --quiet --verbose --policy pressure,explicit_free --reps 3 --workload steady --host-heap-mib 256 --sync-every $k \
    > $O/v/v-n-h256-k$k.json 2> $O/v/v-n-h256-k$k.err
  echo "v k $k done at $(( $(date +%s) - T0 )) s"
done
gzip -f $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
bash bench/h200_picture.sh build-gpu-n $O 1500 && echo "picture done at $(( $(date +%s) - T0 )) s"
P="POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady"
for cell in "256 1" "256 8" "256 32" "1024 8" "1024 1" "1024 32" "0 1" "0 8" "0 32"; do
  set -- $cell
  left ${LEFT:-470} || break
  env $P HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=45 bash bench/h200_matrix.sh build-gpu-n $O/n/n 320 3 2>&1 | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
left 510 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=75 \
  bash bench/h200_matrix.sh build-gpu-n $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
