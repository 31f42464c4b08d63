#!/usr/bin/env bash
# Issue 22's "Done when", the frameworks' own tests, on the GPU machine in one command (~350 s, run
# after h200_python.sh in the same call): numba-cuda's cudadrv and cudapy groups with and without
# gcpressure.numba (tests/numba_suites.py: one process per module and mode, $PROCS at a time, both
# modes interleaved), beside PyTorch's OpInfo samples under gcpressure.torch and PyTorch's allocator
# (tests/opinfo_compare.py), the two at once (the suites use $PROCS of the 16 CPUs, OpInfo the rest).
# Needs the same carried library as h200_python.sh:
#   bash examples/python/h200_suites.sh [path/to/libgcpressure_torch.so]
# Out ($OUT, default ./suites-results): numba_suites.json (per mode: ran/failures/errors/skipped, the
# failing tests' names, import errors with their traceback, modules stopped at their limit or never
# started), numba/<mode>/<module>.{json,stderr}, opinfo.jsonl + opinfo_*.stderr, summary.txt, log.txt,
# suites-results.tar.gz (all of it; the numba/ tree and opinfo_*.stderr are then deleted unless
# KEEP_TREE=1: the device tool returns a bounded number of files). PROCS (12), MODULE_TIMEOUT (150 s), DEADLINE (300 s: no module
# starts later, running ones are stopped then and report what they ran), OPINFO_SECONDS (45 per run,
# three runs), HARD (340 s): timeout(1) of each of the two steps.
set -uo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
LIB=${1:-}
if [ -z "$LIB" ]; then
  for c in "$ROOT"/build-gpu/examples/torch/libgcpressure_torch.so "$ROOT"/build*/examples/torch/libgcpressure_torch.so; do
    [ -f "$c" ] && { LIB=$c; break; }
  done
fi
[ -f "${LIB:-}" ] || { echo "libgcpressure_torch.so not found (carry build-gpu/examples/torch/libgcpressure_torch.so)"; exit 2; }
OUT=${OUT:-$PWD/suites-results}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
TEE=$!
. "$HERE/gpu_env.sh"
T0=$(date +%s)
echo "== suites ($(date -u +%Y-%m-%dT%H:%M:%SZ)); lib $GCPRESSURE_TORCH_LIB; python $PY"
# Imports first, tracebacks whole (an import failure of every module was the 2026-12-02 result).
"$PY" - "$HERE/tests" > "$OUT/imports.txt" 2>&1 <<'PYI'
import sys, traceback
sys.path.insert(0, sys.argv[1])
for m in ("numba.cuda", "numba.cuda.testing", "numba.cuda.tests.cudadrv.test_cuda_memory", "torch",
          "torch.testing._internal.common_methods_invocations", "gcpressure.numba", "gcpressure.torch"):
    try:
        if m.startswith("numba.cuda.test"):
            import numba_suite; numba_suite.install_filecheck_stub()
        if m.startswith("torch.testing"):
            import opinfo_compare; opinfo_compare.install_expecttest_stub()
        __import__(m); print("import", m, "ok")
    except BaseException:
        print("import", m, "FAILED"); traceback.print_exc(); sys.stdout.flush()
PYI
cat "$OUT/imports.txt"
step() {  # name, command...: runs in the background under timeout $HARD, rc to $OUT/<name>.rc
  local name=$1; shift
  echo "== $name: $*"
  ( t0=$(date +%s); timeout -k 10 "${HARD:-340}" "$@" > "$OUT/$name.jsonl" 2> "$OUT/$name.stderr"; rc=$?
    echo "$name: rc=$rc $(( $(date +%s) - t0 )) s" >> "$OUT/summary.txt" ) &
  PIDS+=($!)
}
PIDS=()
step numba_suites "$PY" "$HERE/tests/numba_suites.py" --out "$OUT" --procs "${PROCS:-12}" \
  --module-timeout "${MODULE_TIMEOUT:-150}" --deadline "${DEADLINE:-300}"
step opinfo "$PY" "$HERE/tests/opinfo_compare.py" --seconds "${OPINFO_SECONDS:-45}" --logs "$OUT"
wait "${PIDS[@]}"
cat "$OUT/summary.txt"
for f in numba_suites opinfo; do echo "== $f (stdout, tail)"; tail -c 4000 "$OUT/$f.jsonl"; echo "== $f (stderr, tail)"; tail -15 "$OUT/$f.stderr"; done
echo "suites: $(( $(date +%s) - T0 )) s" | tee -a "$OUT/summary.txt"
exec 1>&- 2>&-
wait "$TEE" 2>/dev/null
(cd "$OUT" && tar czf suites-results.tar.gz --exclude suites-results.tar.gz . 2>/dev/null)
# The device tool brings back a bounded number of files: on 2026-12-03 the tarball and the per-module
# logs did not come back. KEEP_TREE=1 keeps the tree; by default only the tarball and the summaries stay.
[ "${KEEP_TREE:-0}" = 1 ] || rm -rf "$OUT/numba" "$OUT"/opinfo_*.stderr
! grep -qv 'rc=0' <(grep ': rc=' "$OUT/summary.txt")
