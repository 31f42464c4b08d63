#!/usr/bin/env bash
# Second GPU call of 2026-12-06, session 14 (issue 20): Note [The guess is
# what a queued iteration leaves] (build-gpu, working tree on 80de63e)
# against 80de63e (build-gpu-base), interleaved per cell, the matrix's
# process shape (pressure and the oracle, 3 repetitions per process).
# Then one verbose run of each at 1 GiB, K = 8. One tarball per phase.
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/gpu.txt
M="POLICIES=pressure,explicit_free"
for cell in "256 8" "1024 8" "256 32" "1024 32" "256 1"; do
  set -- $cell
  for v in base new; do
    b=build-gpu; [ $v = base ] && b=build-gpu-base
    mkdir -p $O/ab/$v
    env $M WORKLOADS=steady HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=60 bash bench/h200_matrix.sh $b $O/ab/$v 320 3 2>&1 | sed "s/^/$v: /" | grep heap
  done
  echo "cell $cell done at $(( $(date +%s) - T0 )) s"
done
(cd $O && tar czf ab.tgz ab gpu.txt && rm -rf ab)
mkdir -p $O/v
for v in base new; do
  b=build-gpu; [ $v = base ] && b=build-gpu-base
  timeout 60 $b/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 \
    --json --quiet --verbose --policy pressure,explicit_free --workload steady --host-heap-mib 1024 --sync-every 8 \
    > $O/v/v-$v-h1024-k8.json 2> $O/v/v-$v-h1024-k8.err
done
gzip $O/v/*.err
(cd $O && tar czf v.tgz v && rm -rf v)
echo "all done at $(( $(date +%s) - T0 )) s"
