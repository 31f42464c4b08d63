#!/usr/bin/env bash
# Host A/B (session 23), run in this folder: m = 5fb91c6 (git worktree add /tmp/mainref 5fb91c6; cmake -S
# /tmp/mainref -B /tmp/mainref/build -G Ninja -DCMAKE_BUILD_TYPE=Release -DGCPRESSURE_WITH_CUDA=ON), v = 3dfb8f0
# (Note [Tries are paced in syncs], Note [A pause the device outlasted is not credited]): a copy of
# build/release/examples/forward_loop at 3dfb8f0 in /tmp/ab-v. Session 22's script, 3 rounds interleaved.
M=${M:-/tmp/mainref/build/examples/forward_loop} T=${T:-/tmp/ab-v/forward_loop} \
  bash "$(dirname "$0")/../host-2026-12-07-s22-ab/ab.sh"
