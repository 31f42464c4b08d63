#!/usr/bin/env bash
# Builds the library and runs the main job: the Julia-style forward loop,
# on CUDA when a GPU is present, else on the host (simulated device) backend.
# Extra arguments go to forward_loop (e.g. --policy at_limit --iters 200).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$(nproc)" --target forward_loop
exec ./build/release/examples/forward_loop "$@"
