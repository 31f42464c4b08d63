// tests/test_allocator_hook.cpp — device_allocator's allocation_hook on the
// host backend: before_allocate once per allocate, the hook's stats, the
// reclaim ladder in order and stopping at the step that helped, and
// allocations from inside the hook served without nesting (Note [The hook
// point] in allocator.hpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "allocator_test_support.hpp"
#include "gcpressure/allocator.hpp"
#include "gcpressure/collection_scope.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using gcp_alloc_test::host_opts;
using gcp_test::contains;

namespace {

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
