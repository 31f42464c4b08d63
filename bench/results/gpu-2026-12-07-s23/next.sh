#!/usr/bin/env bash
# Prepared in session 23, not run (no device time left): the GPU A/B of next.patch (Note [A try is
# below the last spaced minor], Note [An idle sync after a collection is not a slack sample]; fake
# clock only) against main's policy. Build both for sm_90 (m = main at 61092b5 or later with the
# policy of 3dfb8f0; n = main + next.patch, e.g. git worktree add /tmp/n && cd /tmp/n && git apply
# <this folder>/next.patch):
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu --target forward_loop      (and the same from /tmp/n into build-gpu-n)
#   bash ../shared/gpu/bundle-libs.sh build-gpu/runtime-libs build-gpu/examples/forward_loop
# carry build-gpu/runtime-libs, build-gpu/examples/forward_loop, build-gpu-n/examples/forward_loop.
# What it should show if the notes hold on the GPU: 256 MiB K = 1 from 2.05x towards 1.39x (the
# first sync's idle sample was the traced cause), no change at heap 0, and 1 GiB K = 8's exposure
# (more tries) not above m's.                                                -> v.tgz, n.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/v $O/n
timeout 40 build-gpu-n/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 \
  --json --quiet --verbose --policy pressure,explicit_free --reps 3 --workload steady --host-heap-mib 256 --sync-every 1 \
  > $O/v/v-n-h256-k1.json 2> $O/v/v-n-h256-k1.err
gzip -f $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
for cell in "m 256 1" "n 256 1" "m2 256 1" "n2 256 1" "m 256 8" "n 256 8" "m 1024 8" "n 1024 8" "n 0 1" "n 1024 1"; do
  set -- $cell
  left ${LEFT:-400} || break
  B=build-gpu; [ ${1:0:1} = n ] && B=build-gpu-n
  env POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=45 \
    bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "all done at $(( $(date +%s) - T0 )) s"
