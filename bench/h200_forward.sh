#!/usr/bin/env bash
# The forward-loop matrix on the H200 (or any CUDA machine): every policy run
# once with a trace, then the forward/* benchmarks (now policy x heap x
# workload: 72 cases; narrow --benchmark_filter for a shorter run). The
# repeated matrix of RESULTS.md is bench/h200_matrix.sh. Usage:
#   bench/h200_forward.sh BUILD_DIR OUT_DIR [ITERS]
# Model: 8 Dense layers, d=4096, batch=1024 (512 MiB of weights, 256 MiB of
# temporaries per iteration); hard limit: forward_loop's default (50% of the GPU).
set -uo pipefail
build=$1; out=$2; iters=${3:-1500}
shape="--layers 8 --d 4096 --batch 1024"
mkdir -p "$out/traces"
# The policy names come from the binary (gcpressure::policy_names(), as
# forward_loop --help lists them), not from this script.
policies=$("$build/examples/forward_loop" --help | sed -n 's/.*--policy \([a-z_|]*\)\].*/\1/p' | head -n 1 | tr '|' ' ')
[ -n "$policies" ] || { echo "h200_forward.sh: no policy list in '$build/examples/forward_loop --help'" >&2; exit 1; }
for p in $policies; do
  timeout 300 "$build/examples/forward_loop" --backend cuda_async --policy "$p" --iters "$iters" $shape \
    --quiet --json --trace "$out/traces/$p.csv" | tail -1
done > "$out/forward.jsonl"
(cd "$out" && tar cf traces.tar traces && rm -r traces)
FORWARD_BENCH_ARGS="$shape" FORWARD_BENCH_ITERS="$iters" FORWARD_BENCH_MAX_SECONDS=10 \
  timeout 420 "$build/bench/gcpressure_bench" --benchmark_filter='forward/' --benchmark_min_time=0.01 \
  --benchmark_format=json --benchmark_out="$out/forward_bench.json" > "$out/forward_bench.txt" 2>&1
tail -25 "$out/forward_bench.txt"
