# Run from the repository root after appending experiment-test.cpp.txt to
# tests/test_lag_schedule.cpp (and, for the trial, git apply trial-f.patch),
# then cmake --build build/release --target test_policy.
for cfg in "0.5 0.078" "2.4 0.0177"; do set -- $cfg; for j in 0 2 3.5; do for k in 1 8; do echo "$1+$2 jit $j k $k: $(BASE=$1 SLOPE=$2 JIT=$j K=$k build/release/tests/test_policy --gtest_filter='*ExpK8*' | grep steady)"; done; done; done
