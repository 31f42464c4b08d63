#!/usr/bin/env bash
# Host A/B (session 22, second): m = 9a5a1b0 (build-gpu-t/examples/forward_loop, the sm_90 build, run on
# the host backend), v = Note [A pause the poll refutes] (build/release); CI class, K = 8, heaps 0 and
# 256, 4 rounds interleaved, 3 repetitions a process. Run in this folder; table: python3 ../host-2026-12-07-s22-ab/table.py
R=$(git rev-parse --show-toplevel)
M=${M:-$R/build-gpu-t/examples/forward_loop}; T=${T:-$R/build/release/examples/forward_loop}
for r in 1 2 3 4; do
  for v in m v; do
    B=$M; [ $v = v ] && B=$T
    for H in 0 256; do
      $B --backend host --iters 200 --hard-limit 64MiB --host-heap-mib $H --sync-every 8 --policy pressure,explicit_free --reps 3 --json --quiet 2>/dev/null | grep '^{' >> ci-$v-h$H.jsonl
    done
  done
done
echo done
