#!/usr/bin/env bash
# Second GPU call of 2026-12-06, session 13 (issue 20): b2523ee (Note [What a
# cycle reclaimed]) and the device lag's hint end (Note [The next iteration is
# queued after the hint]) on top of f16fa03 (Note [Finishing a cycle costs its rest]).
# Carries the same three paths as run.sh (build-gpu-base: main at 9e20329).
#  1. verbose promote runs at 256 MiB, K = 1 and 8, and steady at 256 MiB, K = 8
#     (fresh process each)
#  2. promote at 256 MiB, K = 1 and 8: base and head interleaved, 3 runs each
#  3. the steady 256 MiB K = 1 cell in the matrix's process shape with
#     GCPRESSURE_VERBOSE=1 (call A's first repetition there peaked at 52x)
#  4. the matrix of head as in run.sh, without heap 0
# Writes $OUT/all.tgz (d ab v m x).
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; mkdir -p $O/m $O/d $O/x $O/ab $O/v
T0=$(date +%s)
SH="--backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 --json --quiet"
for k in 1 8; do
  timeout 30 build-gpu/examples/forward_loop $SH --verbose --policy pressure --workload promote --host-heap-mib 256 \
    --sync-every $k > $O/d/v-promote-h256-k$k.json 2> $O/d/v-promote-h256-k$k.err; done
timeout 30 build-gpu/examples/forward_loop $SH --verbose --policy pressure --workload steady --host-heap-mib 256 \
  --sync-every 8 > $O/d/v-steady-h256-k8.json 2> $O/d/v-steady-h256-k8.err
gzip $O/d/*.err
echo "verbose done at $(( $(date +%s) - T0 )) s"
for k in 1 8; do for r in 1 2 3; do for b in build-gpu-base build-gpu; do
  timeout 40 $b/examples/forward_loop $SH --policy pressure,explicit_free --workload promote --host-heap-mib 256 \
    --sync-every $k 2>/dev/null | grep '^{' >> $O/ab/promote-k$k-${b#build-gpu}.jsonl
done; done; done
echo "a/b done at $(( $(date +%s) - T0 )) s"
M="POLICIES=pressure,cudajl,explicit_free"
env $M GCPRESSURE_VERBOSE=1 WORKLOADS=steady HEAPS=256 SYNC_EVERY=1 TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $O/v 320 3 2>&1 | grep heap
gzip $O/v/*.err
env $M WORKLOADS=steady HEAPS="256 1024" SYNC_EVERY="1 8 32" TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $O/m 320 3 2>&1 | grep heap
env $M WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY="1 8" TIMEOUT=${MIXED_TIMEOUT:-85} bash bench/h200_matrix.sh build-gpu $O/x 320 3 2>&1 | grep heap
python3 bench/summarize.py $O/m/matrix-*.jsonl > $O/m/matrix.md
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/m/gpu.txt
(cd $O && tar czf all.tgz m d x ab v && rm -rf m d x ab v)
echo "all done at $(( $(date +%s) - T0 )) s"
