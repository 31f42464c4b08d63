// test_shutdown_core.cpp — allocators destroyed with live blocks (issue 6,
// "Shutdown"): a clear message and a documented leak, never a use-after-free
// (the ASan build runs these and would report one; no Boehm here, so the TSan
// build runs them too).
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "reliability_support.hpp"

namespace gcp = gcpressure;

namespace {

// --- in process: allocators destroyed with live blocks ------------------------------------

// The allocator's destructor reports the live blocks and leaks them: memory a
// runtime still points at stays valid (ASan: no use-after-free here).
void destroy_with_live_blocks(bool pool) {
  SCOPED_TRACE(pool ? "with pool" : "without pool");
  gcp_rel::misuse_counter misuse;
  gcp::allocator_options o;
  o.backend = gcp::backend_kind::host;
  o.host_capacity = 256 * MiB;
  o.pool = pool;
  auto a = std::make_unique<gcp::device_allocator>(o);
  std::vector<void*> blocks;
  for (int i = 0; i < 16; ++i) {
    blocks.push_back(a->allocate(64 * KiB));
    std::memset(blocks.back(), i, 64 * KiB);
  }
  a->free(blocks.back(), 64 * KiB);
  blocks.pop_back();
  a.reset();
  EXPECT_GE(misuse.count(), 1);
  const std::string msg = misuse.last();
  EXPECT_NE(msg.find("live"), std::string::npos) << msg;
  EXPECT_NE(msg.find("leak"), std::string::npos) << msg;
  // Still the caller's memory: a late kernel (here: the host) may write it.
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    auto* p = static_cast<unsigned char*>(blocks[i]);
    EXPECT_EQ(p[0], static_cast<unsigned char>(i));
    std::memset(p, 0xEE, 64 * KiB);
  }
}

TEST(ShutdownAllocator, DestroyedWithLiveBlocksLeaksThemWithAMessage) {
  destroy_with_live_blocks(true);
  destroy_with_live_blocks(false);
}

// Over a caller's upstream: the pool returns every idle segment and leaks only
// those holding live blocks; the upstream (which outlives it) still counts them.
TEST(ShutdownAllocator, CallerUpstreamKeepsOnlyTheLeakedSegments) {
  gcp_rel::misuse_counter misuse;
  gcp::host_resource host(256 * MiB);
  {
    gcp::allocator_options o;
    o.hard_limit.bytes = 128 * MiB;
    gcp::device_allocator a(host, o);
    void* keep = a.allocate(11 * MiB);  // its own (large) segment: 11 MiB rounded to 12
    std::vector<void*> idle;
    for (int i = 0; i < 8; ++i) idle.push_back(a.allocate(700 * KiB));
    for (void* p : idle) a.free(p, 700 * KiB);
    EXPECT_GT(host.used(), 12 * MiB);
    (void)keep;
  }
  EXPECT_EQ(host.outstanding(), 1u) << "only the segment with the live block is leaked";
  EXPECT_EQ(host.used(), 12 * MiB) << "the large segment: 11 MiB rounded to 2 MiB granularity";
  EXPECT_GE(misuse.count(), 1);
}

}  // namespace
