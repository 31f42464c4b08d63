// runtime_options.markers reaches bdwgc (GC_set_markers_count before
// GC_INIT): one process per count, since boehm::init runs once per process.
// Usage: test_boehm_markers N. Exits 0 when GC_get_parallel() == N - 1, 1
// when not, 77 (a skip, ctest SKIP_RETURN_CODE) when the result cannot
// tell: GC_MARKERS is set (bdwgc lets it win), or N > 1 and this bdwgc
// marks in one thread whatever it is asked (built without parallel marking).
#ifndef GC_THREADS
#define GC_THREADS 1
#endif
#include <gc/gc.h>

#include <cstdio>
#include <cstdlib>

#include "gcpressure/boehm.hpp"

int main(int argc, char** argv) {
  const int want = argc > 1 ? std::atoi(argv[1]) : 0;
  if (want < 1) {
    std::fprintf(stderr, "usage: test_boehm_markers N (N >= 1)\n");
    return 2;
  }
  if (std::getenv("GC_MARKERS")) {
    std::puts("skipped: GC_MARKERS is set and wins over runtime_options.markers");
    return 77;
  }
  gcpressure::boehm::runtime_options o;
  o.markers = static_cast<unsigned>(want);
  gcpressure::boehm::init(o);  // GC_allow_register_threads starts the marker threads
  const int got = GC_get_parallel();
  std::printf("markers %d: GC_get_parallel() = %d\n", want, got);
  if (got == want - 1) return 0;
  if (want > 1 && got == 0) {
    std::puts("skipped: this bdwgc runs one marker (no parallel marking)");
    return 77;
  }
  return 1;
}
