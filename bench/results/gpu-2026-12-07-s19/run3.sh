#!/usr/bin/env bash
# Third GPU call of session 19 (what device time was left): s = p plus
# Note [The loop's minors price the loop's] and Note [A smoothed slack
# starts as a mean] (the start-up that set p's 256 MiB peaks, call2's
# verbose log) against p, steady, pressure + oracle, 3 reps. Never ran in
# session 19 (device time spent). Build (sm_90): build-gpu-s = beee4bb or
# later main, build-gpu-p = 56031d0 (a worktree), each
#   cmake -S . -B DIR -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build DIR --target forward_loop
# then bash ../shared/gpu/bundle-libs.sh build-gpu/runtime-libs build-gpu-s/examples/forward_loop;
# carry build-gpu/runtime-libs, build-gpu-p/examples/forward_loop, build-gpu-s/examples/forward_loop.
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/s3
for cell in "s 256 1" "p 256 1" "s 256 8" "p 256 8" "s 1024 8"; do
  set -- $cell
  left 95 || break
  env POLICIES=pressure,explicit_free WORKLOADS=steady HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=30 bash bench/h200_matrix.sh build-gpu-$1 $O/s3/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf s3.tgz s3)
done
rm -rf $O/s3
echo "all done at $(( $(date +%s) - T0 )) s"
