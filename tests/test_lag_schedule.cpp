// The pressure policy's schedule against the device's lag (Note [The
// device's lag], core/src/device_lag.hpp): loops that synchronize every K
// iterations, the guess before the first sync (Note [A guess before the
// first sync], Note [The guess is what a queued iteration leaves]) and a
// lag the device did not have. The fake world is schedule_world.hpp's.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "schedule_world.hpp"

namespace gcp = gcpressure;
using namespace gcp_test;  // the fake world (schedule_world.hpp)

// Note [The device's lag]: a loop that syncs every 8 iterations leaves the
// host ahead of the device. A 6 ms minor against 4.8 ms of device work per
// iteration fits in no single iteration's slack (at K = 1 it is exposed, and
// the budget spaces minors out), but in the lag of the iterations queued
// ahead: minors run at allocations and hints, hidden, every iteration or
// two, and the loop is as fast as the device.
TEST(LagSchedule, MinorsRunHiddenInTheLagOfALoopThatSyncsEvery8) {
  std::size_t steady8 = 0;
  const auto run = [&steady8](int k, gcp::collection_stats* g, std::size_t* peak, double* wall) {
    world w("pressure", 4096 * MiB, 3072 * MiB);
    w.gc.minor_seconds = 6 * ms;
    loop_shape s;
    s.iterations = 400;
    s.sync_every = k;
    s.steady_from = 2 * k;
    run_loop(w, s);
    *g = w.stats();
    *peak = w.peak_live;
    if (k == 8) steady8 = w.steady_peak;
    *wall = w.policy->wall_seconds();
    EXPECT_EQ(w.alloc.stats().ooms, 0u);
  };
  gcp::collection_stats g1, g8;
  std::size_t peak1 = 0, peak8 = 0;
  double wall1 = 0, wall8 = 0;
  run(1, &g1, &peak1, &wall1);
  run(8, &g8, &peak8, &wall8);
  SCOPED_TRACE("minors " + std::to_string(minors(g8)) + ", exposed " + std::to_string(g8.exposed_gc_seconds));
  // The device's time: 400 x 8 x 0.6 ms.
  const double device = 400 * 8 * 0.6 * ms;
  EXPECT_LE(wall8, 1.02 * device) << "collections slowed a loop that had lag to hide them";
  EXPECT_GT(minors(g8), 400u / 3);
  EXPECT_LE(g8.exposed_gc_seconds, 0.01 * wall8);
  EXPECT_GT(g8.hidden_gc_seconds, 100 * 6 * ms);
  // One iteration of temporaries is 32 MiB and the device takes 4.8 ms for
  // one: a 6 ms minor is hidden only with two iterations or more queued
  // behind the one running, so after the first two windows minors run
  // every other iteration and keep at most three iterations' temporaries.
  // Before, up to seven (the lag is unknown until the first sync: the guess
  // of Note [A guess before the first sync], "a minor fits in an iteration",
  // is refuted by the third minor). K = 1 keeps many more.
  EXPECT_LE(steady8, 3 * 32 * MiB);
  EXPECT_LE(peak8, 7 * 32 * MiB);
  EXPECT_LT(peak8 * 2, peak1) << "K=1 peak " << peak1;
}

// Note [A guess before the first sync]: a loop that never syncs (but at its
// end) on a device barely slower than the host (0.9 ms per iteration
// against 0.8 ms of host work) has two iterations queued now and then; the
// guess "a 6 ms minor fits in an iteration" is wrong there, and each minor
// taken on it is exposed. Each refutation halves the guess, and the fifth
// ends it: exposed GC time stays within the budget plus eight minors (the
// two that learn the cost at the start, five refutations, one for the
// budget's granularity: 42 ms measured; 36 ms when the first refutation
// ended the guess); without refutations every such moment exposed one (39
// minors, 0.234 s).
TEST(LagSchedule, AWrongGuessOfTheLagCostsAFewExposedMinors) {
  world w("pressure", 4096 * MiB, 3072 * MiB);
  w.gc.minor_seconds = 6 * ms;
  loop_shape s;
  s.iterations = 300;
  s.host_s = 0.1 * ms;
  s.device_s = 0.1125 * ms;
  s.sync_every = s.iterations;
  run_loop(w, s);
  const auto g = w.stats();
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  const double wall = w.policy->wall_seconds();
  EXPECT_GT(minors(g), 2u);
  EXPECT_LE(g.exposed_gc_seconds, 0.05 * wall + 8 * w.gc.minor_seconds);
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// Note [A guess before the first sync]: a refuted guess halves. A model of
// 64 MiB is built first (its minors teach the cost: 16 ms, or 4 ms), then
// the loop queues 32 MiB a 4.8 ms iteration. With 16 ms minors and a sync
// every 8 iterations the first window's guess "a minor fits in an
// iteration" is wrong; stopping at once left the window with only the
// host-paced bound: 10 iterations of temporaries before its second minor
// (12 x 32 MiB live with the model); halving keeps it to 7 (6 while one
// queued iteration never hid a minor and the guess was first tested a hint
// later, with two queued: Note [The guess is what a queued iteration
// leaves] moves the refutation to the first hint). With 4 ms minors and a
// sync every iteration the first busy sync had no estimate of its slack and
// skipped: 4 x 32 MiB live; the guess there makes it 3.
TEST(LagSchedule, ARefutedGuessHalvesAndTheFirstBusySyncUsesIt) {
  const auto early = [](double minor, int k) {
    world w("pressure", 4096 * MiB, 3072 * MiB);
    w.gc.minor_seconds = minor * ms;
    build_model(w);
    loop_shape s;
    s.iterations = 4 * k;
    s.sync_every = k;
    s.steady_from = s.iterations;  // everything is the first windows
    run_loop(w, s);
    EXPECT_EQ(w.alloc.stats().ooms, 0u);
    return w.early_peak;
  };
  EXPECT_LE(early(16, 8), 9 * 32 * MiB);
  EXPECT_LE(early(4, 1), 3 * 32 * MiB);
}

// Note [The guess is what a queued iteration leaves]: the H100's first
// window at a 256 MiB host heap, a sync every 8 iterations. The model's
// minors teach 4 ms; the loop's cost 2.5 ms against 5.5 ms of device work
// an iteration queued in 0.5 ms. The hint after the first loop minor has one
// iteration queued, which hides a 4 ms minor: one iteration of temporaries
// is held. With the guess spent by the host's queueing (3.5 of 4 ms left) it
// took no minor and the next hint collected two. Each clock read takes a
// microsecond, as on a host: Note [A hint decides at its time] (read after
// the hint, the lag was the guess less a few microseconds: not hidden).
TEST(LagSchedule, TheIterationJustQueuedHidesAMinorBeforeTheFirstSync) {
  gcp::policy_options po;
  po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
  world w("pressure", 4096 * MiB, 3072 * MiB, po);
  w.gc.minor_seconds = 4 * ms;
  build_model(w);
  w.gc.minor_seconds = 2.5 * ms;
  w.clock.set_tick(1e-6);
  loop_shape s = h100_loop(16, 8);
  s.steady_from = s.iterations;
  run_loop(w, s);
  EXPECT_LE(w.early_peak, 64 * MiB + 32 * MiB + 4 * MiB);
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// Note [An overrun minor does not refute the guess]: the H100's start-up
// at a 256 MiB host heap, a sync every 8 iterations, as session 25 saw it
// in 3 of 6 repetitions. The set-up's minors price the loop's at 3 ms; the
// loop's first minor, taken on the guess at the first hint, takes 7 ms
// against 5.5 ms of queued device work: the device went idle 1.9 ms before
// its end (timed), so the lag it found was more than the guessed one, and
// the overrun was the minor's. Taken as a refutation, the halved guess made
// the next two hints skip: 160 MiB (the model and three iterations of
// temporaries) before the first sync. Now every hint collects: one
// iteration's. An untimed device still halves (the probe's bound is all it
// has).
TEST(LagSchedule, AFirstLoopMinorOverItsPriceKeepsTheGuess) {
  for (const bool timed : {true, false}) {
    gcp::policy_options po;
    po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
    world w("pressure", 8192 * MiB, 6144 * MiB, po);
    w.dev.timed = timed;
    w.gc.minor_seconds = 3 * ms;
    build_model(w);
    ASSERT_EQ(w.gc.minors, 2);  // the set-up's: the loop's first minor is the third
    w.gc.minor_extra_seconds.assign(1000, 0.0);
    w.gc.minor_extra_seconds[3] = 4 * ms;
    loop_shape s = h100_loop(16, 8);
    s.steady_from = s.iterations;
    run_loop(w, s);
    const gcp::collection_stats g = w.stats();
    if (timed) {
      EXPECT_LE(w.early_peak, 64 * MiB + 32 * MiB) << "a hint after the overrun skipped";
      EXPECT_EQ(minors(g), 2u + 16u);  // every hint
      // Charged what was measured (1.9 ms), not the whole 7 ms minor.
      EXPECT_LT(g.exposed_gc_seconds_charged - 2 * 3 * ms, 3 * ms);
    } else {
      EXPECT_GE(w.early_peak, 64 * MiB + 3 * 32 * MiB) << "an untimed overrun refutes the guess as before";
    }
    EXPECT_EQ(w.alloc.stats().ooms, 0u);
  }
}

// Note [A lag the device did not have]: 25 ms minors against 5.5 ms
// iterations, a sync every 8. The loop's time per hint, stretched by minors
// that starved the device, made every hint's lag 25.7-32.3 ms where the
// device had less than a minor queued: each minor was exposed and charged
// nothing, and the loop took 1.27x the device's time. A minor that refutes
// the lag shrinks the device's time per iteration and is charged whole.
TEST(LagSchedule, AMinorTheLagShouldHaveHiddenCorrectsTheLag) {
  world w("pressure", 4096 * MiB, 3072 * MiB);
  w.gc.minor_seconds = 25 * ms;
  build_model(w);
  run_loop(w, h100_loop(320, 8));
  const double device = 320 * 8 * 0.6875 * ms;
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  EXPECT_LE(w.policy->wall_seconds(), 1.08 * device);
  EXPECT_GT(minors(w.stats()), 320u / 16);
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// Note [A guess before the first sync]: a minor at a sync whose device is
// already done is not taken on the guess and does not test it. A loop that
// first computes on the host (its syncs find the device idle; minors run
// there, exposed) keeps the guess for when its device work starts: the
// first window of the device-bound phase then holds what it holds with no
// host phase before it (9 x 32 MiB with the model, as in
// ARefutedGuessHalvesAndTheFirstBusySyncUsesIt). When idle syncs halved the
// guess (3 of the host phase's minors: to an eighth), the window held one
// iteration more (9 x 32 MiB, measured before Note [The guess is what a
// queued iteration leaves]).
TEST(LagSchedule, IdleSyncsDoNotTestTheGuess) {
  world w("pressure", 4096 * MiB, 3072 * MiB);
  w.gc.minor_seconds = 16 * ms;
  build_model(w);
  loop_shape host;
  host.iterations = 120;
  host.host_computes = true;
  run_loop(w, host);
  const auto before = minors(w.stats());
  ASSERT_GE(before, 3u) << "the host phase should collect at its idle syncs";
  w.early_peak = 0;
  loop_shape s;
  s.iterations = 32;
  s.sync_every = 8;
  s.steady_from = s.iterations;
  run_loop(w, s);
  EXPECT_LE(w.early_peak, 9 * 32 * MiB);
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// Note [The budget starts with the loop], Note [A budget of one second]:
// a set-up whose minors find nothing and are exposed (no lag before the
// loop) does not starve the loop's first syncs, nor does the loop's first
// minor, taken on the guess and charged whole. 6 ms minors against ~5 ms
// of slack a sync, a sync every iteration: the budget spaces the minors
// (4-6 iterations in the steady state). Charged from the policy's start
// without a cap, the set-up's 12 ms of exposed minors and the first
// minor's 6 ms left the first 22 syncs without the lag: they waited for
// the budget rule's 700 MiB of young bytes (as the H100's 256 MiB K = 1
// repetitions: peaks at iterations 9-11, 4.5x the oracle's).
TEST(LagSchedule, SetUpCollectionsDoNotStarveTheLoopsFirstSyncs) {
  for (const double load_seconds : {0.0, 2.0}) {
  SCOPED_TRACE(load_seconds);
  gcp::policy_options po;
  po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
  world w("pressure", 8192 * MiB, 6144 * MiB, po);
  w.gc.minor_seconds = 6 * ms;
  build_model(w);
  // A program that then loads its data for a while: the bucket starts with
  // the loop, not with what the set-up's wall earned or cost.
  w.clock.advance(load_seconds);
  w.make(1 * MiB);
  const double setup_exposed = w.stats().exposed_gc_seconds;
  loop_shape s = h100_loop(120, 1);
  s.steady_from = 40;
  run_loop(w, s);
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  std::printf("early peak %zu MiB, steady peak %zu MiB\n", w.early_peak / MiB, w.steady_peak / MiB);
  EXPECT_GT(setup_exposed, 1.5 * w.gc.minor_seconds) << "the set-up is not the one this test is about";
  // The model, the budget's spacing (1-1.5 ms exposed a minor: 20-30 ms of
  // wall, 4-6 iterations of 32 MiB) and the iteration in flight; 864 MiB
  // without Note [A budget of one second].
  EXPECT_LE(w.steady_peak, 64 * MiB + 7 * 32 * MiB);
  EXPECT_LE(w.early_peak, w.steady_peak + 32 * MiB) << "the first window held more than the budget's spacing";
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
  }
}

namespace {

// The H100-shaped loop over a growing minor: a model built with 9 ms minors
// (a fresh heap's first marks, slow), then minors of `base` + `per_mib` per
// young MiB (plus `jitter`, the loop's minors' in turn); 400 iterations, a
// sync every iteration, the steady peak counted from `steady_from`.
// A spell: the loop's minors from..from+count-1 take `extra` seconds more;
// a timed spell (a machine busy for a while): the minors that start in
// the loop's iterations from..from+count-1 (5.5 ms each).
struct slow_spell {
  int from = 0, count = 0;
  double extra = 0;
  bool timed = false;
};
void run_growing_minors(world& w, double base, double per_mib, int steady_from, std::vector<double> jitter = {},
                        slow_spell spell = {}) {
  w.gc.minor_seconds = 9 * ms;
  build_model(w);
  w.gc.minor_seconds = base;
  w.gc.minor_seconds_per_young_mib = per_mib;
  if (spell.timed) {
    w.gc.spell_from = w.clock.now() + spell.from * 5.5 * ms;
    w.gc.spell_until = w.gc.spell_from + spell.count * 5.5 * ms;
    w.gc.spell_extra_seconds = spell.extra;
  } else if (spell.count > 0) {  // jitter indexes every minor, the set-up's too
    jitter.assign(4096, 0);
    for (int i = 0; i < spell.count; ++i) jitter[static_cast<std::size_t>(w.gc.minors + 1 + spell.from + i)] = spell.extra;
  }
  w.gc.minor_extra_seconds = std::move(jitter);
  loop_shape s = h100_loop(400, 1);
  s.steady_from = steady_from;
  run_loop(w, s);
}


// The run's figures on stdout (for the comments' measured values).
void print_peaks(world& w) {
  const gcp::collection_stats g = w.stats();
  std::printf("early peak %zu MiB, steady peak %zu MiB, minors %llu, exposed %.1f ms of %.0f ms\n", w.early_peak / MiB,
              w.steady_peak / MiB, static_cast<unsigned long long>(minors(g)), g.exposed_gc_seconds * 1e3,
              w.policy->wall_seconds() * 1e3);
}
}  // namespace

// Note [A smaller minor is tried]: a minor's cost that grows with the young
// bytes (2.4 ms + 17.7 us per MiB: 3 ms for one iteration's 32 MiB, 7.5 ms
// for nine), a sync every iteration with ~5 ms of slack. Priced at the cost
// of the minors it has seen, a sync's minor did not fit the slack, the
// budget spaced minors out and every sample stayed at the same young bytes
// (the H100's 256 MiB K = 1 repetitions: 2-2.25 GiB, 7-9 ms, exposed). The
// set-up's slow minors (9 ms) start it there: minors every 8-9 iterations.
// The tried smaller minor (one iteration's 32 MiB, 3 ms) shows the slope;
// two tries and the loop collects at each sync, hidden, by iteration ~60.
// Without the tries the same loop walked down by the spread that the
// budget's minors happened to have: 312 minors, 113 ms exposed (5.0%).
TEST(LagSchedule, ASmallerMinorTriedFindsTheCheapMinorAtEachSync) {
  gcp::policy_options po;
  po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
  world w("pressure", 8192 * MiB, 6144 * MiB, po);
  run_growing_minors(w, 2.4 * ms, 0.0177 * ms, 200);
  const gcp::collection_stats g = w.stats();
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  std::printf("steady peak %zu MiB, minors %llu, exposed %.1f ms of %.0f ms\n", w.steady_peak / MiB,
              static_cast<unsigned long long>(minors(g)), g.exposed_gc_seconds * 1e3, w.policy->wall_seconds() * 1e3);
  // The model, one iteration's temporaries, the next one's first arrays.
  EXPECT_LE(w.steady_peak, 64 * MiB + 2 * 32 * MiB);
  EXPECT_GT(minors(g), 330u);  // 350 measured
  EXPECT_LE(g.exposed_gc_seconds, 0.035 * w.policy->wall_seconds());  // 3.0% measured
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// Note [A smaller minor is tried]: a minor that costs what the heap costs
// (25 ms, whatever the young bytes: a 1 GiB host heap) against ~5 ms of
// slack is not tried smaller: priced at five times the lag, it cannot fit
// however little young it has, and each try would be one more exposed
// minor (9 minors and 225 ms exposed with the tries, 8 and 200 without).
TEST(LagSchedule, AMinorPricedFarBeyondTheLagIsNotTriedSmaller) {
  gcp::policy_options po;
  po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
  world w("pressure", 8192 * MiB, 6144 * MiB, po);
  w.gc.minor_seconds = 25 * ms;
  build_model(w);
  run_loop(w, h100_loop(320, 1));
  const gcp::collection_stats g = w.stats();
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  EXPECT_LE(minors(g), 8u);
  EXPECT_LE(g.exposed_gc_seconds, 8 * 25 * ms + 1e-9);
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// Note [The loop's minors price the loop's]: set-up minors of 9 ms (a
// model built over a fresh heap) and the loop's of 0.5 ms + 0.078 ms per
// young MiB (3 ms at one iteration's 32 MiB) against ~5 ms of slack. Priced
// at the set-up's mean, the first loop minors waited for the budget's young
// bytes, each came at a size whose per-byte cost priced the next one
// higher, and no try could be three times smaller than the samples: 2112
// MiB of steady peak, 80 minors, 28% of wall exposed. With the set-up's
// samples replaced by the loop's first, a minor runs at every sync.
TEST(LagSchedule, SetUpMinorsDoNotPriceTheLoopsMinors) {
  world w("pressure", 8192 * MiB, 6144 * MiB);
  run_growing_minors(w, 0.5 * ms, 0.078 * ms, 100);
  const gcp::collection_stats g = w.stats();
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  EXPECT_LE(w.steady_peak, 64 * MiB + 32 * MiB);  // 96 MiB measured, 2112 before
  EXPECT_GT(minors(g), 330u);                     // 343 measured, 80 before
  EXPECT_LE(g.exposed_gc_seconds, 0.09 * w.policy->wall_seconds());  // 7.4% measured, 28% before
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// --verbose: a hint that skips a minor says so, with the terms it decided
// on; the H100's K = 8 peaks were set by such skips (the first hint after a
// sync), which the log did not show. A 6 ms minor against the ~5 ms of lag
// the first hint after a sync has is skipped there.
TEST(Verbose, AHintThatSkipsAMinorSaysWhy) {
  gcp::policy_options po;
  po.verbose = true;
  world w("pressure", 8192 * MiB, 6144 * MiB, po);
  w.gc.minor_seconds = 6 * ms;
  testing::internal::CaptureStderr();
  run_loop(w, h100_loop(40, 8));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("at a hint, no minor: young "), std::string::npos) << err;
  EXPECT_NE(err.find("at a hint: young "), std::string::npos) << err;  // and one that collects
}

// Note [A smaller minor is tried]: a try that was cheaper is repeated at the
// next sync. The H100-like minor (2.4 ms + 0.0177 ms per young MiB) with 2
// ms more every third (a machine's jitter) against ~5 ms of slack at a sync
// every iteration: the set-up's 9 ms minors price the first loop minors far
// beyond the slack, the budget spaces them to ~320 MiB (8-10 ms each, 3-5
// ms exposed), and the cheap tries at one iteration's 32 MiB (2.97 ms) came
// 30-40 iterations apart: 4.7% of wall exposed. Repeated, the fit learns the
// slope within a few syncs: 2.7%.
TEST(LagSchedule, ACheaperTryIsRepeatedAtTheNextSync) {
  world w("pressure", 8192 * MiB, 6144 * MiB);
  run_growing_minors(w, 2.4 * ms, 0.0177 * ms, 100, {0, 0, 2 * ms});
  const gcp::collection_stats g = w.stats();
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  EXPECT_LE(w.steady_peak, 64 * MiB + 32 * MiB);
  EXPECT_LE(g.exposed_gc_seconds, 0.035 * w.policy->wall_seconds());  // 2.7% at 56031d0 (0.8% since beee4bb), 4.7% before
  EXPECT_GT(minors(g), 330u);  // 355 at 56031d0 (402 since beee4bb), 319 before
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// Note [The loop's first minors are tried smaller]: the H100's 256 MiB
// K = 1 log of session 20 in the fake world: set-up minors of 9 ms, the
// loop's first minor 3.3 ms slower than the loop's others (3 ms + 0.0177 ms
// per young MiB: 3.57 ms at one iteration's 32 MiB, against ~5 ms of
// slack). Priced at that one slow minor, the next ones waited for the
// budget's young bytes, each came bigger and slower than the last, and the
// first try waited for four of them: 992 MiB of peak after iteration 10,
// 128.5 ms exposed. Tried at the first measured sync, the cheap minor is
// found there.
TEST(LagSchedule, TheLoopsFirstMinorsAreTriedSmaller) {
  gcp::policy_options po;
  po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
  world w("pressure", 8192 * MiB, 6144 * MiB, po);
  run_growing_minors(w, 3.0 * ms, 0.0177 * ms, 10, {}, {0, 1, 3.3 * ms});
  const gcp::collection_stats g = w.stats();
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  print_peaks(w);
  EXPECT_LE(w.steady_peak, 64 * MiB + 32 * MiB);
  EXPECT_LE(w.early_peak, 64 * MiB + 2 * 32 * MiB);
  EXPECT_LE(g.exposed_gc_seconds, 0.02 * w.policy->wall_seconds());
  EXPECT_GT(minors(g), 380u);
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}

// Note [Waiting pays only the fixed part]: a machine busy for 60 iterations
// (330 ms) in which every minor takes 4 ms more than the H100-like 2.4 ms +
// 0.0177 ms per young MiB, against ~5 ms of slack. The fit sees the per-byte
// part (b x rate = 9% of wall, over the 5% budget) and a fixed part over the
// slack. Priced whole, the budget rule's threshold outran the young bytes
// (each wait made the next minor dearer) until Note [A fit does not run
// away] capped it: 2112 MiB of peak, 33x the live set, 184 ms exposed.
// Amortizing only the exposed fixed part, the spell holds minors of at most
// six to ten iterations' young bytes (256 MiB of peak; 384 MiB with the
// tries of Note [A fitted line is tried too], one of which ran in the spell
// and was exposed), and by iteration 300 the loop is back to a minor at
// every sync. A spell 8 ms slower: the fit kept the spell's small, slow
// minors as its intercept (~11 ms, over the slack) and the exposed budget
// stayed spent, minors of ~1 GiB, 17-23 ms each, to the end: 1248 MiB after
// iteration 300. A try priced on the device's lag, with a line fitted,
// finds the small minor cheap again: back to one per sync, 96 MiB.
TEST(LagSchedule, ABusySpellOfSlowMinorsDoesNotRunAway) {
  for (const double extra : {4.0, 8.0}) {
    for (const int from : {100, 300}) {
      SCOPED_TRACE(std::to_string(extra) + " ms from " + std::to_string(from));
      gcp::policy_options po;
      po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
      world w("pressure", 8192 * MiB, 6144 * MiB, po);
      run_growing_minors(w, 2.4 * ms, 0.0177 * ms, from, {}, {100, 60, extra * ms, true});
      SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
      print_peaks(w);  // from 100: the spell's peak; from 300: after it
      const std::size_t in_spell = extra < 5 ? 64 * MiB + 10 * 32 * MiB : 64 * MiB + 30 * 32 * MiB;
      EXPECT_LE(w.steady_peak, from == 100 ? in_spell : 64 * MiB + 32 * MiB);
      EXPECT_EQ(w.alloc.stats().ooms, 0u);
    }
  }
}


// Note [Tries are paced in syncs]: an H100 whose first loop minors were slow
// (session 23: 6-9 ms set-up minors, the loop's first ones 4-7 ms against
// 5 ms of slack, later 3 ms). On the fake clock: 2.1 ms + 0.027 ms per MiB
// (3 ms at one iteration's 32 MiB), the first 10 iterations 2.5 ms slower.
// The one try in the slow start was not cheaper; counted in minors, the next
// try waited for 4 minors the budget spaced further each time (each dearer
// than the last): 1216 MiB of peak after iteration 40, 313 minors, 125 ms
// exposed (1344 MiB with 8 ms set-up minors). Counted in
// syncs, the next try comes 8 syncs later, after the slow start: a minor per
// sync.
TEST(LagSchedule, ASlowStartDoesNotSpaceTheLoopOut) {
  gcp::policy_options po;
  po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
  world w("pressure", 8192 * MiB, 6144 * MiB, po);
  run_growing_minors(w, 2.1 * ms, 0.027 * ms, 40, {}, {0, 10, 2.5 * ms, true});
  const gcp::collection_stats g = w.stats();
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  print_peaks(w);
  EXPECT_LE(w.early_peak, 64 * MiB + 10 * 32 * MiB);  // 320 MiB measured (416 before)
  EXPECT_LE(w.steady_peak, 64 * MiB + 2 * 32 * MiB);   // 96 measured (1216 before)
  EXPECT_GT(minors(g), 380u);                           // 394 measured (313 before)
  EXPECT_LE(g.exposed_gc_seconds, 0.025 * w.policy->wall_seconds());  // 1.8% measured (5.4% before)
}
// Note [A pause the device outlasted is not credited]: the H100 (session 23,
// 256 MiB host heap, a sync every 8): the set-up's last minor (8.6 ms) ran at
// iteration 0's first allocations while the device had a layer's work
// queued, and went on after the device was idle. Credited whole, it left
// 0.04 ms of the 8.8 ms guess at the first hint (not refuted: Note [A pause
// the poll refutes] drops only a credit that says the iteration is done),
// the hint took no minor and the next collected two iterations'
// temporaries (1.80x the oracle's peak). The rest of the iteration was
// queued after the pause: the device ran none of it meanwhile. On the fake
// clock the set-up's minors take 9 ms, its last one 7 ms (8 ms predicted):
// credited, 1 ms of lag at the first hint and no minor; now the guess.
TEST(LagSchedule, APauseTheDeviceOutlastedLeavesTheGuess) {
  gcp::policy_options po;
  po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
  world w("pressure", 8192 * MiB, 6144 * MiB, po);
  w.gc.minor_seconds = 9 * ms;
  build_model(w);
  w.gc.minor_seconds = 7 * ms;
  const int before = w.gc.minors;
  std::vector<int> kept{w.make(512 * MiB)};  // the rest of the set-up, under the early threshold
  ASSERT_EQ(w.gc.minors, before);
  w.clock.advance(0.05 * ms);
  w.dev.launch(0.2 * ms);  // iteration 0's first layer; its allocations: the set-up's last minor, 7 ms
  for (int k = 0; k < 64 && w.gc.minors == before; ++k) kept.push_back(w.make(4 * MiB));
  ASSERT_EQ(w.gc.minors, before + 1) << "an early minor at an allocation, priced at the set-up's";
  for (int id : kept) w.gc.drop(id);
  w.dev.launch(5.3 * ms);               // the rest of the iteration, queued after it
  w.clock.advance(0.5 * ms);
  w.policy->iteration();
  EXPECT_EQ(w.gc.minors, before + 2) << "the first hint's minor: the device runs the iteration";
}

// Note [The device's lag]: a sync every 8 iterations drains the device's
// queue, so a hint's lag grows from ~0 by the device's time per iteration
// less the host's (5.5 - 0.5 ms) and is gone at the next sync. A 26 ms minor
// (a 1 GiB host heap's, bench/RESULTS.md session 24) fits once per 8-iteration
// window: the hidden-only bound is the live set plus one window's young bytes
// (64 + 8 x 32 MiB). After the start-up the loop holds that bound with its
// minors hidden: 320 MiB, 37 minors in 300 iterations, 0.0 ms exposed, wall
// 1.0015x the device's (on the H100 of session 24: 4.46x the oracle's peak
// against this bound's 4.48x).
TEST(LagSchedule, ASyncEvery8HidesOneLongMinorPerWindow) {
  gcp::policy_options po;
  po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
  world w("pressure", 8192 * MiB, 6144 * MiB, po);
  w.gc.minor_seconds = 9 * ms;
  build_model(w);
  w.gc.minor_seconds = 26 * ms;
  w.gc.minor_seconds_per_young_mib = 0.005 * ms;
  loop_shape start = h100_loop(96, 8);  // the start-up (whole windows): its peak is early_peak
  start.steady_from = start.iterations;
  run_loop(w, start);
  const gcp::collection_stats g0 = w.stats();
  const double wall0 = w.policy->wall_seconds();
  loop_shape s = h100_loop(300, 8);
  run_loop(w, s);
  const gcp::collection_stats g = w.stats();
  const double wall = w.policy->wall_seconds() - wall0;
  const double exposed = g.exposed_gc_seconds - g0.exposed_gc_seconds;
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  std::printf("steady peak %zu MiB, minors %llu, exposed %.1f ms of %.1f ms (device %.1f ms)\n", w.steady_peak / MiB,
              static_cast<unsigned long long>(minors(g) - minors(g0)), exposed * 1e3, wall * 1e3,
              300 * 8 * 0.6875);
  EXPECT_LE(w.steady_peak, 64 * MiB + 8 * 32 * MiB);
  EXPECT_GE(minors(g) - minors(g0), 300u / 8 - 2) << "fewer minors than one per window";
  EXPECT_LE(exposed, 0.005 * wall);
  EXPECT_LE(wall, 1.01 * 300 * 8 * 0.6875 * ms);
}

// Note [The loop's first sync learns its minor]: Node on the host backend
// (bench/RESULTS.md, session 22): V8's first scavenges, while the program
// set up, took 4.6-5.6 ms and found garbage; the loop's took 0.4-0.7 ms.
// Priced at the set-up's, the loop (CPU-bound: every sync finds the device
// idle, so no try) let its young bytes run to the headroom (10.25 MiB under
// a 12 MiB soft limit) before its first minor: 6x the oracle's peak, where
// the loop's own minor asks for ~5.5 MiB. Here the set-up's minors take
// 5 ms and find its temporaries, the loop's 0.45 ms (~600 MiB/s of young
// bytes: the budget's 5.5 MiB).
TEST(LagSchedule, AnIdleLoopsFirstSyncLearnsItsOwnMinor) {
  gcp::policy_options po;
  po.verbose = std::getenv("GCP_TEST_VERBOSE") != nullptr;
  world w("pressure", 16 * MiB, 12 * MiB, po);
  w.gc.minor_seconds = 5 * ms;
  for (int m = 0; m < 12; ++m) {  // the model, kept: 768 KiB
    w.clock.advance(0.2 * ms);
    w.make(MiB / 16);
  }
  for (int m = 0; m < 64 && minors(w.stats()) < 2; ++m) {  // the set-up's temporaries, until two minors
    w.clock.advance(0.2 * ms);
    w.gc.drop(w.make(MiB / 4));
  }
  ASSERT_EQ(minors(w.stats()), 2u) << "the set-up is not the one this test is about";
  w.gc.minor_seconds = 0.45 * ms;
  loop_shape s;
  s.iterations = 300;
  s.bytes = MiB / 4;
  s.host_s = 0.4 * ms;
  s.device_s = 0.01 * ms;
  s.host_computes = true;
  s.steady_from = 100;
  run_loop(w, s);
  SCOPED_TRACE(gcp::to_text(w.alloc.stats()));
  print_peaks(w);
  EXPECT_LE(w.early_peak, 9 * MiB);
  EXPECT_LE(w.steady_peak, 9 * MiB);
  EXPECT_LE(w.stats().exposed_gc_seconds, 0.06 * w.policy->wall_seconds());
  EXPECT_EQ(w.alloc.stats().ooms, 0u);
}
