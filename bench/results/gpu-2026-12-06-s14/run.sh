#!/usr/bin/env bash
# First GPU call of 2026-12-06, session 14 (issue 20): head (80de63e = the
# fixes 1dce9d6 and d5002d9, not yet run on a GPU). Each phase is its own
# tarball, so a call cut short still returns what ran.
#  1. steady x heaps 0/256/1024 x K 1/8/32, matrix shape       -> m.tgz
#  2. the same process shape with --verbose: heap 256 x K 1/8,
#     heap 1024 x K 8 (where the start-up peaks were)         -> v.tgz
#  3. promote, burst, varied at 256 MiB, K = 1                 -> x.tgz
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/m $O/v $O/x
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/m/gpu.txt
M="POLICIES=pressure,cudajl,explicit_free"
env $M WORKLOADS=steady HEAPS="0 256 1024" SYNC_EVERY="1 8 32" TIMEOUT=60 bash bench/h200_matrix.sh build-gpu $O/m 320 3 2>&1 | grep heap
(cd $O && tar czf m.tgz m && rm -rf m)
echo "matrix done at $(( $(date +%s) - T0 )) s"
V='SHAPE=--layers 8 --d 4096 --batch 1024 --verbose'
env $M "$V" WORKLOADS=steady HEAPS=256 SYNC_EVERY="1 8" TIMEOUT=60 bash bench/h200_matrix.sh build-gpu $O/v 320 3 2>&1 | grep heap
env $M "$V" WORKLOADS=steady HEAPS=1024 SYNC_EVERY="8" TIMEOUT=60 bash bench/h200_matrix.sh build-gpu $O/v 320 3 2>&1 | grep heap
gzip $O/v/*.err
(cd $O && tar czf v.tgz v && rm -rf v)
echo "verbose done at $(( $(date +%s) - T0 )) s"
env $M WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY=1 TIMEOUT=90 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
