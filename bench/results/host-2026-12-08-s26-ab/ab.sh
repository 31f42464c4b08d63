#!/usr/bin/env bash
# Host A/B (session 26), run in this folder: m = main at be39ac8 (git worktree add /tmp/mainref be39ac8;
# cmake -S /tmp/mainref -B /tmp/mainref/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGCPRESSURE_WITH_CUDA=ON),
# v = main + Note [An overrun minor does not refute the guess] (build/release). Session 22's script:
# CI class (K = 8, heaps 0 and 256) and the demo's loop, 3 rounds interleaved; then
# python3 ../host-2026-12-07-s22-ab/table.py here.
M=${M:-/tmp/mainref/build/examples/forward_loop} T=${T:-$(git rev-parse --show-toplevel)/build/release/examples/forward_loop} \
  bash "$(dirname "$0")/../host-2026-12-07-s22-ab/ab.sh"
