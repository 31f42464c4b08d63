#!/usr/bin/env bash
# Second GPU call of 2026-12-07, session 17 (issue 20): Note [A smaller
# minor is tried] (build-gpu, eaca7a4) against the tree before it (build-gpu-a:
# 0f4e2c8 plus the verbose line's split of a collection into collector,
# finalizers and frees; the policy of the first call). Each phase its own
# tarball; phases in order of need, each started only while time is left.
#  1. --verbose, new: 256 K 1 (2 reps)                                  -> v.tgz
#  2. steady, pressure + oracle, 3 reps: a on 256 K 1; new on 256 K 1 / 8
#     / 32, 0 K 1, 1024 K 1 / 8 (same machine)                            -> n.tgz
#  3. --verbose, new: 256 K 8, 1024 K 8 and 32 (1 rep)                    -> w.tgz
#  4. varied, promote at 256 K 1, new (pressure, cudajl, oracle)          -> x.tgz
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/v $O/w $O/n $O/x; T0=$(date +%s)
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/gpu.txt; nproc >> $O/gpu.txt
verbose() {  # DIR HEAP K REPS
  timeout 40 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
    --json --quiet --verbose --policy pressure,explicit_free --reps $4 --workload steady --host-heap-mib $2 --sync-every $3 \
    > $1/v-h$2-k$3.json 2> $1/v-h$2-k$3.err
  echo "verbose $2 $3 at $(( $(date +%s) - T0 )) s"
}
verbose $O/v 256 1 2
gzip $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
env $P HEAPS=256 SYNC_EVERY=1 TIMEOUT=50 bash bench/h200_matrix.sh build-gpu-a $O/n/a 320 3 2>&1 | sed "s/^/a: /" | grep heap
for cell in "256 1" "256 8" "1024 8" "0 1" "256 32" "1024 1"; do
  set -- $cell
  left 110 || break
  env $P HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $O/n/new 320 3 2>&1 | grep heap
done
(cd $O && tar czf n.tgz n && rm -rf n)
echo "n done at $(( $(date +%s) - T0 )) s"
for cell in "1024 8" "256 8"; do left 150 && verbose $O/w $cell 1; done
gzip $O/w/*.err 2>/dev/null; (cd $O && tar czf w.tgz w && rm -rf w)
left 170 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote HEAPS=256 SYNC_EVERY=1 TIMEOUT=60 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
