#!/usr/bin/env bash
# Third GPU call of session 20 (issue 20): u = main with Note [The loop's
# first minors are tried smaller] at about the first samples' size (the
# commit after 8a89bcd) against s (ebef4d7) on the same machine; builds and
# carry as run2.sh (build-gpu = u, build-gpu-s = s).
#  1. --verbose u: 256 K 1 (2 reps)                                     -> v.tgz
#  2. steady, pressure + oracle, 3 reps per process: 256 K 1 (u x3, s x2,
#     interleaved), 256 K 8/32, 0 K 1/8, 1024 K 1/8/32 (u)               -> n.tgz
#  3. varied, promote, burst at 256 K 1 (u: pressure, cudajl, oracle)   -> x.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/v $O/n $O/x
timeout 40 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
  --json --quiet --verbose --policy pressure,explicit_free --reps 2 --workload steady --host-heap-mib 256 --sync-every 1 \
  > $O/v/v-h256-k1.json 2> $O/v/v-h256-k1.err
gzip $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
echo "v done at $(( $(date +%s) - T0 )) s"
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "u 256 1" "s 256 1" "u2 256 1" "s2 256 1" "u3 256 1" "u 256 8" "u 256 32" "u 0 1" "u 0 8" \
            "u 1024 1" "u 1024 8" "u 1024 32"; do
  set -- $cell
  left 420 || break
  B=build-gpu; [ ${1:0:1} = s ] && B=build-gpu-s
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=35 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
left 480 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=85 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
