#!/usr/bin/env bash
# h200_threads.sh — issue 24 on a CUDA machine: 4 KiB pool hits from 1-16
# threads on one device_allocator (a CUDA stream each) beside
# cudaMallocAsync's driver pool from 1 and 8 threads, medians of 3.
# Needs gcpressure_bench built with CUDA (build-gpu, sm_90; target
# gcpressure_bench) and its runtime-libs (shared/gpu/bundle-libs.sh). Usage,
# from the repository root on the GPU machine:
#   bench/h200_threads.sh [BUILD_DIR=build-gpu] [OUT_DIR=$OUT]
# Writes OUT_DIR/threads.json (Google Benchmark JSON) and threads.txt (the
# medians: wall ns per alloc+free pair on the timed thread). Google Benchmark
# there is 1.7.1: --benchmark_min_time is a number of seconds, no "s".
set -uo pipefail
build=${1:-build-gpu}; out=${2:-${OUT:?set OUT or pass OUT_DIR}}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/$build/runtime-libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader >"$out/gpu.txt" 2>&1
nproc >>"$out/gpu.txt"
timeout 540 "$build/bench/gcpressure_bench" \
  --benchmark_filter='^alloc/(pool_hit_threads|cuda_malloc_async_threads)/' \
  --benchmark_repetitions=3 --benchmark_min_time=0.2 \
  --benchmark_format=json --benchmark_out="$out/threads.json" >"$out/threads.log" 2>&1
rc=$?
python3 - "$out/threads.json" >"$out/threads.txt" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for b in d["benchmarks"]:
    if b.get("aggregate_name") == "median":
        print(f'{b["run_name"]:40s} wall {b["real_time"]:9.1f} ns  cpu {b["cpu_time"]:9.1f} ns  {b.get("label", "")}')
    if b.get("error_occurred"):
        print(f'{b["name"]}: ERROR {b.get("error_message")}')
PY
cat "$out/threads.txt"
exit $rc
