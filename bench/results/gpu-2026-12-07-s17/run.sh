#!/usr/bin/env bash
# First GPU call of 2026-12-07, session 17 (issue 20): head 0f4e2c8, whose
# policy is session 15's (852fd88, 80d1818, bfe6f17: never run on a GPU),
# against b0368ea (build-gpu-base, last measured 2026-12-05 on an H100).
# Each phase is its own tarball, so a call cut short still returns what ran.
#  1. steady x heaps 0/256/1024 x K 1/8/32, matrix shape, new build  -> m.tgz
#  2. A/B: base on 256 K 1 / 8 and 1024 K 8 (pressure + oracle)       -> ab.tgz
#  3. promote, burst, varied at 256 MiB, K = 1, new build             -> x.tgz
#  4. --verbose: heap 256 x K 1 and 8, new build                      -> v.tgz
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/m $O/x $O/ab $O/v
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/gpu.txt
nproc >> $O/gpu.txt
M="POLICIES=pressure,cudajl,explicit_free"
for h in 0 256 1024; do
  env $M WORKLOADS=steady HEAPS=$h SYNC_EVERY="1 8 32" TIMEOUT=60 bash bench/h200_matrix.sh build-gpu $O/m 320 3 2>&1 | grep heap
  echo "heap $h done at $(( $(date +%s) - T0 )) s"
done
(cd $O && tar czf m.tgz m gpu.txt && rm -rf m)
for cell in "256 1" "256 8" "1024 8"; do
  [ $(( $(date +%s) - T0 )) -lt 330 ] || break
  set -- $cell
  env POLICIES=pressure,explicit_free WORKLOADS=steady HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=50 bash bench/h200_matrix.sh build-gpu-base $O/ab 320 3 2>&1 | sed "s/^/base: /" | grep heap
done
(cd $O && tar czf ab.tgz ab && rm -rf ab)
echo "ab done at $(( $(date +%s) - T0 )) s"
[ $(( $(date +%s) - T0 )) -lt 420 ] && env $M WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY=1 TIMEOUT=80 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "extras done at $(( $(date +%s) - T0 )) s"
for k in 1 8; do
  [ $(( $(date +%s) - T0 )) -lt 520 ] || break
  timeout 30 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 \
    --json --quiet --verbose --policy pressure,explicit_free --reps 3 --workload steady --host-heap-mib 256 --sync-every $k \
    > $O/v/v-h256-k$k.json 2> $O/v/v-h256-k$k.err
done
gzip $O/v/*.err 2>/dev/null; (cd $O && tar czf v.tgz v && rm -rf v)
echo "all done at $(( $(date +%s) - T0 )) s"
