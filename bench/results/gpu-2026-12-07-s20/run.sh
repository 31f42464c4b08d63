#!/usr/bin/env bash
# First GPU call of session 20 (issue 20): main's policy s (beee4bb:
# Note [The loop's minors price the loop's], Note [A smoothed slack starts as
# a mean]; never run on a GPU before) against p (56031d0, session 19's
# measured build) on the same machine. Build (sm_90), here:
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu --target forward_loop gcpressure_torch      (s = main)
#   the same from a 56031d0 worktree into build-gpu-p                    (p)
#   bash ../shared/gpu/bundle-libs.sh build-gpu/runtime-libs build-gpu/examples/forward_loop
# carry build-gpu/runtime-libs, build-gpu/examples/forward_loop, build-gpu-p/examples/forward_loop.
# Phases, each its own tarball, started only while time is left:
#  1. --verbose, s: 256 K 1 (2 reps)                                   -> v.tgz
#  2. steady, pressure + oracle, 3 reps: 256 K 1/8/32 (s, p), 1024 K 8 (s, p),
#     0 K 1/8, 1024 K 1/32 (s)                                          -> n.tgz
#  3. varied, promote, burst at 256 K 1 (s: pressure, cudajl, oracle)   -> x.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/v $O/n $O/x
timeout 40 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
  --json --quiet --verbose --policy pressure,explicit_free --reps 2 --workload steady --host-heap-mib 256 --sync-every 1 \
  > $O/v/v-s-h256-k1.json 2> $O/v/v-s-h256-k1.err
gzip $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
echo "v done at $(( $(date +%s) - T0 )) s"
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "s 256 1" "p 256 1" "s 256 8" "p 256 8" "s 1024 8" "p 1024 8" "s 0 1" "s 256 32" \
            "s 1024 32" "s 1024 1" "s 0 8" "p 256 32"; do
  set -- $cell
  left 440 || break
  B=build-gpu; [ $1 != s ] && B=build-gpu-$1
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=35 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
left 520 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=60 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
