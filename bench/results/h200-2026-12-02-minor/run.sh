#!/bin/bash
# minorcost's H200 run (issue 20): boehm/minor_in_loop and boehm/minor_overhead.
B=$(dirname "$0")
export LD_LIBRARY_PATH=$B/runtime-libs
export MINOR_BENCH_ARGS="--backend cuda_async --layers 8 --d 4096 --batch 1024"
(nproc; date -u; nvidia-smi --query-gpu=name --format=csv,noheader) > $OUT/machine.txt 2>&1
t0=$(date +%s)
timeout 100 $B/gcpressure_bench --benchmark_filter='boehm/minor_in_loop/' --benchmark_repetitions=3 \
  --benchmark_out=$OUT/minor_in_loop.json --benchmark_out_format=json > $OUT/minor_in_loop.txt 2>&1
echo "in_loop rc=$? $(( $(date +%s) - t0 ))s" >> $OUT/times.txt
timeout 80 $B/gcpressure_bench --benchmark_filter='boehm/minor_overhead/(256|1024)/' --benchmark_repetitions=3 \
  --benchmark_out=$OUT/minor_overhead.json --benchmark_out_format=json > $OUT/minor_overhead.txt 2>&1
echo "overhead rc=$? $(( $(date +%s) - t0 ))s" >> $OUT/times.txt
GC_MARKERS=1 timeout 50 $B/gcpressure_bench --benchmark_filter='boehm/minor_in_loop/256/[0125]' --benchmark_repetitions=3 \
  --benchmark_out=$OUT/minor_in_loop_markers1.json --benchmark_out_format=json > $OUT/minor_in_loop_markers1.txt 2>&1
echo "in_loop_m1 rc=$? $(( $(date +%s) - t0 ))s" >> $OUT/times.txt
timeout 40 $B/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --host-heap-mib 256 --iters 320 \
  --policy pressure --json --quiet --verbose > $OUT/forward_pressure_256.json 2> $OUT/forward_pressure_256.err
echo "forward rc=$? $(( $(date +%s) - t0 ))s" >> $OUT/times.txt
cat $OUT/times.txt
grep -h "^boehm" $OUT/minor_in_loop.txt $OUT/minor_overhead.txt $OUT/minor_in_loop_markers1.txt | grep -v "_stddev\|_cv" | sed -E 's/ +[0-9.]+ ms +[0-9.]+ ms +[0-9]+ / /'
