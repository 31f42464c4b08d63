export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
mkdir -p $OUT/m $OUT/x $OUT/d
POLICIES=pressure,cudajl,explicit_free WORKLOADS=steady HEAPS="0 256 1024" SYNC_EVERY="1 8 32" TIMEOUT=50 bash bench/h200_matrix.sh build-gpu $OUT/m 320 3 2>&1 | tail -9
POLICIES=pressure,cudajl,explicit_free WORKLOADS=promote,burst,varied HEAPS=256 SYNC_EVERY="1 8" TIMEOUT=75 bash bench/h200_matrix.sh build-gpu $OUT/x 320 3 2>&1 | tail -2
S="--backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 2 --json --quiet --verbose --policy pressure --workload steady"
for c in "256 1" "1024 8" "1024 1"; do set -- $c
  timeout 30 build-gpu/examples/forward_loop $S --host-heap-mib $1 --sync-every $2 > $OUT/d/v-h$1-k$2.json 2> $OUT/d/v-h$1-k$2.err; done
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $OUT/m/gpu.txt
cd $OUT && tar czf all.tgz m x d && rm -rf m x d
