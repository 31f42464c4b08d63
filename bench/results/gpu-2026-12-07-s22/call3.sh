#!/usr/bin/env bash
# Session 22, third GPU call: a second process of call1's A/B cells at 1 GiB (K = 1, 8) and
# 256 MiB K = 1, interleaved, same builds and carry as call1.sh.                -> n3.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/n3
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "a3 1024 1" "t3 1024 1" "a3 1024 8" "t3 1024 8" "a3 256 1" "t3 256 1" "a4 1024 8" "t4 1024 8"; do
  set -- $cell
  left ${LEFT:-260} || break
  B=build-gpu; [ ${1:0:1} = t ] && B=build-gpu-t
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=35 bash bench/h200_matrix.sh $B $O/n3/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n3.tgz n3 gpu.txt)
done
rm -rf $O/n3
echo "all done at $(( $(date +%s) - T0 )) s"
