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
# STEPS (default "tests bench"): any of tests, bench, numba_suite, opinfo.
# STEP_TIMEOUT (default 150): seconds per step.
# NUMBA_GROUPS (default "cudadrv cudapy"), NUMBA_TIMEOUT (seconds per suite run).
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LIB=${1:?usage: h200.sh path/to/libgcpressure_torch.so}
OUT=${OUT:-$PWD/python-results}
mkdir -p "$OUT"
export GCPRESSURE_TORCH_LIB=$(cd "$(dirname "$LIB")" && pwd)/$(basename "$LIB")
export PYTHONPATH=$HERE${PYTHONPATH:+:$PYTHONPATH} PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3 /opt/torch/.venv/bin/python3 /opt/*/.venv/bin/python3 /opt/*/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import cupy, numba.cuda" >/dev/null 2>&1; then PY=$cand; break; fi
  done
fi
PY=${PY:-python3}
fails=0
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

for s in ${STEPS:-tests bench}; do
  case $s in
    tests) step adaptors "$PY" "$HERE/tests/test_gpu_adaptors.py" ;;
    bench)
      for fw in cupy numba; do
        for mode in gcpressure own; do
          step "bench_${fw}_${mode}" "$PY" "$HERE/tests/bench_cycles.py" --framework $fw --mode $mode ${BENCH_ARGS:-}
        done
      done ;;
    numba_suite)
      for grp in ${NUMBA_GROUPS:-cudadrv cudapy}; do
        for mm in default gcpressure.numba; do
          envs=(); [ $mm = default ] || envs=(NUMBA_CUDA_MEMORY_MANAGER=$mm GCPRESSURE_HARD_LIMIT=${NUMBA_LIMIT:-16GiB})
          t0=$(date +%s)
          env "${envs[@]}" timeout ${NUMBA_TIMEOUT:-150} "$PY" -m numba.runtests -m ${NUMBA_PROCS:-14} \
            "numba.cuda.tests.$grp" > "$OUT/numba_${grp}_${mm}.log" 2>&1
          echo "numba_suite $grp $mm: rc=$? $(( $(date +%s) - t0 )) s; $(grep -E '^(Ran|OK|FAILED)' "$OUT/numba_${grp}_${mm}.log" | tr '\n' ' ')" | tee -a "$OUT/summary.txt"
        done
      done ;;
    opinfo) step opinfo "$PY" "$HERE/tests/opinfo_compare.py" --seconds ${OPINFO_SECONDS:-60} ;;
  esac
done
echo "failed steps: $fails" | tee -a "$OUT/summary.txt"
exit $fails
