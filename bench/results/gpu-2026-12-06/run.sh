#!/usr/bin/env bash
# GPU call of 2026-12-06 (issues 20, 22): the forward-loop matrix after 3b2864c
# (a refuted lag guess halves; a busy sync before the device's time is measured
# uses it), then the Python package. Run on the GPU machine from the repository
# root, carrying build-gpu/examples/forward_loop, build-gpu/runtime-libs and
# build-gpu/examples/torch/libgcpressure_torch.so. Heap 0 runs K = 8 only (1.36x at
# every K in the call before). Writes $OUT/all.tgz (m d x) and $OUT/py.tgz.
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/m $O/d $O/x
S="--backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 --json --quiet --verbose --policy pressure --workload steady"
for c in ${VERBOSE:-256,1 1024,8}; do IFS=, read -r heap k <<<"$c"
  timeout 30 build-gpu/examples/forward_loop $S --host-heap-mib $heap --sync-every $k > $O/d/v-h$heap-k$k.json 2> $O/d/v-h$heap-k$k.err; done
gzip $O/d/*.err
M="POLICIES=pressure,cudajl,explicit_free"
env $M WORKLOADS=steady HEAPS=0 SYNC_EVERY=8 TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $O/m 320 3 2>&1 | grep heap
env $M WORKLOADS=steady HEAPS="256 1024" SYNC_EVERY="1 8 32" TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $O/m 320 3 2>&1 | grep heap
env $M WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY="1 8" TIMEOUT=90 bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
python3 bench/summarize.py $O/m/matrix-*.jsonl > $O/m/matrix.md
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/m/gpu.txt
(cd $O && tar czf all.tgz m d x && rm -rf m d x)
OUT=$O/py DEADLINE=${PY_DEADLINE:-80} timeout ${PY_TIMEOUT:-120} bash examples/python/h200_python.sh \
  build-gpu/examples/torch/libgcpressure_torch.so > /dev/null 2>&1
(cd $O && tar czf py.tgz py && rm -rf py)
