#!/usr/bin/env bash
# Host A/B (session 25), run in this folder: m = main at f06a421 (/tmp/mainref/build, as in
# ../host-2026-12-07-runtimes-s25/ab.sh), v = main + Note [The loop's first sync learns its minor]
# (build/release). Session 22's script: CI class (K = 8, heaps 0 and 256) and the demo's loop, 3 rounds
# interleaved; then python3 ../host-2026-12-07-s22-ab/table.py here.
M=${M:-/tmp/mainref/build/examples/forward_loop} T=${T:-$(git rev-parse --show-toplevel)/build/release/examples/forward_loop} \
  bash "$(dirname "$0")/../host-2026-12-07-s22-ab/ab.sh"
