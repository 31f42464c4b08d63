#!/usr/bin/env bash
# Third GPU call of 2026-12-06, session 13 (issue 20): Note [The first hint's
# lag] (453dd33, head) against call B's code (41cb38e, carried as
# build-gpu-base/examples/forward_loop), then the head's matrix, trimmed to
# the device time left. Each phase is its own tarball, so a call cut short
# still returns what ran.
#  1. steady 256 MiB, K = 8 and 32: base and head interleaved, 3 runs each
#     (fresh process per run; pressure and the oracle), and a verbose head run
#     at K = 8                                                     -> ab.tgz
#  2. steady 256 MiB x K 1/8/32                                    -> m1.tgz
#  3. steady 1024 MiB x K 8/32                                     -> m2.tgz
#  4. promote, burst, varied at 256 MiB, K = 1                     -> x.tgz
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/ab $O/m1 $O/m2 $O/x
T0=$(date +%s)
SH="--backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 --json --quiet"
for k in 8 32; do for r in 1 2 3; do for b in build-gpu-base build-gpu; do
  timeout 30 $b/examples/forward_loop $SH --policy pressure,explicit_free --workload steady --host-heap-mib 256 \
    --sync-every $k 2>/dev/null | grep '^{' >> $O/ab/steady-k$k-${b#build-gpu}.jsonl
done; done; done
timeout 30 build-gpu/examples/forward_loop $SH --verbose --policy pressure --workload steady --host-heap-mib 256 \
  --sync-every 8 > $O/ab/v-steady-h256-k8.json 2> $O/ab/v-steady-h256-k8.err
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/ab/gpu.txt
(cd $O && tar czf ab.tgz ab && rm -rf ab)
echo "a/b done at $(( $(date +%s) - T0 )) s"
M="POLICIES=pressure,cudajl,explicit_free"
env $M WORKLOADS=steady HEAPS=256 SYNC_EVERY="1 8 32" TIMEOUT=45 bash bench/h200_matrix.sh build-gpu $O/m1 320 3 2>&1 | grep heap
(cd $O && tar czf m1.tgz m1 && rm -rf m1)
env $M WORKLOADS=steady HEAPS=1024 SYNC_EVERY="8 32" TIMEOUT=60 bash bench/h200_matrix.sh build-gpu $O/m2 320 3 2>&1 | grep heap
(cd $O && tar czf m2.tgz m2 && rm -rf m2)
env $M WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY=1 TIMEOUT=90 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
