#!/usr/bin/env bash
# Traces for the README picture: every policy with a 256 MiB live host heap,
# where the host collector rarely runs on its own and at_limit shows the
# seed's ever-growing line. Usage: bench/h200_picture.sh BUILD_DIR OUT_DIR [ITERS]
set -uo pipefail
build=$1; out=$2; iters=${3:-1500}
shape="--layers 8 --d 4096 --batch 1024 --host-heap-mib 256"
mkdir -p "$out/picture"
for p in pressure at_limit cudajl dotnet explicit_free every_iteration; do
  timeout 120 "$build/examples/forward_loop" --backend cuda_async --policy "$p" --iters "$iters" $shape \
    --max-seconds 60 --quiet --json --trace "$out/picture/$p.csv" > "$out/picture/$p.json.all"
  tail -1 "$out/picture/$p.json.all" > "$out/picture/$p.json"; rm "$out/picture/$p.json.all"
done
(cd "$out" && tar cf picture.tar picture && rm -r picture)
