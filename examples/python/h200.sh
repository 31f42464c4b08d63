#!/usr/bin/env bash
# The gcpressure package on the GPU machine (H200: CuPy 14, numba-cuda,
# PyTorch 2.11; no Boehm there, none needed): the adaptors' tests, the cycle
# benchmarks of issue 22 (CuPy and Numba, with gcpressure and with the
# framework's own memory management), optionally numba-cuda's own suites.
# Results (JSON lines, logs, summary.txt) under $OUT.
#
# Build here (standalone: core + the plug-in library, CUDA for sm_90):
#   cmake -S examples/torch -B build/py-cuda -G Ninja -DGCPRESSURE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build/py-cuda -j2 --target gcpressure_torch
# then there: bash examples/python/h200.sh build/py-cuda/libgcpressure_torch.so
# STEPS (default "tests bench pair"): any of tests, bench, pair, numba_suite, opinfo.
# BENCH_ONLY: "framework:mode ..." pairs of the bench step (default all four).
# STEP_TIMEOUT (default 150): seconds per step.
# NUMBA_GROUPS (default "cudadrv cudapy"; "cudapy_subset" = the CUDAPY_SUBSET modules of cudapy),
# NUMBA_TIMEOUT (seconds per suite run), NUMBA_PROCS (runtests -m, default 14).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LIB=${1:?usage: h200.sh path/to/libgcpressure_torch.so}
OUT=${OUT:-$PWD/python-results}
mkdir -p "$OUT"
. "$HERE/gpu_env.sh"
fails=0
# Memory-heavy cudapy modules (arrays, ufuncs on arrays, streams, threads, interop).
CUDAPY_SUBSET=${CUDAPY_SUBSET:-"test_array test_array_args test_array_methods test_array_reductions test_cuda_array_interface
  test_device_array_capture test_gufunc test_matmul test_multithreads test_reduction test_retrieve_autoconverted_arrays
  test_slicing test_stream_api test_sync test_transpose test_vectorize test_laplace test_atomics"}
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "lib: $GCPRESSURE_TORCH_LIB ($(sha256sum "$GCPRESSURE_TORCH_LIB" | cut -c1-16))"
  echo "python: $PY"
  "$PY" - <<'PYV'
import sys
print("python", sys.version.split()[0])
for m in ("cupy", "numba", "torch"):
    try:
        mod = __import__(m); print(m, mod.__version__)
    except Exception as e:
        print(m, "missing:", e)
try:
    import numba_cuda; print("numba_cuda", numba_cuda.__version__)
except Exception as e:
    print("numba_cuda", e)
PYV
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

step() {  # name, command...: log under $OUT, count failures
  local name=$1; shift
  local t0=$(date +%s.%N)
  timeout ${STEP_TIMEOUT:-150} "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.stderr"
  local rc=$?
  echo "$name: rc=$rc $(echo "$(date +%s.%N) - $t0" | bc) s" | tee -a "$OUT/summary.txt"
  [ $rc = 0 ] || { fails=$((fails + 1)); tail -5 "$OUT/$name.stderr"; }
}

for s in ${STEPS:-tests bench pair}; do
  case $s in
    tests) step adaptors "$PY" "$HERE/tests/test_gpu_adaptors.py" ;;
    bench)
      for fm in ${BENCH_ONLY:-cupy:gcpressure cupy:own numba:gcpressure numba:own}; do
        fw=${fm%%:*} mode=${fm##*:}
        step "bench_${fw}_${mode}" "$PY" "$HERE/tests/bench_cycles.py" --framework $fw --mode $mode ${BENCH_ARGS:-}
      done ;;
    numba_suite)
      "$PY" -c "import numba.cuda.tests.cudadrv.test_cuda_memory" > "$OUT/numba_import.log" 2>&1 ||
        { echo "numba_suite: a test module does not import:"; tail -4 "$OUT/numba_import.log"; } | tee -a "$OUT/summary.txt"
      for grp in ${NUMBA_GROUPS:-cudadrv cudapy}; do
        for mm in default gcpressure.numba; do
          envs=(); [ $mm = default ] || envs=(NUMBA_CUDA_MEMORY_MANAGER=$mm GCPRESSURE_HARD_LIMIT=${NUMBA_LIMIT:-16GiB})
          t0=$(date +%s)
          mods=("numba.cuda.tests.$grp")
          [ "$grp" = cudapy_subset ] && mods=($(for m in $CUDAPY_SUBSET; do echo numba.cuda.tests.cudapy.$m; done))
          log=$OUT/numba_${grp}_${mm}.log
          env "${envs[@]}" timeout ${NUMBA_TIMEOUT:-150} "$PY" -m numba.runtests -v -m ${NUMBA_PROCS:-14} \
            "${mods[@]}" > "$log" 2>&1
          rc=$?
          # -v: one line per finished test, so a run the timeout stopped still counts what ran.
          echo "numba_suite $grp $mm: rc=$rc $(( $(date +%s) - t0 )) s; lines ok=$(grep -cE '\.\.\. ok$' "$log") fail=$(grep -cE '\.\.\. FAIL$' "$log") error=$(grep -cE '\.\.\. ERROR$' "$log") skipped=$(grep -cE '\.\.\. skipped' "$log"); $(grep -E '^(Ran|OK|FAILED)' "$log" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
        done
      done ;;
    pair) step pair_cupy "$PY" "$HERE/tests/bench_pair_cupy.py" ;;
    opinfo) step opinfo "$PY" "$HERE/tests/opinfo_compare.py" --seconds ${OPINFO_SECONDS:-60} ;;
  esac
done
echo "failed steps: $fails" | tee -a "$OUT/summary.txt"
# The device tool brings back a few files only: everything in one archive.
(cd "$OUT" && tar czf python-results.tar.gz --exclude python-results.tar.gz . 2>/dev/null)
exit $fails
