#!/usr/bin/env bash
# Session 25, call 2 (the same machine, warm): issue 22's Python suite with n's plug-in library
# (build-gpu-n/examples/torch/libgcpressure_torch.so), then m beside n at 1 GiB K = 8 (steady, as call 1).
set -uo pipefail
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
OUT=$O/py DEADLINE=${DEADLINE:-200} bash examples/python/h200_python.sh build-gpu-n/examples/torch/libgcpressure_torch.so 2>&1 | tail -30
mkdir -p $O/n2
for cell in "m 1024 8" "n 1024 8" "m 256 1" "n 256 1"; do
  set -- $cell
  left ${LEFT:-420} || break
  B=build-gpu; [ $1 = n ] && B=build-gpu-n
  env POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=60 \
    bash bench/h200_matrix.sh $B $O/n2/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n2.tgz n2 gpu.txt)
done
rm -rf $O/n2
echo "all done at $(( $(date +%s) - T0 )) s"
