#!/usr/bin/env bash
# Prepared for the next GPU call (session 21; not run in session 20): what
# session 20 could not trace. Build (sm_90) main into build-gpu as run.sh
# says; carry build-gpu/runtime-libs and build-gpu/examples/forward_loop.
#  1. 256 MiB, K = 1, --verbose, 6 processes x 3 reps: catch a late ~15x
#     repetition (2 of 21 in session 20's call 4) with its log     -> v1.tgz
#  2. 256 MiB, K = 8 and K = 32, --verbose, 2 reps each: the start-up peaks
#     (1.61-2.25x at iterations 2-4)                                -> v2.tgz
#  3. 1 GiB, K = 1, --verbose, 1 rep: the minors' cost against their young
#     bytes (25.8 ms at 18+ GiB; 10-12 ms at 0.25-1 GiB with K = 8)  -> v3.tgz
. "$(dirname "$0")/../gpu-2026-12-07-s18/common.sh"
vb() {  # DIR TAG HEAP K REPS
  mkdir -p $O/$1
  timeout 45 build-gpu/examples/forward_loop --backend cuda_async --layers 8 --d 4096 --batch 1024 --iters 320 \
    --max-seconds 3 --json --quiet --verbose --policy pressure,explicit_free --reps $5 --workload steady \
    --host-heap-mib $3 --sync-every $4 > $O/$1/$2.json 2> $O/$1/$2.err
  gzip -f $O/$1/$2.err
}
for i in 1 2 3 4 5 6; do left 150 || break; vb v1 p$i 256 1 3; (cd $O && tar czf v1.tgz v1 gpu.txt); done
rm -rf $O/v1
for k in 8 32; do left 220 || break; vb v2 k$k 256 $k 2; (cd $O && tar czf v2.tgz v2); done
rm -rf $O/v2
left 260 && vb v3 k1 1024 1 1 && (cd $O && tar czf v3.tgz v3)
rm -rf $O/v3
echo "all done at $(( $(date +%s) - T0 )) s"
