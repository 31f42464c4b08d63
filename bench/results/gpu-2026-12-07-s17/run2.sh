#!/usr/bin/env bash
# Second GPU call of 2026-12-07 (issue 20, "find why"): the verbose line of a
# collection now splits it (collector, finalizers, frees). Heap 256 K 1 / 8
# and 1024 K 8, one process each, 2 repetitions; then the in-loop minor
# benchmark at 256 MiB (variants 0: minor while the device runs, 2: no device).
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/v2; T0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader > $O/v2/gpu.txt
for cell in "256 1" "256 8" "1024 8"; do
  set -- $cell
  timeout 40 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
    --json --quiet --verbose --policy pressure,explicit_free --reps 2 --workload steady --host-heap-mib $1 --sync-every $2 \
    > $O/v2/v-h$1-k$2.json 2> $O/v2/v-h$1-k$2.err
  echo "cell $cell at $(( $(date +%s) - T0 )) s"
done
MINOR_BENCH_ARGS="--backend cuda_async --layers 8 --d 4096 --batch 1024" timeout 120 build-gpu/bench/gcpressure_bench \
  --benchmark_filter='boehm/minor_in_loop/256/(0|2)$' --benchmark_format=json --benchmark_out=$O/v2/minor_in_loop.json > $O/v2/minor_in_loop.txt 2>&1
echo "bench at $(( $(date +%s) - T0 )) s"
gzip $O/v2/*.err; (cd $O && tar czf v2.tgz v2 && rm -rf v2)
