#!/usr/bin/env bash
# A shorter A/B for a call of <= 400 s (session 21, issue 20; prepared, not run:
# no machine started): m = 3c6da5b (the policy before Note [Waiting pays only
# the fixed part]; build-gpu) against t = 6a5d134 (that Note, as landed;
# build-gpu-t), steady, pressure + oracle, 3 reps a process, 320 iterations.
# Build each commit (a git worktree for the older one) for sm_90 as
# gpu-2026-12-07-s20/run.sh says; carry build-gpu/runtime-libs,
# build-gpu/examples/forward_loop, build-gpu-t/examples/forward_loop.   -> n.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/n
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "t 256 1" "m 256 1" "t 1024 8" "m 1024 8" "t 256 8" "m 256 8" "t2 256 1" "m2 256 1" "t 1024 1" "m 1024 1" \
            "t 256 32" "m 256 32"; do
  set -- $cell
  left ${LEFT:-320} || break  # LEFT: start no cell after this many seconds
  B=build-gpu; [ ${1:0:1} = t ] && B=build-gpu-t
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=35 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
rm -rf $O/n
echo "all done at $(( $(date +%s) - T0 )) s"
