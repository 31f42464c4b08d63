// tsan_clocklock_shim.cpp — linked into the reliability tests of the
// ThreadSanitizer build only (tests/reliability/CMakeLists.txt).
//
// libstdc++ 12 implements timed_mutex::try_lock_for / recursive_timed_mutex::
// try_lock_for with pthread_mutex_clocklock, which neither GCC 12's libtsan
// nor LLVM 14's TSan runtime intercepts. TSan then never sees those
// acquisitions: it reports "unlock of an unlocked mutex" at the matching
// unlock and false data races on everything the mutex guards (the pressure
// policy takes its collection mutex with try_lock_for). This definition, in
// the test executable, takes precedence over glibc's and forwards to
// pthread_mutex_timedlock (which TSan does intercept) with the deadline moved
// to CLOCK_REALTIME, so the lock is visible and only real races remain.
#include <pthread.h>
#include <time.h>

extern "C" int pthread_mutex_clocklock(pthread_mutex_t* m, clockid_t clock, const struct timespec* abstime) {
  timespec now_clock{}, now_rt{};
  clock_gettime(clock, &now_clock);
  clock_gettime(CLOCK_REALTIME, &now_rt);
  long long ns = (static_cast<long long>(abstime->tv_sec) - now_clock.tv_sec) * 1000000000LL +
                 (abstime->tv_nsec - now_clock.tv_nsec);
  if (ns < 0) ns = 0;
  long long rt = static_cast<long long>(now_rt.tv_sec) * 1000000000LL + now_rt.tv_nsec + ns;
  timespec deadline{};
  deadline.tv_sec = static_cast<time_t>(rt / 1000000000LL);
  deadline.tv_nsec = static_cast<long>(rt % 1000000000LL);
  return pthread_mutex_timedlock(m, &deadline);
}
