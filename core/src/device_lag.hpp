// The device's lag behind the host (Note [The device's lag]): internal to
// core/src, used by pressure_policy.cpp and its tests.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <deque>

#include "gcpressure/resource.hpp"

namespace gcpressure {

namespace detail {

// Note [The device's lag]
// A loop that synchronizes every K iterations leaves the host up to K
// iterations ahead of the device: a collection run then costs the user
// nothing while it fits in the device work still queued. The policy records
// an event on the device's stream at every iteration hint. At a decision
// point the events still pending say how many iterations of work are queued;
// the oldest pending one is being worked on (it may be nearly done), the
// others are whole, so
//   lag ~ (pending - 1) x max(D, running),
// D being the device's time per iteration, measured at syncs that waited
// (the device was the bottleneck): the time between two sync ends over the
// hints between them (before the first sync, from the first hint); and
// `running` how long the oldest pending iteration has run at least (since
// the previous one was seen done, or since it was queued), which gives the
// lag before the first sync measured anything: a host 8 iterations ahead of
// a device still in its first one. The bound is re-polled at each decision, so the time
// a collection takes is seen in the next one (fewer pending events). A loop
// that syncs every iteration has one pending event at most: lag 0 between
// syncs, and the sync's slack (policy.cpp) is its lag there.
//
// Note [A guess before the first sync]
// Until a sync has waited, `running` is the only bound, and it grows at the
// host's pace, not the device's: a host that queues an iteration in 0.1 ms
// sees 0.06 ms of lag with two iterations queued behind a device that takes
// 6 ms each, and a loop that syncs every K iterations made K iterations of
// garbage before its first collection (the host backend: 16 MiB where the
// oracle peaks at 4). So the policy may pass a guess for the time per
// iteration until it is measured: the predicted pause of a minor, that is
// "a minor fits in one queued iteration" (and at a busy sync, the slack:
// the sync's own estimate is 0 until a sync waited). A wrong guess costs an
// exposed minor, which the probe measures (Note [Exposed GC time]); the
// policy then halves it, "a minor fits in two iterations", and so on, four
// times, then stops guessing. Stopping at once (the first version) left a
// loop whose minor outlasts an iteration with only `running`: on the H100 at
// a 1 GiB host heap (16 ms minors, 5.5 ms iterations, a sync every 8) the
// first window's second minor came 9 iterations after the refuted one, at
// 2.25 GiB of young bytes: the run's peak, 2.80 GiB, 5.0x the oracle's
// (the matrix's median 5.37x; bench/RESULTS.md 2026-12-06). Halving gives "three iterations" after two refutations; on the
// fake clock (16 ms minors, 4.8 ms iterations) the first window's peak went
// from 10 iterations of temporaries to 6 at K = 8 (7 since the guess is
// tested at the first hint: Note [The guess is what a queued iteration
// leaves]), and from 3 to 2 at K = 1 with 4 ms minors, where the first busy
// sync had no estimate of its slack.
// Not thread-safe: used under the policy's collection lock.
class device_lag {
 public:
  static constexpr std::size_t capacity = 64;  // more pending: at least 63 x D anyway

  ~device_lag() { clear(); }

  // An iteration hint at host time `now`: records an event on `stream`.
  // Errors (a stream gone) are ignored: the lag is then unknown (0).
  void hint(stream_ops& ops, stream_ref stream, double now) {
    recorded_ = false;
    if (hints_since_sync_++ == 0) first_hint_ = now;
    if (pending_.size() >= capacity) return;
    try {
      pending_.push_back(entry{&ops, ops.record(stream), now, now, paused_});
      recorded_ = true;
    } catch (...) {
    }
    paused_ = 0;
  }
  // The host collected for `seconds` while it queued the iteration after
  // the newest hint, and the device ran queued work all that time (Note
  // [The guess is what a queued iteration leaves], Note [A pause the device
  // outlasted is not credited]).
  void host_paused(double seconds) noexcept { paused_ += seconds; }
  // Note [The next iteration is queued after the hint]
  // The hint recorded by hint() returned to the loop at `now`: the next
  // iteration's work was queued after this, not after the event (the
  // hint's own collections ran in between). Counted from the event, a
  // minor at the first hint that outlasted the device's iteration made the
  // next hint see no lag (its predecessor done, "queued" 6 ms ago, the
  // guess 4.7 ms all used up) while a whole iteration was queued: on the
  // H100 at a 256 MiB host heap, a sync every 8 iterations, that hint took
  // no minor and the first window held two iterations of temporaries
  // (1.02 GiB, 1.80x the oracle's peak; bench/RESULTS.md, session 13).
  // Its event may be done and polled away already (the hint's own minor
  // outlasted the device's work): then nothing is pending and the next
  // iteration's work is queued after `now` (queued_after_).
  void hint_ended(double now) noexcept {
    paused_ = 0;  // the hint's own collections came before the next iteration
    if (pending_.empty()) queued_after_ = std::max(queued_after_, now);
    else if (recorded_) pending_.back().at = now;  // the newest: only all of them pop it
    recorded_ = false;
  }

  // A sync ended at `now`, the device done with everything queued before
  // it (at `done_at` <= now, when a waited sync saw it finish; collections
  // at the sync may have run past it); `waited`: the device was still busy
  // when the host got there.
  void synced(double now, bool waited, double done_at) {
    // Before the first sync ended, the window starts at its first hint
    // (the host's first iteration is short next to the device's). A window
    // ends when the device was done: on the fake clock a 12 ms minor run at
    // every sync of a loop whose device takes 4.8 ms an iteration made every
    // window 12.4 ms, the lag of the next hint's iteration 12 ms, and that
    // minor "hidden" there: 602 minors, 97% of wall exposed. It starts when
    // the host could queue again, the last sync's return.
    const double from = last_sync_end_ > 0 ? last_sync_end_ : first_hint_;
    const double end = waited ? std::min(now, done_at) : now;
    // Note [The device's time is the fastest window's]: a window's time per
    // hint is the loop's, and that is the device's only while the host kept
    // it busy; the host's own collections in the window stretch it (on the
    // H200 at a 1 GiB heap, 22 ms minors at hints made the "device" take
    // ~11 ms an iteration, so the lag was doubled and minors taken as hidden
    // were exposed). So the estimate is the fastest of the last windows.
    if (waited && hints_since_sync_ > 0 && end > from) {
      windows_[next_window_++ % windows_.size()] = (end - from) / static_cast<double>(hints_since_sync_);
      per_hint_ = 0;
      for (double w : windows_)
        if (w > 0 && (per_hint_ == 0 || w < per_hint_)) per_hint_ = w;
    }
    // The next window starts when the host queues again: the sync's return.
    last_sync_end_ = done_seen_ = queued_after_ = last_poll_ = now;
    hints_since_sync_ = 0;
    paused_ = 0;
    clear();
  }

  // The device seconds still queued at `now` (polls the events). `guess`:
  // the time per iteration to assume until a waited sync measures it
  // (Note [A guess before the first sync]).
  double lag(double now, double guess = 0) {
    while (!pending_.empty() && done(pending_.front())) {
      pending_.front().ops->release(pending_.front().event);
      // Its successor was queued after its hint and started after it ended,
      // which was after the last poll that saw it pending.
      queued_after_ = std::max(pending_.front().at, last_poll_);
      pending_.pop_front();
      done_seen_ = now;
    }
    last_poll_ = now;  // everything still pending was pending then
    if (pending_.empty()) return 0;
    const double per = per_hint_ > 0 ? per_hint_ : guess;
    // Note [The oldest iteration's rest]
    // The oldest pending iteration was queued after the hint before it (or
    // the sync before it) and started after its predecessor ended (after
    // the last poll that saw that one pending): it has run at most
    // now - queued_after_, so at least per - that is left of it. Without
    // this term a loop that syncs every K iterations saw no lag at the first
    // hint after each sync (one pending event), though the device had a whole
    // iteration queued: at heap 0 on the H200 its minors skipped that hint
    // and held two iterations of temporaries (2.08x the oracle's peak at
    // K = 8, 1.44x at K = 1).
    // Note [The guess is what a queued iteration leaves]
    // Unmeasured, the guess is the device work an iteration leaves queued
    // when the host has queued it (at its hint): "the iteration just queued
    // hides a minor". Counted like a measured time from when the host began
    // queueing, it was always spent by the host's own queueing (0.5 ms of
    // the H100 loop's), so one pending iteration never hid a minor: the
    // first window waited for two. On the H100 at a 256 MiB host heap, a
    // sync every 8 iterations, the second hint saw 3.57 ms of a 4.07 ms
    // guess, took no minor, and the third collected two iterations'
    // temporaries (1.80-1.86x the oracle's peak, at iteration 3, in all six
    // runs at K = 8 of the first call; the true lag was ~5 ms, the minor
    // 2.7 ms; bench/RESULTS.md, session 14).
    // A host that collected while it queued the iteration gave the device
    // that long to run it: the guess less that is left at the hint (a set-up
    // minor inside the first iteration, 4.2 ms, let the device finish it;
    // the hint's minor, taken on the whole guess, was exposed and halved it,
    // and the next minor came three iterations later: 2.30x, session 14).
    const entry& oldest = pending_.front();
    double rest = per_hint_ > 0 ? std::max(0.0, per - (now - queued_after_))
                                : std::max(0.0, guess - oldest.paused - (now - oldest.hinted));
    // Note [A pause the poll refutes]
    // The credit assumes the device ran the iteration while the host
    // collected. A collection at the iteration's start finds little queued:
    // on the H100 (256 MiB host heap, a sync every 8; bench/RESULTS.md
    // session 22) the set-up's last minor (5.4 ms) ran at iteration 0's
    // first allocations, the rest of the iteration was queued after it, and
    // at the hint the credit left 0 of a 5.5 ms guess while the device had
    // ~5 ms queued: no minor there, and the next hint collected two
    // iterations' temporaries (1.80x the oracle's peak). The poll above is
    // the evidence: the iteration is still running, so a credit that says
    // it is done is dropped and the guess stands (if that is wrong, the
    // minor taken on it is exposed and halves the guess). A pause at the
    // iteration's end lets the device finish it: the poll finds it done.
    //
    // Note [A pause the device outlasted is not credited]
    // A credit that leaves a little of the guess is not refuted, and a pause
    // the device outlasted ran none of what was queued after it: the caller
    // (pressure_policy.cpp) passes a pause only while the device is still
    // busy at its end. On the H100 (session 23, 256 MiB, a sync every 8) the
    // set-up's last minor, 8.6 ms at iteration 0's first allocations with a
    // layer queued, left 0.04 ms of the 8.8 ms guess: no minor at the first
    // hint, two iterations' temporaries at the next (1.80x the oracle's peak)
    // (LagSchedule.APauseTheDeviceOutlastedLeavesTheGuess).
    if (per_hint_ <= 0 && rest <= 0 && oldest.paused > 0) rest = std::max(0.0, guess - (now - oldest.hinted));
    if (pending_.size() < 2) return rest;
    // The oldest pending iteration started at the latest when the one before
    // it was seen done (or the device was idle: a sync), or when it was
    // queued: it has run at least this long, and so will the others.
    const double running = now - std::max(done_seen_, pending_.front().at);
    return static_cast<double>(pending_.size() - 1) * std::max(per, running) + rest;
  }

  // The device's time per iteration was at most `ratio` x the estimate
  // (Note [A lag the device did not have], pressure_policy.cpp).
  void scale(double ratio) noexcept {
    for (double& w : windows_) w *= ratio;
    per_hint_ *= ratio;
  }

  // Whether the device's time per iteration is measured (a sync waited).
  bool measured() const noexcept { return per_hint_ > 0; }
  // Whether lag() can be more than 0 now (without polling).
  bool possible() const noexcept { return !pending_.empty(); }
  double per_hint() const noexcept { return per_hint_; }
  std::size_t pending() const noexcept { return pending_.size(); }

 private:
  struct entry {
    stream_ops* ops;
    event_ref event;
    double at;      // when the host went on queueing after its hint (hint_ended)
    double hinted;  // the hint's time
    double paused;  // the host's collections while it queued this iteration
  };
  static bool done(const entry& e) {
    try {
      return e.ops->query(e.event);
    } catch (...) {
      return true;
    }
  }
  void clear() noexcept {
    for (const entry& e : pending_) e.ops->release(e.event);
    pending_.clear();
    recorded_ = false;
  }

  std::deque<entry> pending_;
  std::array<double, 8> windows_{};  // the last windows' seconds per hint (0: none yet)
  std::size_t next_window_ = 0;
  double per_hint_ = 0, last_sync_end_ = 0, first_hint_ = 0;
  double done_seen_ = 0;  // when the last event was seen done (or a sync ended)
  // The host time at which the oldest pending iteration's work began to be
  // queued: the hint before it, or the last sync's end (0: unknown).
  static constexpr double k_never = -1e300;
  double queued_after_ = k_never;
  double last_poll_ = k_never;  // the last lag() call (or sync end)
  std::size_t hints_since_sync_ = 0;
  double paused_ = 0;  // the host's collections since the newest hint ended
  bool recorded_ = false;  // the last hint() recorded pending_.back()
};

}  // namespace detail

}  // namespace gcpressure
