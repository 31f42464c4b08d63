#!/usr/bin/env bash
# Second GPU call of 2026-12-07, session 17 (issue 20): Note [A smaller
# minor is tried] (build-gpu) against the tree before it (build-gpu-a: 0f4e2c8
# plus the verbose line's split of a collection: collector, finalizers,
# frees; the policy of the first call). Each phase its own tarball.
#  1. --verbose, new build: 256 K 1 (2 reps), 256 K 8, 1024 K 8        -> v.tgz
#  2. steady, pressure + oracle, 3 reps: new on 256 K 1/8/32, 0 K 1,
#     1024 K 1/8; build-gpu-a on 256 K 1 (same machine)               -> n.tgz
#  3. varied, promote at 256 K 1, new (pressure, cudajl, oracle)       -> x.tgz
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/v $O/n $O/x; T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/gpu.txt; nproc >> $O/gpu.txt
for cell in "256 1 2" "256 8 1" "1024 8 1"; do
  set -- $cell
  timeout 40 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
    --json --quiet --verbose --policy pressure,explicit_free --reps $3 --workload steady --host-heap-mib $1 --sync-every $2 \
    > $O/v/v-h$1-k$2.json 2> $O/v/v-h$1-k$2.err
  echo "verbose $cell at $(( $(date +%s) - T0 )) s"
done
gzip $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
env $P HEAPS=256 SYNC_EVERY=1 TIMEOUT=50 bash bench/h200_matrix.sh build-gpu-a $O/n/a 320 3 2>&1 | sed "s/^/a: /" | grep heap
for h in 256 0 1024; do
  ks="1 8 32"; [ $h = 0 ] && ks=1; [ $h = 1024 ] && ks="1 8"
  [ $(( $(date +%s) - T0 )) -lt 420 ] || break
  env $P HEAPS=$h SYNC_EVERY="$ks" TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $O/n/new 320 3 2>&1 | grep heap
done
(cd $O && tar czf n.tgz n && rm -rf n)
echo "n done at $(( $(date +%s) - T0 )) s"
[ $(( $(date +%s) - T0 )) -lt 470 ] && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote HEAPS=256 SYNC_EVERY=1 TIMEOUT=60 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
