#!/usr/bin/env bash
# Session 26: the six runtimes side by side (runtimes_compare.py, 3 reps a cell), m = main at be39ac8
# (git worktree add /tmp/mainref be39ac8; cmake -S /tmp/mainref -B /tmp/mainref/build -G Ninja
# -DCMAKE_BUILD_TYPE=Release -DGCPRESSURE_WITH_CUDA=ON; cmake --build /tmp/mainref/build) and n = main +
# Note [An overrun minor does not refute the guess] (build/release), two rounds interleaved. Run from the
# repository root; the tables and every run's JSON go to this folder; then, in this folder,
# python3 ../host-2026-12-07-runtimes-s25/table.py.
D=bench/results/host-2026-12-08-runtimes-s26
for r in 1 2; do
  for v in m n; do
    B=build/release; [ $v = m ] && B=/tmp/mainref/build
    S=examples/runtimes/runtimes_compare.py; [ $v = m ] && S=/tmp/mainref/examples/runtimes/runtimes_compare.py
    python3 $S --build $B --reps 3 --json-out $D/runs-$v-$r.jsonl > $D/table-$v-$r.txt 2>&1
    echo "$v round $r done"
  done
done
