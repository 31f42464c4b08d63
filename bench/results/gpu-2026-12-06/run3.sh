#!/usr/bin/env bash
# Third GPU call of 2026-12-06 (issue 20): adf8dd5 (Note [A lag the device did
# not have]) over 3b2864c. First the verbose runs in the matrix's own process
# shape (3 repetitions of pressure, cudajl and the oracle in one process) at the
# cells whose spread had outliers in the second call (256 MiB K = 1: 4.52x in
# one repetition; 1 GiB K = 32: 52.6x), then the steady matrix at 256 MiB and
# 1 GiB and the mixed workloads at 256 MiB. Each phase leaves one tarball in
# $OUT (v.tgz, m.tgz, x.tgz), so a phase cut short still returns the others.
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/v $O/m $O/x
S="--backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 --json --quiet --verbose --reps 3 --policy pressure,cudajl,explicit_free --workload steady"
for c in ${VERBOSE:-256,1 1024,32 1024,8}; do IFS=, read -r heap k <<<"$c"
  timeout 60 build-gpu/examples/forward_loop $S --host-heap-mib $heap --sync-every $k > $O/v/v-h$heap-k$k.json 2> $O/v/v-h$heap-k$k.err; done
gzip $O/v/*.err; (cd $O && tar czf v.tgz v && rm -rf v)
M="POLICIES=pressure,cudajl,explicit_free"
env $M WORKLOADS=steady HEAPS="256 1024" SYNC_EVERY="1 8 32" TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $O/m 320 3 2>&1 | grep heap
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/m/gpu.txt
(cd $O && tar czf m.tgz m && rm -rf m)
env $M WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY="1 8" TIMEOUT=90 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
