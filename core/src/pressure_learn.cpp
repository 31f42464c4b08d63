// The "pressure" policy's learning side: what collections teach it, and when
// a whole-heap cycle starts. Its events are in pressure_policy.cpp.
//
// Note [Generations of device bytes]
// After a collection every surviving handle is old: in a generational
// collector (Boehm in incremental mode) a minor collection will not free it
// again, only a whole-heap cycle will. So the policy keeps
//   young  = device bytes allocated since the last collection,
//   old    = device bytes live right after the last collection,
//   floor  = device bytes live right after the last whole-heap collection
//            (the policy's or the runtime's own),
// and treats old - floor as promoted bytes that may be garbage. Budgets are
// sized from the floor, never from old: bytes only suspected to be live must
// not buy a larger young budget (that was the climbing footprint of the first
// version: each minor promoted some garbage, the budget grew with it, and the
// suspected garbage never reached the budget that would start a cycle).
//
// Note [Whole-heap cycles pay for the young bytes they hold]
// While a whole-heap cycle runs in slices no minor collection can run, so the
// young bytes allocated meanwhile stay. A cycle is worth starting when the
// suspected garbage is at least what it will hold up: the allocation rate x
// the cycle's measured wall time (and at least one young budget). It runs in
// slices in the device's time (synchronize) or paced by the exposed-time
// budget; when memory is needed at once its slices run back to back, which is
// a blocking collection and counted as one (blocking_cycles).
//
// Note [Collections that find nothing]
// In a runtime that frees most blocks itself (CPython and PyTorch: reference
// counting frees a tensor the moment it dies), a minor finds almost nothing:
// the young bytes were gone before it ran. The alloc budget still counted
// them, so the policy collected at its full GC budget for nothing (on the
// H200, 1.2 collections of ~40 us + ~40 us of probing per 2 ms PyTorch step,
// each reclaiming 0 bytes). So a minor that reclaims less than 1/16 of the
// young bytes it was run for, while half of them or more are gone, doubles
// that device's alloc budget, up to 16x; one that finds more resets it; one
// that finds nothing while most young bytes survive leaves it (Boehm's case:
// garbage a minor cannot find is promoted, old grows, whole-heap cycles find
// it). A device in the stretch
// asks for a whole-heap cycle only when pressed: none of its young bytes
// were promoted, so its old bytes are live (on the H200 the first cycle, a
// ~200 ms gc.collect in a process that imported torch, found nothing). The
// headroom bounds the stretch: memory that is needed is collected.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "gcpressure/config.hpp"
#include "gcpressure/policy.hpp"
#include "pressure_model.hpp"
#include "pressure_policy.hpp"

namespace gcpressure::detail {

// Note [The budget starts with the loop]
// The exposed budget is a share of the loop's wall time: it starts at the
// first hint or sync, and the collections before it (a program's set-up,
// allocating what stays live) are reported, not charged. Charged, they
// starved the loop's first iterations: on the H100 (256 MiB host heap, a
// sync every iteration; bench/RESULTS.md, 2026-12-06 session 15) five
// set-up minors that found nothing (5-9 ms each, exposed: no lag yet) were
// 30-41 ms of debt against a few ms of loop wall, so the first syncs
// counted no lag (usable_lag) and waited for the budget rule's young bytes:
// 2.5-7.5 GiB, 10-30 iterations of temporaries, the repetitions' peaks
// (4.5-14.7x the oracle's). A program that never hints nor syncs keeps
// the whole run's share.
void pressure_policy::start_budget() {
  if (loop_started_ >= 0) return;
  loop_started_ = now();
  minor_cost_.loop_begins();  // Note [The loop's first sync learns its minor]
  exposed_before_loop_ = charged_exposed();
  bucket_started_ = false;  // Note [A budget of one second]: it starts with the loop, two pauses in hand
}

double pressure_policy::budget_exposed() const noexcept {
  return charged_exposed() - (loop_started_ >= 0 ? exposed_before_loop_ : 0);
}

double pressure_policy::budget_wall() const noexcept {
  return loop_started_ >= 0 ? now() - loop_started_ : wall_seconds();
}

// Note [A budget of one second]
// What a decision may still spend (usable_lag) is a bucket: it fills at
// gc_budget seconds per second of the loop's wall and holds at most a
// second's worth (budget_horizon_seconds); it starts with two predicted
// pauses. Counted from the loop's start with nothing in hand, the first
// exposed minor left the loop in debt for twenty times its length (a 6 ms
// minor on the guess, charged whole: the next 22 syncs of a 5.5 ms
// iteration counted no lag and collected at the budget rule's 700 MiB of
// young bytes; LagSchedule.SetUpCollectionsDoNotStarveTheLoopsFirstSyncs).
// Starting full, a short loop overspent by up to a second's budget
// (LagSchedule.AWrongGuessOfTheLagCostsAFewExposedMinors: 84 ms exposed in
// 0.3 s). A cap of two pauses was too small for a loop whose exposed and
// hidden minors alternate: the surplus overflowed between two exposed
// minors (FutileCollections.GarbageAfterAFutileStretchIsCollectedAsBefore:
// 3x the footprint). A bucket begun before the loop (the set-up's
// decisions) is begun again at its start: kept, the surplus a long set-up
// earned became debt once the loop's own count started from zero (2 s of
// loading: the whole loop starved, 865 MiB against 225). `forgiven_` is the surplus the cap took away (the
// running maximum of surplus - cap, from surplus - the start's two
// pauses); the decision sees it as spent.
double pressure_policy::budget_spent(double pause) {
  const double spent = budget_exposed(), surplus = opts_.gc_budget * budget_wall() - spent;
  if (pause <= 0) return spent;  // no cost known: no decision reads it (usable_lag)
  const double cap = opts_.gc_budget * tuning_.budget_horizon_seconds;
  if (!bucket_started_) forgiven_ = surplus - std::min(cap, 2 * pause);
  bucket_started_ = true;
  forgiven_ = std::max(forgiven_, surplus - cap);
  return spent + forgiven_;
}

double pressure_policy::exposed_fraction() const {
  const double wall = budget_wall();
  return wall > 0 ? budget_exposed() / wall : 0;
}

// --verbose: why an allocation-time collection was taken, with every term
// of the model (Note [One decision over an explicit model]).
void pressure_policy::explain_early(const detail::pressure_snapshot& s, const detail::pressure_decision& dec) const {
  const detail::device_snapshot& d = s.dev;
  std::fprintf(stderr,
               "gcpressure[pressure]: early on device %zu: young %s, threshold %s (floor %s, predicted minor "
               "%.1f us, lag %.1f us, rate %s/s, gc budget %.2f, yield %.2f, futile x%.0f, "
               "headroom %s)%s\n",
               s.device, format_bytes(d.young).c_str(), format_bytes(dec.threshold).c_str(),
               format_bytes(static_cast<std::size_t>(
                                std::max(opts_.growth * static_cast<double>(d.floor),
                                         static_cast<double>(opts_.min_young_bytes))))
                   .c_str(),
               s.pause * 1e6, s.lag * 1e6, format_bytes(static_cast<std::size_t>(d.rate)).c_str(),
               opts_.gc_budget, d.yield, d.futile,
               format_bytes(static_cast<std::size_t>(detail::headroom(d, tuning_))).c_str(),
               dec.headroom ? ", over the headroom" : dec.hidden ? ", hidden in the lag" : "");
}

// Other tenants: one driver read per device, which also re-resolves the
// allocator's "%avail" limits (Note [Limits of available memory]), so the
// soft limit the budgets use shrinks with the memory others leave.
void pressure_policy::refresh_device() {
  refreshed_at_ = now();
  for (std::size_t i = 0; i < device_count(); ++i) {
    device_state& d = dev_[i];
    try {
      d.device_free.store(device(i).refresh_limits().free, std::memory_order_relaxed);
      d.reserved_at_refresh.store(device(i).reserved_bytes(), std::memory_order_relaxed);
    } catch (...) {
      d.device_free.store(0, std::memory_order_relaxed);
    }
  }
}

double pressure_policy::smooth(double old, double sample) const {
  return old > 0 ? (1 - tuning_.smoothing) * old + tuning_.smoothing * sample : sample;
}

// Note [Quiet moments]: the young bytes allocated between two hints.
void pressure_policy::learn_stretch(std::size_t i, double t) {
  device_state& d = dev_[i];
  const std::size_t young = young_of(i);
  const std::size_t total = young + d.collected_since_quiet;
  const double bytes = static_cast<double>(total > d.young_at_quiet ? total - d.young_at_quiet : 0);
  d.stretch = smooth(d.stretch, bytes);
  d.young_at_quiet = young;
  d.collected_since_quiet = 0;
  learn_rate_at_hint(d, bytes, t);
}

// Note [The allocation rate is per wall second], in a loop that gives
// hints: each stretch between two hints is a sample (bytes over its wall
// seconds), and collections teach the rate no more. What came before the
// first hint (a model built, data loaded: the minors then saw 0.5-0.8
// GiB/s on the H200 against the loop's 46) is dropped at the second: the
// rate is then the first iteration's, where it stayed the set-up's for
// about a second and made the first minors of a loop at a 1 GiB host heap
// come at 1.1, 2.5 and 6 GiB of young bytes instead of ~18 (each 20-28 ms,
// exposed).
void pressure_policy::learn_rate_at_hint(device_state& d, double bytes, double t) {
  if (d.last_hint_at > 0) {
    const double interval = t - d.last_hint_at;
    if (interval > 0) {
      const double keep = d.hints_seen == 1 ? 0.0 : std::exp(-interval / tuning_.rate_horizon_seconds);
      d.rate_bytes = keep * d.rate_bytes + bytes;
      d.rate_seconds = keep * d.rate_seconds + interval;
      d.rate = d.rate_bytes / d.rate_seconds;
    }
  }
  d.last_hint_at = t;
  ++d.hints_seen;
}

// Note [The allocation rate is per wall second]
// The rate prices time in bytes: the budget rule's threshold is the bytes
// allocated while the exposed budget earns a pause (rate x exposed / gc
// budget), and a whole-heap cycle holds rate x its wall time. Both are per
// second of wall, waits included. A loop that syncs every K iterations
// allocates K iterations' bytes in a burst, then waits; averaging the
// per-interval rates of collections taken inside the burst gave the
// burst's rate (467 GiB/s against 46 GiB/s over wall on the H200) and
// priced every whole-heap cycle out. So the rate is a ratio of sums over
// the intervals between collections, each weighed down by exp(-age /
// rate_horizon_seconds, 0.5 s: three windows of a loop that syncs every 32
// iterations of 5 ms): bytes over seconds, whatever the intervals' lengths.
void pressure_policy::learn_rate(const outcome& o) {
  const double interval = now() - last_end_ - o.seconds;
  last_end_ = now();
  if (dev_[0].hints_seen > 1) return;  // hints teach it (learn_rate_at_hint)
  // The first interval starts when the policy was made, before whatever
  // the program did until it allocated (a host heap built, a model
  // loaded): on the H200 it held the rate at 2-28 GiB/s for a second
  // against the loop's 48. It teaches nothing.
  if (!rate_started_) {
    rate_started_ = true;
    return;
  }
  if (interval <= 0) return;
  const double keep = std::exp(-interval / tuning_.rate_horizon_seconds);
  for (std::size_t i = 0; i < o.devices.size(); ++i) {
    device_state& d = dev_[i];
    d.rate_bytes = keep * d.rate_bytes + static_cast<double>(o.devices[i].young_before);
    d.rate_seconds = keep * d.rate_seconds + interval;
    d.rate = d.rate_bytes / d.rate_seconds;
  }
}

// The exposed seconds of the minor that starts now are measured from here
// (Note [A guess before the first sync]); `lag`: the device's queued work
// it starts against, measured (not guessed), 0 if none is known;
// `from_events`: that lag is the events' (Note [The device's lag]), not a
// sync's slack estimate.
void pressure_policy::begin_minor(double guessed, double lag, bool from_events) {
  exposed_at_minor_start_ = charged_exposed();
  exposure_at_minor_start_ = own_exposure();
  lag_at_minor_start_ = lag;
  lag_from_events_ = from_events;
  guess_at_minor_start_ = guessed;
  minor_begun_ = true;
}

// Note [Charging what the lag hid]
// The probe counts a collection during which the device finished as
// exposed whole (Note [Exposed GC time]: an upper bound). A minor that
// starts against L seconds of queued device work exposes at most P - L of
// its P seconds: the device was busy for the first L. So the budget is
// charged min(measured, P - L). The figures reported (stats, JSON) stay
// the probe's upper bound. Without this, every minor at a sync of a loop
// whose minor outlasts the slack (the H200's and H100's 1 GiB host heap:
// 17-20 ms minors against 5.2 ms of slack) was charged whole, and the 5%
// budget bought fewer minors than it pays for (H100, 2026-12-06, 320
// iterations: 4 minors, the first at a sync at 26-28 GiB of young bytes,
// 50.1x the oracle's peak at 1.042x its time; with this 5 minors, the
// first at 21.5-23 GiB, 40.8x at 1.040x; bench/RESULTS.md).
void pressure_policy::charge_minor(const outcome& o, double timed) {
  // A sliced minor finished by a cycle's steps had no begin_minor: its
  // slices are charged as measured.
  if (!std::exchange(minor_begun_, false)) return;
  const double measured = charged_exposed() - exposed_at_minor_start_;
  if (timed >= 0) {  // Note [An overrun minor does not refute the guess]: a guess that stood
    if (measured > timed)
      overcharge_.store(overcharge_.load(std::memory_order_relaxed) + measured - timed, std::memory_order_relaxed);
    return;
  }
  // Note [A lag the device did not have]
  // The probe says the device finished inside a minor whose lag at its
  // start was at least the minor's own length: the lag was overestimated
  // (the device had less than the minor queued), so it bounds nothing: the
  // minor is charged as measured, and the device's time per iteration that
  // gave that lag shrinks by the same ratio (lag < seconds <= L). The
  // estimate of Note [The device's time is the fastest window's] is the
  // loop's own time per hint, and a loop whose minors starve the device
  // stretches every window: on the fake clock (25 ms minors, 5.5 ms
  // iterations, a sync every 8) every minor at a hint ran against a lag of
  // 25.7-32.3 ms that was not there, each was charged nothing, and the loop
  // ran 27% over the device's time (60% before the guess halved).
  if (measured > 0.25 * o.seconds && lag_at_minor_start_ >= o.seconds) {
    if (lag_from_events_)  // a sync's slack estimate corrects itself at every sync
      for (std::size_t j = 0; j < device_count(); ++j) dev_[j].lag.scale(o.seconds / lag_at_minor_start_);
    return;
  }
  const double bound = std::max(0.0, o.seconds - lag_at_minor_start_);
  if (measured <= bound) return;
  overcharge_.store(overcharge_.load(std::memory_order_relaxed) + measured - bound, std::memory_order_relaxed);
  if (opts_.verbose)
    std::fprintf(stderr, "gcpressure[pressure]:   charged %.3f ms of %.3f (lag %.3f ms at its start)\n", bound * 1e3,
                 measured * 1e3, lag_at_minor_start_ * 1e3);
}

// Note [An overrun minor does not refute the guess]
// A minor taken on the guess (Note [A guess before the first sync]) that
// the device did not outlast proves the guess too high only if the queued
// work ran out before the guessed lag. Where the backend times the moment
// the device went idle (Note [Exposed GC time, measured]), the minor's
// hidden part is the work it found queued: at least the guessed lag, and
// the minor itself ran over its price (the loop's first minor, priced by
// the set-up's one), so the guess stands. Halving it there made the next
// hints price the next minor at the overrun's length against half an
// iteration's lag, and skip: on the fake clock (3 ms minors priced by the
// set-up, the loop's first one 7 ms, 5.5 ms iterations, a sync every 8)
// two hints skipped and the start-up held three iterations of
// temporaries, the shape of the H100's 2.27x repetitions at 256 MiB, K = 8
// and 32 (two minors fewer, the peak at iteration 4; bench/RESULTS.md,
// sessions 25-26). A minor that found less than the guess still refutes
// it, also where that iteration was queued at the set-up's pace (the
// H200's traced start-up, session 23). An untimed exposure (the probe's
// bound only) refutes as before. A guess that stands is charged what was
// measured (Note [Charging what the lag hid]): charged whole by the
// probe's bound, such minors (12.6 ms, 0.5 ms of it exposed, on the fake
// clock's 12 ms minors against 5.5 ms iterations, a sync every 8) spent
// the budget the later syncs needed (steady peak 160 -> 224 MiB).
//
// found_queued: the device work the minor in progress found queued, its
// length less its timed exposed part; -1 where the exposure was not timed.
double pressure_policy::found_queued(const outcome& o) const {
  const exposure e = own_exposure();
  if (e.untimed != exposure_at_minor_start_.untimed) return -1;
  return o.seconds - (e.measured - exposure_at_minor_start_.measured);
}

// --verbose: what a minor taken on the guess found, and what became of the
// guess (the start-up's skipped hints follow from it: bench/RESULTS.md,
// session 26). `share`: the guess's share of the pause before this minor;
// `found`: found_queued's.
void pressure_policy::explain_guess(const outcome& o, double share, double found) const {
  char what[64] = "an untimed amount";
  if (found >= o.seconds) std::snprintf(what, sizeof what, "more than %.3f ms queued (hidden)", o.seconds * 1e3);
  else if (found >= 0) std::snprintf(what, sizeof what, "%.3f ms queued", found * 1e3);
  std::fprintf(stderr, "gcpressure[pressure]:   on a guessed lag of %.3f ms: found %s; the guess %s (share %.3g -> %.3g)\n",
               guess_at_minor_start_ * 1e3, what, lag_guess_share_ < share ? "halves" : "stands", share,
               lag_guess_share_);
}

// `loop`: the minor belongs to the loop, and its yield is the loop's (Note
// [Set-up minors teach the cost only]; their futility is not learned
// either way: a set-up keeps its bytes, so none are gone).
void pressure_policy::learn_minor(const outcome& o, bool loop) {
  learn_rate(o);
  // Note [A guess before the first sync]: a minor taken as hidden on the
  // guess that was a quarter exposed or more halves it, unless it found the
  // guessed lag queued (Note [An overrun minor does not refute the guess]).
  constexpr double k_tolerance = 0.9;  // the probe's poll and the clock's reads: not a wrong guess
  const bool guessed = guess_at_minor_start_ > 0;
  const double found = guessed ? found_queued(o) : -1;
  const bool stood = guessed && found >= k_tolerance * guess_at_minor_start_;
  const double share = lag_guess_share_;
  if (guessed && !stood && charged_exposed() - exposed_at_minor_start_ > 0.25 * o.seconds)
    lag_guess_share_ = lag_guess_share_ > 1.0 / 16 ? lag_guess_share_ / 2 : 0;
  if (opts_.verbose && guessed) explain_guess(o, share, found);
  guess_at_minor_start_ = 0;
  charge_minor(o, stood ? std::max(0.0, o.seconds - found) : -1);
  minor_cost_.add(static_cast<double>(o.young_before), o.seconds, std::exchange(probing_, false), loop);
  for (std::size_t i = 0; i < o.devices.size(); ++i) {
    device_state& d = dev_[i];
    const device_outcome& od = o.devices[i];
    // Yield: the share of the young bytes that is gone, whoever freed it
    // (the runtime's own collections free handles too, unseen by
    // `reclaimed`). Smoothed: one minor measured while finalizers were
    // still queued (seen on the H200: 0.5 of 4 GiB found, 15 GiB by the
    // next) must not quadruple the next threshold.
    const std::size_t grew = od.live_after > d.live_after ? od.live_after - d.live_after : 0;
    const std::size_t gone = od.young_before > grew ? od.young_before - grew : 0;
    if (od.young_before > 0 && loop)
      d.yield = (1 - tuning_.smoothing) * d.yield +
                tuning_.smoothing * static_cast<double>(gone) / static_cast<double>(od.young_before);
    if (od.young_before >= opts_.min_young_bytes) {  // Note [Collections that find nothing]
      if (od.reclaimed * 16 >= od.young_before) d.futile = 1.0;
      else if (gone * 2 >= od.young_before) {
        d.futile = std::min(d.futile * 2, tuning_.max_futile_stretch);
        if (opts_.verbose)  // the 52x repetition of session 13 is unexplained: say when this stretches
          std::fprintf(stderr,
                       "gcpressure[pressure]: device %zu: a minor found %s of %s young bytes gone before it ran "
                       "(reclaimed %s): thresholds x%.0f\n",
                       i, format_bytes(gone).c_str(), format_bytes(od.young_before).c_str(),
                       format_bytes(od.reclaimed).c_str(), d.futile);
      }
    }
    d.live_after = od.live_after;
    d.old = od.live_after;  // every survivor is old now
    if (gc_.minor_is_whole_heap()) d.floor = od.live_after;  // and nothing old is garbage
  }
  refresh_device();
}

void pressure_policy::learn_full(const outcome& o) {
  learn_rate(o);
  full_cost_ = smooth(full_cost_, o.seconds);
  full_wall_ = smooth(full_wall_, now() - cycle_started_);
  full_backoff_ = o.reclaimed * 4 < suspect_at_start_ ? std::min(full_backoff_ * 2, tuning_.max_full_backoff) : 1;
  if (opts_.verbose)
    std::fprintf(stderr, "gcpressure[pressure]: whole-heap cycle done: %.3f ms of work in %.3f ms of wall, reclaimed %s of %s suspected\n",
                 o.seconds * 1e3, (now() - cycle_started_) * 1e3, format_bytes(o.reclaimed).c_str(),
                 format_bytes(suspect_at_start_).c_str());
  floor_known_ = true;
  for (std::size_t i = 0; i < o.devices.size(); ++i) {
    dev_[i].live_after = o.devices[i].live_after;
    dev_[i].floor = dev_[i].old = o.devices[i].live_after;
  }
  refresh_device();
}

void pressure_policy::finish_minor(const outcome& o, gc_reason reason) {
  // Note [A floor before the first whole-heap collection]: until one
  // measures it, the floor is what the minors left until the loop began:
  // the first minor at a hint or sync (only what outlives iterations is
  // alive there), or the first that found garbage (half its young bytes
  // gone). Before, minors find the program's set-up, which is live. With
  // 0 instead, the model's weights promoted by the first minors read as
  // 560 MiB of suspected garbage and started a whole-heap cycle in the
  // first iterations (170 ms, exposed, on the H200 at a 256 MiB host
  // heap); with only the minor at a hint setting it, the minors while the
  // model was built (each finding 0 B) started the same cycle before the
  // first hint (run 1 of 2026-12-03: 190 ms, finished back to back).
  bool loop = floor_known_ || reason == gc_reason::quiet_moment;
  for (const device_outcome& od : o.devices)
    loop = loop || (od.young_before >= opts_.min_young_bytes && od.reclaimed * 2 >= od.young_before);
  // Note [Set-up minors teach the cost only]
  // The minors while a program builds its model find nothing (it keeps
  // what it allocates): their cost is a minor's, but their yield (0 B of
  // their young bytes gone) is not the loop's. Learned, it took the yield
  // to 0.5-0.75 before the first loop minor and divided the loop's first
  // threshold by it: on the H100 at a 1 GiB host heap and a sync every
  // iteration (2026-12-06), the first minor at a sync came at 23 GiB of
  // young bytes and the next ones at 20.8, 17.5 and 11.8 GiB as the yield
  // climbed back to 1; the run's peak is the first (bench/RESULTS.md).
  learn_minor(o, loop);
  if (!floor_known_) {
    for (std::size_t i = 0; i < o.devices.size(); ++i)
      dev_[i].floor = std::max(dev_[i].floor, o.devices[i].live_after);
    floor_known_ = loop;
  }
  for (std::size_t i = 0; i < device_count(); ++i) dev_[i].young_at_quiet = 0;
  maybe_start_full(reason);
}

void pressure_policy::finish_cycle(gc_reason reason) {
  const gc_kind k = minor_cycle_active() ? gc_kind::minor : gc_kind::incremental_full;
  outcome o;
  bool done = step_cycle(k, reason, &o, false);
  while (!done) done = step_cycle(k, reason, &o, true);
  if (k == gc_kind::minor) finish_minor(o, reason);
  else learn_full(o);
}

// Note [Generations of device bytes], Note [Whole-heap cycles pay for the
// young bytes they hold]: a cycle is worth it when one device's suspected
// garbage is (the most-pressed device decides, never the sum): at least
// what the cycle holds up (rate x its wall time) and a minor's threshold.
bool pressure_policy::full_worth(std::size_t* suspect_sum) {
  const double expected_wall = full_wall_ > 0 ? full_wall_ : 2 * expected_full_cost();
  bool worth = false;
  *suspect_sum = 0;
  for (std::size_t i = 0; i < device_count(); ++i) {
    device_state& d = dev_[i];
    const std::size_t old = std::min(d.old, device(i).live_bytes());
    const std::size_t suspect = old > d.floor ? old - d.floor : 0;
    *suspect_sum += suspect;
    if (suspect < opts_.min_young_bytes) continue;
    // Note [Collections that find nothing]: this device's runtime frees its
    // young bytes itself, none were promoted as garbage: old is live.
    if (d.futile > 1 && !pressing(i)) continue;
    // Garbage on a device nobody allocates from costs nothing until its
    // memory is needed: an idle device asks for a cycle only when pressed.
    if (d.rate <= 0 && !pressing(i)) continue;
    // The minor's threshold where this loop's minors run: at syncs (their
    // lag) when it syncs, at hints when it gives them, else at
    // allocations. Note [Promoted garbage without slack]: a loop that gives
    // hints and never syncs (CPU-bound, or syncing only at the end) was
    // held to the allocation's threshold, which in such a loop is the
    // headroom (Note [Allocations wait for the hint]): its promoted garbage
    // waited for a whole-heap cycle until the soft limit was near (on the
    // fake clock, lifetime-2 arrays: cycles at 1.5 GiB of suspected
    // garbage, 18.2x the live arrays; issue 20 reports zero cycles in 300
    // iterations of such a loop on the H200 at 17x the oracle's peak under
    // a 52 GiB soft limit: this mechanism, not rerun there).
    const pressure_event at = sync_count() > 0 ? pressure_event::sync
                              : d.stretch > 0  ? pressure_event::hint
                                               : pressure_event::allocation;
    const detail::pressure_snapshot s = snapshot(i, at, 0);
    const double held = d.rate * expected_wall;
    const double minor = static_cast<double>(detail::decide(s, tuning_).threshold);
    worth = worth || static_cast<double>(suspect) >= full_backoff_ * std::max(held, minor) || pressing(i);
  }
  return worth;
}

bool pressure_policy::pressing(std::size_t i) const {
  return static_cast<double>(dev_[i].live_after) > tuning_.pressing_share * static_cast<double>(device(i).soft_limit());
}

double pressure_policy::expected_full_cost() const { return full_cost_ > 0 ? full_cost_ : 5 * minor_cost_.mean(); }

// Whole-heap cycles run in slices: in the device's time at syncs, or
// paced by the exposed budget slice by slice (decide()), so a cycle may
// start whenever the exposed budget has room for a slice — with or
// without slack — or a device is pressed.
void pressure_policy::maybe_start_full(gc_reason reason) {
  const std::uint64_t own_full = gc_.counters().own_full_collections;
  if (own_full != own_full_seen_) {  // the runtime ran a whole-heap collection itself
    own_full_seen_ = own_full;
    floor_known_ = true;
    for (std::size_t i = 0; i < device_count(); ++i) dev_[i].floor = dev_[i].old = device(i).live_bytes();
    return;
  }
  std::size_t suspect = 0;
  if (!full_worth(&suspect)) return;
  bool any_pressing = false;
  for (std::size_t i = 0; i < device_count(); ++i) any_pressing = any_pressing || pressing(i);
  const bool in_device_time = sync_count() > 0 && slack_estimate() > 0;
  if (!in_device_time && !any_pressing && exposed_fraction() >= opts_.gc_budget) return;
  if (opts_.verbose)
    std::fprintf(stderr,
                 "gcpressure[pressure]: whole-heap cycle: suspected garbage %s, expected cost %.3f ms, wall %.3f ms, "
                 "backoff x%.0f\n",
                 format_bytes(suspect).c_str(), expected_full_cost() * 1e3,
                 (full_wall_ > 0 ? full_wall_ : 2 * expected_full_cost()) * 1e3, full_backoff_);
  cycle_started_ = now();
  exposed_at_cycle_start_ = charged_exposed();
  suspect_at_start_ = suspect;
  outcome o;
  if (step_full_cycle(reason, &o)) learn_full(o);
}

}  // namespace gcpressure::detail
