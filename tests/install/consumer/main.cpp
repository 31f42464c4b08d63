// tests/install/consumer/main.cpp — a C++ program against the installed tree
// through find_package(gcpressure): the Boehm heap, configuration with the
// environment as the default layer, stats. Exits nonzero on any failure.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gcpressure/boehm.hpp"
#include "gcpressure/config.hpp"

int main() {
  using namespace gcpressure;
  boehm::init();
  options o;  // fields left unset come from GCPRESSURE_*, then the defaults
  o.backend = backend_choice::host;
  o.hard_limit = parse_size("32MiB", "hard limit");
  const std::size_t mib = std::size_t{1} << 20;
  std::size_t peak = 0;
  std::string policy;
  {
    boehm::device_heap heap(o);
    policy = heap.policy().name();
    for (int it = 0; it < 200; ++it) {
      boehm::buffer* x = heap.alloc(mib);
      if (!boehm::device_heap::data(x)) return std::puts("consumer: null device pointer"), 1;
      heap.iteration();
      if (heap.allocator().reserved_bytes() > peak) peak = heap.allocator().reserved_bytes();
    }
    if (heap.allocator().hard_limit() != 32 * mib) return std::puts("consumer: hard limit not applied"), 1;
  }  // ~device_heap: the clean teardown
  if (peak > 32 * mib) return std::printf("consumer: peak %zu above the hard limit\n", peak), 1;
  std::printf("consumer: 200 MiB through a 32 MiB limit, peak reserved %zu MiB, policy %s\n", peak / mib,
              policy.c_str());
  return 0;
}
