// tests/test_pool_accounting.cpp — pool_resource's exact accounting under
// random sequences of allocations and frees on one or three streams, and
// limiting_adaptor (a limit checked before upstream is asked). Split from
// test_pool.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/pool_resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using gcp_test::misuse_capture;
using gcp_test::overlap;

// --- pool: exact accounting under random sequences -------------------------------------------

namespace {

struct shadow_block {
  void* p;
  std::size_t n;
  stream_ref s;
  std::uint64_t tag;
  std::size_t block_bytes;  // what counters().allocated grew by for this block
};

std::size_t random_size(std::mt19937& rng) {
  std::uniform_int_distribution<int> kind(0, 99);
  const int k = kind(rng);
  if (k < 70) return std::uniform_int_distribution<std::size_t>(1, 64 * KiB)(rng);
  if (k < 90) return std::uniform_int_distribution<std::size_t>(64 * KiB, MiB)(rng);
  if (k < 98) return std::uniform_int_distribution<std::size_t>(MiB + 1, 10 * MiB)(rng);
  return std::uniform_int_distribution<std::size_t>(10 * MiB + 1, 24 * MiB)(rng);
}

void random_accounting_run(unsigned seed, bool use_streams) {
  host_resource h(std::size_t{2} << 30);
  host_stream A, B;
  pool_resource pool(h);
  const stream_ref streams[] = {nullptr, A.ref(), B.ref()};
  misuse_capture misuse;
  std::mt19937 rng(seed);
  std::vector<shadow_block> live;
  std::size_t requested = 0, allocated = 0;
  std::uint64_t next_tag = 1;
  for (int op = 0; op < 4000; ++op) {
    const bool do_alloc = live.empty() || (live.size() < 120 && rng() % 100 < 55);
    if (do_alloc) {
      const std::size_t n = random_size(rng);
      const stream_ref s = use_streams ? streams[rng() % 3] : nullptr;
      const std::size_t before = pool.counters().allocated;
      void* p = pool.allocate(n, s);
      ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % gcpressure::alignment, 0u);
      const std::size_t grew = pool.counters().allocated - before;
      // A block is the rounded request plus at most an unsplit tail (< min_block
      // for small blocks, <= small_threshold for larger ones).
      const std::size_t rounded = pool.rounded_size(n);
      ASSERT_GE(grew, rounded) << "op " << op;
      ASSERT_LE(grew - rounded, rounded <= MiB ? std::size_t{511} : MiB) << "op " << op;
      const std::uint64_t tag = next_tag++;
      gcp_test::put_tags(p, n, tag);
      live.push_back({p, n, s, tag, grew});
      requested += n;
      allocated += grew;
      ASSERT_EQ(pool.live_size(p), n);
    } else {
      const std::size_t i = rng() % live.size();
      const shadow_block b = live[i];
      live[i] = live.back();
      live.pop_back();
      ASSERT_TRUE(gcp_test::tags_ok(b.p, b.n, b.tag)) << "block overwritten (overlap) at op " << op;
      pool.deallocate(b.p, b.n, b.s);
      requested -= b.n;
      allocated -= b.block_bytes;
    }
    if (op % 500 == 499) {
      if (rng() % 2) pool.release_cached();
      else pool.trim();
    }
    const pool_counters c = pool.counters();
    ASSERT_EQ(c.requested, requested) << "op " << op;
    ASSERT_EQ(c.allocated, allocated) << "op " << op;
    ASSERT_EQ(c.live_blocks, live.size()) << "op " << op;
    ASSERT_GE(c.reserved, c.allocated) << "op " << op;
  }
  while (!live.empty()) {
    const shadow_block b = live.back();
    live.pop_back();
    ASSERT_TRUE(gcp_test::tags_ok(b.p, b.n, b.tag));
    pool.deallocate(b.p, b.n, b.s);
  }
  pool_counters c = pool.counters();
  EXPECT_EQ(c.requested, 0u);
  EXPECT_EQ(c.allocated, 0u);
  EXPECT_EQ(c.live_blocks, 0u);
  pool.trim();
  A.synchronize();
  B.synchronize();
  c = pool.counters();
  EXPECT_EQ(c.reserved, 0u);
  EXPECT_EQ(c.segments, 0u);
  EXPECT_EQ(c.upstream_allocations, c.upstream_frees);
  EXPECT_EQ(h.used(), 0u);
  EXPECT_EQ(h.outstanding(), 0u);
  EXPECT_EQ(misuse.count(), 0) << misuse.last();
}

}  // namespace

TEST(PoolAccounting, RandomSequenceDefaultStream) { random_accounting_run(20240601u, false); }
TEST(PoolAccounting, RandomSequenceSecondSeed) { random_accounting_run(7u, false); }
TEST(PoolAccounting, RandomSequenceThreeStreams) { random_accounting_run(99u, true); }

// --- limits ---------------------------------------------------------------------------------

TEST(Limiting, ThrowsBeforeAskingUpstream) {
  host_resource h(64 * MiB);
  limiting_adaptor lim(h, MiB);
  EXPECT_EQ(lim.limit(), MiB);
  void* a = lim.allocate(768 * KiB);
  const std::size_t host_used = h.used();
  const std::size_t host_live = h.outstanding();
  const std::size_t lim_used = lim.used();
  EXPECT_GE(lim_used, 768 * KiB);
  EXPECT_THROW((void)lim.allocate(512 * KiB), gcpressure::out_of_memory);
  EXPECT_EQ(h.used(), host_used) << "upstream was asked despite the limit";
  EXPECT_EQ(h.outstanding(), host_live);
  EXPECT_EQ(lim.used(), lim_used);
  void* b = lim.allocate(128 * KiB);  // still fits
  lim.deallocate(b, 128 * KiB);
  lim.deallocate(a, 768 * KiB);
  EXPECT_EQ(lim.used(), 0u);
  EXPECT_EQ(h.used(), 0u);
}

TEST(Limiting, LimitChangesAtRunTime) {
  host_resource h(64 * MiB);
  limiting_adaptor lim(h, MiB);
  EXPECT_THROW((void)lim.allocate(2 * MiB), gcpressure::out_of_memory);
  lim.set_limit(4 * MiB);
  EXPECT_EQ(lim.limit(), 4 * MiB);
  void* p = nullptr;
  ASSERT_NO_THROW(p = lim.allocate(2 * MiB));
  lim.set_limit(MiB);  // below what is in use: further allocations fail, frees work
  EXPECT_THROW((void)lim.allocate(256), gcpressure::out_of_memory);
  lim.deallocate(p, 2 * MiB);
  EXPECT_EQ(lim.used(), 0u);
  void* q = lim.allocate(512 * KiB);
  lim.deallocate(q, 512 * KiB);
}

TEST(Limiting, PoolOverLimitCountsUpstreamFailure) {
  host_resource h(256 * MiB);
  limiting_adaptor lim(h, 32 * MiB);
  pool_resource pool(lim);
  void* a = pool.allocate(20 * MiB);
  const pool_counters before = pool.counters();
  EXPECT_THROW((void)pool.allocate(20 * MiB), gcpressure::out_of_memory);
  const pool_counters after = pool.counters();
  EXPECT_EQ(after.upstream_failures, before.upstream_failures + 1);
  EXPECT_EQ(after.requested, before.requested);
  EXPECT_EQ(after.live_blocks, before.live_blocks);
  EXPECT_EQ(after.reserved, before.reserved);
  EXPECT_EQ(lim.used(), before.reserved);
  pool.deallocate(a, 20 * MiB);
  // The cached 20 MiB segment satisfies the same request again without upstream.
  void* b = pool.allocate(20 * MiB);
  EXPECT_EQ(pool.counters().upstream_allocations, after.upstream_allocations);
  pool.deallocate(b, 20 * MiB);
  EXPECT_EQ(pool.trim(), 20 * MiB);
  EXPECT_EQ(lim.used(), 0u);
  EXPECT_EQ(h.used(), 0u);
}
