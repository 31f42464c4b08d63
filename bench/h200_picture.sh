#!/usr/bin/env bash
# Traces for the README picture: the oracle (explicit_free), the CUDA.jl
# baseline and the pressure policy with a 256 MiB live host heap, where the
# host collector rarely runs on its own. Draw them with
#   bench/plot.sh -o docs/img/h200_forward_256.png OUT_DIR/picture/*.csv
# (memory per iteration, and GC time exposed vs hidden).
# Usage: bench/h200_picture.sh BUILD_DIR OUT_DIR [ITERS]
set -uo pipefail
build=$1; out=$2; iters=${3:-1500}
shape="--layers 8 --d 4096 --batch 1024 --host-heap-mib 256"
mkdir -p "$out/picture"
for p in explicit_free cudajl pressure; do  # the README picture: oracle, CUDA.jl, ours
  timeout 120 "$build/examples/forward_loop" --backend cuda_async --policy "$p" --iters "$iters" $shape \
    --max-seconds 60 --quiet --json --trace "$out/picture/$p.csv" > "$out/picture/$p.json.all"
  tail -1 "$out/picture/$p.json.all" > "$out/picture/$p.json"; rm "$out/picture/$p.json.all"
done
(cd "$out" && tar cf picture.tar picture && rm -r picture)
