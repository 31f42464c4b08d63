#!/bin/bash
export ASAN_OPTIONS=allow_user_segv_handler=1:handle_segv=0:detect_leaks=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
for i in $(seq 1 $2); do
  if ! /work/main/build/asan-flake/tests/test_boehm --gtest_filter=Boehm.RegisteredThreadsAllocateAndDropConcurrently > out.$1.$i 2>&1; then
    echo "FAIL $1 $i" >> fails
  elif grep -q "survivor 0x" out.$1.$i; then echo "SURV $1 $i" >> survs
  else rm out.$1.$i; echo ok >> oks; fi
done
