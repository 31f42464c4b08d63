#!/usr/bin/env bash
# Builds and runs the whole test suite twice: Release (with CUDA when the
# toolkit is there; GPU tests skip without a GPU), then Debug with
# AddressSanitizer + UndefinedBehaviorSanitizer on the host-only build.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs=$(nproc)

echo "=== Release build and tests"
cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j"$jobs"
ctest --test-dir build/release --output-on-failure -j"$jobs"

echo "=== Debug + ASan/UBSan build and tests (host backend)"
cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DGCPRESSURE_WITH_CUDA=OFF \
  -DGCPRESSURE_SANITIZE=address,undefined -DGCPRESSURE_BUILD_BENCH=OFF >/dev/null
cmake --build build/asan -j"$jobs"
# Boehm's incremental mode takes write faults on protected pages (mprotect
# dirty bits): ASan must let its SEGV handler through.
export ASAN_OPTIONS=allow_user_segv_handler=1:handle_segv=0:detect_leaks=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir build/asan --output-on-failure -j"$jobs"
