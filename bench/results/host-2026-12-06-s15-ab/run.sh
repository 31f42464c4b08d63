#!/usr/bin/env bash
# Host backend A/B of 852fd88 (new: build/release) against b0368ea (base: a worktree at b0368ea
# built Release without CUDA, BASE=path/to/its/forward_loop), the CPU machine, session 15.
# Same commands as bench/results/host-2026-12-06-s14-ab/README.txt; base and new alternate per K.
set -u
D=$(dirname "$0"); NEW=${NEW:-build/release/examples/forward_loop}; BASE=${BASE:?}
uptime > $D/load.txt
for k in 8 1; do for v in base new; do b=$NEW; [ $v = base ] && b=$BASE
  $b --backend host --layers 8 --d 1024 --batch 256 --iters 40 --host-heap-mib 256 --sync-every $k \
    --policy pressure,explicit_free --reps 3 --json --quiet 2>/dev/null | grep '^{' > $D/host-$v-k$k.jsonl
done; done
for k in 8 32; do for v in base new; do b=$NEW; [ $v = base ] && b=$BASE
  $b --backend host --iters 200 --hard-limit 64MiB --host-heap-mib 256 --sync-every $k \
    --policy pressure,explicit_free --reps 3 --json --quiet 2>/dev/null | grep '^{' > $D/hostS-$v-k$k.jsonl
done; done
uptime >> $D/load.txt
