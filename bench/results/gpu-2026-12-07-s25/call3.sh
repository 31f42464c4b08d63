#!/usr/bin/env bash
# Session 25, call 3: where the K = 8 start-up's 2.27x comes from on this machine — n (build-gpu-n,
# e8ebc9b) with --verbose, 256 MiB, K = 8 and 32, pressure + the oracle, 3 repetitions each.   -> v.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/v
for k in 8 32; do
  timeout 50 build-gpu-n/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
    --json --quiet --verbose --policy pressure,explicit_free --reps 3 --workload steady --host-heap-mib 256 --sync-every $k \
    > $O/v/v-n-h256-k$k.json 2> $O/v/v-n-h256-k$k.err
  echo "k $k done at $(( $(date +%s) - T0 )) s"
done
gzip -f $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
