#!/usr/bin/env bash
# Prepared, not run (no machine started in session 21): main (build-gpu, 3c6da5b)
# against t = Note [Waiting pays only the fixed part] in its first form (the
# fixed part alone everywhere; build-gpu-t; the landed form is call3.sh's),
# interleaved on one machine; then t's verbose 256 MiB K = 1, the mixed
# workloads on t, and the Python package (issue 22) if time is left.
# Build (sm_90): build-gpu as gpu-2026-12-07-s20/run.sh on 3c6da5b;
#   build-gpu-t: cmake -S . -B build-gpu-t -G Ninja -DCMAKE_BUILD_TYPE=Release
#   -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-gpu-t --target forward_loop
#   && bash ../shared/gpu/bundle-libs.sh build-gpu-t/runtime-libs build-gpu-t/examples/forward_loop
# Carry: build-gpu/runtime-libs, build-gpu/examples/forward_loop,
#   build-gpu-t/examples/forward_loop, build-gpu/examples/torch/libgcpressure_torch.so
#  1. steady, pressure + oracle, 3 reps a process, 320 iterations:
#     256 K 1 (t, m, t, m), 256 K 8 / 32, 1024 K 1 / 8, 0 K 1 (t, m)   -> n.tgz
#  2. --verbose t: 256 K 1, 2 reps                                     -> v.tgz
#  3. varied, promote, burst at 256 K 1 (t: pressure, cudajl, oracle)  -> x.tgz
#  4. examples/python/h200_python.sh (main's package)                  -> py/
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/n $O/v $O/x
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "t 256 1" "m 256 1" "t2 256 1" "m2 256 1" "t 256 8" "m 256 8" "t 256 32" "m 256 32" \
            "t 1024 1" "m 1024 1" "t 1024 8" "m 1024 8" "t 0 1" "m 0 1"; do
  set -- $cell
  left 330 || break
  B=build-gpu; [ ${1:0:1} = t ] && B=build-gpu-t
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=35 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
if left 360; then
  timeout 30 build-gpu-t/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
    --json --quiet --verbose --policy pressure,explicit_free --reps 2 --workload steady --host-heap-mib 256 --sync-every 1 \
    > $O/v/v-t-h256-k1.json 2> $O/v/v-t-h256-k1.err
  gzip $O/v/*.err; (cd $O && tar czf v.tgz v)
fi
rm -rf $O/v
left 400 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=80 \
  bash bench/h200_matrix.sh build-gpu-t $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "x done at $(( $(date +%s) - T0 )) s"
if left 470; then
  mkdir -p $O/py
  OUT=$O/py DEADLINE=$(( 570 - $(date +%s) + T0 )) timeout $(( 585 - $(date +%s) + T0 )) \
    bash examples/python/h200_python.sh build-gpu/examples/torch/libgcpressure_torch.so > /dev/null 2>&1
  rm -rf $O/py/steps; tail -30 $O/py/summary.txt
fi
echo "all done at $(( $(date +%s) - T0 )) s"
