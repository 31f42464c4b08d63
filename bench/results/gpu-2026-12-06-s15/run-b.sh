#!/usr/bin/env bash
# Second GPU call of 2026-12-06, session 15 (issues 20, 22): Note [The
# budget starts with the loop] + Note [A budget of one second] (852fd88) and
# Note [A slope needs young bytes that differ] + Note [A fit does not run
# away] (build-gpu, the working tree after 2ab3b16) against b0368ea (build-gpu-base), each
# cell's two processes back to back (pressure and the oracle, 3 repetitions
# a process, the matrix's shape); the 256 MiB cells twice (the 52x
# repetitions); then --verbose (new, 256 MiB, K = 1 and 8, two processes
# each: the non-collecting syncs are now logged); the mixed workloads with
# the new build; the Python package if time is left. Tarballs per phase.
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/gpu.txt
P="POLICIES=pressure,explicit_free"
for cell in "256 1" "256 8" "1024 8" "256 1" "256 8" "1024 1"; do
  [ $(( $(date +%s) - T0 )) -lt 200 ] || break  # device time: what is left after failed starts
  set -- $cell
  for v in base new; do
    b=build-gpu; [ $v = base ] && b=build-gpu-base
    mkdir -p $O/ab/$v/$1-$2
    env $P WORKLOADS=steady HEAPS=$1 SYNC_EVERY=$2 TIMEOUT=60 bash bench/h200_matrix.sh $b $O/ab/$v/$1-$2 320 3 2>&1 | sed "s/^/$v: /" | grep heap
    mv $O/ab/$v/$1-$2/matrix-*.jsonl $O/ab/$v/$1-$2/run-$(date +%s%N).jsonl 2>/dev/null
  done
  echo "cell $cell done at $(( $(date +%s) - T0 )) s"
done
(cd $O && tar czf ab.tgz ab gpu.txt && rm -rf ab)
mkdir -p $O/v
for k in 1 8 1 8; do
  [ $(( $(date +%s) - T0 )) -lt 270 ] || break
  n=v-h256-k$k-$(date +%s)
  timeout 30 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 \
    --json --quiet --verbose --policy pressure,explicit_free --reps 3 --workload steady --host-heap-mib 256 --sync-every $k \
    > $O/v/$n.json 2> $O/v/$n.err
done
gzip $O/v/*.err; (cd $O && tar czf v.tgz v && rm -rf v)
echo "verbose done at $(( $(date +%s) - T0 )) s"
mkdir -p $O/x
[ $(( $(date +%s) - T0 )) -lt 300 ] && env POLICIES=pressure,cudajl,explicit_free WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY=1 TIMEOUT=90 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
(cd $O && tar czf x.tgz x && rm -rf x)
echo "extras done at $(( $(date +%s) - T0 )) s"
if [ $(( $(date +%s) - T0 )) -lt 360 ]; then
  OUT=$O/py DEADLINE=60 timeout 100 bash examples/python/h200_python.sh build-gpu/examples/torch/libgcpressure_torch.so > /dev/null 2>&1
  (cd $O && tar czf py.tgz py && rm -rf py)
fi
echo "all done at $(( $(date +%s) - T0 )) s"
