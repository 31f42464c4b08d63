#!/usr/bin/env bash
# The short form of run.sh (same builds), for what device time was left
# after the failed starts: the probe's A/B at 256 MiB K = 1, K = 8 with the
# skipped hints logged, the trial at K = 8; then 1024 K 8 and the Python
# package only if time is left.
. "$(dirname "$0")/common.sh"
mkdir -p $O/v $O/n
verbose $O/v 256 1 1
verbose $O/v 256 8 1
gzip $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
for cell in "a 256 1" "new 256 1" "new 256 8" "b 256 8" "b 256 1" "new 1024 8"; do
  set -- $cell
  left 200 || break
  B=build-gpu; [ $1 = a ] && B=build-gpu-a; [ $1 = b ] && B=build-gpu-b
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=40 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
  (cd $O && tar czf n.tgz n)
done
rm -rf $O/n
echo "n done at $(( $(date +%s) - T0 )) s"
if left 230; then
  OUT=$O/python DEADLINE=60 bash examples/python/h200_python.sh build-gpu/examples/torch/libgcpressure_torch.so > /dev/null 2>&1
  cp $O/python/python-results.tar.gz $O/python/summary.txt $O/python/results.json $O/ 2>/dev/null; rm -rf $O/python
fi
echo "all done at $(( $(date +%s) - T0 )) s"
