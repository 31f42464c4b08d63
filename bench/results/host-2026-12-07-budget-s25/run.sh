#!/usr/bin/env bash
# Session 25 (issue 23): pressure's GC budget as the knob against each runtime's own mechanism, in the
# runtimes where the own mechanism survives (Lua, Guile, CPython), every workload, 3 reps a cell, main
# e8ebc9b (build/release). Run from the repository root; one table and JSONL per budget here.
D=bench/results/host-2026-12-07-budget-s25
for b in 0.05 0.2 0.5 1.0; do
  GCPRESSURE_GC_BUDGET=$b python3 examples/runtimes/runtimes_compare.py --build build/release --reps 3 \
    --runtimes lua,guile,python --json-out $D/runs-b$b.jsonl > $D/table-b$b.txt 2>&1
  echo "budget $b done"
done
