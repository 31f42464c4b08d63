# Run from the repository root after appending experiment-test.cpp.txt to tests/test_lag_schedule.cpp,
# then cmake --build build/release --target test_policy. Prints one line per case.

for e in 1 2 4 8; do for c in 5 20 60; do
  r=$(EXTRA=$e COUNT=$c build/release/tests/test_policy --gtest_filter='LagScheduleExp.Spell' | grep RES | awk '{printf "%s ", $2} END{}'; EXTRA=$e COUNT=$c build/release/tests/test_policy --gtest_filter='LagScheduleExp.Spell' | grep RES | tail -1 | awk '{print "minors", $3, "exp", $4}')
  echo "spell $e x $c: $r"; done; done
for cfg in "0.5 0.078" "2.4 0.0177" "20 0.005" "12 0.01"; do set -- $cfg; for j in 0 2 3.5; do for k in 1 8; do echo "$1+$2 jit $j k $k: $(BASE=$1 SLOPE=$2 JIT=$j K=$k build/release/tests/test_policy --gtest_filter='*ExpK8*' | grep steady)"; done; done; done
