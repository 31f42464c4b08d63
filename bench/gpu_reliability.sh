#!/usr/bin/env bash
# GPU reliability runs (issue 6; docs/RELIABILITY.md, rows marked "H200"):
# builds the CUDA tests, runs them plainly, then under compute-sanitizer
# (memcheck with leak checking, racecheck, synccheck; initcheck with
# INITCHECK=1), and runs the shutdown helper's CUDA modes. Needs a GPU.
#
#   bash bench/gpu_reliability.sh            # everything; logs in $BUILD/gpu-reliability-logs
#   BUILD=build-x SOAK_ALLOCS=1000000 bash bench/gpu_reliability.sh
#
# Environment:
#   BUILD              build directory (default build-gpu-reliability)
#   SOAK_ALLOCS        GpuSoak total allocations in the plain run (default 1000000)
#   SAN_SOAK_ALLOCS    the same under compute-sanitizer (default 20000: kernels are instrumented)
#   COMPUTE_SANITIZER  path of compute-sanitizer (default: PATH, then /usr/local/cuda/bin)
#   INITCHECK=1        also run initcheck
# Exit status: 0 when every run passed and every sanitizer reported 0 errors.
set -uo pipefail
cd "$(dirname "$0")/.."

BUILD=${BUILD:-build-gpu-reliability}
SOAK_ALLOCS=${SOAK_ALLOCS:-1000000}
SAN_SOAK_ALLOCS=${SAN_SOAK_ALLOCS:-20000}
CS=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)}
LOGS=$BUILD/gpu-reliability-logs

command -v nvidia-smi >/dev/null && nvidia-smi -L
[ -x "$CS" ] || { echo "compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 2; }

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGCPRESSURE_WITH_CUDA=ON \
  -DGCPRESSURE_BUILD_BENCH=OFF -DGCPRESSURE_BUILD_EXAMPLES=OFF >/dev/null || exit 2
cmake --build "$BUILD" -j"$(nproc)" --target test_gpu test_gpu_reliability test_shutdown \
  gcpressure_shutdown_helper gcpressure_shutdown_capi_helper || exit 2
mkdir -p "$LOGS"

T=$BUILD/tests/test_gpu
R=$BUILD/tests/reliability/test_gpu_reliability
H=$BUILD/tests/reliability/gcpressure_shutdown_helper
# Tests that leak device memory on purpose (a heap destroyed with live
# handles): excluded from leak-checking runs, run separately without.
LEAKY='*DocumentedLeak*'

summary=()
failed=0
run() {  # run <name> <command...>
  local name=$1; shift
  local t0=$SECONDS
  echo "=== $name"
  if "$@" >"$LOGS/$name.log" 2>&1; then
    summary+=("PASS  $(printf '%5ds' $((SECONDS - t0)))  $name")
  else
    summary+=("FAIL  $(printf '%5ds' $((SECONDS - t0)))  $name  (see $LOGS/$name.log)")
    failed=1
  fi
  grep -E "ERROR SUMMARY|LEAK SUMMARY|\[ (gpu|gpu soak|gpu faults|gpu shutdown) \]|PASSED|FAILED|SKIPPED" \
    "$LOGS/$name.log" | head -20
}
san() {  # san <tool> <extra args...> -- <command...>
  local tool=$1; shift
  local args=()
  while [ "$1" != "--" ]; do args+=("$1"); shift; done
  shift
  "$CS" --tool "$tool" --error-exitcode 1 "${args[@]}" "$@"
}

# 1. Plain runs: the data checks of the tests themselves.
run plain_test_gpu "$T"
run plain_test_gpu_reliability env GCPRESSURE_GPU_SOAK_ALLOCS="$SOAK_ALLOCS" "$R"
run plain_shutdown_cuda_static "$H" cuda-static-heap
run plain_shutdown_cuda_leaked "$H" cuda-leaked-heap
run plain_test_shutdown_cuda "$BUILD/tests/reliability/test_shutdown" --gtest_filter='ShutdownAfterMain.Cuda*'

# 2. memcheck (+ leak check on the runs that must not leak).
export GCPRESSURE_GPU_SOAK_ALLOCS=$SAN_SOAK_ALLOCS GCPRESSURE_GPU_FAULT_OPS=1500
run memcheck_test_gpu san memcheck --leak-check full -- "$T"
run memcheck_test_gpu_reliability san memcheck --leak-check full -- "$R" --gtest_filter="-$LEAKY"
run memcheck_documented_leak san memcheck -- "$R" --gtest_filter="$LEAKY"
run memcheck_shutdown_cuda_static san memcheck -- "$H" cuda-static-heap
run memcheck_shutdown_cuda_leaked san memcheck -- "$H" cuda-leaked-heap

# 3. racecheck and synccheck (shared-memory hazards and barrier misuse in
# our kernels; the pool's cross-stream ordering is checked by the data).
run racecheck_test_gpu san racecheck -- "$T"
run racecheck_test_gpu_reliability san racecheck -- "$R"
run synccheck_test_gpu san synccheck -- "$T"
run synccheck_test_gpu_reliability san synccheck -- "$R"

# 4. Optional initcheck (reads of device memory never written).
if [ "${INITCHECK:-0}" = 1 ]; then
  run initcheck_test_gpu san initcheck -- "$T"
  run initcheck_test_gpu_reliability san initcheck -- "$R"
fi

echo
echo "=== summary (logs in $LOGS)"
printf '%s\n' "${summary[@]}"
exit $failed
