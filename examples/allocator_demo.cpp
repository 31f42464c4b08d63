// A short demo of the allocator: allocate, free, drop through the deferred
// queue, and print the pool status table and JSON.
#include <cstdio>
#include <cstring>
#include <vector>

#include "gcpressure/allocator.hpp"

int main() {
  using namespace gcpressure;
  auto opts = allocator_options::from_config(config_from_env());
  device_allocator alloc(opts);
  std::vector<void*> live;
  for (int i = 0; i < 64; ++i) live.push_back(alloc.allocate(std::size_t{1} << 20));
  for (int i = 0; i < 32; ++i) alloc.free(live[i], std::size_t{1} << 20);
  for (int i = 32; i < 64; ++i) alloc.deferred().push(live[i], std::size_t{1} << 20, nullptr);
  std::printf("%s", alloc.stats_text().c_str());
  alloc.drain();
  alloc.trim();
  std::printf("%s%s\n", alloc.stats_text().c_str(), alloc.stats_json().c_str());
  return 0;
}
