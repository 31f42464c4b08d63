#!/usr/bin/env bash
# GPU call of 2026-12-07, session 19 (issues 20, 22). Builds (forward_loop):
#   a   = 0f4e2c8 (build-gpu-a; session 17's H100 matrix)
#   new = 5c26831 (build-gpu; Note [A smaller minor is tried], never run on a GPU)
#   p   = new + a cheaper try is repeated at the next sync (build-gpu-p)
#   f   = p + Note [A minor's exposed part is the mean of its overruns] and
#         Note [Waiting only costs more] (build-gpu-f)
# Each phase is its own tarball, started only while time is left.
#  1. --verbose, f: 256 K 1 (2 reps)                                  -> v.tgz
#  2. steady, pressure + oracle, 3 reps, same machine: 256 K 1 (a, new,
#     p, f), 256 K 8 and 1024 K 8 (new, p, f), 1024 K 1 (new, f)       -> n.tgz
#  3. the Python package (examples/python/h200_python.sh, on new)      -> python-*
#  4. varied, promote, burst at 256 K 1 (f: pressure, cudajl, oracle)  -> x.tgz
#  5. steady, f: 0 K 1, 256 K 32, 1024 K 32, 0 K 8                     -> m.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
mkdir -p $O/v $O/n $O/m $O/x
timeout 40 build-gpu-f/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
  --json --quiet --verbose --policy pressure,explicit_free --reps 2 --workload steady --host-heap-mib 256 --sync-every 1 \
  > $O/v/v-f-h256-k1.json 2> $O/v/v-f-h256-k1.err
gzip $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
echo "v done at $(( $(date +%s) - T0 )) s"
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "a 256 1" "new 256 1" "p 256 1" "f 256 1" "new 256 8" "p 256 8" "f 256 8" \
            "new 1024 8" "p 1024 8" "f 1024 8" "f 1024 1" "new 1024 1"; do
  set -- $cell
  left 300 || break
  B=build-gpu; [ $1 != new ] && B=build-gpu-$1
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=40 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
if left 400; then
  OUT=$O/python DEADLINE=90 bash examples/python/h200_python.sh build-gpu/examples/torch/libgcpressure_torch.so > /dev/null 2>&1
  cp $O/python/python-results.tar.gz $O/ 2>/dev/null; cp $O/python/summary.txt $O/python-summary.txt 2>/dev/null
  cp $O/python/results.json $O/python-results.json 2>/dev/null; rm -rf $O/python
  echo "python done at $(( $(date +%s) - T0 )) s"
fi
left 500 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote,burst HEAPS=256 SYNC_EVERY=1 TIMEOUT=50 bash bench/h200_matrix.sh build-gpu-f $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
for cell in "0 1" "256 32" "1024 32" "0 8"; do
  set -- $cell
  left 545 || break
  env $P HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=25 bash bench/h200_matrix.sh build-gpu-f $O/m 320 3 2>&1 | grep heap
  (cd $O && tar czf m.tgz m)
done
rm -rf $O/m
echo "all done at $(( $(date +%s) - T0 )) s"
