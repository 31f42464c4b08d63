// The price of a minor's exposed part (core/src/pressure_model.hpp): Note [A
// minor's exposed part is the mean of its overruns] and Note [Waiting only
// costs more], each on a hand-made snapshot (tests/decide_support.hpp).
#include <gtest/gtest.h>

#include "decide_support.hpp"
#include "pressure_model.hpp"

namespace d = gcpressure::detail;
using gcp_decide::base;
using gcp_decide::gib;
using gcp_decide::ms;

namespace {

// The fake clock's stuck row (bench/RESULTS.md, 2026-12-07 session 18): a
// 3 ms minor, 3.5 ms more every third, so its samples sit 1.17 ms below and
// 2.33 ms above their 4.2 ms mean.
d::pause_spread every_third_slow() {
  d::pause_spread sp;
  sp.dev = {-1.1667 * ms, -1.1667 * ms, 2.3333 * ms};
  sp.n = 3;
  return sp;
}

}  // namespace

// A mean pause that fits in the lag is not a free minor when one in three
// overruns it: priced at 0 before (the minimum young bytes), it is priced at
// the mean overrun, 0.51 ms, and the budget's threshold is rate x that /
// budget (40 GiB/s x 0.51 ms / 0.05 = 0.41 GiB).
TEST(ExposedPrice, AMinorIsPricedAsTheMeanOfItsOverruns) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::sync);
  s.pause = 4.2 * ms;
  s.lag = 5 * ms;
  s.dev.young = 256 * MiB;
  EXPECT_EQ(d::decide(s, t).threshold, t.min_young_bytes) << "no spread: the mean fits, the minor is free";
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::minor);
  s.spread = every_third_slow();
  const double overrun = (4.2 + 2.3333 - 5) * ms / 3;
  EXPECT_NEAR(d::expected_exposed(s.pause, s.lag, &s.spread), overrun, 1e-9);
  const auto r = d::decide(s, t);
  EXPECT_NEAR(gib(r.threshold), 40 * overrun / t.gc_budget, 0.01);
  EXPECT_EQ(r.action, d::pressure_action::none) << "256 MiB does not pay for 0.51 ms exposed";
  EXPECT_TRUE(r.hidden) << "hidden still means the predicted pause fits (hints may run it)";
  s.lag = 7 * ms;  // every sample fits: free again
  EXPECT_EQ(d::decide(s, t).threshold, t.min_young_bytes);
  s.lag = 0;  // no lag: the mean of the pauses, as before
  EXPECT_NEAR(d::expected_exposed(s.pause, 0, &s.spread), s.pause, 1e-7);
}

// Note [Waiting only costs more]: a minor whose exposed cost per young byte
// would be no lower one stretch later is due now, whatever the budget's
// threshold says; one whose fixed part cannot hide waits for the threshold.
TEST(ExposedPrice, ASyncCollectsWhenWaitingOnlyCostsMore) {
  const d::pressure_tuning t;
  auto s = base(d::pressure_event::sync);
  s.pause = 4.2 * ms;
  s.lag = 5 * ms;
  s.spread = every_third_slow();
  s.dev.young = 32 * MiB;
  s.dev.stretch = 32.0 * MiB;
  s.pause_next = 6.2 * ms;  // 2 ms more a stretch: E 0.51 -> 1.20 ms, per byte up
  auto r = d::decide(s, t);
  ASSERT_GT(r.threshold, s.dev.young) << "the budget's threshold alone would wait";
  EXPECT_EQ(r.action, d::pressure_action::minor);
  s.pause_next = 4.5 * ms;  // 0.3 ms more: E 0.61 ms over twice the bytes, per byte down
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.pause_next = 6.2 * ms;
  s.lag = 0;  // nothing hides the fixed part: bigger minors are cheaper per byte
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.lag = 5 * ms;
  s.event = d::pressure_event::hint;  // syncs only
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
  s.event = d::pressure_event::sync;
  s.dev.young = t.min_young_bytes - 1;
  EXPECT_EQ(d::decide(s, t).action, d::pressure_action::none);
}
