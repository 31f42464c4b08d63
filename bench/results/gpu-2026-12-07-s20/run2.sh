#!/usr/bin/env bash
# Second GPU call of session 20 (issue 20): t = 8a89bcd (Note [The loop's
# first minors are tried smaller]) against s (ebef4d7, main before it) on
# the same machine. Build (sm_90) here: build-gpu = t, build-gpu-s = s
# (cmake -S . -B DIR -G Ninja -DCMAKE_BUILD_TYPE=Release
# -DCMAKE_CUDA_ARCHITECTURES=90; cmake --build DIR --target forward_loop);
# bash ../shared/gpu/bundle-libs.sh build-gpu/runtime-libs build-gpu/examples/forward_loop;
# carry build-gpu/runtime-libs and both forward_loop binaries.
#  1. --verbose t: 256 K 1 (2 reps), 1024 K 8 (1 rep)                  -> v.tgz
#  2. steady, pressure + oracle, 3 reps: 256 K 1 (t, s, t), 256 K 8/32,
#     0 K 1/8, 1024 K 1/8/32 (t), 256 K 8 (s)                            -> n.tgz
#  3. varied, promote, burst at 256 K 1 (t: pressure, cudajl, oracle)   -> x.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/v $O/n $O/x
vb() {  # BUILD HEAP K REPS
  timeout 40 $1/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
    --json --quiet --verbose --policy pressure,explicit_free --reps $4 --workload steady --host-heap-mib $2 --sync-every $3 \
    > $O/v/v-h$2-k$3.json 2> $O/v/v-h$2-k$3.err
}
vb build-gpu 256 1 2; vb build-gpu 1024 8 1
gzip $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
echo "v done at $(( $(date +%s) - T0 )) s"
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "t 256 1" "s 256 1" "t 256 8" "t 1024 8" "t 0 1" "t 256 32" "t 1024 32" "t 1024 1" \
            "t 0 8" "s 256 8" "t2 256 1"; do
  set -- $cell
  left 400 || break
  B=build-gpu; [ $1 = s ] && B=build-gpu-s
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=35 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
left 470 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=85 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
