# Session 24's fake-clock grid: run from the repository root after appending experiment-test.cpp.txt
# (session 22's ExpK8GrowingMinor with JIT2: ms added to every fifth minor too) to
# tests/test_lag_schedule.cpp, then cmake --build build/release --target test_policy. BASE ms + SLOPE
# ms/MiB per minor, JIT ms more every fifth minor (the third of five), JIT2 the fifth; K the sync interval.
# m = 78a9bb4 (a worktree), e = main + Note [Exposed GC time, measured]: m.txt, e.txt.
B=${B:-build/release}
for j in "0 0" "10 4" "14 -4"; do set -- $j; for k in 1 8 32; do echo "base26 jit $1/$2 k $k: $(BASE=26 SLOPE=0.005 JIT=$1 JIT2=$2 K=$k $B/tests/test_policy --gtest_filter='*ExpK8*' | grep steady)"; done; done
for cfg in "0.5 0.078" "2.4 0.0177" "12 0.01"; do set -- $cfg; for j in 0 3.5; do for k in 1 8; do echo "$1+$2 jit $j k $k: $(BASE=$1 SLOPE=$2 JIT=$j K=$k $B/tests/test_policy --gtest_filter='*ExpK8*' | grep steady)"; done; done; done
