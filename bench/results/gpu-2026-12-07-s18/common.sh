# Sourced by run.sh and run-min.sh (the GPU machine, repository root): the
# library path, the clock (left N: fewer than N seconds since the start), the
# card, and verbose DIR HEAP K REPS (one --verbose forward loop, pressure and
# the oracle, steady).
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
O=$OUT; T0=$(date +%s)
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > $O/gpu.txt; nproc >> $O/gpu.txt
verbose() {
  timeout 40 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 --max-seconds 3 \
    --json --quiet --verbose --policy pressure,explicit_free --reps $4 --workload steady --host-heap-mib $2 --sync-every $3 \
    > $1/v-h$2-k$3.json 2> $1/v-h$2-k$3.err
  echo "verbose $2 $3 at $(( $(date +%s) - T0 )) s"
}
