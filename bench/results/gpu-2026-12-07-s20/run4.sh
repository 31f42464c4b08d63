#!/usr/bin/env bash
# Fourth GPU call of session 20 (issue 20): u (main) against s (ebef4d7)
# again, interleaved processes on one machine, to tell the policy from the
# process-to-process spread (calls 2 and 3 disagreed on t vs s). Builds and
# carry as run3.sh. Steady, pressure + oracle, 3 reps per process:
# 256 K 1 (u, s alternating, 4 each), 256 K 8 (2 each), 1024 K 32 (1 each).
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/n
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "u1 256 1" "s1 256 1" "u2 256 1" "s2 256 1" "u3 256 1" "s3 256 1" "u4 256 1" "s4 256 1" \
            "u1 256 8" "s1 256 8" "u2 256 8" "s2 256 8" "u1 1024 32" "s1 1024 32"; do
  set -- $cell
  left 330 || break
  B=build-gpu; [ ${1:0:1} = s ] && B=build-gpu-s
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=35 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n gpu.txt)
done
echo "all done at $(( $(date +%s) - T0 )) s"
