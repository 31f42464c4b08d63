// tests/test_allocator.cpp — device_allocator on the host backend: accounting,
// checked frees, limits, the out_of_memory report, the deferred-free queue,
// since_mark and the stats. The allocation_hook and the reclaim ladder are
// tests/test_allocator_hook.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "allocator_test_support.hpp"
#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using namespace std::chrono_literals;
using gcp_alloc_test::host_opts;
using gcp_test::contains;
using gcp_test::lower;
using gcp_test::misuse_capture;

namespace {

size_spec percent_spec(double p) {
  size_spec s;
  s.percent = p;
  return s;
}

}  // namespace

// --- construction and limits ----------------------------------------------------------

TEST(Allocator, DefaultLimits) {
  device_allocator a(host_opts(256 * MiB));
  EXPECT_EQ(a.backend(), backend_kind::host);
  EXPECT_EQ(a.hard_limit(), 256 * MiB) << "unset hard limit is the device total";
  EXPECT_EQ(a.soft_limit(), 192 * MiB) << "unset soft limit is 75% of the hard limit";
  EXPECT_EQ(a.device_memory().total, 256 * MiB);
  const allocator_stats s = a.stats();
  EXPECT_EQ(s.hard_limit, 256 * MiB);
  EXPECT_EQ(s.soft_limit, 192 * MiB);
  EXPECT_EQ(s.device_memory.total, 256 * MiB);
  EXPECT_EQ(s.backend, backend_kind::host);
}

TEST(Allocator, ExplicitLimits) {
  device_allocator a(host_opts(256 * MiB, 64 * MiB, 40 * MiB));
  EXPECT_EQ(a.hard_limit(), 64 * MiB);
  EXPECT_EQ(a.soft_limit(), 40 * MiB);
  device_allocator b(host_opts(256 * MiB, 64 * MiB));
  EXPECT_EQ(b.soft_limit(), 48 * MiB) << "soft = 75% of the hard limit when unset";
  a.set_hard_limit(100 * MiB);
  a.set_soft_limit(90 * MiB);
  EXPECT_EQ(a.hard_limit(), 100 * MiB);
  EXPECT_EQ(a.soft_limit(), 90 * MiB);
  EXPECT_EQ(a.stats().hard_limit, 100 * MiB);
}

TEST(Allocator, PercentLimits) {
  allocator_options o = host_opts(256 * MiB);
  o.hard_limit = percent_spec(50);
  o.soft_limit = percent_spec(25);
  device_allocator a(o);
  EXPECT_EQ(a.hard_limit(), 128 * MiB);
  EXPECT_EQ(a.soft_limit(), 64 * MiB);
  // The percent hard limit is enforced.
  void* p = a.allocate(100 * MiB);
  EXPECT_THROW((void)a.allocate(60 * MiB), gcpressure::out_of_memory);
  a.free(p, 100 * MiB);
  void* q = a.allocate(120 * MiB);
  a.free(q, 120 * MiB);
}

TEST(Allocator, PercentLimitsFromParsedConfig) {
  allocator_options o = host_opts(512 * MiB);
  o.hard_limit = parse_size("50%", "GCPRESSURE_HARD_LIMIT");
  device_allocator a(o);
  EXPECT_EQ(a.hard_limit(), 256 * MiB);
  EXPECT_EQ(a.soft_limit(), 192 * MiB);
}

// --- accounting ------------------------------------------------------------------------

TEST(Allocator, AllocateFreeAccounting) {
  device_allocator a(host_opts(256 * MiB));
  void* p = a.allocate(1000);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % gcpressure::alignment, 0u);
  std::memset(p, 0x3c, 1000);
  void* q = a.allocate(5000);
  allocator_stats s = a.stats();
  EXPECT_EQ(s.requested.current, 6000);
  EXPECT_EQ(s.requested.peak, 6000);
  EXPECT_EQ(s.requested.total, 6000);
  EXPECT_GE(s.allocated.current, s.requested.current);
  EXPECT_GE(s.reserved.current, s.allocated.current);
  EXPECT_EQ(s.active_blocks.current, 2);
  EXPECT_EQ(s.allocations, 2u);
  EXPECT_EQ(s.frees, 0u);
  EXPECT_EQ(s.cached, static_cast<std::size_t>(s.reserved.current - s.allocated.current));
  EXPECT_EQ(a.live_bytes(), 6000u);
  EXPECT_EQ(a.reserved_bytes(), static_cast<std::size_t>(s.reserved.current));
  EXPECT_EQ(a.allocation_count(), 2u);
  EXPECT_TRUE(a.owns(p));
  EXPECT_TRUE(a.owns(q));

  a.free(p, 1000);
  s = a.stats();
  EXPECT_EQ(s.requested.current, 5000);
  EXPECT_EQ(s.requested.peak, 6000) << "peak keeps the maximum";
  EXPECT_EQ(s.requested.total, 6000);
  EXPECT_EQ(s.active_blocks.current, 1);
  EXPECT_EQ(s.frees, 1u);
  EXPECT_FALSE(a.owns(p));
  a.free(q, 5000);
  s = a.stats();
  EXPECT_EQ(s.requested.current, 0);
  EXPECT_EQ(s.allocated.current, 0);
  EXPECT_EQ(s.active_blocks.current, 0);
  EXPECT_EQ(a.live_bytes(), 0u);

  a.reset_peaks();
  EXPECT_EQ(a.stats().requested.peak, 0);
  void* r = a.allocate(300);
  EXPECT_EQ(a.stats().requested.peak, 300);
  a.free(r, 300);
}

// The reserved peak (the limiter's) restarts too: a benchmark that runs
// variants one after another in one process reads each variant's own peak.
TEST(Allocator, ResetPeaksRestartsTheReservedPeak) {
  device_allocator a(host_opts(256 * MiB));
  void* big = a.allocate(64 * MiB);
  a.free(big, 64 * MiB);
  EXPECT_GE(a.stats().reserved.peak, static_cast<std::int64_t>(64 * MiB));
  a.trim();
  ASSERT_EQ(a.stats().reserved.current, 0);
  a.reset_peaks();
  EXPECT_EQ(a.stats().reserved.peak, 0) << "reset_peaks left the reserved peak of an earlier phase";
  void* p = a.allocate(MiB);
  const auto s = a.stats();
  EXPECT_EQ(s.reserved.peak, s.reserved.current);
  EXPECT_LT(s.reserved.peak, static_cast<std::int64_t>(64 * MiB));
  a.free(p, MiB);
}

TEST(Allocator, TrimReturnsReservedMemory) {
  device_allocator a(host_opts(256 * MiB));
  void* p = a.allocate(12 * MiB);
  a.free(p, 12 * MiB);
  EXPECT_GT(a.reserved_bytes(), 0u) << "pool keeps freed memory cached";
  EXPECT_GT(a.stats().cached, 0u);
  EXPECT_GT(a.trim(), 0u);
  EXPECT_EQ(a.reserved_bytes(), 0u);
  EXPECT_EQ(a.stats().reserved.current, 0);
}

TEST(Allocator, CallerUpstreamGetsEverythingBack) {
  host_resource h(128 * MiB);
  {
    device_allocator a(h, host_opts(128 * MiB));
    void* p = a.allocate(MiB);
    void* q = a.allocate(15 * MiB);
    EXPECT_GE(h.used(), 16 * MiB);
    EXPECT_EQ(a.device_memory().total, 128 * MiB);
    a.free(p, MiB);
    a.free(q, 15 * MiB);
  }
  EXPECT_EQ(h.used(), 0u) << "allocator destructor did not return its segments";
  EXPECT_EQ(h.outstanding(), 0u);
}

TEST(Allocator, NoPoolAccounting) {
  host_resource h(64 * MiB);
  device_allocator a(h, host_opts(64 * MiB, 0, 0, /*pool=*/false));
  void* p = a.allocate(1000);
  EXPECT_EQ(a.stats().requested.current, 1000);
  EXPECT_GE(a.stats().allocated.current, 1000);
  EXPECT_GE(h.used(), 1000u);
  a.free(p, 1000);
  EXPECT_EQ(a.stats().requested.current, 0);
  EXPECT_EQ(h.used(), 0u) << "without a pool a free returns memory at once";
  EXPECT_EQ(a.release_cached(), 0u);
  EXPECT_EQ(a.trim(), 0u);
}

TEST(Allocator, StreamAllocations) {
  host_stream s;  // outlives the allocator
  device_allocator a(host_opts(256 * MiB));
  void* p = a.allocate(64 * KiB, s.ref());
  std::atomic<bool> ran{false};
  s.enqueue([p, &ran] {
    std::memset(p, 1, 64 * KiB);
    ran = true;
  });
  a.free(p, 64 * KiB, s.ref());
  s.synchronize();
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(a.live_bytes(), 0u);
  a.trim();
  EXPECT_EQ(a.reserved_bytes(), 0u);
}

TEST(Allocator, ForgetStreamThenDestroyIt) {
  device_allocator a(host_opts(256 * MiB));
  {
    host_stream s;
    void* p = a.allocate(64 * KiB, s.ref());
    std::atomic<bool> ran{false};
    s.enqueue([p, &ran] {
      std::this_thread::sleep_for(50ms);
      std::memset(p, 2, 64 * KiB);
      ran = true;
    });
    a.free(p, 64 * KiB, s.ref());
    a.forget_stream(s.ref());
    EXPECT_TRUE(ran.load()) << "forget_stream returned before the stream's work ran";
  }  // stream destroyed
  void* q = a.allocate(64 * KiB);  // default stream may take the block at once
  a.free(q, 64 * KiB);
  a.trim();
  EXPECT_EQ(a.reserved_bytes(), 0u);
  EXPECT_EQ(a.live_bytes(), 0u);
}

// --- misuse ------------------------------------------------------------------------------

class AllocatorMisuse : public ::testing::TestWithParam<bool> {};

TEST_P(AllocatorMisuse, ZeroSizeIsLogicError) {
  device_allocator a(host_opts(64 * MiB, 0, 0, GetParam()));
  EXPECT_THROW((void)a.allocate(0), gcpressure::logic_error);
  EXPECT_EQ(a.live_bytes(), 0u);
}

TEST_P(AllocatorMisuse, CheckedFreeThrows) {
  misuse_capture quiet;
  device_allocator a(host_opts(64 * MiB, 0, 0, GetParam()));
  void* p = a.allocate(4096);
  // Wrong size: throws, and the block stays live.
  EXPECT_THROW(a.free(p, 4097), gcpressure::logic_error);
  EXPECT_EQ(a.live_bytes(), 4096u);
  // Foreign pointers: a stack variable, an interior pointer.
  int x = 0;
  EXPECT_THROW(a.free(&x, sizeof x), gcpressure::logic_error);
  EXPECT_THROW(a.free(static_cast<char*>(p) + 256, 1024), gcpressure::logic_error);
  EXPECT_EQ(a.live_bytes(), 4096u);
  EXPECT_NO_THROW(a.free(p, 4096));
  // Double free.
  EXPECT_THROW(a.free(p, 4096), gcpressure::logic_error);
  EXPECT_EQ(a.live_bytes(), 0u);
  EXPECT_EQ(a.stats().active_blocks.current, 0);
  EXPECT_EQ(a.stats().frees, 1u);
}

TEST_P(AllocatorMisuse, UncheckedDeallocateReports) {
  misuse_capture misuse;
  device_allocator a(host_opts(64 * MiB, 0, 0, GetParam()));
  void* p = a.allocate(4096);
  a.deallocate(p, 4096);
  EXPECT_EQ(misuse.count(), 0) << misuse.last();
  a.deallocate(p, 4096);  // double free
  EXPECT_GE(misuse.count(), 1);
  int x = 0;
  const int before = misuse.count();
  a.deallocate(&x, sizeof x);  // foreign
  EXPECT_GT(misuse.count(), before);
  EXPECT_GE(a.stats().misuse_errors, 2u);
  EXPECT_EQ(a.live_bytes(), 0u);
  EXPECT_EQ(a.stats().requested.current, 0);
  // Still fully usable.
  void* q = a.allocate(4096);
  a.free(q, 4096);
}

INSTANTIATE_TEST_SUITE_P(PoolOnOff, AllocatorMisuse, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "pool" : "nopool"; });

// --- out of memory -------------------------------------------------------------------------

TEST(AllocatorOom, HardLimitReport) {
  device_allocator a(host_opts(512 * MiB, 64 * MiB, 48 * MiB));
  // The request alone fits under the limit; with what is live it does not.
  void* held = a.allocate(40 * MiB);
  const std::size_t request = 30 * MiB;
  std::string msg;
  try {
    (void)a.allocate(request);
    FAIL() << "allocation past the hard limit succeeded";
  } catch (const gcpressure::out_of_memory& e) {
    msg = e.what();
  }
  const std::string lm = lower(msg);
  EXPECT_TRUE(contains(msg, std::to_string(request)) || contains(msg, format_bytes(request)))
      << "request size not named: " << msg;
  EXPECT_TRUE(contains(lm, "live")) << msg;
  EXPECT_TRUE(contains(lm, "reserved") || contains(lm, "cached")) << msg;
  EXPECT_TRUE(contains(lm, "hard limit")) << msg;
  EXPECT_TRUE(contains(lm, "soft limit")) << msg;
  EXPECT_TRUE(contains(msg, format_bytes(64 * MiB)) || contains(msg, std::to_string(64 * MiB)))
      << "hard limit value not named: " << msg;
  EXPECT_TRUE(contains(msg, "release_cache")) << msg;
  EXPECT_TRUE(contains(msg, "trim")) << msg;

  const allocator_stats s = a.stats();
  EXPECT_EQ(s.ooms, 1u);
  EXPECT_GE(s.ladder[static_cast<int>(ladder_step::release_cache)], 1u);
  EXPECT_GE(s.ladder[static_cast<int>(ladder_step::trim)], 1u);
  EXPECT_EQ(s.requested.current, static_cast<std::int64_t>(40 * MiB)) << "failed allocation changed accounting";
  EXPECT_EQ(s.active_blocks.current, 1);
  EXPECT_LE(a.reserved_bytes(), 64 * MiB);

  // The allocator keeps working after an out_of_memory.
  void* small = a.allocate(MiB);
  a.free(small, MiB);
  a.free(held, 40 * MiB);
  EXPECT_EQ(a.stats().ooms, 1u);
}

TEST(AllocatorOom, CatchableAsBadAlloc) {
  device_allocator a(host_opts(64 * MiB));
  EXPECT_THROW((void)a.allocate(65 * MiB), std::bad_alloc);
  EXPECT_THROW((void)a.allocate(std::size_t{1} << 50), std::exception);
  EXPECT_GE(a.stats().ooms, 1u);
}

TEST(AllocatorOom, AbsurdSizeRejectedWithoutCrash) {
  device_allocator a(host_opts(64 * MiB));
  for (std::size_t n : {SIZE_MAX, SIZE_MAX - 255, std::size_t{1} << 50, gcpressure::max_request_bytes + 1})
    gcp_test::expect_rejected([&] { return a.allocate(n); }, "bytes=" + std::to_string(n));
  EXPECT_EQ(a.live_bytes(), 0u);
}

TEST(AllocatorOom, CachedMemoryIsReclaimedBeforeFailing) {
  // 40 MiB cached in the pool + a 40 MiB request under a 64 MiB hard limit:
  // the ladder must return the cache upstream and then succeed.
  device_allocator a(host_opts(512 * MiB, 64 * MiB));
  void* p = a.allocate(40 * MiB);
  a.free(p, 40 * MiB);
  EXPECT_GE(a.reserved_bytes(), 40 * MiB);
  void* q = nullptr;
  ASSERT_NO_THROW(q = a.allocate(50 * MiB));
  EXPECT_EQ(a.stats().ooms, 0u);
  EXPECT_LE(a.reserved_bytes(), 64 * MiB);
  a.free(q, 50 * MiB);
}

// --- deferred frees and marks ----------------------------------------------------------------

TEST(AllocatorDeferred, PushThenDrain) {
  device_allocator a(host_opts(256 * MiB));
  void* p = a.allocate(1000);
  void* q = a.allocate(2000);
  void* r = a.allocate(3000);
  ASSERT_TRUE(a.deferred().push(p, 1000, nullptr));
  ASSERT_TRUE(a.deferred().push(q, 2000, nullptr));
  EXPECT_EQ(a.deferred().pending(), 2u);
  EXPECT_EQ(a.deferred().pending_bytes(), 3000u);
  EXPECT_EQ(a.stats().deferred_pending, 2u);
  EXPECT_EQ(a.live_bytes(), 6000u) << "queued blocks stay live until drained";
  EXPECT_EQ(a.drain(), 3000u);
  EXPECT_EQ(a.deferred().pending(), 0u);
  EXPECT_EQ(a.live_bytes(), 3000u);
  EXPECT_FALSE(a.owns(p));
  EXPECT_TRUE(a.owns(r));
  EXPECT_EQ(a.drain(), 0u);
  ASSERT_TRUE(a.deferred().push(r, 3000, nullptr));
  EXPECT_EQ(a.drain(), 3000u);
  EXPECT_EQ(a.live_bytes(), 0u);
  EXPECT_EQ(a.stats().requested.current, 0);
  EXPECT_EQ(a.stats().active_blocks.current, 0);
  EXPECT_EQ(a.stats().frees, 3u);
  EXPECT_EQ(a.deferred().pushed(), 3u);
}

TEST(AllocatorDeferred, AllocateDrainsQueue) {
  device_allocator a(host_opts(256 * MiB));
  void* p = a.allocate(4096);
  ASSERT_TRUE(a.deferred().push(p, 4096, nullptr));
  void* q = a.allocate(8192);
  EXPECT_EQ(a.deferred().pending(), 0u) << "allocate() must drain deferred frees";
  EXPECT_EQ(a.live_bytes(), 8192u);
  a.free(q, 8192);
}

TEST(AllocatorDeferred, DrainedMisuseIsReportedNotThrown) {
  misuse_capture misuse;
  device_allocator a(host_opts(256 * MiB));
  int x = 0;
  ASSERT_TRUE(a.deferred().push(&x, sizeof x, nullptr));
  EXPECT_NO_THROW(a.drain());
  EXPECT_GE(misuse.count(), 1);
  EXPECT_EQ(a.live_bytes(), 0u);
}

TEST(AllocatorDeferred, StreamOrderedDeferredFree) {
  host_stream s;
  device_allocator a(host_opts(256 * MiB));
  void* p = a.allocate(4096, s.ref());
  std::atomic<bool> done{false};
  s.enqueue([p, &done] {
    std::this_thread::sleep_for(50ms);
    std::memset(p, 7, 4096);
    done = true;
  });
  ASSERT_TRUE(a.deferred().push(p, 4096, s.ref()));
  EXPECT_EQ(a.drain(), 4096u);
  EXPECT_EQ(a.live_bytes(), 0u);
  s.synchronize();
  EXPECT_TRUE(done.load());
  a.trim();
  EXPECT_EQ(a.reserved_bytes(), 0u);
}

TEST(AllocatorMark, SinceMark) {
  device_allocator a(host_opts(256 * MiB));
  a.mark();
  EXPECT_EQ(a.since_mark(), 0u);
  void* p = a.allocate(4096);
  EXPECT_EQ(a.since_mark(), 4096u);
  void* q = a.allocate(8192);
  EXPECT_EQ(a.since_mark(), 12288u);
  EXPECT_EQ(a.stats().since_mark, 12288u);
  a.free(p, 4096);
  EXPECT_EQ(a.since_mark(), 12288u) << "since_mark counts allocations, frees do not lower it";
  a.mark();
  EXPECT_EQ(a.since_mark(), 0u);
  void* r = a.allocate(1024);
  EXPECT_EQ(a.since_mark(), 1024u);
  a.free(q, 8192);
  a.free(r, 1024);
  EXPECT_EQ(a.allocation_count(), 3u);
}

TEST(AllocatorStats, TextAndJsonFromLiveAllocator) {
  device_allocator a(host_opts(256 * MiB));
  void* p = a.allocate(777777);
  const std::string j = a.stats_json();
  gcp_test::json_check chk(j);
  EXPECT_TRUE(chk.valid()) << chk.error() << "\n" << j;
  EXPECT_TRUE(contains(j, "777777")) << j;
  EXPECT_FALSE(a.stats_text().empty());
  a.free(p, 777777);
}
