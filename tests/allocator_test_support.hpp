// tests/allocator_test_support.hpp — what test_allocator.cpp and
// test_allocator_hook.cpp share: allocator options over the host backend,
// `capacity` bytes of simulated device first.
#pragma once

#include <cstddef>

#include "gcpressure/allocator.hpp"

namespace gcp_alloc_test {

inline gcpressure::size_spec bytes_spec(std::size_t n) {
  gcpressure::size_spec s;
  s.bytes = n;
  return s;
}

// hard / soft: 0 leaves the limit unset (the allocator's defaults).
inline gcpressure::allocator_options host_opts(std::size_t capacity, std::size_t hard = 0, std::size_t soft = 0,
                                               bool pool = true) {
  gcpressure::allocator_options o;
  o.backend = gcpressure::backend_kind::host;
  o.host_capacity = capacity;
  if (hard) o.hard_limit = bytes_spec(hard);
  if (soft) o.soft_limit = bytes_spec(soft);
  o.pool = pool;
  return o;
}

}  // namespace gcp_alloc_test
