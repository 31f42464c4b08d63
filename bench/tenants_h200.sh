#!/usr/bin/env bash
# Other tenants on the H200 (issue 14): forward_loop on cuda_async with a hard
# limit of 90% of the memory available to it (GCPRESSURE_HARD_LIMIT=90%avail)
# while gcpressure_hog, another process, takes 50% of the GPU about 2 s into
# the loop and holds it past the loop's end. The CI version on the host
# backend is tests/tenants_forward.sh (ctest -L tenants). Usage:
#   bench/tenants_h200.sh BUILD_DIR OUT_DIR [REPS=3] [MAX_SECONDS=20]
# BUILD_DIR: a CUDA build (-DGCPRESSURE_WITH_CUDA=ON) with tests and examples.
# Model: h200_forward.sh's (8 Dense layers, d=4096, batch=1024: 512 MiB of
# weights, 256 MiB of temporaries per iteration); workloads steady and burst
# (30% of the first hard limit held at once every 50 iterations, ~38 GB: it
# fits in the 90% of the ~70 GB the hog leaves, only if the limit follows).
# Writes OUT_DIR/tenants.jsonl (one forward_loop JSON per run, with the hog's
# JSON under "hog"), the runs' stdout/stderr, and prints one line per run.
# Expect: ooms 0, headroom_changes >= 1, available_bytes_min <= ~50% of the
# GPU, every hog "complete":true.
set -uo pipefail
build=$1; out=$2; reps=${3:-3}; max_s=${4:-20}
shape="--layers 8 --d 4096 --batch 1024"
mkdir -p "$out"
: > "$out/tenants.jsonl"
for rep in $(seq "$reps"); do
  for wl in steady burst; do
    run="$out/${wl}_$rep"
    extra=""; [ "$wl" = burst ] && extra="--burst-fraction 0.3"
    GCPRESSURE_HARD_LIMIT=90%avail timeout $((max_s + 120)) "$build/examples/forward_loop" --backend cuda_async \
      --policy pressure --workload "$wl" $extra $shape --iters 100000000 --max-seconds "$max_s" --json \
      > "$run.loop.out" 2> "$run.loop.err" &
    loop_pid=$!
    for _ in $(seq 1200); do  # the hog's 2 s count from the loop's first iteration
      grep -q '^\[ iter' "$run.loop.out" 2>/dev/null && break
      kill -0 $loop_pid 2>/dev/null || break
      sleep 0.05
    done
    timeout $((max_s + 120)) "$build/tests/gcpressure_hog" --backend cuda_async --fraction 0.5 --after-seconds 2 \
      --hold-seconds $((max_s + 10)) > "$run.hog.out" 2>&1 &
    hog_pid=$!
    wait $loop_pid; loop_rc=$?
    wait $hog_pid; hog_rc=$?
    json=$(tail -1 "$run.loop.out")
    hog=$(tail -1 "$run.hog.out")
    case "$json" in "{"*) ;; *) json='{"error":"no JSON from forward_loop"}' ;; esac
    case "$hog" in "{"*) ;; *) hog='{"error":"no JSON from gcpressure_hog"}' ;; esac
    echo "${json%\}},\"rep\":$rep,\"loop_rc\":$loop_rc,\"hog_rc\":$hog_rc,\"hog\":$hog}" >> "$out/tenants.jsonl"
    key() { echo "$json" | grep -o "\"$1\":[^,}]*" | head -1 | cut -d: -f2; }
    echo "$wl rep $rep: loop rc $loop_rc, hog rc $hog_rc; ooms $(key ooms), iterations $(key iterations)," \
      "headroom changes $(key headroom_changes) at $(echo "$json" | grep -o '"headroom_change_iterations":\[[^]]*\]' | cut -d: -f2)," \
      "available min $(key available_bytes_min), hard limit at start $(key hard_limit), peak reserved $(key peak_reserved_bytes);" \
      "$(grep '^hog:' "$run.hog.out" || echo 'hog did not take its share')"
  done
done
