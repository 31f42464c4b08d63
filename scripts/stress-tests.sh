#!/usr/bin/env bash
# scripts/stress-tests.sh N [ctest args...] — runs the whole Release suite N
# times under `ctest -j2` with a CPU hog (`yes >/dev/null`, one per core)
# beside it, printing each failing round's failed tests and their logs, and
# at the end how often each test failed over all rounds. Proves the suite is
# not flaky on a loaded machine (issue 13: the target is N/N green;
# docs/RELIABILITY.md). Exits 1 if any round failed.
#
# Environment: BUILD_DIR (default build/release; configured and built here if
# it has no build.ninja), HOGS (default: the number of cores), STOP_AT_FIRST=1
# to stop at the first failing round.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-20}
shift || true
build=${BUILD_DIR:-build/release}
hogs=${HOGS:-$(nproc)}

if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
cmake --build "$build" -j"$(nproc)" >/dev/null

pids=()
stop_hogs() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap stop_hogs EXIT
for ((i = 0; i < hogs; i++)); do
  yes >/dev/null &
  pids+=($!)
done

log_dir=$(mktemp -d)
green=0
failed_rounds=0
for ((r = 1; r <= rounds; r++)); do
  start=$(date +%s)
  if ctest --test-dir "$build" -j2 --output-on-failure "$@" >"$log_dir/round$r.log" 2>&1; then
    green=$((green + 1))
    echo "round $r/$rounds: green ($(($(date +%s) - start)) s; $(grep -Eo '[0-9]+ tests failed out of [0-9]+' "$log_dir/round$r.log" || true))"
  else
    failed_rounds=$((failed_rounds + 1))
    echo "round $r/$rounds: FAILED after $(($(date +%s) - start)) s; the failing tests:"
    sed -n '/The following tests FAILED/,$p' "$log_dir/round$r.log"
    # "  123 - name (Failed)" lines, one per failed test, for the tally.
    sed -n '/The following tests FAILED/,$p' "$log_dir/round$r.log" |
      sed -nE 's/^[[:space:]]*[0-9]+ - ([^ ]+) \((.*)\)$/\1 (\2)/p' >>"$log_dir/failures.txt"
    echo "=== their output (ctest --output-on-failure):"
    # A status line "N/M Test #K: name ..." starts each test's section; the
    # output of a failed one follows its line.
    awk '/^ *[0-9]+\/[0-9]+ Test +#[0-9]+:/ { p = ($0 ~ /\*\*\*(Failed|Timeout|Exception)|Subprocess|Child aborted/) } p' \
      "$log_dir/round$r.log" | head -600
    echo "(full log: $log_dir/round$r.log)"
    if [[ ${STOP_AT_FIRST:-0} == 1 ]]; then
      echo "stress: $green/$r green; stopped at the first failing round (STOP_AT_FIRST=1)"
      exit 1
    fi
  fi
done
if ((failed_rounds > 0)); then
  echo "stress: $green/$rounds rounds green under ctest -j2 with $hogs CPU hog(s); failures per test over $rounds rounds:"
  sort "$log_dir/failures.txt" | uniq -c | sort -rn
  exit 1
fi
echo "stress: $green/$rounds rounds green under ctest -j2 with $hogs CPU hog(s)"
