#!/usr/bin/env bash
# Fifth GPU call of 2026-12-06, session 14 (issue 20), trimmed to the device
# time left: Note [The guess is what a queued iteration leaves] (with the
# host's pauses) and Note [A hint decides at its time] (build-gpu = 4de8cc3,
# the commit of both) against 80de63e (build-gpu-base), interleaved per cell,
# the matrix's process shape (pressure and the oracle, 3 repetitions per
# process); then the new build's 256 MiB, K = 8 with --verbose.
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/gpu.txt
M="POLICIES=pressure,explicit_free"
for cell in "256 8" "256 1" "256 32" "1024 8"; do
  set -- $cell
  for v in base new; do
    b=build-gpu; [ $v = base ] && b=build-gpu-base
    mkdir -p $O/ab/$v
    env $M WORKLOADS=steady HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=60 bash bench/h200_matrix.sh $b $O/ab/$v 320 3 2>&1 | sed "s/^/$v: /" | grep heap
  done
  (cd $O && tar czf ab-$1-$2.tgz ab gpu.txt)
  echo "cell $cell done at $(( $(date +%s) - T0 )) s"
done
rm -f $O/ab-*.tgz; (cd $O && tar czf ab.tgz ab gpu.txt && rm -rf ab)
mkdir -p $O/v
timeout 40 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 \
  --json --quiet --verbose --policy pressure,explicit_free --reps 3 --workload steady --host-heap-mib 256 --sync-every 8 \
  > $O/v/v-new-h256-k8.json 2> $O/v/v-new-h256-k8.err
gzip $O/v/*.err
(cd $O && tar czf v.tgz v && rm -rf v)
echo "all done at $(( $(date +%s) - T0 )) s"
