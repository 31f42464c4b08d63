#!/usr/bin/env bash
# Second GPU call of session 19: the landed build p (56031d0's policy) where
# run.sh measured only the trial f: mixed workloads at 256 K 1, steady
# 256 K 32, 1024 K 32, 1024 K 1 (pressure + oracle), --verbose p 256 K 1.
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/p2 $O/v2
env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=60 bash bench/h200_matrix.sh build-gpu-p $O/p2/x 320 3 2>&1 | grep heap
(cd $O && tar czf p2.tgz p2)
for cell in "256 32" "1024 32" "1024 1"; do
  set -- $cell
  left 170 || break
  env POLICIES=pressure,explicit_free WORKLOADS=steady HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=30 bash bench/h200_matrix.sh build-gpu-p $O/p2/m 320 3 2>&1 | grep heap
  (cd $O && tar czf p2.tgz p2)
done
rm -rf $O/p2
left 200 && timeout 25 build-gpu-p/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
  --json --quiet --verbose --policy pressure,explicit_free --reps 2 --workload steady --host-heap-mib 256 --sync-every 1 \
  > $O/v2/v-p-h256-k1.json 2> $O/v2/v-p-h256-k1.err
gzip $O/v2/*.err 2>/dev/null; (cd $O && tar czf v2.tgz v2 && rm -rf v2)
echo "all done at $(( $(date +%s) - T0 )) s"
