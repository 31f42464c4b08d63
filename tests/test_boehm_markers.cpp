// runtime_options.markers reaches bdwgc (GC_set_markers_count before
// GC_INIT): one process per count, since boehm::init runs once per process.
// Usage: test_boehm_markers N | default. Exits 0 when GC_get_parallel() ==
// N - 1, 1 when not, 77 (a skip, ctest SKIP_RETURN_CODE) when the result
// cannot tell: GC_MARKERS is set (bdwgc lets it win), or N > 1 and this
// bdwgc marks in one thread whatever it is asked (built without parallel
// marking). "default": boehm::init() with default options marks in one
// thread (Note [One marker for minors]); skipped on a machine with one CPU,
// where bdwgc's own default is one marker too.
#ifndef GC_THREADS
#define GC_THREADS 1
#endif
#include <gc/gc.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "gcpressure/boehm.hpp"

int main(int argc, char** argv) {
  const bool by_default = argc > 1 && std::strcmp(argv[1], "default") == 0;
  const int want = by_default ? 1 : argc > 1 ? std::atoi(argv[1]) : 0;
  if (want < 1) {
    std::fprintf(stderr, "usage: test_boehm_markers N (N >= 1) | default\n");
    return 2;
  }
  if (std::getenv("GC_MARKERS")) {
    std::puts("skipped: GC_MARKERS is set and wins over runtime_options.markers");
    return 77;
  }
  if (by_default && sysconf(_SC_NPROCESSORS_ONLN) < 2) {
    std::puts("skipped: one CPU, where bdwgc's own default is one marker too");
    return 77;
  }
  gcpressure::boehm::runtime_options o;
  if (!by_default) o.markers = static_cast<unsigned>(want);
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
