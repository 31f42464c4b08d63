// tests/test_limits.cpp — a hard limit means what it says: the bytes under it
// are usable (Note [Segments near the limit], core/src/pool_resource.cpp), and
// the out-of-memory report says which cached bytes could be returned.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/pool_resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using gcp_test::contains;

namespace {

allocator_options limited(std::size_t hard) {
  allocator_options o;
  o.backend = backend_kind::host;
  o.host_capacity = 4 * hard;  // the limit, not the device, is what runs out
  o.hard_limit.bytes = hard;
  return o;
}

// Allocates `block` bytes until the allocator refuses; returns how many fit
// and frees them. `oom` gets the refusal's text.
std::size_t fill(device_allocator& a, std::size_t block, std::string* oom = nullptr) {
  std::vector<void*> held;
  for (;;) {
    try {
      held.push_back(a.allocate(block));
    } catch (const out_of_memory& e) {
      if (oom) *oom = e.what();
      break;
    }
    if (held.size() > (std::size_t{1} << 16)) break;  // a limit that does not hold: fail below, not hang
  }
  EXPECT_LE(a.reserved_bytes(), a.hard_limit());
  for (void* p : held) a.free(p, block);
  return held.size();
}

void expect_fills(std::size_t limit, std::size_t mib) {
  device_allocator a(limited(limit));
  const std::size_t block = mib * MiB;
  const std::size_t n = fill(a, block);
  EXPECT_GE(n * block + block, limit) << mib << " MiB blocks under a " << format_bytes(limit) << " limit: only " << n
                                      << " fit (" << format_bytes(n * block) << ")";
}

}  // namespace

TEST(Limits, BlocksOfEverySizeFillTheLimit) {
  for (std::size_t mib = 1; mib <= 33; ++mib) expect_fills(64 * MiB, mib);
}

// Medium blocks (segments shared by several of them) fill larger limits too:
// the rule is not one for 64 MiB.
TEST(Limits, MediumBlocksFillLargerLimits) {
  for (std::size_t limit : {100 * MiB, 256 * MiB, 1024 * MiB})
    for (std::size_t mib = 2; mib <= 10; ++mib) expect_fills(limit, mib);
}

// The segment sizes far from a limit stay those pool_resource.hpp documents;
// only the last ones before it are exact.
TEST(Limits, ExactSegmentsOnlyNearTheLimit) {
  device_allocator a(limited(64 * MiB));
  std::vector<void*> held{a.allocate(8 * MiB)};
  EXPECT_EQ(a.reserved_bytes(), 16 * MiB) << "far from the limit a segment is shared";
  for (int i = 1; i < 7; ++i) held.push_back(a.allocate(8 * MiB));
  // 16 MiB segments (two 8 MiB blocks each) while the headroom holds two
  // of them: reserved 16, 32, 48 MiB; then exact 8 MiB ones: 56, 64.
  EXPECT_EQ(a.reserved_bytes(), 56 * MiB);
  held.push_back(a.allocate(8 * MiB));
  EXPECT_EQ(a.reserved_bytes(), 64 * MiB);
  EXPECT_THROW((void)a.allocate(512), out_of_memory);
  for (void* p : held) a.free(p, 8 * MiB);
}

TEST(Limits, OomReportSaysCachedBytesCannotBeReturned) {
  device_allocator a(limited(64 * MiB));
  void* keep = a.allocate(4 * MiB);  // a 20 MiB segment: five 4 MiB blocks
  void* gone = a.allocate(4 * MiB);
  a.free(gone, 4 * MiB);
  std::string msg;
  try {
    (void)a.allocate(50 * MiB);
    FAIL() << "50 MiB fitted beside a 20 MiB segment under 64 MiB";
  } catch (const out_of_memory& e) {
    msg = e.what();
  }
  EXPECT_TRUE(contains(msg, "cached 16.00 MiB (0 B releasable")) << msg;
  EXPECT_TRUE(contains(msg, "usable only by requests of at most 16.00 MiB")) << msg;
  EXPECT_TRUE(contains(msg, "release_cache (nothing to do)")) << msg;
  // A 16 MiB request is served from that free part, without a new segment.
  void* fits = a.allocate(16 * MiB);
  EXPECT_EQ(a.reserved_bytes(), 20 * MiB);
  a.free(fits, 16 * MiB);
  a.free(keep, 4 * MiB);
}

// Note [A lowered limit is met at once where it can be] (docs/DESIGN.md,
// Invariants): lowering the hard limit returns idle cached segments before
// set_hard_limit returns; below the bytes in use, reserved stays over the
// limit, nothing grows it, and the frees that leave segments idle return
// them, so the limit holds again once enough is freed.
TEST(Limits, ALoweredHardLimitIsMetAtOnceWhereCachesAllow) {
  device_allocator a(limited(64 * MiB));
  std::vector<void*> held;
  for (int i = 0; i < 8; ++i) held.push_back(a.allocate(8 * MiB));
  ASSERT_EQ(a.reserved_bytes(), 64 * MiB);
  for (int i = 2; i < 8; ++i) a.free(held[i], 8 * MiB);  // 48 MiB cached, 16 MiB in use
  a.set_hard_limit(32 * MiB);
  EXPECT_LE(a.reserved_bytes(), 32 * MiB) << "idle cached segments went back at once";
  EXPECT_GE(a.reserved_bytes(), 16 * MiB);
  a.set_hard_limit(8 * MiB);  // below the 16 MiB in use
  EXPECT_GT(a.reserved_bytes(), a.hard_limit()) << "blocks in use are not taken away";
  const std::size_t over = a.reserved_bytes();
  EXPECT_THROW((void)a.allocate(16 * MiB), out_of_memory);
  EXPECT_EQ(a.reserved_bytes(), over) << "nothing grows reserved over a lowered limit";
  a.free(held[0], 8 * MiB);
  a.free(held[1], 8 * MiB);
  EXPECT_LE(a.reserved_bytes(), a.hard_limit()) << "met again once the blocks in use are freed";
  void* p = a.allocate(4 * MiB);
  EXPECT_LE(a.reserved_bytes(), a.hard_limit());
  a.free(p, 4 * MiB);
}
