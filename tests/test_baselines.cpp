// The baselines against their sources, decision by decision (core/src/
// baselines.cpp: Note [CUDA.jl's maybe_collect], Note [CUDA.jl's
// out-of-memory path], Note [.NET's AddMemoryPressure]). Everything runs on
// the fake runtime (tests/fake_runtime.hpp): a fake clock that moves only
// when a collection costs time, the host waits for the fake device, or the
// test says so; no sleeps, no real time. Each test puts a baseline just
// before and just after one decision point and asserts what it does.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "fake_runtime.hpp"
#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"
#include "test_support.hpp"

namespace {

using namespace gcp_test;

// What fake_collector does not keep: the seconds its collections cost, in
// counters(), and whole-heap collections the runtime runs by itself that
// take fake time. Also lets a test start from non-zero process-global counts.
class timed_collector final : public gcp::collector {
 public:
  timed_collector(fake_collector& g, fake_clock& c) : g_(g), clock_(c) {}
  const char* name() const noexcept override { return "timed_fake"; }
  void collect_minor() override {
    g_.collect_minor();
    seconds_ += g_.minor_seconds;
  }
  void start_full() override { g_.start_full(); }
  bool step_full(double b) override {
    const bool active = g_.full_in_progress();
    const bool done = g_.step_full(b);
    if (active) seconds_ += g_.slice_seconds;
    return done;
  }
  void collect_full() override {
    g_.collect_full();
    seconds_ += g_.full_seconds;
  }
  std::size_t run_finalizers() override { return g_.run_finalizers(); }
  gcp::collector_counters counters() const override {
    auto c = g_.counters();
    c.full_collections += base_full_;
    c.collections += base_full_;
    c.seconds += seconds_ + own_seconds_;
    c.own_seconds += own_seconds_;
    return c;
  }
  // A gen-2 the runtime starts itself, taking `cost` fake seconds; its
  // finalizers run at once (Boehm's finalizer thread).
  void runtime_full(double cost) {
    clock_.advance(cost);
    g_.runtime_collection(true);
    g_.run_finalizers();
    own_seconds_ += cost;
  }
  // Counts left by earlier benchmark cases in the same process.
  void preset(std::uint64_t full, double seconds) {
    base_full_ = full;
    own_seconds_ = seconds;
  }

 private:
  fake_collector& g_;
  fake_clock& clock_;
  double seconds_ = 0, own_seconds_ = 0;
  std::uint64_t base_full_ = 0;
};

struct world_options {
  std::size_t capacity = std::size_t{1} << 30;
  std::size_t hard = 0;  // 0: unset (the device total)
  std::size_t soft = 0;  // 0: unset
  gcp::backend_kind backend = gcp::backend_kind::host;
};

gcp::allocator_options allocator_opts(const world_options& w) {
  gcp::allocator_options o;
  o.backend = w.backend;  // reported only: memory comes from the fake device
  o.hard_limit.bytes = w.hard;
  o.soft_limit.bytes = w.soft;
  return o;
}

// Fake clock + fake device + allocator + fake collector + one baseline.
struct world {
  fake_clock clock;
  fake_device dev;
  gcp::device_allocator alloc;
  timeline log;
  fake_collector gc{&log};
  timed_collector tc{gc, clock};
  std::unique_ptr<gcp::gc_policy> policy;
  std::vector<std::pair<void*, std::size_t>> owned;  // blocks the test frees itself

  explicit world(world_options w = {}) : dev(clock, w.capacity), alloc(dev, allocator_opts(w)) {
    gc.bind(alloc);
    gc.clock = &clock;
    gc.minor_seconds = 0.1;
    gc.full_seconds = 0.1;
    gc.slice_seconds = 0.01;
  }
  ~world() {
    policy.reset();
    gc.release_all();
    for (auto& [p, n] : owned) alloc.free(p, n);
  }
  void use(const std::string& name, gcp::policy_options po = {}) {
    po.clock = &clock;
    policy = gcp::make_policy(name, alloc, tc, po);
  }
  // A block owned by a GC handle (reachable until dropped).
  int keep(std::size_t bytes) { return gc.track(alloc.allocate(bytes), bytes); }
  // A block the test frees with free_last().
  void take(std::size_t bytes) { owned.emplace_back(alloc.allocate(bytes), bytes); }
  void free_last() {
    alloc.free(owned.back().first, owned.back().second);
    owned.pop_back();
  }
  void keep_mib(int n) {
    for (int i = 0; i < n; ++i) keep(MiB);
  }
  int collections() const { return gc.collections(); }
  std::uint64_t by_kind(gcp::gc_kind k) { return alloc.stats().gc.by_kind[static_cast<int>(k)]; }
  std::uint64_t by_reason(gcp::gc_reason r) { return alloc.stats().gc.by_reason[static_cast<int>(r)]; }
};

world_options hard_mib(std::size_t mib) {
  world_options w;
  w.hard = mib * MiB;
  return w;
}

// Index (1-based) of the allocation of 1 MiB blocks that first collected.
int first_collecting_allocation(world& w, int max) {
  for (int k = 1; k <= max; ++k) {
    const int before = w.collections();
    w.keep(MiB);
    if (w.collections() != before) return k;
  }
  return -1;
}

// --- cudajl: thresholds and size -----------------------------------------------------

// Pressure is live / size before the allocation (pool_alloc accounts the
// request after allocating): the 76th MiB sees 75/100 and collects a minor.
TEST(CudaJl, CollectsAMinorAtThreeQuartersOfTheHardLimit) {
  world w(hard_mib(100));
  w.use("cudajl");
  EXPECT_EQ(first_collecting_allocation(w, 100), 76);
  EXPECT_EQ(w.gc.minors, 1);
  EXPECT_EQ(w.gc.fulls + w.gc.full_starts, 0);
  EXPECT_EQ(w.by_reason(gcp::gc_reason::early), 1u);
}

TEST(CudaJl, AboutToBlockCollectsFromHalf) {
  world w(hard_mib(100));
  w.use("cudajl");
  w.keep_mib(49);
  w.policy->quiet_moment(true);
  EXPECT_EQ(w.collections(), 0) << "0.49 < 0.50";
  w.keep(MiB);
  w.policy->quiet_moment(false);
  EXPECT_EQ(w.collections(), 0) << "0.50 < 0.75 without will_block";
  w.policy->quiet_moment(true);
  EXPECT_EQ(w.gc.minors, 1);
  EXPECT_EQ(w.by_reason(gcp::gc_reason::quiet_moment), 1u);
}

// An iteration boundary is not an event CUDA.jl sees; a quiet moment is
// an explicit maybe_collect(will_block).
TEST(CudaJl, IterationIsNoCall) {
  world w(hard_mib(100));
  w.use("cudajl");
  w.keep_mib(75);  // the last one saw 0.74
  w.policy->iteration();
  EXPECT_EQ(w.collections(), 0);
  w.policy->quiet_moment(false);
  EXPECT_EQ(w.gc.minors, 1);
}

// synchronize() calls maybe_collect(true) only while the stream is not done
// (synchronize_object: `if !isdone(obj) maybe_collect(true)`).
TEST(CudaJl, SynchronizeOnABusyDeviceIsAboutToBlock) {
  for (const bool busy : {false, true}) {
    world w(hard_mib(100));
    w.use("cudajl");
    w.keep_mib(50);
    if (busy) w.dev.launch(1.0);
    w.policy->synchronize(nullptr);
    EXPECT_EQ(w.gc.minors, busy ? 1 : 0) << (busy ? "busy" : "idle");
    EXPECT_EQ(w.alloc.stats().gc.syncs, 1u);
  }
}

TEST(CudaJl, SizeIsTheSoftLimitOnlyWhenOneWasSet) {
  world_options o;
  o.capacity = 100 * MiB;
  o.soft = 40 * MiB;
  {
    world w(o);
    gcp::policy_options po;
    po.soft_limit_set = true;
    w.use("cudajl", po);
    EXPECT_EQ(first_collecting_allocation(w, 100), 31) << "0.75 x 40 MiB";
  }
  {
    world w(o);  // the same soft limit, but the default one: free + live
    w.use("cudajl");
    EXPECT_EQ(first_collecting_allocation(w, 100), 76) << "0.75 x (free + live) = 0.75 x 100 MiB";
  }
}

// Without limits: free + live + cached, so memory others hold shrinks it.
TEST(CudaJl, SizeWithoutLimitsIsFreePlusLive) {
  world_options o;
  o.capacity = 100 * MiB;
  world w(o);
  void* other = w.dev.allocate(50 * MiB);  // another process's 50 MiB
  w.use("cudajl");
  EXPECT_EQ(first_collecting_allocation(w, 60), 39) << "0.75 x 50 MiB = 37.5 MiB: the 39th sees 38";
  w.dev.deallocate(other, 50 * MiB);
}

// `current_time - stats.size_updated > 10`: a new hard limit is seen only
// after more than 10 s.
TEST(CudaJl, SizeIsReEstimatedOnlyAfterTenSeconds) {
  world w(hard_mib(100));
  w.use("cudajl");
  const double t0 = w.clock.now();
  w.keep_mib(40);  // size fixed at t0: 100 MiB
  w.alloc.set_hard_limit(50 * MiB);
  w.clock.advance_to(t0 + 10);
  w.policy->quiet_moment(false);
  EXPECT_EQ(w.collections(), 0) << "at exactly 10 s the old size holds (0.4)";
  w.clock.advance_to(t0 + 10.5);
  w.policy->quiet_moment(false);
  EXPECT_EQ(w.gc.minors, 1) << "re-estimated: 40/50 = 0.8";
}

// --- cudajl: the GC-time rate ------------------------------------------------------

// One minor at 0.75 costing 0.1 s (EMA 0.025), live then raised to
// `live_mib` without collecting (rate 0.025 / 0.1 s > any budget). Returns
// the time the collection started (last_time).
double after_one_collection(world& w, int live_mib, int dropped_mib = 0) {
  w.use("cudajl");
  w.clock.advance(5);  // the first last_time is the policy's creation, long before
  w.keep_mib(75 - dropped_mib);
  std::vector<int> drop;
  for (int i = 0; i < dropped_mib; ++i) drop.push_back(w.keep(MiB));
  for (int id : drop) w.gc.drop(id);
  const double t1 = w.clock.now();
  w.keep(MiB);
  EXPECT_EQ(w.gc.minors, 1);
  while (w.alloc.live_bytes() < static_cast<std::size_t>(live_mib) * MiB) w.keep(MiB);
  EXPECT_EQ(w.gc.minors, 1) << "collected again at once";
  return t1;
}

// 5%: the EMA over the time since last_time, stamped BEFORE the collection:
// at t1 + 0.55 the rate is 0.025 / 0.55 < 0.05; stamped after it (t1 + 0.1)
// it would be 0.025 / 0.45 > 0.05.
TEST(CudaJl, RateWithinFivePercentSinceTheCollectionStarted) {
  world w(hard_mib(100));
  const double t1 = after_one_collection(w, 80);
  w.clock.advance_to(t1 + 0.45);
  w.policy->quiet_moment(false);
  EXPECT_EQ(w.gc.minors, 1) << "0.025 / 0.45 s = 5.6% > 5%";
  w.clock.advance_to(t1 + 0.55);
  w.policy->quiet_moment(false);
  EXPECT_EQ(w.gc.minors, 2) << "0.025 / 0.55 s = 4.5%, counted from before the last collection";
}

// Each doubling alone lets a rate of 0.025 / 0.3 s = 8.3% (or 16.7% at
// 0.15 s) through where the undoubled budget refuses it.
TEST(CudaJl, DoubledWhenAboutToBlock) {
  world w(hard_mib(100));
  const double t1 = after_one_collection(w, 80);
  w.clock.advance_to(t1 + 0.3);
  w.policy->quiet_moment(false);
  EXPECT_EQ(w.gc.minors, 1);
  w.policy->quiet_moment(true);
  EXPECT_EQ(w.gc.minors, 2);
}

TEST(CudaJl, DoubledAboveNinetyPercent) {
  world w(hard_mib(100));
  const double t1 = after_one_collection(w, 90);
  w.clock.advance_to(t1 + 0.3);
  w.keep(MiB);  // sees 0.90: not above
  EXPECT_EQ(w.gc.minors, 1);
  w.keep(MiB);  // sees 0.91
  EXPECT_EQ(w.gc.minors, 2);
}

TEST(CudaJl, DoubledAgainAboveNinetyFivePercent) {
  world w(hard_mib(100));
  const double t1 = after_one_collection(w, 95);
  w.clock.advance_to(t1 + 0.15);
  w.keep(MiB);  // 0.95: x2 only, 16.7% > 10%
  EXPECT_EQ(w.gc.minors, 1);
  w.keep(MiB);  // 0.96: x4, 16.7% <= 20%
  EXPECT_EQ(w.gc.minors, 2);
}

// `last_freed > 0.1*size`: 10 MiB of 100 is not more than 10%, 11 MiB is.
TEST(CudaJl, DoubledWhenTheLastCollectionFreedOverATenthOfTheSize) {
  for (const int dropped : {10, 11}) {
    world w(hard_mib(100));
    const double t1 = after_one_collection(w, 80, dropped);
    EXPECT_EQ(w.alloc.stats().gc.reclaimed_bytes, dropped * MiB);
    w.clock.advance_to(t1 + 0.3);
    w.policy->quiet_moment(false);
    EXPECT_EQ(w.gc.minors, dropped == 11 ? 2 : 1) << dropped << " MiB freed";
  }
}

// --- cudajl: the out-of-memory path ----------------------------------------------

// Pending stream frees first (phases 1-2), then a minor, then one full,
// then nothing more: the allocator trims after that (phase 5).
TEST(CudaJl, LadderSyncsThenMinorThenFull) {
  world w(hard_mib(64));
  w.use("cudajl");
  w.dev.launch(100);  // the device is busy: a free on the stream stays pending
  w.take(MiB);
  w.free_last();
  ASSERT_EQ(w.policy->reclaim(w.alloc, gcp::ladder_step::finish_and_drain), true);
  EXPECT_EQ(w.dev.syncs, 1);
  EXPECT_EQ(w.collections(), 0) << "phases 1-2 came first and may suffice";
  EXPECT_TRUE(w.policy->reclaim(w.alloc, gcp::ladder_step::full_collection));
  EXPECT_EQ(w.gc.minors, 1);
  EXPECT_EQ(w.gc.fulls, 0);
  EXPECT_TRUE(w.policy->reclaim(w.alloc, gcp::ladder_step::full_collection_2));
  EXPECT_EQ(w.gc.fulls, 1);
  EXPECT_FALSE(w.policy->reclaim(w.alloc, gcp::ladder_step::full_collection_2)) << "CUDA.jl collects at most twice";
  EXPECT_FALSE(w.policy->reclaim(w.alloc, gcp::ladder_step::trim)) << "trim is the allocator's";
}

// Nothing pending: the minor runs at the first hook step. Old garbage only
// a full finds: the ladder goes minor, then full, and the allocation fits.
TEST(CudaJl, LadderThroughTheAllocatorMinorThenFull) {
  world w(hard_mib(16));
  w.use("cudajl");
  std::vector<int> ids;
  for (int i = 0; i < 16; ++i) ids.push_back(w.keep(MiB));
  w.gc.runtime_collection(false);  // the runtime's own minor: all of them are old now
  for (int id : ids) w.gc.drop(id);
  w.log.clear();
  w.keep(MiB);
  std::vector<std::string> expect = {"gc.collect_minor", "gc.run_finalizers", "gc.collect_full", "gc.run_finalizers"};
  EXPECT_EQ(w.log.get(), expect);
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// Without a stream-ordered pool (plain cudaMalloc): GC.gc(false), GC.gc(true)
// and no synchronisation.
TEST(CudaJl, LadderWithoutAStreamOrderedPoolDoesNotSync) {
  world_options o = hard_mib(64);
  o.backend = gcp::backend_kind::cuda;
  world w(o);
  w.use("cudajl");
  w.dev.launch(100);
  w.take(MiB);
  w.free_last();
  EXPECT_TRUE(w.policy->reclaim(w.alloc, gcp::ladder_step::finish_and_drain));
  EXPECT_EQ(w.gc.minors, 1);
  EXPECT_EQ(w.dev.syncs, 0);
  EXPECT_TRUE(w.policy->reclaim(w.alloc, gcp::ladder_step::full_collection));
  EXPECT_EQ(w.gc.fulls, 1);
  EXPECT_FALSE(w.policy->reclaim(w.alloc, gcp::ladder_step::full_collection_2));
}

// --- dotnet ----------------------------------------------------------------------

// 4 MB of pressure since the last gen-2 induces a background gen-2: a
// whole-heap cycle advanced one slice per allocation or hint, never blocking.
TEST(DotNet, FourMegabytesStartABackgroundGen2) {
  world w(hard_mib(256));
  w.use("dotnet");
  w.keep_mib(3);
  EXPECT_EQ(w.gc.full_starts, 0);
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 1);
  EXPECT_EQ(w.gc.full_steps, 1) << "started with one slice";
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_steps, 2) << "one slice per later allocation";
  w.policy->quiet_moment();
  EXPECT_EQ(w.gc.full_cycles_done, 1) << "and per hint";
  EXPECT_EQ(w.gc.minors + w.gc.fulls, 0);
  const auto s = w.alloc.stats().gc;
  EXPECT_EQ(s.by_kind[static_cast<int>(gcp::gc_kind::incremental_full)], 1u);
  EXPECT_EQ(s.by_kind[static_cast<int>(gcp::gc_kind::blocking_full)], 0u);
  EXPECT_EQ(s.blocking_cycles, 0u);
}

TEST(DotNet, BudgetIsAtLeastAThirdOfTheHeap) {
  world w(hard_mib(256));
  w.gc.heap_bytes = 30 * MiB;
  w.use("dotnet");
  w.keep_mib(9);
  EXPECT_EQ(w.gc.full_starts, 0) << "9 MiB < 30 MiB / 3";
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 1);
}

// Starts dotnet and allocates 4 MiB: the 4th induces a gen-2 (its first
// slice). Returns the time it started.
double induce_at_fourth_mib(world& w) {
  w.use("dotnet");
  w.keep_mib(3);
  const double t0 = w.clock.now();
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 1);
  return t0;
}

// Over budget, one gen-2 started so far: none at t0 + `before`, the second
// at t0 + `after`.
void expect_second_gen2_between(world& w, double t0, double before, double after) {
  w.clock.advance_to(t0 + before);
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 1) << "started again at t0 + " << before;
  w.clock.advance_to(t0 + after);
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 2) << "not started again at t0 + " << after;
}

// `GetNow() - GetLastGCStartTime(2) > GetLastGCDuration(2) * 5`: three
// slices back to back, 0.03 s of work, allow the next gen-2 after 0.15 s.
TEST(DotNet, NoNewGen2WithinFiveDurationsOfTheLastOnesStart) {
  world w(hard_mib(256));
  const double t0 = induce_at_fourth_mib(w);  // slice 1: t0 .. t0 + 0.01
  w.keep_mib(2);                              // slices 2 and 3: done at t0 + 0.03
  ASSERT_EQ(w.gc.full_cycles_done, 1);
  w.keep_mib(2);  // 4 MiB since the gen-2 started: over budget
  EXPECT_EQ(w.gc.full_starts, 1);
  expect_second_gen2_between(w, t0, 0.14, 0.16);
}

// The duration is the cycle's work (its slices), not its span: slices 0.1 s
// apart (0.23 s from start to end, 0.03 s of work) allow the next gen-2 at
// t0 + 0.23 already. And the period starts with the gen-2: what is
// allocated while it runs counts towards the next 4 MB.
TEST(DotNet, Gen2DurationIsItsWorkNotItsSpan) {
  world w(hard_mib(256));
  induce_at_fourth_mib(w);
  w.clock.advance(0.1);
  w.keep(MiB);  // slice 2
  w.clock.advance(0.1);
  w.keep(MiB);  // slice 3: done
  ASSERT_EQ(w.gc.full_cycles_done, 1);
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 1) << "3 MiB since its start";
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 2) << "0.23 s > 5 x 0.03 s";
}

// A collector whose whole-heap cycle is one slice: done at once, timed too.
TEST(DotNet, AOneSliceGen2IsTimedToo) {
  world w(hard_mib(256));
  w.gc.slices_per_full = 1;
  w.gc.slice_seconds = 0.1;
  const double t0 = induce_at_fourth_mib(w);
  ASSERT_EQ(w.gc.full_cycles_done, 1);
  w.keep_mib(4);
  expect_second_gen2_between(w, t0, 0.49, 0.51);  // 5 x 0.1 s
}

// A gen-2 of any cause (here the runtime's own, 0.2 s) starts a new period:
// the pressure before it is forgotten, and its duration holds back the next.
TEST(DotNet, TheRuntimesOwnGen2ResetsThePressureAndTheDutyCycle) {
  world w(hard_mib(256));
  w.use("dotnet");
  w.keep_mib(3);
  const double t0 = w.clock.now();
  w.tc.runtime_full(0.2);
  w.keep_mib(4);  // 4 MiB since that gen-2 (the 3 before it were the previous period's)
  EXPECT_EQ(w.gc.full_starts, 0) << "within 5 x 0.2 s of its start";
  w.clock.advance_to(t0 + 0.95);
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 0);
  w.clock.advance_to(t0 + 1.05);
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 1);
}

// Note [Baselines take deltas]: counts left by earlier cases are not gen-2s.
TEST(DotNet, ProcessGlobalCountsBeforeItsCreationDoNotCount) {
  world w(hard_mib(256));
  w.tc.preset(7, 3.0);
  w.use("dotnet");
  w.keep_mib(4);
  EXPECT_EQ(w.gc.full_starts, 1) << "4 MB after creation, no duty-cycle wait from old seconds";
}

// The runtime runs a gen-2 of its own (taking no time); the policy sees it
// at its next call; a second later the duty-cycle check passes.
void next_period(world& w) {
  w.tc.runtime_full(0);
  w.policy->quiet_moment();
  w.clock.advance(1);
}

// Four gen-2 periods (the runtime's own, 1 s apart), each adding `add`
// blocks of `block` bytes and freeing `freed` of them; then the MiB at
// which the fifth period induces a gen-2.
int induced_at_mib_after_history(std::size_t block, int add, int freed, bool extra_free = false) {
  world w(hard_mib(512));
  w.use("dotnet");
  if (extra_free) w.take(512 * KiB);  // in period 0, freed in period 3
  for (int period = 0; period < 4; ++period) {
    for (int i = 0; i < add; ++i) w.take(block);
    for (int i = 0; i < freed; ++i) w.free_last();
    if (period == 3 && extra_free) {
      std::swap(w.owned.front(), w.owned.back());
      w.free_last();
    }
    w.policy->quiet_moment();  // sees the frees (RemoveMemoryPressure)
    EXPECT_EQ(w.gc.full_starts, 0);
    next_period(w);
  }
  for (int mib = 1; mib <= 100; ++mib) {
    w.keep(MiB);
    if (w.gc.full_starts > 0) return mib;
  }
  return -1;
}

TEST(DotNet, BudgetScalesWithTheAddRemoveRatioOfTheOtherThreePeriods) {
  // 3 MiB added and 1.5 MiB freed per period: ratio 2, budget 8 MB.
  EXPECT_EQ(induced_at_mib_after_history(512 * KiB, 6, 3), 8);
  // As much freed as added: no scaling, 4 MB.
  EXPECT_EQ(induced_at_mib_after_history(512 * KiB, 6, 6), 4);
  // Nothing freed: add >= rem x 10, budget 40 MB.
  EXPECT_EQ(induced_at_mib_after_history(MiB, 3, 0), 40);
  // 9 MiB added, 0.5 MiB freed: ratio 18, capped at 10: 40 MB, not 72.
  EXPECT_EQ(induced_at_mib_after_history(MiB, 3, 0, true), 40);
}

// Before four periods the ratio is not used: 4 MB.
TEST(DotNet, RatioWaitsForFourPeriods) {
  world w(hard_mib(512));
  w.use("dotnet");
  for (int period = 0; period < 3; ++period) {
    w.keep_mib(3);
    next_period(w);
  }
  w.keep_mib(3);
  EXPECT_EQ(w.gc.full_starts, 0);
  w.keep(MiB);
  EXPECT_EQ(w.gc.full_starts, 1) << "iteration 3: the 40 MB of an all-add history does not apply yet";
}

// --- the other baselines and the name list ------------------------------------------

// None of them collects at a sync (before_block -> their quiet_moment).
TEST(Baselines, AtLimitEveryIterationAndExplicitFreeDoNotCollectAtASync) {
  for (const char* name : {"at_limit", "every_iteration", "explicit_free"}) {
    world w(hard_mib(100));
    w.use(name);
    w.keep_mib(90);
    w.dev.launch(1.0);
    w.policy->synchronize(nullptr);
    w.policy->quiet_moment(true);
    EXPECT_EQ(w.collections() + w.gc.full_starts, 0) << name;
  }
}

TEST(Baselines, EveryNameInTheListMakesThatPolicy) {
  int n = 0;
  for (const char* const* name = gcp::policy_names(); *name; ++name, ++n) {
    world w(hard_mib(16));
    w.use(*name);
    EXPECT_STREQ(w.policy->name(), *name);
  }
  EXPECT_EQ(n, 7);
  world w(hard_mib(16));
  try {
    w.use("cuda.jl");
    FAIL() << "an unknown name was accepted";
  } catch (const gcp::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("'cuda.jl' (expected pressure, at_limit, every_iteration, cudajl, dotnet, explicit_free or runtime_native)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
