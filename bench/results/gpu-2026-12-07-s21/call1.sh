#!/usr/bin/env bash
# Prepared, not run (no machine started in session 21): session 20's prepared traces (next.sh: verbose
# 256 MiB K = 1 x18 repetitions, K = 8/32 start-up, 1 GiB K = 1 minor costs),
# then issue 22's Python package (examples/python/h200_python.sh) on main.
# Build (sm_90) as gpu-2026-12-07-s20/run.sh; carry build-gpu/runtime-libs,
# build-gpu/examples/forward_loop, build-gpu/examples/torch/libgcpressure_torch.so.
set -u
bash bench/results/gpu-2026-12-07-s20/next.sh
mkdir -p $OUT/py
OUT=$OUT/py DEADLINE=200 timeout 280 bash examples/python/h200_python.sh build-gpu/examples/torch/libgcpressure_torch.so > /dev/null 2>&1
rm -rf $OUT/py/steps
tail -40 $OUT/py/summary.txt
