// tests/test_boehm_shared.hpp — what test_boehm.cpp and test_boehm_facts.cpp
// (both in the test_boehm binary) share: the heaps' allocator options and
// global roots for handles a test keeps alive (Note [Exact accounting under a
// conservative collector] in test_boehm.cpp).
#pragma once

#include <cstddef>

#include "boehm_test_support.hpp"

namespace gcp_boehm_test {

// Host backend with 4 GiB of simulated device.
inline gcp::allocator_options host_opts(std::size_t hard, std::size_t soft = 0) {
  return gcp_test::host_opts(hard, soft, std::size_t{4} << 30);
}

// GC-visible roots (the data segment), never std::vector: malloc memory is
// not scanned.
inline gb::buffer* volatile g_keep[16];

}  // namespace gcp_boehm_test
