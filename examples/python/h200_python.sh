#!/usr/bin/env bash
# Issue 22 on the GPU machine in one command, under 3 minutes (63 s on 2026-12-03): the
# gcpressure package's adaptors (CuPy, Numba, mixed PyTorch + CuPy through
# DLPack), the costs that bound the peaks (probe_gc_cost.py), the CuPy and
# Numba cycle variants under a 4 GiB limit with gcpressure's defaults, the
# framework's own memory management and the freeze=False control, the
# alloc+free pair against CuPy's pool (interleaved, one process), and a few
# memory-heavy numba-cuda test modules with and without the plug-in (a module
# that is not installed is a visible skip). No pip, no network: the package is
# imported from this working tree (PYTHONPATH), the library from the carried
# build folder.
#
# Build here (the whole project, CUDA for sm_90; the plug-in library is the
# only file this script needs from it, ~1.5 MB, cudart linked statically, no
# Boehm):
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90
#   cmake --build build-gpu -j2 --target gcpressure_torch
# Carry: build-gpu/examples/torch/libgcpressure_torch.so
# Run there: bash examples/python/h200_python.sh            (or: ... path/to/libgcpressure_torch.so)
# Out ($OUT, default ./python-results): log.txt (everything), results.json (every JSON line of every
# step, by step), summary.txt (one line per step), steps/ (each step's .jsonl and .stderr), python-results.tar.gz (all of it).
# REPS (default 3): runs per cycle variant. STEP_TIMEOUT (default 45 s) per step (adaptors 100,
# numba suites 50); DEADLINE (default 230 s): steps that would start later are skipped, named in summary.txt.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LIB=${1:-}
if [ -z "$LIB" ]; then
  for c in "$ROOT"/build-gpu/examples/torch/libgcpressure_torch.so "$ROOT"/build*/examples/torch/libgcpressure_torch.so \
           "$ROOT"/build/*/examples/torch/libgcpressure_torch.so; do
    [ -f "$c" ] && { LIB=$c; break; }
  done
fi
[ -f "${LIB:-}" ] || { echo "libgcpressure_torch.so not found (carry build-gpu/examples/torch/libgcpressure_torch.so)"; exit 2; }
OUT=${OUT:-$PWD/python-results}
mkdir -p "$OUT/steps"
S=$OUT/steps  # per-step files; $OUT itself keeps the four files that matter
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE=$!
. "$HERE/gpu_env.sh"
T0=$(date +%s)
echo "== env ($(date -u +%Y-%m-%dT%H:%M:%SZ)); lib $GCPRESSURE_TORCH_LIB ($(sha256sum "$GCPRESSURE_TORCH_LIB" | cut -c1-16)); python $PY"
"$PY" - <<'PYV'
import sys
print("python", sys.version.split()[0])
for m in ("cupy", "numba", "numba_cuda", "torch", "numpy"):
    try:
        mod = __import__(m); print(m, getattr(mod, "__version__", "?"), getattr(mod, "__file__", ""))
    except Exception as e:
        print(m, "missing:", e.__class__.__name__, e)
try:
    from numba import cuda; print("numba.cuda at", cuda.__file__)
except Exception as e:
    print("numba.cuda:", e.__class__.__name__, e)
PYV
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader

fails=0
step() {  # name, command...: its stdout (JSON lines) and stderr under $OUT; TMO: its timeout
  local name=$1; shift
  local t0=$(date +%s.%N)
  if [ $(( $(date +%s) - T0 )) -gt "${DEADLINE:-230}" ]; then
    echo "$name: SKIPPED (past the script's ${DEADLINE:-230} s deadline)" | tee -a "$OUT/summary.txt"; return
  fi
  echo "== $name: $*"
  env "${STEP_ENV[@]}" timeout "${TMO:-${STEP_TIMEOUT:-45}}" "$@" > "$S/$name.jsonl" 2> "$S/$name.stderr"
  local rc=$?
  local verdict=ok; [ $rc = 77 ] && verdict=SKIPPED; [ $rc != 0 ] && [ $rc != 77 ] && { verdict=FAILED; fails=$((fails + 1)); }
  [ $rc = 124 ] && verdict="FAILED (timeout ${TMO:-${STEP_TIMEOUT:-45}} s)"
  printf '%s: rc=%s %s %.1f s\n' "$name" "$rc" "$verdict" "$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { print a - b }')" | tee -a "$OUT/summary.txt"
  tail -c 1500 "$S/$name.jsonl"; [ $rc = 0 ] || tail -8 "$S/$name.stderr"
}
STEP_ENV=()

TMO=100 step adaptors "$PY" "$HERE/tests/test_gpu_adaptors.py" --cases cupy,numba,mixed
# What bounds the peaks (RESULTS.md, issue 22's bounds): gc.collect's cost over the frozen heap, the
# freeing per iteration of garbage, the policy's seconds per collection, in bench_cycles' process type.
for fw in cupy numba; do
  step "probe_${fw}" "$PY" "$HERE/tests/probe_gc_cost.py" --framework "$fw"
done
VARIANTS=c2_4,c2_64,c2_512,c100_8x8,thread_c2_64,ring,acyclic_64,hinted_c2_64
for fm in cupy:gcpressure cupy:own numba:gcpressure numba:own; do
  fw=${fm%%:*} mode=${fm##*:}
  step "cycles_${fw}_${mode}" "$PY" "$HERE/tests/bench_cycles.py" --framework "$fw" --mode "$mode" \
    --reps "${REPS:-3}" --variants "$VARIANTS"
done
step pair_cupy "$PY" "$HERE/tests/bench_pair_cupy.py" --n 20000 --rounds 5
# Where the pair's microseconds go in the library (Note [Where the microseconds go]; timing costs a few
# clock reads per call, so its pair figures are not the ones to compare).
STEP_ENV=(GCP_TORCH_PROFILE=1)
step pair_cupy_profiled "$PY" "$HERE/tests/bench_pair_cupy.py" --n 20000 --rounds 3
STEP_ENV=()
# The control: freeze=False, whose auto minors are generational (the defaults before 22bb5a5;
# Note [Choosing the minor's generation]).
YOUNG='{"freeze": false}'
for fw in cupy numba; do
  step "cycles_${fw}_young" "$PY" "$HERE/tests/bench_cycles.py" --framework "$fw" --mode gcpressure \
    --reps "${REPS:-3}" --variants "$VARIANTS" --options "$YOUNG"
done
# The control for Note [Freezing again after the heap grew]: Numba with no re-freeze (today's defaults
# before it: numba-cuda's compiler state keeps the minors generational).
step cycles_numba_refreeze0 "$PY" "$HERE/tests/bench_cycles.py" --framework numba --mode gcpressure \
  --reps "${REPS:-3}" --variants "$VARIANTS" --options '{"refreeze": 0}'
for mm in default gcpressure.numba; do
  STEP_ENV=(); [ $mm = default ] || STEP_ENV=(NUMBA_CUDA_MEMORY_MANAGER=$mm GCPRESSURE_HARD_LIMIT=16GiB)
  TMO=50 step "numba_suite_${mm%%.*}" "$PY" "$HERE/tests/numba_suite.py" \
    --modules cudadrv.test_emm_plugins,cudadrv.test_cuda_memory,cudadrv.test_deallocations,cudadrv.test_streams
done
STEP_ENV=()
# Diagnostic, last (the deadline may skip it): Numba with the heap frozen after its first kernel is
# compiled (its compiler state made whole-heap collections 13-21 ms in the run of 2026-12-02 night).
step cycles_numba_frozen_after_jit "$PY" "$HERE/tests/bench_cycles.py" --framework numba --mode gcpressure \
  --reps 1 --variants "$VARIANTS" --freeze-after-setup

# Every JSON line, by step, in one file.
"$PY" - "$OUT" <<'PYJ'
import glob, json, os, sys
out = sys.argv[1]; res = {}
for f in sorted(glob.glob(os.path.join(out, "steps", "*.jsonl"))):
    rows = []
    for line in open(f):
        line = line.strip()
        if line.startswith("{"):
            try:
                rows.append(json.loads(line))
            except ValueError:
                rows.append({"unparsed": line[:500]})
    res[os.path.basename(f)[:-6]] = rows
res["summary"] = open(os.path.join(out, "summary.txt")).read().splitlines()
json.dump(res, open(os.path.join(out, "results.json"), "w"), indent=1, default=str)
PYJ
echo "failed steps: $fails; $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"
exec 1>&- 2>&-
wait "$TEE" 2>/dev/null  # log.txt complete before it is archived
(cd "$OUT" && tar czf python-results.tar.gz --exclude python-results.tar.gz . 2>/dev/null)
exit $fails
