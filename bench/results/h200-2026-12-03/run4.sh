#!/usr/bin/env bash
# H200 run 4 of 2026-12-03: policy-next (set-up minors teach the cost only;
# the lag's start bound = the end of the hint that queued the iteration), the
# matrix of run.sh with verbose schedules at the cells the fixes address, then
# boehm/minor_overhead with the default of one marker (256 MiB and 1 GiB).
VERBOSE="256,1 1024,1 1024,8" MIXED_TIMEOUT=80 bash bench/results/h200-2026-12-03/run.sh
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
timeout 75 build-gpu/bench/gcpressure_bench --benchmark_filter='boehm/minor_overhead/(256|1024)/' \
  --benchmark_repetitions=3 --benchmark_out=$OUT/minor_overhead.json --benchmark_out_format=json \
  > $OUT/minor_overhead.txt 2>&1; echo "minor_overhead rc=$?"
grep "^boehm.*median" $OUT/minor_overhead.txt
