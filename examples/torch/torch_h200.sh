#!/usr/bin/env bash
# Runs the PyTorch allocator's tests on the GPU machine (H200, torch 2.11,
# Python 3.12) and writes every result under $OUT: one .jsonl per test (the
# JSON lines each test prints), its stderr, and summary.txt. About 4 minutes.
#
# Build here first (standalone: core + the plug-in, no Boehm), carry the
# build folder, then run this there from the repo root:
#
#   cmake -S examples/torch -B build/torch-cuda -G Ninja -DGCPRESSURE_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build/torch-cuda -j2 --target gcpressure_torch
#   # there (carry build/torch-cuda):
#   bash examples/torch/torch_h200.sh build/torch-cuda
#
# The library needs nothing but libstdc++ and the driver (cudart is linked
# statically), so no LD_LIBRARY_PATH is needed. The interpreter: $PYTHON, else
# the first of python3 and /opt/torch/.venv/bin/python3 that imports torch.
# QUICK=1 (the default; QUICK=0 for the long versions) runs the short
# versions (--quick) of cycle_loop, training and threads_torch. PIP=1 also
# runs check_pip.sh with this interpreter (needs cmake and a compiler there).
# Exit status: the number of failed steps (0: all passed).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${1:-$ROOT/build-torch-cuda}
LIB=${GCPRESSURE_TORCH_LIB:-}
if [ -z "$LIB" ]; then  # standalone build: the library at the top; root build: under examples/torch
  LIB=$BUILD/libgcpressure_torch.so
  [ -f "$LIB" ] || LIB=$BUILD/examples/torch/libgcpressure_torch.so
fi
OUT=${OUT:-$ROOT/torch-results}
T=$ROOT/examples/torch/tests
mkdir -p "$OUT"

if [ ! -f "$LIB" ]; then
  echo "torch_h200.sh: $LIB not found; build the gcpressure_torch target (see the header of this script)" >&2
  exit 2
fi
export GCPRESSURE_TORCH_LIB=$LIB PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1

PY=${PYTHON:-}
if [ -z "$PY" ]; then
  for cand in python3 /opt/torch/.venv/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch" >/dev/null 2>&1; then PY=$cand; break; fi
  done
fi
if [ -z "$PY" ]; then
  echo "torch_h200.sh: no python3 with torch found (set PYTHON=...)" >&2
  exit 2
fi

QARG=()
[ "${QUICK:-1}" = 1 ] && QARG=(--quick)

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "host: $(hostname)"
  echo "git: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null) $(git -C "$ROOT" status --porcelain 2>/dev/null | wc -l) local changes"
  echo "lib: $LIB ($(sha256sum "$LIB" | cut -c1-16))"
  echo "python: $PY ($("$PY" -c 'import sys; print(sys.version.split()[0])'))"
  "$PY" -c 'import torch; print("torch:", torch.__version__, "cuda:", torch.version.cuda, "available:", torch.cuda.is_available())'
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || echo "nvidia-smi: n/a"
} > "$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

fails=0
declare -a rows
step() {  # step NAME TIMEOUT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc
  echo "=== $name: $*"
  timeout -k 10 "$limit" "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.stderr"
  rc=$?
  local verdict=passed
  if [ $rc -eq 77 ]; then verdict=skipped
  elif [ $rc -ne 0 ]; then verdict="FAILED (rc $rc$([ $rc -eq 124 ] && echo ', timed out'))"; fails=$((fails + 1)); fi
  rows+=("$(printf '%-26s %-28s %5ss' "$name" "$verdict" $((SECONDS - t0)))")
  tail -n 1 "$OUT/$name.jsonl" | cut -c1-600
  [ $rc -ne 0 ] && [ $rc -ne 77 ] && tail -n 20 "$OUT/$name.stderr"
}

# The CPU-side tests first, with this interpreter: the stable-ABI build loads
# into Python 3.12 as into Debian's 3.11 (host backend; CUDA untouched).
step cpu_api 300 "$PY" "$T/test_cpu_api.py" --lib "$LIB"
step cpu_threads 300 "$PY" "$T/test_cpu_ctypes.py" --lib "$LIB" --threads 4 --iters 400
step cpu_native_threads 300 "$PY" "$T/test_cpu_ctypes.py" --lib "$LIB" --threads 3 --iters 300 --native-threads 3 --python-gc off
step cpu_cycle_sim 300 "$PY" "$T/test_cycle_loop.py" --lib "$LIB" --cpu-sim
step cpu_graphs 120 "$PY" "$T/test_cpu_graphs.py" --lib "$LIB"

# The issue's three GPU tests.
step cycle_loop 1200 "$PY" "$T/test_cycle_loop.py" --lib "$LIB" "${QARG[@]}"
step training 1800 "$PY" "$T/test_training.py" --lib "$LIB" "${QARG[@]}"
step threads_torch 1200 "$PY" "$T/test_threads_torch.py" --lib "$LIB" "${QARG[@]}"

# Issue 11: the wrapped torch.cuda.synchronize reaches the policy, slack measured.
step sync 300 "$PY" "$T/test_sync.py" --lib "$LIB" "${QARG[@]}"
# Issue 14: CUDA graph capture + replay and torch.compile(mode="reduce-overhead")
# against PyTorch's allocator; the ~1 ms compiled step and its profile.
step graphs 600 "$PY" "$T/test_graphs.py" --lib "$LIB"
step small_step 600 "$PY" "$T/bench_small_step.py" --lib "$LIB" "${QARG[@]}"
step pair_cpu 300 "$PY" "$T/bench_pair_cpu.py" --lib "$LIB"
if [ "${PIP:-0}" = 1 ]; then
  step check_pip 600 env PYTHON="$PY" bash "$ROOT/examples/torch/check_pip.sh"
fi

{
  cat "$OUT/env.txt"
  echo
  printf '%s\n' "${rows[@]}"
  echo
  for f in cycle_loop training threads_torch sync graphs small_step; do
    echo "--- $f summary"
    grep '"summary": true' "$OUT/$f.jsonl" 2>/dev/null | tail -n 1
  done
  echo
  echo "$fails failed"
} > "$OUT/summary.txt"
echo
cat "$OUT/summary.txt"
exit $fails
