#!/usr/bin/env bash
# Host A/B (session 24), run in this folder: m = 78a9bb4 (main; a copy of build-gpu/examples/forward_loop,
# Release with CUDA, in /tmp/ab-m), v = main + Note [Exposed GC time, measured] (a copy of
# build/release/examples/forward_loop in /tmp/ab-e). Session 22's script, 3 rounds interleaved.
M=${M:-/tmp/ab-m/forward_loop} T=${T:-/tmp/ab-e/forward_loop} \
  bash "$(dirname "$0")/../host-2026-12-07-s22-ab/ab.sh"
