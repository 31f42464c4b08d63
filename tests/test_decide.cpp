// The pressure policy's decision model, rule by rule (Note [One decision
// over an explicit model], core/src/pressure_model.hpp): decide() is pure,
// so each rule is checked on a hand-made snapshot. The device's lag is in
// test_device_lag.cpp; the schedule these rules make in a loop in
// test_schedule.cpp and test_lag_schedule.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "decide_support.hpp"
#include "pressure_model.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;
namespace d = gcpressure::detail;

using gcp_decide::base;
using gcp_decide::gib;
using gcp_decide::ms;

// Without lag the budget rule: rate x pause / gc budget (40 GiB/s x 6 ms /
// 0.05 = 4.8 GiB), above growth x floor (1 GiB).
TEST(Decide, WithoutLagTheBudgetRuleSetsTheThreshold) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.dev.young = 4 * 1024 * MiB;
  auto r = d::decide(s, t);
  EXPECT_NEAR(gib(r.threshold), 4.8, 1e-6);
  EXPECT_EQ(r.action, d::pressure_action::none);
  EXPECT_FALSE(r.hidden);
  s.dev.young = 5 * 1024 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
}

// A pause that fits in the lag is free: a collection as soon as the young
// bytes are worth one at all (min_young_bytes).
TEST(Decide, APauseThatFitsInTheLagNeedsOnlyTheMinimum) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.lag = 10 * ms;
  s.dev.young = t.min_young_bytes;
  auto r = d::decide(s, t);
  EXPECT_EQ(r.threshold, t.min_young_bytes);
  EXPECT_TRUE(r.hidden);
  EXPECT_EQ(r.action, d::pressure_action::minor);
  s.dev.young = t.min_young_bytes - 1;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
}

// Note [Allocations wait for the hint]: in a loop that gives hints, a minor
// that is due at an allocation waits for the hint (which collects the same
// bytes with fewer of them alive) unless the headroom needs it; the hint
// itself does not wait; a loop without hints collects at the threshold.
TEST(Decide, AnAllocationWaitsForTheHintUnlessTheHeadroomNeedsIt) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.lag = 10 * ms;  // hidden: due at min_young_bytes without hints
  s.dev.young = 2 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  s.dev.stretch = 1024.0 * MiB;
  s.dev.young = 7167 * MiB;  // 7 GiB of room under the soft limit
  auto r = d::decide(s, t);
  EXPECT_EQ(r.threshold, 7168 * MiB);
  EXPECT_EQ(r.action, d::pressure_action::none);
  s.dev.young = 7168 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  s.event = d::pressure_event::hint;
  s.dev.young = 2 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
}

// Only the exposed part is charged: 6 ms against 5 ms of lag exposes 1 ms,
// so the threshold is rate x 1 ms / budget (0.8 GiB), unless the exposed
// share (a sixth) of growth x floor is more: 1 GiB at a 6 GiB floor.
TEST(Decide, OnlyTheExposedPartIsChargedToTheBudget) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.lag = 5 * ms;
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 0.8, 1e-6);
  EXPECT_FALSE(d::decide(s, t).hidden);
  s.dev.floor = 6144 * MiB;
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 1.0, 1e-6);
  s.lag = 0;  // all of the pause exposed: the whole floor rule
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 6.0, 1e-6);
}

// Note [Waiting pays only the fixed part]: at 1 GiB of young bytes a 6 ms
// pause of which 4 ms grow with them (b x rate = 40 GiB/s x 4 ms / 1 GiB =
// 16% of wall, over the 5% budget), 3 ms of lag. No spacing keeps such
// minors within the budget; waiting spreads only the fixed 2 ms, which the
// lag covers: the minimum (priced whole, 40 GiB/s x 3 ms / 0.05 = 2.4 GiB,
// and the threshold outran the young bytes). A fixed part beyond the lag is
// amortized alone: 6 ms fixed of 10 give 40 GiB/s x 3 ms / 0.05. A
// per-byte part the budget can pay (1 ms at 1 GiB: 4%) is priced with the
// pause, as is a pause with none. Whether the budget can pay it is a matter
// of the slope: at 8 GiB of young bytes, past where the fit is trusted and
// the pause is priced flat, the threshold is the same.
TEST(Decide, WaitingPaysOnlyTheFixedPart) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.dev.floor = 0;  // the heap-growth rule out of the way
  s.dev.young = 1024 * MiB;
  s.lag = 3 * ms;
  s.pause_growth = 4 * ms;
  s.pause_slope = 4 * ms / (1024.0 * MiB);
  EXPECT_EQ(d::decide(s, t).threshold, t.min_young_bytes);
  s.pause = 10 * ms;
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 2.4, 1e-6);
  auto past_the_fit = s;
  past_the_fit.dev.young = 8192 * MiB;
  EXPECT_NEAR(gib(d::decide(past_the_fit, t).threshold), 2.4, 1e-6);
  s.pause_growth = 1 * ms;
  s.pause_slope = 1 * ms / (1024.0 * MiB);
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 5.6, 1e-6);
  s.pause_growth = 0;
  s.pause_slope = 0;
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 5.6, 1e-6);
}

// Closed loop: once exposed GC time is over the budget, the lag is not
// counted and the budget rule applies; until then a collection may
// overspend it by its own exposed part (Note [The budget starts with the
// loop]).
TEST(Decide, AnExposedBudgetSpentFallsBackToTheBudgetRule) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.lag = 5 * ms;
  s.dev.floor = 0;
  s.exposed = 0.05 * s.wall + 1e-6;  // spent
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 4.8, 1e-6);
  // Not spent yet: a collection may overspend the budget by its own exposed
  // part (the lag counts).
  s.exposed = 0.05 * s.wall - 1e-6;
  EXPECT_LT(gib(d::decide(s, t).threshold), 4.8 / 2);
  s.lag = 10 * ms;  // a free collection exposes nothing: still free
  EXPECT_EQ(d::decide(s, t).threshold, t.min_young_bytes);
}

// Yield and futility scale the threshold; the headroom caps it.
TEST(Decide, YieldFutilityAndHeadroomScaleTheThreshold) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.dev.soft = 65536 * MiB;  // headroom 63 GiB: not binding yet
  s.dev.hard = 131072 * MiB;
  s.dev.yield = 0.25;  // clamped to min_yield 0.5
  s.dev.futile = 2;
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 4.8 / 0.5 * 2, 1e-6);
  s.dev.live_after = 63488 * MiB;  // 2 GiB under the soft limit
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 2.0, 1e-6);
  s.dev.device_free = 1024 * MiB;  // 90% of the free memory
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 0.9, 1e-6);
}

// Note [No collection storms]: over the headroom a collection runs below
// the threshold, at most headroom_collections_per_iteration times, and only
// once the young bytes reach the backoff.
TEST(Decide, TheHeadroomAsksForBoundedCollections) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.dev.young = 64 * MiB;
  s.dev.live = s.dev.soft + 1;
  auto r = d::decide(s, t);
  EXPECT_EQ(r.action, d::pressure_action::minor);
  EXPECT_TRUE(r.headroom);
  s.headroom_collections = t.headroom_collections_per_iteration;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.headroom_collections = 0;
  s.dev.backoff = 128 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.dev.live = s.dev.soft;  // at the limit, not over it
  s.dev.backoff = 0;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
}

// The headroom test and the fast path's bounds are one computation: at the
// bound not over, one byte past it over (live, hard margin, free memory).
TEST(Decide, FastPathBoundsAreTheHeadroomTest) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation).dev;
  s.soft = 20000 * MiB;  // the hard limit's margin binds: 95% of 16 GiB
  s.device_free = 4096 * MiB;
  s.reserved_at_refresh = 2048 * MiB;
  const d::headroom_bounds b = d::fast_bounds(s, t);
  EXPECT_EQ(b.live, static_cast<std::size_t>(static_cast<double>(16384 * MiB) * (1 - t.hard_margin)));
  EXPECT_EQ(b.reserved, 2048 * MiB + 4096 * MiB - static_cast<std::size_t>(4096.0 * MiB * 0.1));
  s.live = b.live;
  s.reserved = b.reserved;
  EXPECT_FALSE(d::over_headroom(s, t));
  s.live = b.live + 1;
  EXPECT_TRUE(d::over_headroom(s, t));
  s.live = b.live;
  s.reserved = b.reserved + 1;
  EXPECT_TRUE(d::over_headroom(s, t));
}

// The fast path's young bound is never above what decide() would ask for at
// any lag it can meet: no allocation under it can be due. The bound is
// published at the young bytes of that moment (often none, right after a
// minor) and must hold for every young volume the allocations then reach,
// with a pause priced a + b x min(young, cap) as the cost model does.
TEST(Decide, FastPathYoungBoundIsBelowEveryThreshold) {
  const d::pressure_tuning t;
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(0, 1);
  for (int k = 0; k < 2000; ++k) {
    auto s = base(d::pressure_event::allocation);
    const double a = u(rng) * 30 * ms, cap = (1 + u(rng) * 4096) * MiB;
    const double slope = u(rng) < 0.3 ? 0 : u(rng) * 20 * ms / (1024.0 * MiB);
    const auto price = [&](d::pressure_snapshot& at, double young) {
      at.dev.young = static_cast<std::size_t>(young);
      at.pause_growth = slope * std::min(young, cap);
      at.pause = a + at.pause_growth;
      at.pause_slope = slope;
    };
    s.dev.rate = u(rng) * 80.0 * (1u << 30);
    s.dev.floor = static_cast<std::size_t>(u(rng) * 4096) * MiB;
    s.dev.yield = u(rng);
    s.dev.futile = 1 + 15 * u(rng);
    s.exposed = u(rng) * 0.1 * s.wall;
    s.dev.stretch = u(rng) < 0.5 ? 0 : u(rng) * 8192 * MiB;
    const double young0 = u(rng) < 0.5 ? 0 : std::floor(u(rng) * 64) * MiB;
    price(s, young0);
    const std::size_t with_lag = d::fast_young_bound(s.dev, true, s.pause, true, t, s.pause_growth, slope);
    const std::size_t no_lag = d::fast_young_bound(s.dev, true, s.pause, false, t, s.pause_growth, slope);
    s.lag = 0;
    EXPECT_EQ(no_lag, d::decide(s, t).threshold);
    for (double young : {young0, young0 + MiB, 0.5 * cap, 2.0 * cap, 8192.0 * MiB}) {
      if (young < young0) continue;
      auto later = s;
      price(later, young);
      for (double lag : {0.0, 0.5 * later.pause, later.pause, 10 * later.pause}) {
        later.lag = lag;
        EXPECT_LE(with_lag, d::decide(later, t).threshold) << "lag " << lag << " young " << young;
      }
    }
  }
}

// Note [Quiet moments defer to syncs]: at a hint of a loop that syncs there,
// a due collection that is exposed waits for the sync; a hidden one runs.
TEST(Decide, HintsDeferExposedCollectionsToTheSync) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::hint);
  s.dev.young = 6 * 1024 * MiB;  // over the 4.8 GiB threshold
  s.syncing = true;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.syncing = false;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  s.syncing = true;
  s.lag = 10 * ms;
  s.dev.young = 2 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
}

// Note [Quiet moments]: a hint collects early when the next stretch would
// cross the threshold anyway, once quiet_fraction of it is used.
TEST(Decide, AHintCollectsWhenTheNextStretchWouldCross) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::hint);  // threshold 4.8 GiB
  s.dev.young = 3 * 1024 * MiB;
  s.dev.stretch = 1.0 * (1u << 30);
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.dev.stretch = 2.0 * (1u << 30);
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  s.dev.young = 2 * 1024 * MiB;  // under half the threshold
  s.dev.stretch = 4.0 * (1u << 30);
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
}

// At a sync the slack is the lag: a minor that fits collects at the minimum.
TEST(Decide, ASyncCollectsWhatFitsInItsSlack) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::sync);
  s.dev.young = 32 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.lag = 6 * ms;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  s.dev.young = t.min_young_bytes - 1;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
}

// Note [A smaller minor is tried]: a sync takes the smaller minor the cost
// model asks for only where the device hides part of it and the minor is
// priced within twice the lag, and says it is a try. A spent exposed
// budget does not stop it (Note [A fitted line is tried too]).
TEST(Decide, ASyncTriesTheSmallerMinorTheCostModelAsksFor) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::sync);
  s.dev.young = 256 * MiB;
  s.lag = 5 * ms;
  s.pause = 7.5 * ms;
  ASSERT_EQ(d::decide(s, t).action, d::pressure_action::none) << "priced at 7.5 ms it is not due";
  s.smaller_wanted = true;
  auto r = d::decide(s, t);
  EXPECT_EQ(r.action, d::pressure_action::minor);
  EXPECT_TRUE(r.probe);
  s.lag = 0;  // an idle device hides nothing
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.lag = 3.7 * ms;  // priced beyond twice the lag: a smaller young volume cannot make it fit
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.lag = 3.8 * ms;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  s.lag = 5 * ms;
  s.exposed = 0.06 * s.wall;  // the budget is spent: the lag is still the device's
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  EXPECT_TRUE(d::decide(s, t).probe);
  s.exposed = 0;
  s.dev.young = t.min_young_bytes - 1;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.dev.young = 256 * MiB;
  s.event = d::pressure_event::hint;  // only syncs try
  EXPECT_FALSE(d::decide(s, t).probe);
  s.event = d::pressure_event::sync;
  s.pause = 4 * ms;  // hidden anyway: a minor, not a try
  r = d::decide(s, t);
  EXPECT_EQ(r.action, d::pressure_action::minor);
  EXPECT_FALSE(r.probe);
}

// Note [The loop's first sync learns its minor]: until the loop has a
// minor of its own, a sync collects what is worth a collection at all if
// the bucket can pay the exposed part; not at a hint, not once priced.
TEST(Decide, TheLoopsFirstSyncLearnsItsMinorIfTheBucketPays) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::sync);
  s.dev.young = 2 * MiB;
  s.wall = 0.002;  // the loop's first iterations: 0.1 ms of budget earned
  s.exposed = t.gc_budget * s.wall - 2 * s.pause;  // the bucket's start: two predicted pauses in hand
  ASSERT_EQ(d::decide(s, t).action, d::pressure_action::none) << "priced at 6 ms, 2 MiB is not due";
  s.loop_unpriced = true;
  auto r = d::decide(s, t);
  EXPECT_EQ(r.action, d::pressure_action::minor);
  EXPECT_TRUE(r.learn);
  EXPECT_FALSE(r.probe);
  s.exposed = t.gc_budget * s.wall - 0.5 * s.pause;  // the bucket holds less than the exposed part
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.lag = 5.5 * ms;  // the device hides all but 0.5 ms of it: that much is enough
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  s.lag = 0;
  s.exposed = t.gc_budget * s.wall - 2 * s.pause;
  s.dev.young = t.min_young_bytes - 1;  // not worth a collection at all
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.dev.young = 2 * MiB;
  s.event = d::pressure_event::hint;  // only syncs
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.event = d::pressure_event::sync;
  s.loop_unpriced = false;  // the loop has a minor of its own: the budget rule
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
}

// A cycle in progress: finished at once where memory is needed, advanced at
// syncs, paced by the exposed budget elsewhere; a sliced minor waits.
// Note [Syncs collect what the next stretch would]: a sync whose slack
// hides only 1 ms of a 6 ms minor (its own threshold: 40 GiB/s x 5 ms /
// 0.05 = 4 GiB) still takes it when one more stretch would make it due at
// an allocation (in a loop with hints: the 7 GiB of headroom, exposed whole).
TEST(Decide, ASyncCollectsWhatTheNextStretchWouldMakeDue) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::sync);
  s.lag = 1 * ms;
  s.dev.floor = 0;
  s.dev.young = 2048 * MiB;
  s.dev.stretch = 4096.0 * MiB;  // 6 GiB < 7 GiB
  EXPECT_NEAR(gib(d::decide(s, t).threshold), 4.0, 1e-6);
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.dev.stretch = 5632.0 * MiB;  // 7.5 GiB >= 7 GiB
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  s.dev.young = t.min_young_bytes - 1;  // never below the minimum
  s.dev.stretch = 8192.0 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
}

TEST(Decide, ACycleInProgressIsFinishedSteppedOrPaced) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.cycle = true;
  s.dev.young = 6 * 1024 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::finish_cycle);
  s.dev.young = 64 * MiB;
  s.cycle_wall = 0.2;  // the cycle's own pace: 10 ms of exposed slices in its 200 ms
  s.cycle_exposed = 0.009;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::step_cycle);
  s.cycle_exposed = 0.011;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.exposed = 0;  // however little the run as a whole exposed
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.event = d::pressure_event::sync;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::step_cycle);
  s.event = d::pressure_event::hint;
  s.cycle_exposed = 0;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::step_cycle);
  s.syncing = true;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.event = d::pressure_event::allocation;
  s.minor_cycle = true;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
}

// Note [Finishing a cycle costs its rest]: young bytes that would pay for a
// minor (4.8 GiB at 6 ms) do not pay for the 150 ms a whole-heap cycle still
// needs (120 GiB, capped by the 7 GiB headroom); the headroom still does.
TEST(Decide, FinishingACycleIsPricedAtItsRest) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::allocation);
  s.cycle = true;
  s.cycle_wall = 0.2;
  s.dev.young = 6 * 1024 * MiB;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::finish_cycle);  // no rest known: a minor's price
  s.cycle_rest = 0.150;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::step_cycle);  // paced on, not finished
  s.dev.young = 7 * 1024 * MiB + 1;  // at the headroom (soft 8 GiB - 1 GiB live after)
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::finish_cycle);
  s.dev.young = 6 * 1024 * MiB;
  s.dev.live = 8193 * MiB;  // past the soft limit: memory is needed now
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::finish_cycle);
  s.dev.live = 1024 * MiB;
  s.minor_cycle = true;  // a sliced minor's rest is a minor
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::finish_cycle);
}
