// The pressure policy's cost model (core/src/cost_model.hpp, Note [Minor cost
// is fixed + per young byte] and Note [A slope must explain the samples]):
// a cost that is fixed with jitter stays fixed, a cost that grows with the
// young bytes is separated into its two parts, and a handful of samples is
// never fitted. Seeded generators: every case is deterministic.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "cost_model.hpp"

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Adds one sample the model skips (the first mark of a fresh heap), then
// `n` samples from `cost(young)`, young uniform in [lo, hi] MiB.
template <class Cost>
gcpressure::detail::cost_model feed(std::mt19937_64& rng, int n, double lo, double hi, Cost cost) {
  gcpressure::detail::cost_model m;
  m.add(lo * kMiB, 1.0);  // skipped: a first collection is not a sample
  std::uniform_real_distribution<double> young(lo * kMiB, hi * kMiB);
  for (int i = 0; i < n; ++i) {
    const double x = young(rng);
    m.add(x, cost(x));
  }
  return m;
}

TEST(CostModel, NoiseOnlySamplesKeepTheFixedCost) {
  // CPython's gc.collect as the PyTorch plug-in saw it: ~98 us whatever the
  // young bytes, +-30% jitter, each minor taken when the young bytes crossed
  // a budget of about 32 MiB (32-40 MiB). The policy asks the cost of a 1 MiB
  // minor (alloc_budget: max(growth x floor, min_young_bytes)): a fitted line
  // extrapolated that far from its samples fell below half the true cost in
  // 20-43% of fits, and the budget collapsed with it.
  std::mt19937_64 rng(20261201);
  std::uniform_real_distribution<double> jitter(0.7, 1.3);
  int collapsed = 0;
  const int trials = 400;
  for (int t = 0; t < trials; ++t) {
    const auto m = feed(rng, 16, 32, 40, [&](double) { return 98e-6 * jitter(rng); });
    if (m.predict(1 * kMiB) < 0.5 * 98e-6) ++collapsed;
    EXPECT_GT(m.predict(1 * kMiB), 0) << "a cost is never zero or negative";
  }
  EXPECT_LE(collapsed, trials / 50) << collapsed << " of " << trials << " fits called a 98 us collection almost free";
}

TEST(CostModel, LinearCostWithSpreadIsSeparated) {
  // A Boehm-like minor: 2 ms fixed + 0.5 ms per young MiB, young between 4
  // and 64 MiB, +-10% jitter: the fit recovers both parts.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  const auto truth = [](double x) { return 2e-3 + 0.5e-3 * x / kMiB; };
  for (int t = 0; t < 50; ++t) {
    const auto m = feed(rng, 16, 4, 64, [&](double x) { return truth(x) * jitter(rng); });
    double a = 0, b = 0;
    m.fit(&a, &b);
    EXPECT_NEAR(b * kMiB, 0.5e-3, 0.1e-3) << "trial " << t;
    // (The line is trusted up to twice the largest sample: Note [A fit
    // does not run away].)
    EXPECT_NEAR(m.predict(64 * kMiB), truth(64 * kMiB), 0.15 * truth(64 * kMiB)) << "trial " << t;
    EXPECT_NEAR(m.predict(4 * kMiB), truth(4 * kMiB), 0.5 * truth(4 * kMiB)) << "trial " << t;
  }
}

TEST(CostModel, FewSamplesAreAFixedCost) {
  // Five samples that a line would fit well: too few to trust a slope, so
  // the cost is their mean and the same for any young size.
  gcpressure::detail::cost_model m;
  EXPECT_FALSE(m.known());
  m.add(1 * kMiB, 5.0);  // skipped
  EXPECT_FALSE(m.known());
  const double xs[] = {1, 2, 4, 8, 16}, ys[] = {110e-6, 120e-6, 150e-6, 210e-6, 330e-6};
  for (int i = 0; i < 5; ++i) m.add(xs[i] * kMiB, ys[i]);
  ASSERT_TRUE(m.known());
  double a = -1, b = -1;
  m.fit(&a, &b);
  EXPECT_NEAR(a, (110e-6 + 120e-6 + 150e-6 + 210e-6 + 330e-6) / 5, 1e-12);
  EXPECT_DOUBLE_EQ(b, 0);
  EXPECT_DOUBLE_EQ(m.predict(1 * kMiB), m.predict(1024 * kMiB));
  // Three more on the line 90 us + 15 us/MiB make eight: now the slope
  // explains them.
  const double xs2[] = {24, 32, 48}, ys2[] = {450e-6, 570e-6, 810e-6};
  for (int i = 0; i < 3; ++i) m.add(xs2[i] * kMiB, ys2[i]);
  m.fit(&a, &b);
  EXPECT_NEAR(b * kMiB, 15e-6, 1e-6);
  EXPECT_NEAR(a, 90e-6, 5e-6);
}

TEST(CostModel, OneSlowCollectionIsNotTheCost) {
  // Note [One slow collection is not the cost]: seven 1 ms minors and one
  // preempted at 9 ms: the cost is 1 ms, not the mean's 2 ms; with a slope,
  // one 10x sample does not bend it.
  gcpressure::detail::cost_model m;
  m.add(0, 1.0);  // skipped
  for (int i = 0; i < 8; ++i) m.add((4 + i) * kMiB, i == 3 ? 9e-3 : 1e-3);
  EXPECT_NEAR(m.predict(1 * kMiB), 1e-3, 1e-9);
  EXPECT_NEAR(m.predict(10 * kMiB), 1e-3, 1e-9);
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> jitter(0.9, 1.1);
  const auto truth = [](double x) { return 2e-3 + 0.5e-3 * x / kMiB; };
  auto line = feed(rng, 15, 4, 64, [&](double x) { return truth(x) * jitter(rng); });
  line.add(8 * kMiB, 10 * truth(8 * kMiB));
  double a = 0, b = 0;
  line.fit(&a, &b);
  EXPECT_NEAR(b * kMiB, 0.5e-3, 0.1e-3);
  EXPECT_NEAR(line.predict(8 * kMiB), truth(8 * kMiB), 0.2 * truth(8 * kMiB));
}

TEST(CostModel, ADecreasingFitIsAFixedCost) {
  // Bigger young sets that happened to collect faster (a warm cache): a
  // negative slope explains nothing about the cost of more young bytes.
  gcpressure::detail::cost_model m;
  m.add(0, 1.0);
  for (int i = 0; i < 12; ++i) m.add((1 + i) * kMiB, 300e-6 - i * 10e-6);
  double a = -1, b = -1;
  m.fit(&a, &b);
  EXPECT_DOUBLE_EQ(b, 0);
  EXPECT_NEAR(a, 245e-6, 1e-12);  // the mean of 300 ... 190 us
}

// 16 minors at lo, lo + step, ... lo + 4 step MiB of young bytes whose
// times climb 1.5 ms per MiB, +-0.1 ms (after the skipped first sample).
gcpressure::detail::cost_model steep(double lo, double step) {
  gcpressure::detail::cost_model m;
  m.add(0, 1.0);  // skipped
  for (int i = 0; i < 16; ++i) {
    const double young = (lo + (i % 5) * step) * kMiB;
    m.add(young, 0.7e-3 + 1.5e-3 * young / kMiB + (i % 2 ? 0.1e-3 : -0.1e-3));
  }
  return m;
}

// Note [A slope needs young bytes that differ]: minors at 1.25-2.25 MiB of
// young bytes whose times happen to climb with them (the host backend's CI
// shape: 2.7-4.5 ms) are a fixed cost, not a steep slope.
TEST(CostModel, ASlopeOverYoungBytesThatBarelyDifferIsAFixedCost) {
  const auto m = steep(1.25, 0.25);
  double a = 0, b = 0;
  m.fit(&a, &b);
  EXPECT_DOUBLE_EQ(b, 0);
  EXPECT_DOUBLE_EQ(m.predict(16 * kMiB), m.predict(1 * kMiB));
}

// Note [A fit does not run away]: a slope fitted over samples that span a
// factor of 3 or more holds up to twice the largest of them, and is flat
// beyond.
TEST(CostModel, AFitIsNotExtrapolatedPastTwiceItsSamples) {
  auto m = steep(0.5, 0.5);
  double a = 0, b = 0;
  m.fit(&a, &b);
  ASSERT_GT(b * kMiB, 1e-3) << "the samples are meant to fit a steep slope";
  EXPECT_NEAR(m.predict(2 * kMiB), a + b * 2 * kMiB, 1e-12);  // inside: the line
  EXPECT_NEAR(m.predict(5 * kMiB), a + b * 5 * kMiB, 1e-12);  // up to twice the largest sample
  EXPECT_DOUBLE_EQ(m.predict(16 * kMiB), m.predict(5 * kMiB));  // flat beyond
  // A minor further out is a sample: the range grows with what was seen.
  m.add(16 * kMiB, 4e-3);
  EXPECT_GT(m.predict(32 * kMiB), m.predict(16 * kMiB) - 1e-12);
}

// Note [A smaller minor is tried]: minors that all ran at about the same
// young bytes (the H100's 2-2.25 GiB at a sync every iteration, 7-9 ms)
// call the cost fixed; a minor three times smaller than every recent one is
// worth one try. Its sample gives the fit the spread it needs: when the
// cost grows with the young bytes, the small minor is then priced at what
// it costs (the H100's 2.6-3.0 ms at 256 MiB), not at the big ones' mean.
TEST(CostModel, ClusteredSamplesAskForASmallerMinorOnce) {
  std::mt19937_64 rng(20261207);
  const auto truth = [](double x) { return 2.4e-3 + 2.4e-3 * x / (1024 * kMiB); };
  auto m = feed(rng, 8, 2048, 2304, truth);
  double a = 0, b = 0;
  m.fit(&a, &b);
  ASSERT_DOUBLE_EQ(b, 0) << "samples within a factor of 3 are meant to fit no slope";
  EXPECT_GT(m.predict(256 * kMiB), 6.5e-3) << "priced at the big minors' mean";
  EXPECT_TRUE(m.wants_smaller(256 * kMiB));
  EXPECT_TRUE(m.wants_smaller(682 * kMiB));
  EXPECT_FALSE(m.wants_smaller(700 * kMiB)) << "not three times below every recent sample";
  m.add(256 * kMiB, truth(256 * kMiB), true);
  m.fit(&a, &b);
  EXPECT_GT(b, 0) << "the tried minor gives the spread a slope needs";
  EXPECT_NEAR(m.predict(256 * kMiB), truth(256 * kMiB), 0.5e-3);
  // Note [A fitted line is tried too]: below every recent sample the line's
  // intercept is an extrapolation; one try checks it, and a try the line
  // priced right spaces the next out.
  EXPECT_TRUE(m.wants_smaller(64 * kMiB));
  m.add(64 * kMiB, truth(64 * kMiB), true);
  EXPECT_FALSE(m.wants_smaller(16 * kMiB)) << "the line was right: the next try waits";
}

// A cost that does not grow with the young bytes: the try was not cheaper,
// so the next waits twice as many syncs (8, then 16, ... up to 64: Note
// [Tries are paced in syncs]), however far apart the minors are, and a
// fixed cost costs few tries.
TEST(CostModel, ATryThatWasNotCheaperSpacesTheNextOut) {
  for (const int spacing : {1, 8, 40}) {  // syncs between two minors of the budget's
    gcpressure::detail::cost_model m;
    m.add(2048 * kMiB, 1.0);  // skipped: a first collection
    for (int i = 0; i < 4; ++i) m.add(2048 * kMiB, 7e-3);
    std::vector<int> at;
    for (int sync = 0; sync < 400; ++sync) {
      m.sync_passed();
      if (m.wants_smaller(256 * kMiB)) {
        at.push_back(sync);
        m.add(256 * kMiB, 7e-3, true);
      } else if (sync % spacing == 0) {
        m.add(2048 * kMiB, 7e-3);
      }
    }
    SCOPED_TRACE(spacing);
    ASSERT_GE(at.size(), 5u);
    EXPECT_EQ(at[1] - at[0], 8) << "8 syncs between the first two tries";
    EXPECT_EQ(at[2] - at[1], 16);
    EXPECT_EQ(at[4] - at[3], 64) << "at most 64";
    EXPECT_LE(at.size(), 9u) << "a fixed cost was tried " << at.size() << " times in 400 syncs";
  }
}

// Note [A smaller minor is tried]: a try that was cheaper is repeated at the
// next sync at about its size, and the tries stop once the fit has a slope.
// One cheap sample among fifteen big ones with jitter fits no slope (the
// line explains too little of their spread: Note [A slope must explain the
// samples]), and before, the next try waited four more minors at the
// budget's spacing.
TEST(CostModel, ATryThatWasCheaperIsRepeatedUntilASlopeIsFitted) {
  const auto truth = [](double x) { return 2.4e-3 + 0.0177e-3 * x / kMiB; };  // the H100-like minor
  gcpressure::detail::cost_model m;
  m.add(320 * kMiB, 1.0);  // skipped
  for (int i = 0; i < 16; ++i) m.add(320 * kMiB, truth(320 * kMiB) + (i % 3 == 2 ? 3.5e-3 : 0));
  ASSERT_TRUE(m.wants_smaller(32 * kMiB));
  m.add(32 * kMiB, truth(32 * kMiB), true);
  int tries = 1;
  double a = 0, b = 0;
  m.fit(&a, &b);
  ASSERT_EQ(b, 0) << "one cheap sample fits no slope here";
  for (; b == 0 && tries < 16; m.fit(&a, &b)) {
    ASSERT_TRUE(m.wants_smaller(32 * kMiB)) << "a cheaper try is repeated at the next sync (try " << tries << ")";
    EXPECT_TRUE(m.wants_smaller(48 * kMiB)) << "at about its size";
    EXPECT_FALSE(m.wants_smaller(128 * kMiB)) << "not at four times it (over a third of the spaced minors' young bytes)";
    m.add(32 * kMiB, truth(32 * kMiB), true);
    ++tries;
  }
  EXPECT_GT(b, 0) << "the repeated tries give the fit its slope";
  EXPECT_LE(tries, 8);
  EXPECT_NEAR(m.predict(32 * kMiB), truth(32 * kMiB), 0.6e-3);
  // The last try was still cheaper than the fixed cost it was priced at:
  // one more at its size finds the line right, and the tries stop.
  if (m.wants_smaller(32 * kMiB)) m.add(32 * kMiB, truth(32 * kMiB), true);
  EXPECT_FALSE(m.wants_smaller(32 * kMiB)) << "the line prices the small minor right: nothing more to try";
  // A try that was not cheaper stops the repetition.
  gcpressure::detail::cost_model flat;
  flat.add(320 * kMiB, 1.0);
  for (int i = 0; i < 8; ++i) flat.add(320 * kMiB, 7e-3);
  ASSERT_TRUE(flat.wants_smaller(32 * kMiB));
  flat.add(32 * kMiB, 7e-3, true);
  EXPECT_FALSE(flat.wants_smaller(32 * kMiB));
}

// Note [The loop's minors price the loop's]: the set-up's minors (a heap
// of new objects: 4.4-4.7 ms on the H100 at a 256 MiB host heap) price a
// minor only until the loop's first (2.0-2.5 ms there).
TEST(CostModel, TheLoopsFirstMinorReplacesTheSetUpSamples) {
  gcpressure::detail::cost_model m;
  m.add(16 * kMiB, 1.0, false, false);  // skipped
  for (int i = 0; i < 4; ++i) m.add(192 * kMiB, 4.5e-3, false, false);
  EXPECT_NEAR(m.predict(256 * kMiB), 4.5e-3, 1e-9) << "before the loop: the set-up's cost";
  m.add(256 * kMiB, 2.47e-3);
  EXPECT_NEAR(m.predict(256 * kMiB), 2.47e-3, 1e-9) << "the loop's first minor prices the next";
  m.add(256 * kMiB, 2.2e-3);
  EXPECT_NEAR(m.predict(256 * kMiB), 0.5 * (2.47e-3 + 2.2e-3), 1e-9);
  m.add(192 * kMiB, 4.5e-3, false, false);  // a set-up minor later (a new model) is a sample again
  EXPECT_GT(m.predict(256 * kMiB), 2.47e-3);
}

// Note [The loop's first sync learns its minor]: a minor before the loop
// began that found garbage counted as the loop's (Node's second set-up
// scavenge, 5.6 ms); when the loop begins, the loop's next minor replaces
// every sample before it.
TEST(CostModel, MinorsBeforeTheLoopBeganAreTheSetUps) {
  gcpressure::detail::cost_model m;
  m.add(1 * kMiB, 4.6e-3);  // skipped
  m.add(1 * kMiB, 5.6e-3);  // found garbage: counted as the loop's
  EXPECT_TRUE(m.loop_priced());
  m.loop_begins();
  EXPECT_FALSE(m.loop_priced());
  EXPECT_NEAR(m.predict(2 * kMiB), 5.6e-3, 1e-9) << "it prices minors until the loop has one";
  m.add(2 * kMiB, 0.45e-3);
  EXPECT_TRUE(m.loop_priced());
  EXPECT_NEAR(m.predict(2 * kMiB), 0.45e-3, 1e-9) << "the loop's first minor replaced it";
}

// Note [The loop's first minors are tried smaller]: the loop's first minor
// (6.8 ms at 384 MiB on the H100) asks for a try at about its young volume
// or fewer until the loop has four minors; then only three times smaller.
TEST(CostModel, TheLoopsFirstMinorsAskForATryAtAboutTheirSize) {
  gcpressure::detail::cost_model m;
  m.add(16 * kMiB, 1.0, false, false);  // skipped
  for (int i = 0; i < 4; ++i) m.add(128 * kMiB, 6.5e-3, false, false);
  EXPECT_FALSE(m.wants_smaller(64 * kMiB)) << "before the loop: only three times below the samples";
  m.add(384 * kMiB, 6.8e-3);
  EXPECT_TRUE(m.wants_smaller(256 * kMiB)) << "the loop's first minor: any smaller size";
  EXPECT_TRUE(m.wants_smaller(512 * kMiB)) << "or about its size";
  EXPECT_FALSE(m.wants_smaller(640 * kMiB)) << "not beyond 1.5x it";
  for (int i = 0; i < 3; ++i) m.add(2304 * kMiB, 6.7e-3);
  EXPECT_FALSE(m.wants_smaller(256 * kMiB)) << "four loop minors: three times below every one";
  EXPECT_TRUE(m.wants_smaller(128 * kMiB));
}

}  // namespace
