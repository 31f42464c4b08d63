#!/bin/bash
# gpu_oracle.sh BUILD OUT [REPS] — the runtime forward loops (Lua, Guile, CPython)
# under the oracle and the pressure policy on each workload, on cudaMallocAsync
# memory, through oracle_compare.py (medians of REPS runs, default 3, with their
# spread). One JSON line per case in OUT/<runtime>-<workload>.json, the
# loops' stderr in OUT/<runtime>-<workload>.log, and a table on stdout.
#
# BUILD is a CUDA build of this tree (the Lua module and the Guile extension
# built in it). The interpreters: $LUA (default lua5.4), $GUILE (default
# guile-3.0), python3; a runtime whose interpreter is missing is skipped with
# a message. Shapes and limits are the ctests' (examples/runtimes/*/CMakeLists.txt).
set -u
build=${1:?usage: gpu_oracle.sh BUILD OUT [REPS]}
out=${2:?usage: gpu_oracle.sh BUILD OUT [REPS]}
reps=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
cmp=(python3 "$here/oracle_compare.py" --reps "$reps" --)
lua=${LUA:-lua5.4}
guile=${GUILE:-guile-3.0}
export LUA_CPATH_5_4="$build/examples/runtimes/lua/?.so"
export GCPRESSURE_LIB="$build/gc_bridge/libgcpressure.so"
export GUILE_LOAD_PATH="$here/guile" GUILE_LOAD_COMPILED_PATH="$build/examples/runtimes/guile"
export GUILE_EXTENSIONS_PATH="$build/examples/runtimes/guile"

run_case() {  # runtime workload command...
  local rt=$1 w=$2
  shift 2
  "${cmp[@]}" "$@" > "$out/$rt-$w.json" 2> "$out/$rt-$w.log"
  echo "$rt $w rc=$? $(tail -n 1 "$out/$rt-$w.log")"
}

for w in steady promote burst varied; do
  if command -v "$lua" > /dev/null; then
    lim=16MiB it=300
    [ "$w" = promote ] && lim=32MiB it=400
    run_case lua "$w" "$lua" "$here/lua/forward_loop.lua" --backend cuda_async --policy pressure --workload "$w" \
      --iters "$it" --hard-limit "$lim" --host-heap-mib 32 --json --quiet --check
  else
    echo "lua $w: skipped ($lua not found)"
  fi
  if command -v "$guile" > /dev/null; then
    lim=16MiB
    [ "$w" = promote ] && lim=32MiB
    run_case guile "$w" "$guile" --no-auto-compile "$here/guile/forward_loop.scm" --backend cuda_async \
      --policy pressure --workload "$w" --iters 250 --hard-limit "$lim" --json --quiet
  else
    echo "guile $w: skipped ($guile not found)"
  fi
  lim=64MiB it=300
  [ "$w" = promote ] && lim=128MiB it=400
  run_case python "$w" python3 "$here/python/forward_loop.py" --quiet --backend cuda_async --policy pressure \
    --workload "$w" --iters "$it" --hard-limit "$lim" --assert-bounded
done
