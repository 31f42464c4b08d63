#!/usr/bin/env bash
# Host A/B (session 22): m = 6dc29d9 (git worktree add /tmp/mainref 6dc29d9; cmake -S
# /tmp/mainref -B /tmp/mainref/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGCPRESSURE_WITH_CUDA=ON,
# as build/release: a build without CUDA ran the host backend differently, 37 runtime-started
# collections where this one has 9), v = 9a5a1b0, Note [A fitted line is tried too] (build/release);
# 3 rounds interleaved, run in the folder the JSONL files go to (files named -v- here).
M=${M:-/tmp/mainref/build/examples/forward_loop}; T=${T:-$(git rev-parse --show-toplevel)/build/release/examples/forward_loop}
for r in 1 2 3; do
  for v in m v; do
    B=$M; [ $v = v ] && B=$T
    for H in 0 256; do
      $B --backend host --iters 200 --hard-limit 64MiB --host-heap-mib $H --sync-every 8 --policy pressure,explicit_free --reps 3 --json --quiet 2>/dev/null | grep '^{' >> ci-$v-h$H.jsonl
    done
    $B --host-heap-mib 256 --iters 1200 --reps 2 --policy pressure,explicit_free --max-seconds 30 --json --quiet 2>/dev/null | grep '^{' >> demo-$v.jsonl
  done
done
echo done
