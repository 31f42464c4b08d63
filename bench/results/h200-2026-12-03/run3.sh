#!/usr/bin/env bash
# H200 run 3 of 2026-12-03: the matrix of run.sh (VERBOSE cases below), then
# examples/python/h200_python.sh (issue 22) with a 100 s deadline, in one call.
VERBOSE="0,8 256,32 1024,1" MIXED_TIMEOUT=80 bash bench/results/h200-2026-12-03/run.sh
mkdir -p $OUT/python
OUT=$OUT/python DEADLINE=100 bash examples/python/h200_python.sh build-gpu/examples/torch/libgcpressure_torch.so > /dev/null 2>&1
rm -rf $OUT/python/steps
tail -3 $OUT/python/summary.txt
