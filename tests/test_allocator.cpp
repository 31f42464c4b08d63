// tests/test_allocator.cpp — device_allocator on the host backend: accounting,
// checked frees, limits, the out_of_memory report, the deferred-free queue,
// since_mark and the allocation_hook / reclaim ladder.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collection_scope.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using namespace std::chrono_literals;
using gcp_test::contains;
using gcp_test::lower;
using gcp_test::misuse_capture;

namespace {

size_spec bytes_spec(std::size_t n) {
  size_spec s;
  s.bytes = n;
  return s;
}
size_spec percent_spec(double p) {
  size_spec s;
  s.percent = p;
  return s;
}

allocator_options host_opts(std::size_t capacity, std::size_t hard = 0, std::size_t soft = 0, bool pool = true) {
  allocator_options o;
  o.backend = backend_kind::host;
  o.host_capacity = capacity;
  if (hard) o.hard_limit = bytes_spec(hard);
  if (soft) o.soft_limit = bytes_spec(soft);
  o.pool = pool;
  return o;
}

constexpr ladder_step kAllSteps[] = {ladder_step::release_cache, ladder_step::finish_and_drain,
                                     ladder_step::wait_streams,  ladder_step::full_collection,
                                     ladder_step::full_collection_2, ladder_step::drain,
                                     ladder_step::trim};

std::string steps_str(const std::vector<ladder_step>& v) {
  std::string s;
  for (auto st : v) s += std::string(s.empty() ? "" : ",") + to_string(st);
  return s;
}

bool strictly_in_ladder_order(const std::vector<ladder_step>& v) {
  for (std::size_t i = 1; i < v.size(); ++i)
    if (static_cast<int>(v[i - 1]) >= static_cast<int>(v[i])) return false;
  return true;
}
std::vector<ladder_step> collector_steps(const std::vector<ladder_step>& v) {
  std::vector<ladder_step> out;
  for (auto s : v)
    if (s == ladder_step::finish_and_drain || s == ladder_step::full_collection ||
        s == ladder_step::full_collection_2)
      out.push_back(s);
  return out;
}

// A hook that records what the allocator calls. Subclasses decide what reclaim does.
class recording_hook : public allocation_hook {
 public:
  void before_allocate(device_allocator&, std::size_t bytes, stream_ref s) override {
    std::lock_guard<std::mutex> lk(mu);
    before_calls.push_back({bytes, s});
  }
  bool reclaim(device_allocator& a, ladder_step step) override {
    {
      std::lock_guard<std::mutex> lk(mu);
      steps.push_back(step);
    }
    return on_reclaim(a, step);
  }
  void fill_stats(collection_stats& out) const override {
    out.policy = "test-hook";
    out.by_kind[static_cast<int>(gc_kind::blocking_full)] = 3;
  }
  virtual bool on_reclaim(device_allocator&, ladder_step) { return false; }

  std::mutex mu;
  std::vector<std::pair<std::size_t, stream_ref>> before_calls;
  std::vector<ladder_step> steps;
};

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

// --- the hook and the reclaim ladder ------------------------------------------------------------

TEST(AllocatorHook, BeforeAllocateOncePerAllocate) {
  host_stream s;
  device_allocator a(host_opts(256 * MiB));
  recording_hook hook;
  a.set_hook(&hook);
  EXPECT_EQ(a.hook(), &hook);
  void* p = a.allocate(100);
  void* q = a.allocate(2 * MiB, s.ref());
  void* r = a.allocate(30 * MiB);
  ASSERT_EQ(hook.before_calls.size(), 3u);
  EXPECT_EQ(hook.before_calls[0].first, 100u);
  EXPECT_EQ(hook.before_calls[0].second, nullptr);
  EXPECT_EQ(hook.before_calls[1].first, 2 * MiB);
  EXPECT_EQ(hook.before_calls[1].second, s.ref());
  EXPECT_EQ(hook.before_calls[2].first, 30 * MiB);
  EXPECT_TRUE(hook.steps.empty()) << "reclaim ran without a failure: " << steps_str(hook.steps);
  a.free(p, 100);
  a.free(q, 2 * MiB, s.ref());
  a.free(r, 30 * MiB);
  EXPECT_EQ(hook.before_calls.size(), 3u) << "free() must not call before_allocate";
  a.set_hook(nullptr);
  a.free(a.allocate(64), 64);
  EXPECT_EQ(hook.before_calls.size(), 3u) << "removed hook still called";
  a.trim();
  s.synchronize();
}

TEST(AllocatorHook, FillsStats) {
  device_allocator a(host_opts(256 * MiB));
  recording_hook hook;
  a.set_hook(&hook);
  const allocator_stats s = a.stats();
  EXPECT_EQ(s.gc.policy, "test-hook");
  EXPECT_EQ(s.gc.by_kind[static_cast<int>(gc_kind::blocking_full)], 3u);
  EXPECT_TRUE(contains(a.stats_json(), "test-hook"));
  a.set_hook(nullptr);
}

TEST(AllocatorHook, LadderStepsInOrderOnFailure) {
  device_allocator a(host_opts(512 * MiB, 64 * MiB));
  recording_hook hook;
  a.set_hook(&hook);
  void* held = a.allocate(40 * MiB);
  EXPECT_THROW((void)a.allocate(30 * MiB), gcpressure::out_of_memory);
  EXPECT_EQ(hook.before_calls.size(), 2u) << "before_allocate must run once per allocate, not per retry";
  // reclaim() sees the ladder in order, each step at most once, and at least
  // every collector step (pool-side steps may or may not be shown to the hook).
  EXPECT_TRUE(strictly_in_ladder_order(hook.steps)) << "got: " << steps_str(hook.steps);
  const std::vector<ladder_step> collector = {ladder_step::finish_and_drain, ladder_step::full_collection,
                                              ladder_step::full_collection_2};
  EXPECT_EQ(collector_steps(hook.steps), collector) << "got: " << steps_str(hook.steps);
  const allocator_stats s = a.stats();
  for (ladder_step st : kAllSteps)
    EXPECT_EQ(s.ladder[static_cast<int>(st)], 1u) << to_string(st);
  EXPECT_EQ(s.ooms, 1u);
  a.free(held, 40 * MiB);
  a.set_hook(nullptr);
}

namespace {
// Simulates a collector: on full_collection, the "garbage" block's finalizer
// queues it (deferred().push) and the collector drains, as a real policy does.
class freeing_hook : public recording_hook {
 public:
  bool on_reclaim(device_allocator& a, ladder_step step) override {
    if (step != trigger || garbage == nullptr) return false;
    EXPECT_TRUE(a.deferred().push(garbage, garbage_bytes, nullptr));
    garbage = nullptr;
    if (drain_too) a.drain();
    return true;
  }
  ladder_step trigger = ladder_step::full_collection;
  void* garbage = nullptr;
  std::size_t garbage_bytes = 0;
  bool drain_too = true;
};

// Holds 24 MiB (`other`) and 32 MiB of garbage that `hook` frees at its
// trigger step, then asks for 32 MiB more: over the 64 MiB soft limit, so the
// ladder runs. Returns the block (null if the allocation threw).
void* allocate_past_garbage(device_allocator& a, freeing_hook& hook, void*& other) {
  other = a.allocate(24 * MiB);
  hook.garbage = a.allocate(32 * MiB);
  hook.garbage_bytes = 32 * MiB;
  a.set_hook(&hook);
  void* p = nullptr;
  EXPECT_NO_THROW(p = a.allocate(32 * MiB)) << "steps: " << steps_str(hook.steps);
  return p;
}
}  // namespace

TEST(AllocatorHook, CollectionThatFreesMakesAllocationSucceed) {
  device_allocator a(host_opts(512 * MiB, 64 * MiB));
  freeing_hook hook;
  void* other = nullptr;
  void* p = allocate_past_garbage(a, hook, other);
  ASSERT_NE(p, nullptr) << "steps: " << steps_str(hook.steps);
  const std::vector<ladder_step> want = {ladder_step::finish_and_drain, ladder_step::full_collection};
  EXPECT_TRUE(strictly_in_ladder_order(hook.steps)) << "got: " << steps_str(hook.steps);
  EXPECT_EQ(collector_steps(hook.steps), want) << "the ladder must stop at the step that helped; got: "
                                               << steps_str(hook.steps);
  ASSERT_FALSE(hook.steps.empty());
  EXPECT_EQ(hook.steps.back(), ladder_step::full_collection);
  const allocator_stats s = a.stats();
  EXPECT_EQ(s.ooms, 0u);
  for (ladder_step st : {ladder_step::release_cache, ladder_step::finish_and_drain, ladder_step::wait_streams,
                         ladder_step::full_collection})
    EXPECT_EQ(s.ladder[static_cast<int>(st)], 1u) << to_string(st);
  EXPECT_EQ(s.ladder[static_cast<int>(ladder_step::full_collection_2)], 0u);
  EXPECT_EQ(s.ladder[static_cast<int>(ladder_step::drain)], 0u);
  EXPECT_EQ(s.ladder[static_cast<int>(ladder_step::trim)], 0u);
  EXPECT_EQ(s.requested.current, static_cast<std::int64_t>(56 * MiB));
  a.free(p, 32 * MiB);
  a.free(other, 24 * MiB);
  a.set_hook(nullptr);
}

TEST(AllocatorHook, FinalizerOnlyPushIsDrainedByTheLadder) {
  // The hook only queues the block (no drain of its own); the allocator's own
  // drain must pick it up before trim and the allocation must succeed.
  device_allocator a(host_opts(512 * MiB, 64 * MiB));
  freeing_hook hook;
  hook.drain_too = false;
  void* other = nullptr;
  void* p = allocate_past_garbage(a, hook, other);
  ASSERT_NE(p, nullptr) << "steps: " << steps_str(hook.steps);
  EXPECT_EQ(a.stats().ooms, 0u);
  EXPECT_EQ(a.deferred().pending(), 0u);
  EXPECT_EQ(a.stats().ladder[static_cast<int>(ladder_step::trim)], 0u)
      << "a queued free should be drained before trim; steps: " << steps_str(hook.steps);
  EXPECT_EQ(a.live_bytes(), 56 * MiB);
  a.free(p, 32 * MiB);
  a.free(other, 24 * MiB);
  a.set_hook(nullptr);
}

// Note [The hook point] (allocator.hpp): code the hook runs may allocate from
// the same allocator on the same thread; the hook runs it inside a
// collection_scope, as gc_policy does, and such an allocation is served
// without calling the hook again, so no collection ever nests inside another.
TEST(AllocatorHook, AllocateFromReclaimIsServedWithoutNesting) {
  gcp_test::run_with_watchdog(std::chrono::seconds(60), "allocate from inside reclaim", [] {
    device_allocator a(host_opts(512 * MiB, 16 * MiB));
    struct reentrant_hook : recording_hook {
      bool on_reclaim(device_allocator& al, ladder_step) override {
        const int d = ++depth;
        max_depth = std::max(max_depth, d);
        collection_scope collecting;  // a collection, whose finalizer allocates
        try {
          void* p = al.allocate(512);  // a finalizer that allocates, say
          al.free(p, 512);
          ++served;
        } catch (const std::exception&) {
          ++failed;
        }
        --depth;
        return false;
      }
      int depth = 0, max_depth = 0, served = 0, failed = 0;
    } hook;
    a.set_hook(&hook);
    void* held = a.allocate(12 * MiB);
    // 12 MiB live + 8 MiB under a 16 MiB limit: fails, the ladder runs.
    EXPECT_THROW((void)a.allocate(8 * MiB), gcpressure::out_of_memory);
    EXPECT_GE(hook.served, 1) << "the nested allocation (512 bytes fit) was not served";
    EXPECT_EQ(hook.failed, 0);
    EXPECT_EQ(hook.max_depth, 1) << "reclaim() nested inside reclaim()";
    EXPECT_EQ(hook.before_calls.size(), 2u) << "before_allocate ran for the nested allocations";
    a.set_hook(nullptr);
    EXPECT_EQ(a.live_bytes(), 12 * MiB);
    a.free(held, 12 * MiB);
  });
}

TEST(AllocatorHook, AllocateFromBeforeAllocateIsServedWithoutNesting) {
  gcp_test::run_with_watchdog(std::chrono::seconds(60), "allocate from inside before_allocate", [] {
    device_allocator a(host_opts(256 * MiB));
    struct reentrant_hook : recording_hook {
      void before_allocate(device_allocator& al, std::size_t bytes, stream_ref s) override {
        recording_hook::before_allocate(al, bytes, s);
        if (inside) {  // the allocator called the hook again from the nested allocation
          ++nested;
          return;
        }
        inside = true;
        try {
          collection_scope collecting;
          void* p = al.allocate(512);
          held.push_back(p);
          ++served;
        } catch (const std::exception&) {
          ++failed;
        }
        inside = false;
      }
      bool inside = false;
      int nested = 0, served = 0, failed = 0;
      std::vector<void*> held;
    } hook;
    a.set_hook(&hook);
    void* p = a.allocate(4096);
    EXPECT_EQ(hook.served, 1);
    EXPECT_EQ(hook.failed, 0);
    EXPECT_EQ(hook.nested, 0) << "before_allocate was called for an allocation made inside it";
    EXPECT_EQ(hook.before_calls.size(), 1u);
    EXPECT_EQ(a.live_bytes(), 4096u + 512u) << "both allocations are accounted";
    EXPECT_EQ(a.allocation_count(), 2u);
    a.set_hook(nullptr);
    a.free(p, 4096);
    for (void* q : hook.held) a.free(q, 512);
    EXPECT_EQ(a.live_bytes(), 0u);
  });
}

TEST(AllocatorHook, HooksOnOtherThreadsStillRun) {
  // The re-entrancy guard is per thread: while one thread is inside the hook,
  // another thread's allocation still calls it.
  gcp_test::run_with_watchdog(std::chrono::seconds(60), "hook on two threads", [] {
    device_allocator a(host_opts(256 * MiB));
    struct slow_hook : recording_hook {
      void before_allocate(device_allocator& al, std::size_t bytes, stream_ref s) override {
        recording_hook::before_allocate(al, bytes, s);
        if (bytes == 1111) {
          entered = true;
          while (!release.load()) std::this_thread::yield();
        }
      }
      std::atomic<bool> entered{false}, release{false};
    } hook;
    a.set_hook(&hook);
    std::thread t([&] { a.free(a.allocate(1111), 1111); });
    while (!hook.entered.load()) std::this_thread::yield();
    a.free(a.allocate(2222), 2222);  // must call the hook although thread t is inside it
    hook.release = true;
    t.join();
    std::vector<std::size_t> sizes;
    for (auto& c : hook.before_calls) sizes.push_back(c.first);
    std::sort(sizes.begin(), sizes.end());
    EXPECT_EQ(sizes, (std::vector<std::size_t>{1111, 2222}));
    a.set_hook(nullptr);
  });
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
