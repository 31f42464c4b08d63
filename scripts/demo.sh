#!/usr/bin/env bash
# demo.sh — the problem and the fix, in about a minute: one forward loop (the
# Flux/CUDA.jl loop whose device memory grows every iteration) under five
# collection policies, side by side:
#   at_limit         nothing: the host collector runs only when the limit is hit
#   every_iteration  a full collection every iteration (GC.gc(true)): correct, slow
#   cudajl           CUDA.jl's heuristic (rebuilt from its source)
#   pressure         this library's policy
#   explicit_free    every array freed the moment it dies: the oracle
# at a live host heap of 256 MiB, where they differ (at 0 MiB Boehm's own
# collections keep every policy's footprint down). Prints one line per run,
# then one table (bench/summarize.py --brief) and the path of a picture of
# reserved device memory per iteration (bench/plot.sh, gnuplot).
#
# Usage: bash scripts/demo.sh [FORWARD_LOOP ARGS...]
#   Installs what is missing (scripts/setup.sh), builds forward_loop in
#   build/release, runs it on CUDA when a GPU is usable, else on the host
#   backend (a simulated device). Arguments go to forward_loop after the
#   demo's own (later flags win): e.g. --reps 1 for a quicker run, --backend host.
#   Results: build/demo/ (DEMO_DIR=... to change): runs.jsonl (one JSON line
#   per run), table.md, rep<N>/<policy>.csv (traces), forward_loop.png.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${DEMO_DIR:-build/demo}

bash scripts/setup.sh
echo "demo: building forward_loop (build/release; the first build takes minutes) ..."
log=$(mktemp /tmp/gcpressure_demo_build.XXXXXX)
if ! { cmake -S . -B build/release -G Ninja -DCMAKE_BUILD_TYPE=Release &&
       cmake --build build/release -j"$(nproc)" --target forward_loop; } >"$log" 2>&1; then
  cat "$log" >&2
  echo "demo: the build failed (log above)" >&2
  exit 1
fi
rm -f "$log"

# 1200 iterations take a policy past forward_loop's default 256 MiB host limit
# (about 260 KiB per iteration). every_iteration runs in a second process,
# stopped by --max-seconds 3: its full collections of the 256 MiB heap take
# 100-500 ms each on a 2-core machine. Every policy's repetition k is compared
# with the oracle's repetition k (bench/summarize.py).
common=(--host-heap-mib 256 --iters 1200 --reps 3)
first=(--policy at_limit,cudajl,pressure,explicit_free "${common[@]}" --max-seconds 30)
second=(--policy every_iteration "${common[@]}" --max-seconds 3)
rm -rf "$out"
mkdir -p "$out"
for r in 1 2 3 4 5 6 7 8 9; do mkdir -p "$out/rep$r"; done
start=$SECONDS
echo "demo: forward_loop ${first[*]} $*"
echo "demo: forward_loop ${second[*]} $*"
echo "demo: each run in turn (a line when it ends) ..."
declare -A reps_seen
n=0
# Two processes (each builds the host heap once); a JSON line per run.
get() { grep -o "\"$1\":[^,]*" <<<"$line" | head -n 1 | cut -d: -f2 | tr -d '"'; }  # a key of $line
while IFS= read -r line; do
  [[ $line == "{"* ]] || continue
  echo "$line" >>"$out/runs.jsonl"
  p=$(get policy)
  rep=$(( ${reps_seen[$p]:-0} + 1 ))
  reps_seen[$p]=$rep
  [ -d "$out/rep$rep" ] && echo "$line" >"$out/rep$rep/$p.json"
  n=$((n + 1))
  stopped=""
  [ "$(get stopped_early)" = true ] && stopped=" (stopped by --max-seconds)"
  printf 'demo: run %2d  %-16s rep %d: %5s iterations in %5.1f s, peak reserved %7.1f MiB, %s collections%s\n' \
    "$n" "$p" "$rep" "$(get iterations)" "$(get wall_seconds)" \
    "$(awk -v b="$(get peak_reserved_bytes)" 'BEGIN { print b / 1048576 }')" \
    "$(( $(get collections_minor) + $(get collections_full) ))" "$stopped"
done < <(for a in first second; do
           declare -n run_args=$a
           ./build/release/examples/forward_loop "${run_args[@]}" --trace "$out/rep{rep}/{policy}.csv" --json --quiet "$@"
         done)
[ "$n" -gt 0 ] || { echo "demo: forward_loop gave no results" >&2; exit 1; }

echo
python3 bench/summarize.py --brief "$out/runs.jsonl" | tee "$out/table.md"
for r in 1 2 3 4 5 6 7 8 9; do rmdir "$out/rep$r" 2>/dev/null || true; done
png=$out/forward_loop.png
if bash bench/plot.sh -o "$png" -t "Reserved device memory per iteration (scripts/demo.sh, repetition 1)" \
     "$out"/rep1/*.csv 2>"$out/plot.log"; then
  echo "demo: picture (reserved memory per iteration, one line per policy): $png"
else
  cat "$out/plot.log" >&2
  echo "demo: no picture (bench/plot.sh failed, above)" >&2
fi
echo "demo: ${n} runs in $((SECONDS - start)) s; JSON, traces and the table in $out/"
