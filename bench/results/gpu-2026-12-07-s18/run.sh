#!/usr/bin/env bash
# GPU call of 2026-12-07, session 18 (issues 20, 22): session 17's run3.sh
# (Note [A smaller minor is tried], eaca7a4/e011958, never run on a GPU) plus
# the Python package's script. build-gpu = 0a8e27e (the note's policy; --verbose
# also logs the hints that skip a minor);
# build-gpu-a = 0f4e2c8 plus the verbose line's split (the policy before it);
# build-gpu-b = 92161ad plus a trial, Note [A minor is priced by minors of its
# size] (core/src/cost_model.hpp: called fixed, a minor is priced from the
# samples within 1.5x its young bytes), not landed:
# bench/results/fake-2026-12-07-s18-near-mean/trial-near-mean.patch.
# Each phase is its own tarball, phases in order of need, each started only
# while time is left.
#  1. --verbose, new: 256 K 1 (2 reps)                                  -> v.tgz
#  2. steady, pressure + oracle, 3 reps: a on 256 K 1; new and b on 256 K 1
#     and 8; new on 1024 K 8, 0 K 1, 256 K 32, 1024 K 1 (same machine)   -> n.tgz
#  3. the Python package (examples/python/h200_python.sh, DEADLINE 100)  -> python-results.tar.gz
#  4. --verbose, new: 1024 K 8, 256 K 8 (1 rep)                         -> w.tgz
#  5. varied, promote at 256 K 1, new (pressure, cudajl, oracle)         -> x.tgz
. "$(dirname "$0")/common.sh"
mkdir -p $O/v $O/w $O/n $O/x
verbose $O/v 256 1 2
gzip $O/v/*.err; (cd $O && tar czf v.tgz v gpu.txt && rm -rf v)
P="POLICIES=pressure,explicit_free WORKLOADS=steady"
env $P HEAPS=256 SYNC_EVERY=1 TIMEOUT=50 bash bench/h200_matrix.sh build-gpu-a $O/n/a 320 3 2>&1 | sed "s/^/a: /" | grep heap
for cell in "new 256 1" "b 256 1" "new 256 8" "b 256 8" "new 1024 8" "new 0 1" "new 256 32" "new 1024 1"; do
  set -- $cell
  left 280 || break
  B=build-gpu; [ $1 = b ] && B=build-gpu-b
  env $P HEAPS=$2 SYNC_EVERY=$3 TIMEOUT=50 bash bench/h200_matrix.sh $B $O/n/$1 320 3 2>&1 | sed "s/^/$1: /" | grep heap
done
(cd $O && tar czf n.tgz n && rm -rf n)
echo "n done at $(( $(date +%s) - T0 )) s"
if left 350; then
  OUT=$O/python DEADLINE=100 bash examples/python/h200_python.sh build-gpu/examples/torch/libgcpressure_torch.so > /dev/null 2>&1
  cp $O/python/python-results.tar.gz $O/ 2>/dev/null; cp $O/python/summary.txt $O/python-summary.txt 2>/dev/null
  cp $O/python/results.json $O/python-results.json 2>/dev/null; rm -rf $O/python
  echo "python done at $(( $(date +%s) - T0 )) s"
fi
for cell in "1024 8" "256 8"; do left 470 && verbose $O/w $cell 1; done
gzip $O/w/*.err 2>/dev/null; (cd $O && tar czf w.tgz w && rm -rf w)
left 500 && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=varied,promote HEAPS=256 SYNC_EVERY=1 TIMEOUT=40 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "all done at $(( $(date +%s) - T0 )) s"
