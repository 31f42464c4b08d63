#!/usr/bin/env bash
# Session 26, call 2 (the GPU machine, repository root). Two builds (Release, sm_90; README's GPU recipe):
# m = main at e8ebc9b (build-gpu-n), x = main at a6bbafc or later (Note [An overrun minor does not refute
# the guess], and --verbose says what each minor on the guess found) (build-gpu: forward_loop, test_gpu);
# or x = branch s26-conclusive for that branch's A/B. Carry build-gpu/runtime-libs, build-gpu/examples/forward_loop,
# build-gpu/tests/test_gpu, build-gpu-n/examples/forward_loop. Builds, here (2 cores, ~1 min each once
# configured): cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
# cmake --build build-gpu --target forward_loop test_gpu && bash ../shared/gpu/bundle-libs.sh
# build-gpu/runtime-libs build-gpu/examples/forward_loop build-gpu/tests/test_gpu; m the same in a worktree
# at e8ebc9b (git worktree add /tmp/m e8ebc9b; cmake -S /tmp/m -B build-gpu-n ... --target forward_loop).
# Phases, each its own tarball:
#  t: x's test_gpu (every Gpu / GpuPool test)                                                  -> test_gpu.log
#  v: x, the 256 MiB K = 8 start-up with --verbose (pressure + the oracle, 3 reps)             -> v.tgz
#  a: m and x interleaved, 256 MiB, K = 8 and 32, steady, pressure + CUDA.jl's rule + the oracle,
#     3 reps a process, 2 rounds                                                               -> a.tgz
#  p: the README picture's traces with x (bench/h200_picture.sh, 1500 iterations)              -> picture.tar
#  n: x over the rest of the steady matrix (heap {256, 1024, 0} x K {1, 8, 32} less a's cells)  -> n.tgz
#  c: the host's clock source and the cost of a clock read                                     -> clock.txt
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
mkdir -p $O/v $O/a $O/n
{ cat /sys/devices/system/clocksource/clocksource0/current_clocksource; lscpu | grep -E "Model name|MHz"
  python3 -c "import time; t=time.perf_counter_ns; a=t(); [time.monotonic_ns() for _ in range(1000000)]; print('monotonic_ns from python:', (t()-a)/1e6, 'ns per call')"; } > $O/clock.txt 2>&1
build-gpu/tests/test_gpu --gtest_filter="Gpu.*:GpuPool.*" > $O/test_gpu.log 2>&1
echo "test_gpu rc $?"; grep -E "PASSED|FAILED|SKIPPED" $O/test_gpu.log | head -8
timeout 50 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
  --json --quiet --verbose --policy pressure,explicit_free --reps 3 --workload steady --host-heap-mib 256 --sync-every 8 \
  > $O/v/v-x-h256-k8.json 2> $O/v/v-x-h256-k8.err
echo "v done at $(( $(date +%s) - T0 )) s"
gzip -f $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
P="POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady"
for r in 1 2; do
  for b in m x; do
    B=build-gpu; [ $b = m ] && B=build-gpu-n
    left 330 || break
    env $P HEAPS=256 SYNC_EVERY="8 32" TIMEOUT=45 bash bench/h200_matrix.sh $B $O/a/$b$r 320 3 2>&1 | sed "s/^/$b$r: /" | grep heap
  done
  (cd $O && tar czf a.tgz a gpu.txt)
done
rm -rf $O/a
echo "a done at $(( $(date +%s) - T0 )) s"
left 400 && bash bench/h200_picture.sh build-gpu $O 1500 && echo "picture done at $(( $(date +%s) - T0 )) s"
for cell in "256 1" "1024 8" "0 1" "1024 1" "0 8" "1024 32" "0 32"; do
  set -- $cell
  left ${LEFT:-535} || break
  env $P HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=45 bash bench/h200_matrix.sh build-gpu $O/n/x 320 3 2>&1 | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "all done at $(( $(date +%s) - T0 )) s"
