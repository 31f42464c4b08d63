#!/usr/bin/env bash
# Session 22, second GPU call: issue 22's Python package on 9a5a1b0's policy (the plug-in
# library of build-gpu-t: cmake --build build-gpu-t --target gcpressure_torch), then
# --verbose traces of t at 256 MiB K = 1 (the late ~15x repetitions of session 20, 3 processes
# x 3 reps) and 1 GiB K = 1 (1 rep).
# Carry: build-gpu/runtime-libs, build-gpu-t/examples/forward_loop,
# build-gpu-t/examples/torch/libgcpressure_torch.so.                     -> py/, v1.tgz
set -u
T0=$(date +%s); O=$OUT
mkdir -p $O/py
OUT=$O/py DEADLINE=200 timeout 290 bash examples/python/h200_python.sh build-gpu-t/examples/torch/libgcpressure_torch.so > /dev/null 2>&1
rm -rf $O/py/steps
tail -40 $O/py/summary.txt
echo "py done at $(( $(date +%s) - T0 )) s"
export LD_LIBRARY_PATH=$PWD/build-gpu/runtime-libs
left() { [ $(( $(date +%s) - T0 )) -lt $1 ]; }
vb() {  # TAG HEAP K REPS
  timeout 45 build-gpu-t/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 \
    --max-seconds 3 --json --quiet --verbose --policy pressure,explicit_free --reps $4 --workload steady \
    --host-heap-mib $2 --sync-every $3 > $O/v1/$1.json 2> $O/v1/$1.err
  gzip -f $O/v1/$1.err
}
mkdir -p $O/v1
for i in 1 2 3; do left 440 || break; vb p$i 256 1 3; (cd $O && tar czf v1.tgz v1); done
left 500 && vb g1 1024 1 1 && (cd $O && tar czf v1.tgz v1)
rm -rf $O/v1
echo "all done at $(( $(date +%s) - T0 )) s"
