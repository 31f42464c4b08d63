// Runtime-agnostic tests of the policies: a recording fake collector stands in
// for the runtime. It owns "handles" to device blocks; the test drops them
// (makes them unreachable) and a collection of the right kind finds them and
// queues their blocks — the finalizers run in run_finalizers(), which pushes
// onto allocator.deferred() exactly as a Boehm finalizer does.
//
// The fake is generational like Boehm in incremental mode: a minor collection
// frees only unreachable *young* handles and promotes every survivor to old;
// a whole-heap cycle (incremental or blocking) frees every unreachable handle.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cstddef>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/policy.hpp"
#include "gcpressure/stats.hpp"
#include "fake_runtime.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;
using namespace std::chrono_literals;
using gcp_test::fake_collector;
using gcp_test::host_opts;
using gcp_test::timeline;

namespace {

// An upstream that logs what reaches it (segments the pool returns).
class recording_upstream final : public gcp::device_resource {
 public:
  recording_upstream(timeline& t, std::size_t capacity) : log_(t), inner_(capacity) {}

 private:
  void* do_allocate(std::size_t bytes, gcp::stream_ref s) override { return inner_.allocate(bytes, s); }
  void do_deallocate(void* p, std::size_t bytes, gcp::stream_ref s) noexcept override {
    log_.add("upstream.free " + std::to_string(bytes / MiB) + "MiB");
    inner_.deallocate(p, bytes, s);
  }
  gcp::device_memory_info do_memory_info() const override { return inner_.memory_info(); }
  gcp::stream_ops& do_streams() noexcept override { return inner_.streams(); }
  const char* do_name() const noexcept override { return "recording"; }

  timeline& log_;
  gcp::host_resource inner_;
};

// Forwards to the policy and logs the ladder steps the allocator hands it.
class recording_hook final : public gcp::allocation_hook {
 public:
  recording_hook(gcp::allocation_hook& inner, timeline& t) : inner_(inner), log_(t) {}
  void before_allocate(gcp::device_allocator& a, std::size_t bytes, gcp::stream_ref s) override {
    inner_.before_allocate(a, bytes, s);
  }
  bool reclaim(gcp::device_allocator& a, gcp::ladder_step step) override {
    log_.add(std::string("hook.reclaim ") + gcp::to_string(step));
    return inner_.reclaim(a, step);
  }
  void fill_stats(gcp::collection_stats& out) const override { inner_.fill_stats(out); }

 private:
  gcp::allocation_hook& inner_;
  timeline& log_;
};

// Allocator + fake collector + a policy by name.
struct rig {
  fake_collector gc;
  gcp::device_allocator alloc;
  std::unique_ptr<gcp::gc_policy> policy;

  rig(const std::string& name, gcp::allocator_options ao, gcp::policy_options po = {}, timeline* t = nullptr)
      : gc(t), alloc(ao) {
    gc.bind(alloc);
    policy = gcp::make_policy(name, alloc, gc, po);
  }
  ~rig() {
    policy.reset();
    gc.release_all();
  }
  // Allocates and registers a handle; returns its id.
  int make(std::size_t bytes) { return gc.track(alloc.allocate(bytes), bytes); }
  gcp::allocator_stats stats() const { return alloc.stats(); }
};

// The step names listed after "Reclaim ladder tried: " in an OOM message.
std::vector<std::string> ladder_in_message(const std::string& msg) {
  std::vector<std::string> names;
  const std::string key = "Reclaim ladder tried: ";
  auto pos = msg.find(key);
  if (pos == std::string::npos) return names;
  pos += key.size();
  const auto end = msg.find(". Last failure", pos);
  std::string list = msg.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
  std::size_t i = 0;
  while (i < list.size()) {
    auto comma = list.find(", ", i);
    std::string item = list.substr(i, comma == std::string::npos ? std::string::npos : comma - i);
    // A step's note is in parentheses and may itself contain no ", ".
    auto paren = item.find(" (");
    names.push_back(item.substr(0, paren));
    if (comma == std::string::npos) break;
    i = comma + 2;
  }
  return names;
}

std::vector<std::string> all_step_names() {
  std::vector<std::string> v;
  for (int i = 0; i < gcp::ladder_step_count; ++i) v.push_back(gcp::to_string(static_cast<gcp::ladder_step>(i)));
  return v;
}

std::size_t index_of(const std::vector<std::string>& v, const std::string& s, std::size_t from = 0) {
  for (std::size_t i = from; i < v.size(); ++i)
    if (v[i] == s) return i;
  return std::string::npos;
}

std::string join(const std::vector<std::string>& v) {
  std::ostringstream os;
  for (auto& s : v) os << "  " << s << "\n";
  return os.str();
}

}  // namespace

// --- the reclaim ladder ----------------------------------------------------------

// A request that can never fit runs every step, in order: the allocator runs
// the pool steps, the hook runs the collector steps, and the message names
// each step.
TEST(Ladder, RunsEveryStepInOrderAndNamesThemInTheMessage) {
  timeline t;
  recording_upstream up(t, std::size_t{1} << 30);
  fake_collector gc(&t);
  auto ao = host_opts(64 * MiB);
  gcp::device_allocator alloc(up, ao);
  gc.bind(alloc);
  auto policy = gcp::make_policy("at_limit", alloc, gc);
  recording_hook hook(*policy, t);
  alloc.set_hook(&hook);

  // A cached idle segment for release_cache to return: a 1 MiB block lives in
  // a 2 MiB small segment; freeing it leaves the segment idle.
  void* cached = alloc.allocate(1 * MiB);
  alloc.free(cached, 1 * MiB);
  // Young garbage (a minor collection finds it) and old garbage (only a
  // whole-heap collection finds it). 12 MiB blocks get their own segments.
  const int young = gc.track(alloc.allocate(12 * MiB), 12 * MiB);
  const int old = gc.track(alloc.allocate(12 * MiB), 12 * MiB);
  gc.collect_minor();  // promotes both
  gc.run_finalizers();
  ASSERT_TRUE(gc.is_old(old));
  gc.drop(old);
  const int young2 = gc.track(alloc.allocate(12 * MiB), 12 * MiB);
  gc.drop(young2);
  (void)young;
  t.clear();
  gc.minors = gc.fulls = 0;

  std::string msg;
  try {
    alloc.allocate(100 * MiB);  // over the hard limit whatever happens
    FAIL() << "a request over the hard limit succeeded";
  } catch (const gcp::out_of_memory& e) {
    msg = e.what();
  }

  // The message names every step, in ladder order.
  EXPECT_EQ(ladder_in_message(msg), all_step_names()) << msg;

  // Each step ran exactly once.
  const auto s = alloc.stats();
  for (int i = 0; i < gcp::ladder_step_count; ++i)
    EXPECT_EQ(s.ladder[i], 1u) << gcp::to_string(static_cast<gcp::ladder_step>(i));
  EXPECT_EQ(s.ooms, 1u);

  // The timeline: release_cache (the idle 2 MiB segment goes upstream), then
  // the hook's finish_and_drain (a minor collection + finalizers: frees the
  // young garbage), then full_collection and full_collection_2 (blocking
  // fulls: the first frees the old garbage), then trim returns the now idle
  // 12 MiB segments upstream.
  const auto ev = t.get();
  SCOPED_TRACE("timeline:\n" + join(ev));
  const auto i_release = index_of(ev, "upstream.free 2MiB");
  const auto i_finish = index_of(ev, "hook.reclaim finish_and_drain");
  const auto i_minor = index_of(ev, "gc.collect_minor");
  const auto i_full1 = index_of(ev, "hook.reclaim full_collection");
  const auto i_gcfull1 = index_of(ev, "gc.collect_full", i_full1 == std::string::npos ? 0 : i_full1);
  const auto i_full2 = index_of(ev, "hook.reclaim full_collection_2");
  const auto i_gcfull2 = index_of(ev, "gc.collect_full", i_full2 == std::string::npos ? 0 : i_full2);
  const auto i_trim = index_of(ev, "upstream.free 12MiB", i_gcfull2 == std::string::npos ? 0 : i_gcfull2);
  ASSERT_NE(i_release, std::string::npos);
  ASSERT_NE(i_finish, std::string::npos);
  ASSERT_NE(i_minor, std::string::npos);
  ASSERT_NE(i_full1, std::string::npos);
  ASSERT_NE(i_gcfull1, std::string::npos);
  ASSERT_NE(i_full2, std::string::npos);
  ASSERT_NE(i_gcfull2, std::string::npos);
  ASSERT_NE(i_trim, std::string::npos);
  EXPECT_LT(i_release, i_finish);
  EXPECT_LT(i_finish, i_minor);
  EXPECT_LT(i_minor, i_full1);
  EXPECT_LT(i_full1, i_gcfull1);
  EXPECT_LT(i_gcfull1, i_full2);
  EXPECT_LT(i_full2, i_gcfull2);
  EXPECT_LT(i_gcfull2, i_trim);
  EXPECT_EQ(gc.minors, 1);
  EXPECT_EQ(gc.fulls, 2);

  // The hook is handed exactly the collector steps, in order; pool steps stay
  // with the allocator.
  std::vector<std::string> hook_steps;
  for (auto& e : ev)
    if (e.rfind("hook.reclaim ", 0) == 0) hook_steps.push_back(e.substr(13));
  EXPECT_EQ(hook_steps, (std::vector<std::string>{"finish_and_drain", "full_collection", "full_collection_2"}));

  // Collections the ladder ran are recorded as such.
  EXPECT_EQ(s.gc.by_reason[static_cast<int>(gcp::gc_reason::ladder)], 3u);
  EXPECT_EQ(s.gc.by_kind[static_cast<int>(gcp::gc_kind::minor)], 1u);
  EXPECT_EQ(s.gc.by_kind[static_cast<int>(gcp::gc_kind::blocking_full)], 2u);
  // Both garbage blocks were returned.
  EXPECT_EQ(alloc.live_bytes(), 12 * MiB);
  EXPECT_FALSE(gc.tracked(old));
  EXPECT_FALSE(gc.tracked(young2));
  alloc.set_hook(nullptr);
  policy.reset();
  gc.release_all();
}

// The ladder stops at the first step after which the allocation succeeds: a
// minor collection suffices for young garbage, so no full collection runs.
TEST(Ladder, StopsAtTheFirstStepThatSuffices) {
  rig r("at_limit", host_opts(16 * MiB));
  std::vector<int> ids;
  for (int i = 0; i < 16; ++i) ids.push_back(r.make(1 * MiB));
  for (int id : ids) r.gc.drop(id);
  EXPECT_EQ(r.gc.collections(), 0);
  void* p = r.alloc.allocate(1 * MiB);  // fails first, then finish_and_drain frees 16 MiB
  ASSERT_NE(p, nullptr);
  const auto s = r.stats();
  EXPECT_EQ(s.ooms, 0u);
  EXPECT_EQ(s.ladder[static_cast<int>(gcp::ladder_step::release_cache)], 1u);
  EXPECT_EQ(s.ladder[static_cast<int>(gcp::ladder_step::finish_and_drain)], 1u);
  EXPECT_EQ(s.ladder[static_cast<int>(gcp::ladder_step::full_collection)], 0u);
  EXPECT_EQ(r.gc.minors, 1);
  EXPECT_EQ(r.gc.fulls, 0);
  EXPECT_EQ(r.alloc.live_bytes(), 1 * MiB);
  r.alloc.free(p, 1 * MiB);
}

// A policy that leaves a whole-heap cycle in progress: the ladder's
// finish_and_drain must finish that cycle (not start a minor one).
namespace {
class half_cycle_policy final : public gcp::gc_policy {
 public:
  using gc_policy::gc_policy;
  const char* name() const noexcept override { return "half_cycle"; }
  void before_allocate(gcp::device_allocator&, std::size_t, gcp::stream_ref) override {
    if (!started_) {
      started_ = true;
      EXPECT_FALSE(step_full_cycle(gcp::gc_reason::early, nullptr));  // one slice of three
    }
  }
  bool active() const { return full_cycle_active(); }

 private:
  bool started_ = false;
};
}  // namespace

TEST(Ladder, FinishAndDrainCompletesTheCycleInProgress) {
  fake_collector gc;
  gcp::device_allocator alloc(host_opts(16 * MiB));
  gc.bind(alloc);
  gc.slices_per_full = 3;
  half_cycle_policy policy(alloc, gc, {});
  std::vector<int> ids;
  for (int i = 0; i < 16; ++i) ids.push_back(gc.track(alloc.allocate(1 * MiB), 1 * MiB));
  ASSERT_TRUE(policy.active());
  gc.collect_minor();  // everything is old now: only the whole-heap cycle can free it
  gc.run_finalizers();
  gc.minors = 0;
  for (int id : ids) gc.drop(id);
  void* p = alloc.allocate(1 * MiB);
  ASSERT_NE(p, nullptr);
  EXPECT_FALSE(policy.active());
  EXPECT_EQ(gc.full_cycles_done, 1);
  EXPECT_EQ(gc.minors, 0) << "finish_and_drain started a minor collection instead of finishing the cycle";
  EXPECT_EQ(gc.fulls, 0);
  const auto s = alloc.stats();
  EXPECT_EQ(s.gc.by_kind[static_cast<int>(gcp::gc_kind::incremental_full)], 1u);
  EXPECT_EQ(s.gc.by_reason[static_cast<int>(gcp::gc_reason::ladder)], 1u);
  EXPECT_EQ(s.gc.incremental_slices, 3u);
  EXPECT_EQ(alloc.live_bytes(), 1 * MiB);
  alloc.free(p, 1 * MiB);
  alloc.set_hook(nullptr);
  gc.release_all();
}

// --- at_limit ----------------------------------------------------------------------

TEST(AtLimit, NeverCollectsBeforeAFailure) {
  rig r("at_limit", host_opts(64 * MiB));
  for (int i = 0; i < 60; ++i) {
    r.gc.drop(r.make(1 * MiB));  // all garbage, and still no collection
    r.policy->iteration();
    r.policy->quiet_moment();
  }
  EXPECT_EQ(r.gc.collections(), 0);
  EXPECT_EQ(r.gc.full_starts, 0);
  EXPECT_EQ(r.gc.full_steps, 0);
  EXPECT_EQ(r.alloc.live_bytes(), 60 * MiB);
}

TEST(AtLimit, CollectsOnlyOnFailure) {
  rig r("at_limit", host_opts(64 * MiB));
  int first_collection_at = -1;
  for (int i = 0; i < 640; ++i) {  // 10x the hard limit
    const int before = r.gc.collections();
    r.gc.drop(r.make(1 * MiB));
    if (r.gc.collections() != before && first_collection_at < 0) first_collection_at = i;
  }
  const auto s = r.stats();
  EXPECT_EQ(s.ooms, 0u);
  // The first collection came with the first allocation that did not fit.
  EXPECT_EQ(first_collection_at, 64);
  // Every collection was a ladder step (one per failure).
  const auto ladder_runs = s.ladder[static_cast<int>(gcp::ladder_step::finish_and_drain)];
  EXPECT_GE(ladder_runs, 9u);
  EXPECT_EQ(static_cast<std::uint64_t>(r.gc.collections()), ladder_runs);
  EXPECT_EQ(s.gc.by_reason[static_cast<int>(gcp::gc_reason::ladder)], ladder_runs);
  EXPECT_EQ(s.gc.by_reason[static_cast<int>(gcp::gc_reason::early)], 0u);
  EXPECT_EQ(s.gc.policy, "at_limit");
}

// --- every_iteration -----------------------------------------------------------------

TEST(EveryIteration, CollectsExactlyOncePerNIterations) {
  gcp::policy_options po;
  po.every_n = 3;
  rig r("every_iteration", host_opts(256 * MiB), po);
  std::vector<int> collected_at;
  for (int it = 1; it <= 10; ++it) {
    for (int k = 0; k < 4; ++k) r.gc.drop(r.make(1 * MiB));  // allocations never collect in this mode
    EXPECT_EQ(r.gc.fulls, static_cast<int>(collected_at.size())) << "collected during allocations";
    const int before = r.gc.fulls;
    r.policy->iteration();
    if (r.gc.fulls != before) collected_at.push_back(it);
    r.policy->quiet_moment();  // not an iteration
  }
  EXPECT_EQ(collected_at, (std::vector<int>{3, 6, 9}));
  EXPECT_EQ(r.gc.minors, 0);
  const auto s = r.stats();
  EXPECT_EQ(s.gc.by_kind[static_cast<int>(gcp::gc_kind::blocking_full)], 3u);
  EXPECT_EQ(s.gc.by_reason[static_cast<int>(gcp::gc_reason::baseline)], 3u);
  EXPECT_EQ(s.ooms, 0u);
  // What was garbage at iteration 9 is gone: 4 allocations of iteration 10 remain.
  EXPECT_EQ(r.alloc.live_bytes(), 4 * MiB);
}

TEST(EveryIteration, CollectsExactlyOncePerNAllocations) {
  gcp::policy_options po;
  po.every_n = 3;
  po.every_n_allocations = true;
  rig r("every_iteration", host_opts(256 * MiB), po);
  std::vector<int> collected_at;
  for (int n = 1; n <= 10; ++n) {
    const int before = r.gc.fulls;
    r.gc.drop(r.make(1 * MiB));
    if (r.gc.fulls != before) collected_at.push_back(n);
    const int before_it = r.gc.fulls;
    r.policy->iteration();  // counts nothing in this mode
    EXPECT_EQ(r.gc.fulls, before_it);
  }
  EXPECT_EQ(collected_at, (std::vector<int>{3, 6, 9}));
  EXPECT_EQ(r.stats().gc.by_kind[static_cast<int>(gcp::gc_kind::blocking_full)], 3u);
}

// cudajl and dotnet: tests/test_baselines.cpp (fake clock, decision by decision).

// --- explicit_free -----------------------------------------------------------------

TEST(ExplicitFree, NeverCollectsEvenOnFailure) {
  rig r("explicit_free", host_opts(16 * MiB));
  for (int i = 0; i < 16; ++i) r.gc.drop(r.make(1 * MiB));  // garbage a GC could free
  r.policy->iteration();
  r.policy->quiet_moment();
  std::string msg;
  try {
    r.alloc.allocate(1 * MiB);
    FAIL() << "allocation over the hard limit succeeded without frees";
  } catch (const gcp::out_of_memory& e) {
    msg = e.what();
  }
  EXPECT_EQ(r.gc.collections(), 0);
  EXPECT_EQ(r.gc.full_starts, 0);
  EXPECT_EQ(r.gc.finalizer_runs, 0);
  EXPECT_FALSE(r.policy->reclaim(r.alloc, gcp::ladder_step::finish_and_drain));
  EXPECT_FALSE(r.policy->reclaim(r.alloc, gcp::ladder_step::full_collection));
  EXPECT_NE(msg.find("finish_and_drain (nothing to do)"), std::string::npos) << msg;
  EXPECT_EQ(ladder_in_message(msg), all_step_names()) << msg;
  EXPECT_EQ(r.stats().ooms, 1u);
}

TEST(ExplicitFree, CallerFreesNoCollectionsNoFailures) {
  rig r("explicit_free", host_opts(16 * MiB));
  for (int i = 0; i < 200; ++i) {
    void* p = r.alloc.allocate(1 * MiB);
    r.alloc.free(p, 1 * MiB);
  }
  EXPECT_EQ(r.gc.collections(), 0);
  EXPECT_EQ(r.stats().ooms, 0u);
}

// --- pressure ------------------------------------------------------------------------

namespace {
struct pressure_run {
  std::size_t peak_live = 0;
  gcp::allocator_stats stats;
  int full_starts = 0, minors = 0, fulls = 0;
};

// A loop of iterations allocating `per_iter` blocks of `block` bytes. Each
// block lives for `lifetime` iterations (0: dropped at once), so blocks alive
// at a minor collection are promoted and later become old garbage.
pressure_run run_pressure_loop(int iterations, int per_iter, std::size_t block, int lifetime, std::size_t hard,
                               std::size_t soft) {
  rig r("pressure", host_opts(hard, soft));
  std::deque<std::pair<int, int>> alive;  // (iteration dropped at, id)
  pressure_run out;
  for (int it = 0; it < iterations; ++it) {
    for (int k = 0; k < per_iter; ++k) {
      const int id = r.make(block);
      if (lifetime == 0) r.gc.drop(id);
      else alive.emplace_back(it + lifetime, id);
      out.peak_live = std::max(out.peak_live, r.alloc.live_bytes());
    }
    while (!alive.empty() && alive.front().first <= it) {
      r.gc.drop(alive.front().second);
      alive.pop_front();
    }
    r.policy->iteration();
  }
  for (auto& [_, id] : alive) r.gc.drop(id);  // the loop drops all its blocks
  out.stats = r.stats();
  out.full_starts = r.gc.full_starts;
  out.minors = r.gc.minors;
  out.fulls = r.gc.fulls;
  return out;
}
}  // namespace

// Temporaries that outlive a minor collection get promoted; when dropped they
// are old garbage that only a whole-heap cycle finds. The policy must run
// incremental whole-heap cycles, never a blocking full, stay under the soft
// limit and never fail.
TEST(Pressure, BoundedWithPromotedGarbageNoBlockingFull) {
  const auto r = run_pressure_loop(/*iterations=*/400, /*per_iter=*/4, 1 * MiB, /*lifetime=*/3, 64 * MiB, 48 * MiB);
  const auto& g = r.stats.gc;
  std::printf("%speak live %s\n", gcp::to_text(r.stats).c_str(), gcp::format_bytes(r.peak_live).c_str());
  EXPECT_EQ(r.stats.ooms, 0u);
  EXPECT_LE(r.peak_live, r.stats.soft_limit) << "live bytes went over the soft limit";
  EXPECT_EQ(g.by_kind[static_cast<int>(gcp::gc_kind::blocking_full)], 0u);
  EXPECT_EQ(r.fulls, 0) << "collect_full() called";
  for (int i = 0; i < gcp::ladder_step_count; ++i) EXPECT_EQ(r.stats.ladder[i], 0u) << "the ladder ran";
  EXPECT_GT(g.by_kind[static_cast<int>(gcp::gc_kind::minor)], 0u);
  EXPECT_GT(g.by_kind[static_cast<int>(gcp::gc_kind::incremental_full)], 0u) << "old garbage never collected";
  EXPECT_GE(g.incremental_slices, g.by_kind[static_cast<int>(gcp::gc_kind::incremental_full)]);
  EXPECT_GT(g.gc_seconds, 0.0);
  EXPECT_GT(g.longest_pause_seconds, 0.0);
  EXPECT_GT(g.finalized, 0u);
  EXPECT_GT(g.reclaimed_bytes, 0u);
  EXPECT_EQ(g.policy, "pressure");
  EXPECT_NE(gcp::to_json(r.stats).find("\"policy\":\"pressure\""), std::string::npos);
  // Cheap collections dominate: whole-heap cycles are rarer than minors.
  EXPECT_LT(g.by_kind[static_cast<int>(gcp::gc_kind::incremental_full)], g.by_kind[static_cast<int>(gcp::gc_kind::minor)]);
}

// Temporaries that die young: minors suffice; no whole-heap cycle is justified.
TEST(Pressure, YoungGarbageNeedsNoWholeHeapCycle) {
  const auto r = run_pressure_loop(400, 4, 1 * MiB, /*lifetime=*/0, 64 * MiB, 48 * MiB);
  const auto& g = r.stats.gc;
  SCOPED_TRACE(gcp::to_text(r.stats));
  EXPECT_EQ(r.stats.ooms, 0u);
  EXPECT_LE(r.peak_live, r.stats.soft_limit);
  EXPECT_GT(g.by_kind[static_cast<int>(gcp::gc_kind::minor)], 0u);
  EXPECT_EQ(g.by_kind[static_cast<int>(gcp::gc_kind::incremental_full)], 0u);
  EXPECT_EQ(g.by_kind[static_cast<int>(gcp::gc_kind::blocking_full)], 0u);
  EXPECT_EQ(r.full_starts, 0);
}

// It collects before failure: 100x the hard limit of garbage, no ladder.
TEST(Pressure, ActsBeforeFailure) {
  const auto r = run_pressure_loop(1600, 4, 1 * MiB, /*lifetime=*/1, 64 * MiB, 48 * MiB);
  SCOPED_TRACE(gcp::to_text(r.stats));
  EXPECT_EQ(r.stats.ooms, 0u);
  EXPECT_EQ(r.stats.ladder[static_cast<int>(gcp::ladder_step::release_cache)], 0u);
  EXPECT_LE(r.peak_live, r.stats.soft_limit);
  EXPECT_EQ(r.stats.gc.by_kind[static_cast<int>(gcp::gc_kind::blocking_full)], 0u);
}

TEST(Pressure, QuietMomentCollectsOnceHalfTheYoungBudgetIsUsed) {
  gcp::policy_options po;
  po.min_young_bytes = 4 * MiB;  // the young budget of a fresh policy
  {
    rig r("pressure", host_opts(64 * MiB, 48 * MiB), po);
    r.gc.drop(r.make(1 * MiB));
    r.policy->iteration();
    EXPECT_EQ(r.gc.collections(), 0) << "collected for 1 MiB (budget 4 MiB)";
  }
  {
    rig r("pressure", host_opts(64 * MiB, 48 * MiB), po);
    for (int i = 0; i < 3; ++i) r.gc.drop(r.make(1 * MiB));
    EXPECT_EQ(r.gc.collections(), 0) << "collected early under the 4 MiB budget";
    r.policy->iteration();
    EXPECT_EQ(r.gc.minors, 1);
    const auto s = r.stats();
    EXPECT_EQ(s.gc.by_reason[static_cast<int>(gcp::gc_reason::quiet_moment)], 1u);
    EXPECT_EQ(r.alloc.live_bytes(), 0u);
  }
}

// --- shared behaviour ----------------------------------------------------------------

TEST(Policies, MakePolicyByNameAndUserCollections) {
  for (const char* const* n = gcp::policy_names(); *n; ++n) {
    rig r(*n, host_opts(64 * MiB));
    EXPECT_STREQ(r.policy->name(), *n);
    EXPECT_EQ(r.alloc.hook(), r.policy.get()) << *n << " did not install itself as the hook";
    const auto s0 = r.stats();
    EXPECT_EQ(s0.gc.policy, *n);
    EXPECT_NE(gcp::to_json(s0).find(std::string("\"policy\":\"") + *n + "\""), std::string::npos) << *n;
    if (std::string(*n) == "explicit_free") continue;  // no statement on user collections without a GC
    r.gc.drop(r.make(1 * MiB));
    const int before = r.gc.fulls;
    r.policy->collect(gcp::gc_kind::blocking_full);
    EXPECT_EQ(r.gc.fulls, before + 1) << *n;
    const auto s = r.stats();
    EXPECT_EQ(s.gc.by_reason[static_cast<int>(gcp::gc_reason::user)], 1u) << *n;
    EXPECT_EQ(r.alloc.live_bytes(), 0u) << *n;
  }
  // Unknown names are refused, and the hook goes away with the policy.
  fake_collector gc;
  gcp::device_allocator alloc(host_opts(64 * MiB));
  EXPECT_THROW(gcp::make_policy("no_such_policy", alloc, gc), gcp::logic_error);
  {
    auto p = gcp::make_policy("pressure", alloc, gc);
    EXPECT_EQ(alloc.hook(), p.get());
  }
  EXPECT_EQ(alloc.hook(), nullptr);
}
