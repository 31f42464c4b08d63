// Boehm bridge tests, part 2 (host backend): the sync hint through the
// bridge, every collection counted (Note [Every collection is counted]),
// the one owner of process-wide Boehm state (boehm_runtime), teardown.
// Built into test_boehm; each case runs in its own process (ctest), so
// Boehm's process-wide counters start fresh for each.
#ifndef GC_THREADS
#define GC_THREADS 1
#endif
#include <gc/gc.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "gcpressure/boehm.hpp"
#include "gcpressure/error.hpp"

namespace gcp = gcpressure;
namespace gb = gcpressure::boehm;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

gcp::allocator_options host_opts(std::size_t hard) {
  gcp::allocator_options o;
  o.backend = gcp::backend_kind::host;
  o.host_capacity = std::size_t{1} << 30;
  o.hard_limit.bytes = hard;
  return o;
}

}  // namespace

// --- the sync hint ------------------------------------------------------------

TEST(BoehmSync, SynchronizeAndWillBlockReachThePolicy) {
  gb::init();
  gb::device_heap h(host_opts(64 * MiB), "pressure");
  EXPECT_EQ(h.stats().gc.syncs, 0u);
  h.synchronize(nullptr);
  h.synchronize();
  EXPECT_EQ(h.stats().gc.syncs, 2u);
  h.quiet_moment(true);
  h.quiet_moment();
  EXPECT_EQ(h.stats().gc.syncs, 2u) << "quiet_moment(will_block) is a hint, not a sync";
}
