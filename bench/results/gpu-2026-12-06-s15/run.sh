#!/usr/bin/env bash
# First GPU call of 2026-12-06, session 15 (issue 20): head b0368ea (policy
# of 4de8cc3: Note [The guess is what a queued iteration leaves] with the
# host's pauses, Note [A hint decides at its time]; never run on a GPU).
# Each phase is its own tarball, so a call cut short still returns what ran.
#  1. steady x heaps 0/256/1024 x K 1/8/32, matrix shape          -> m.tgz
#  2. promote, burst, varied at 256 MiB, K = 1                    -> x.tgz
#  3. A/B in the same call: 80de63e (build-gpu-base) on the cells
#     4de8cc3 aimed at (256 K = 8 / 1, 1024 K = 8), pressure+oracle -> ab.tgz
#  4. --verbose: heap 256 x K 8 and 1, new build                  -> v.tgz
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/m $O/x $O/ab $O/v
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/m/gpu.txt
M="POLICIES=pressure,cudajl,explicit_free"
env $M WORKLOADS=steady HEAPS="0 256 1024" SYNC_EVERY="1 8 32" TIMEOUT=60 bash bench/h200_matrix.sh build-gpu $O/m 320 3 2>&1 | grep heap
(cd $O && tar czf m.tgz m && rm -rf m)
echo "matrix done at $(( $(date +%s) - T0 )) s"
env $M WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY=1 TIMEOUT=90 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "extras done at $(( $(date +%s) - T0 )) s"
env POLICIES=pressure,explicit_free WORKLOADS=steady HEAPS=256 SYNC_EVERY="8 1" TIMEOUT=60 bash bench/h200_matrix.sh build-gpu-base $O/ab 320 3 2>&1 | sed "s/^/base: /" | grep heap
env POLICIES=pressure,explicit_free WORKLOADS=steady HEAPS=1024 SYNC_EVERY="8" TIMEOUT=60 bash bench/h200_matrix.sh build-gpu-base $O/ab 320 3 2>&1 | sed "s/^/base: /" | grep heap
(cd $O && tar czf ab.tgz ab && rm -rf ab)
echo "ab done at $(( $(date +%s) - T0 )) s"
for k in 8 1; do
  timeout 40 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 \
    --json --quiet --verbose --policy pressure,explicit_free --reps 3 --workload steady --host-heap-mib 256 --sync-every $k \
    > $O/v/v-h256-k$k.json 2> $O/v/v-h256-k$k.err
done
gzip $O/v/*.err
(cd $O && tar czf v.tgz v && rm -rf v)
echo "all done at $(( $(date +%s) - T0 )) s"
