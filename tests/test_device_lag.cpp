// The device's lag (Note [The device's lag], core/src/device_lag.hpp) on the
// fake clock and device: pending iterations, the guess before the first
// sync, the pause credit, the windows that measure the device's time. The
// decisions that read it are in test_decide.cpp.
#include <gtest/gtest.h>

#include "decide_support.hpp"
#include "device_lag.hpp"
#include "fake_runtime.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;
namespace d = gcpressure::detail;

using gcp_decide::ms;

// Note [The device's lag]: (pending - 1) x the device's time per iteration,
// measured at syncs that waited.
TEST(DeviceLag, PendingIterationsTimesTheDevicesTimePerIteration) {
  gcp_test::fake_clock clock;
  gcp_test::fake_device dev(clock, 64 * MiB);
  d::device_lag lag;
  // One iteration queued, the time per iteration unknown: no lag counted
  // (it may be nearly done).
  dev.launch(5 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_EQ(lag.lag(clock.now()), 0.0);
  EXPECT_TRUE(lag.possible());
  auto ev = dev.record(nullptr);
  dev.synchronize(ev);
  dev.release(ev);
  lag.synced(clock.now(), true, clock.now());  // the first: from the first hint
  EXPECT_NEAR(lag.per_hint(), 5 * ms, 1e-9);
  // Eight iterations of 5 ms queued in 0.8 ms of host time, then a sync.
  for (int i = 0; i < 8; ++i) {
    dev.launch(5 * ms);
    clock.advance(0.1 * ms);
    lag.hint(dev, nullptr, clock.now());
  }
  ev = dev.record(nullptr);
  dev.synchronize(ev);
  dev.release(ev);
  lag.synced(clock.now(), true, clock.now());
  EXPECT_NEAR(lag.per_hint(), 5 * ms, 1e-9);
  for (int i = 0; i < 8; ++i) {
    dev.launch(5 * ms);
    clock.advance(0.1 * ms);
    lag.hint(dev, nullptr, clock.now());
  }
  EXPECT_TRUE(lag.possible());
  // Note [The oldest iteration's rest]: seven whole iterations, and of the
  // first (queued from the sync's end, 0.8 ms ago) at least 4.2 ms: exactly
  // the device's 40 ms of work less the 0.8 ms done.
  EXPECT_NEAR(lag.lag(clock.now()), 7 * 5 * ms + 4.2 * ms, 1e-9);
  clock.advance(12 * ms);  // the device finished two iterations meanwhile
  EXPECT_EQ(lag.pending(), 8u);
  // The third started after the last poll (12 ms ago): nothing of it counted.
  EXPECT_NEAR(lag.lag(clock.now()), 5 * 5 * ms, 1e-9);
  EXPECT_EQ(lag.pending(), 6u);
  // After a sync, the first hint: one iteration queued, nearly all of it left.
  ev = dev.record(nullptr);
  dev.synchronize(ev);
  dev.release(ev);
  lag.synced(clock.now(), true, clock.now());
  dev.launch(5 * ms);
  clock.advance(0.3 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_NEAR(lag.lag(clock.now()), lag.per_hint() - 0.3 * ms, 1e-9);
  clock.advance(lag.per_hint());  // past its whole time: none left counted
  EXPECT_EQ(lag.lag(clock.now()), 0.0);
  // A sync that did not wait (the host was the bottleneck) teaches nothing.
  clock.advance(100 * ms);
  lag.synced(clock.now(), false, clock.now());
  EXPECT_NEAR(lag.per_hint(), 5 * ms, 1e-9);
  EXPECT_EQ(lag.lag(clock.now()), 0.0);
}

// Note [The next iteration is queued after the hint]: the device's time
// measured (5 ms), a 5.4 ms minor at a hint, longer than the device's
// iteration; the next iteration is queued after it, in 0.3 ms. At the next
// hint its event is the only one pending and it has run at most 0.3 ms:
// 5 - 0.3 ms are left (counted from the first hint's event: 0).
TEST(DeviceLag, TheNextIterationIsQueuedAfterTheHintsCollection) {
  gcp_test::fake_clock clock;
  gcp_test::fake_device dev(clock, 64 * MiB);
  d::device_lag lag;
  dev.launch(5 * ms);
  lag.hint(dev, nullptr, clock.now());
  auto ev = dev.record(nullptr);
  dev.synchronize(ev);
  dev.release(ev);
  lag.synced(clock.now(), true, clock.now());
  ASSERT_NEAR(lag.per_hint(), 5 * ms, 1e-9);
  dev.launch(5 * ms);
  clock.advance(0.3 * ms);
  lag.hint(dev, nullptr, clock.now());
  clock.advance(5.4 * ms);  // the hint's minor
  lag.hint_ended(clock.now());
  dev.launch(5 * ms);
  clock.advance(0.3 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_NEAR(lag.lag(clock.now()), 4.7 * ms, 1e-9);
  lag.hint_ended(clock.now());
  lag.hint_ended(clock.now() + 1);  // only the hint's own event moves
  EXPECT_NEAR(lag.lag(clock.now()), 4.7 * ms, 1e-9);
  // The hint's event polled away during its own minor (the device finished
  // meanwhile): nothing pending is touched (ASan: a use after free once),
  // and the next iteration counts from the hint's end.
  dev.launch(5 * ms);
  clock.advance(0.3 * ms);
  lag.hint(dev, nullptr, clock.now());
  clock.advance(20 * ms);  // the hint's minor outlasts everything queued
  EXPECT_EQ(lag.lag(clock.now()), 0.0);
  ASSERT_EQ(lag.pending(), 0u);
  lag.hint_ended(clock.now());
  dev.launch(5 * ms);
  clock.advance(0.3 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_NEAR(lag.lag(clock.now()), 4.7 * ms, 1e-9);
}

// Note [The guess is what a queued iteration leaves]: before a sync
// measured the device's time, one iteration queued in 0.5 ms behind an
// idle device leaves the whole guess at its hint (5.5 - 0.5 ms when the
// guess was counted from when the host began queueing, as it was, so a
// 5.5 ms minor never fitted), and the guess less the time since its hint
// later. This holds for the run's first hint too, nothing having been
// seen done before it.
TEST(DeviceLag, AGuessIsTheWorkLeftWhenTheHostHasQueuedAnIteration) {
  gcp_test::fake_clock clock;
  gcp_test::fake_device dev(clock, 64 * MiB);
  clock.advance(1.0);  // the process's set-up
  d::device_lag lag;
  dev.launch(5.5 * ms);
  clock.advance(0.5 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_NEAR(lag.lag(clock.now(), 5.5 * ms), 5.5 * ms, 1e-9);
  clock.advance(2 * ms);
  EXPECT_NEAR(lag.lag(clock.now(), 5.5 * ms), 3.5 * ms, 1e-9);
  // The hint's minor outlasts the device's work; the next iteration is
  // queued after it in 0.5 ms: the whole guess again.
  clock.advance(10 * ms);
  EXPECT_EQ(lag.lag(clock.now(), 5.5 * ms), 0.0);
  lag.hint_ended(clock.now());
  dev.launch(5.5 * ms);
  clock.advance(0.5 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_NEAR(lag.lag(clock.now(), 5.5 * ms), 5.5 * ms, 1e-9);
  // Guessing stopped (Note [A guess before the first sync]): no lag.
  EXPECT_EQ(lag.lag(clock.now(), 0), 0.0);
  // A host that collected 4 ms while it queued the next iteration gave the
  // device that long: 1.5 ms of the guess left at its hint. A collection at
  // the hint (before hint_ended) is not the next iteration's.
  lag.hint_ended(clock.now());
  clock.advance(10 * ms);
  dev.launch(5.5 * ms);
  clock.advance(0.2 * ms);
  lag.host_paused(4 * ms);
  clock.advance(4 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_NEAR(lag.lag(clock.now(), 5.5 * ms), 1.5 * ms, 1e-9);
  clock.advance(10 * ms);
  EXPECT_EQ(lag.lag(clock.now(), 5.5 * ms), 0.0);
  lag.host_paused(3 * ms);  // the hint's minor
  lag.hint_ended(clock.now());
  dev.launch(5.5 * ms);
  clock.advance(0.5 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_NEAR(lag.lag(clock.now(), 5.5 * ms), 5.5 * ms, 1e-9);
  // Once a sync measured the device's time, the rest is counted from when
  // the host began queueing (Note [The oldest iteration's rest]).
  auto ev = dev.record(nullptr);
  dev.synchronize(ev);
  dev.release(ev);
  lag.synced(clock.now(), true, clock.now());
  dev.launch(5.5 * ms);
  clock.advance(0.5 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_NEAR(lag.lag(clock.now(), 50 * ms), lag.per_hint() - 0.5 * ms, 1e-9);
}

// Note [A pause the poll refutes]: the H100's first window at a 256 MiB
// host heap, a sync every 8. The set-up's collections (the device busy
// copying weights) and its last minor, at iteration 0's first allocation
// with little of the iteration queued, are credited as time the device ran
// the iteration: 27 ms against a 5.5 ms guess, "done". The poll at the hint
// finds the iteration still running (the rest of it was queued after the
// minor): the credit is dropped and the guess stands. A minor at the
// iteration's end lets the device finish: the poll finds it done, no lag.
TEST(DeviceLag, APauseThePollRefutesIsNotCredited) {
  gcp_test::fake_clock clock;
  gcp_test::fake_device dev(clock, 64 * MiB);
  clock.advance(1.0);
  d::device_lag lag;
  for (int i = 0; i < 3; ++i) {  // set-up minors while the device copies
    dev.launch(6 * ms);
    lag.host_paused(5.5 * ms);
    clock.advance(5.5 * ms);
  }
  dev.launch(0.2 * ms);  // iteration 0's first layer, then the set-up's last minor
  lag.host_paused(5.4 * ms);
  clock.advance(5.4 * ms);
  dev.launch(5.3 * ms);  // the rest of iteration 0, queued after it
  clock.advance(0.5 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_NEAR(lag.lag(clock.now(), 5.5 * ms), 5.5 * ms, 1e-9) << "the device still runs the iteration";
  clock.advance(1 * ms);
  EXPECT_NEAR(lag.lag(clock.now(), 5.5 * ms), 4.5 * ms, 1e-9);
  // A minor at the end of the next iteration: the device finishes it meanwhile.
  clock.advance(10 * ms);
  lag.hint_ended(clock.now());
  dev.launch(5.5 * ms);
  clock.advance(0.5 * ms);
  lag.host_paused(5.4 * ms);
  clock.advance(5.4 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_EQ(lag.lag(clock.now(), 5.5 * ms), 0.0) << "the poll finds it done";
}

// Before any sync measured D, the oldest pending iteration's running time
// is the estimate: a host 8 iterations ahead of a device still in its first.
TEST(DeviceLag, BeforeTheFirstSyncTheRunningIterationBoundsTheLag) {
  gcp_test::fake_clock clock;
  gcp_test::fake_device dev(clock, 64 * MiB);
  d::device_lag lag;
  const double t0 = clock.now();
  for (int i = 0; i < 8; ++i) {
    dev.launch(5 * ms);
    clock.advance(0.1 * ms);
    lag.hint(dev, nullptr, clock.now());
  }
  EXPECT_EQ(lag.per_hint(), 0.0);
  // The first was queued by t0 + 0.1 ms and is still running at t0 + 0.8 ms.
  EXPECT_NEAR(lag.lag(clock.now()), 7 * 0.7 * ms, 1e-9);
  clock.advance_to(t0 + 2.8 * ms);
  EXPECT_NEAR(lag.lag(clock.now()), 7 * 2.7 * ms, 1e-9);
  // The first is done at t0 + 5 ms, seen at t0 + 6 ms: the second has run
  // at least 0 ms then, 2 ms at t0 + 8 ms.
  clock.advance_to(t0 + 6 * ms);
  EXPECT_EQ(lag.lag(clock.now()), 0.0 * 6);
  clock.advance_to(t0 + 8 * ms);
  EXPECT_NEAR(lag.lag(clock.now()), 6 * 2 * ms, 1e-9);
}

// Note [A guess before the first sync]: until a sync waited, a guess for the
// device's time per iteration stands in for it (the running bound alone
// grows at the host's pace); once measured, the guess is ignored.
TEST(DeviceLag, AGuessStandsInForTheTimePerIterationUntilASyncMeasuresIt) {
  gcp_test::fake_clock clock;
  gcp_test::fake_device dev(clock, 64 * MiB);
  d::device_lag lag;
  for (int i = 0; i < 3; ++i) {
    dev.launch(5 * ms);
    clock.advance(0.1 * ms);
    lag.hint(dev, nullptr, clock.now());
  }
  EXPECT_FALSE(lag.measured());
  EXPECT_NEAR(lag.lag(clock.now()), 2 * 0.2 * ms, 1e-9);  // the running bound
  // Two iterations at the guess and the oldest's rest: the guess less the
  // 0.2 ms since its hint (Note [The guess is what a queued iteration leaves]).
  EXPECT_NEAR(lag.lag(clock.now(), 2 * ms), 2 * 2 * ms + 1.8 * ms, 1e-9);
  clock.advance(3 * ms);  // the running bound passes the guess; the rest is spent
  EXPECT_NEAR(lag.lag(clock.now(), 2 * ms), 2 * 3.2 * ms, 1e-9);
  auto ev = dev.record(nullptr);
  dev.synchronize(ev);
  dev.release(ev);
  lag.synced(clock.now(), true, clock.now());
  EXPECT_TRUE(lag.measured());
  for (int i = 0; i < 3; ++i) {
    dev.launch(5 * ms);
    clock.advance(0.1 * ms);
    lag.hint(dev, nullptr, clock.now());
  }
  // Two whole iterations and the rest of the first (queued from the sync's
  // end, 0.3 ms ago); the guess is ignored.
  EXPECT_NEAR(lag.lag(clock.now(), 50 * ms), 3 * lag.per_hint() - 0.3 * ms, 1e-9);
}

// Note [The device's time is the fastest window's]: a window the host
// stretched with its own collections (the device idle meanwhile) does not
// raise the time per iteration; the fastest of the last eight windows is it.
TEST(DeviceLag, AWindowTheHostStretchedDoesNotRaiseTheDevicesTime) {
  gcp_test::fake_clock clock;
  gcp_test::fake_device dev(clock, 64 * MiB);
  d::device_lag lag;
  const auto window = [&](double host_pause) {
    for (int i = 0; i < 8; ++i) {
      dev.launch(5 * ms);
      clock.advance(0.1 * ms);
      lag.hint(dev, nullptr, clock.now());
    }
    clock.advance(host_pause);  // the host collects; the device may go idle
    dev.launch(1e-6);
    auto ev = dev.record(nullptr);
    dev.synchronize(ev);
    dev.release(ev);
    lag.synced(clock.now(), true, clock.now());
  };
  window(0);
  EXPECT_NEAR(lag.per_hint(), 5 * ms, 0.1 * ms);
  window(80 * ms);  // 8 x 5 ms of device work, then 40 ms more of host time
  EXPECT_NEAR(lag.per_hint(), 5 * ms, 0.1 * ms);
  for (int k = 0; k < 8; ++k) window(80 * ms);  // the fast window has aged out
  EXPECT_GT(lag.per_hint(), 9 * ms);
}

// A window ends when the device was done, not when a sync that collected
// past the device's end returned: collections at every sync do not make the
// device look slower (they did: 12 ms minors at each sync of a 4.8 ms
// iteration read as a 12.4 ms device, and the next hint's lag hid them).
TEST(DeviceLag, AWindowEndsWhenTheDeviceWasDoneNotWhenTheSyncReturned) {
  gcp_test::fake_clock clock;
  gcp_test::fake_device dev(clock, 64 * MiB);
  d::device_lag lag;
  for (int k = 0; k < 10; ++k) {
    dev.launch(4.8 * ms);
    clock.advance(0.4 * ms);
    lag.hint(dev, nullptr, clock.now());
    auto ev = dev.record(nullptr);
    dev.synchronize(ev);  // the device is done here...
    dev.release(ev);
    const double done = clock.now();
    clock.advance(7.6 * ms);  // ...and a minor at the sync runs on to 12 ms
    lag.synced(clock.now(), true, done);
  }
  EXPECT_NEAR(lag.per_hint(), 4.8 * ms, 0.41 * ms);
  // The next hint: the rest of one iteration, not of a 12 ms one.
  dev.launch(4.8 * ms);
  clock.advance(0.4 * ms);
  lag.hint(dev, nullptr, clock.now());
  EXPECT_LT(lag.lag(clock.now()), 4.8 * ms);
}
