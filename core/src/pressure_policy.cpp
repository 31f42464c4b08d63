// The "pressure" policy's event side: allocations, hints, syncs, the fast path and the factory.
//
// The "pressure" policy: device bytes drive the host collector, collections
// go where the device is still working, whole-heap cycles reclaim what minors
// promote.
//
// Note [Why device bytes must drive the collector]
// A runtime's array object is a few dozen host bytes holding gigabytes of
// device memory. The host collector's heuristics count host bytes, so they
// never run while the device fills up. The policy counts the device bytes
// allocated since the last collection ("young" bytes) and asks the collector
// for a collection when they justify one — before an allocation fails.
//
// Note [Where collections run]
// Every decision is detail::decide() over an explicit model (Note [One
// decision over an explicit model], pressure_model.hpp), at three events:
// an allocation (young bytes against the threshold at the device's lag,
// Note [The device's lag]; or the headroom), an iteration hint (the same,
// plus Note [Quiet moments]) and a sync (the lag there is the slack, or what
// minors measured exposed there: Note [Collect in the device's time]). What
// collections teach the model (rate, yield, floors, futility, the cost of a
// minor and of a cycle) is learned in learn_minor / learn_full, apart from
// the decisions. With no syncs and no lag (CPU-bound loops) the threshold is
// the budget rule: rate x predicted pause / gc budget, and growth x floor.
//
// Note [No collection storms]
// Near the hard limit reserved bytes include the pool's cache, which is
// reclaimable without any collection (the ladder's release_cache step). The
// headroom test therefore uses allocated bytes; and collections that the
// headroom alone asks for back off exponentially in young bytes while they
// reclaim little, and at most two run per iteration hint.
#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "gcpressure/config.hpp"
#include "gcpressure/policy.hpp"
#include "pressure_model.hpp"
#include "pressure_policy.hpp"

namespace gcpressure {

namespace detail {

// Note [Allowances of the fast path]
// The fast path's bounds (young bytes, live bytes) used to be checked
// against the allocator's counters at every allocation; with per-thread
// pool caches those are sums over every thread's slot (Note [Thread caches],
// pool_cache.cpp), so each check would read lines other threads write.
// Instead each publish turns the bounds into one allowance per device, the
// bytes that may still be allocated before either bound is reached
// (reconciled against the real counters there); a thread takes a share of
// it (a sixteenth of what is left, at least the request) with one CAS and
// spends it locally. A publish starts a new epoch, and a thread's share of
// an older epoch is void, so the bytes allocated on the fast path between
// two decision points never exceed what the last one allowed (frees do not
// refill it: conservative, never over a bound).
namespace {
struct thread_allowance {
  std::uint64_t epoch = 0;
  std::size_t left = 0;
};
thread_local std::array<thread_allowance, detail::device_list::capacity> t_allowance{};
std::atomic<std::uint64_t> g_fast_epoch{0};  // epochs are unique over every policy of the process
}  // namespace

pressure_policy::pressure_policy(const std::vector<device_allocator*>& d, collector& c, policy_options o)
    : gc_policy(d, c, o), tuning_(detail::pressure_tuning::from(o)),
      dev_(new device_state[detail::device_list::capacity]) {
  last_end_ = now();
  own_full_seen_ = c.counters().own_full_collections;
  refresh_device();
}

void pressure_policy::before_allocate(device_allocator& a, std::size_t bytes, stream_ref stream) {
  const std::size_t i = device_index(a);
  if (i == device_count()) return;
  // Compare, then store: the same stream's allocations write no shared line.
  if (dev_[i].last_stream.load(std::memory_order_relaxed) != stream)
    dev_[i].last_stream.store(stream, std::memory_order_relaxed);
  if (nothing_due(i, a, bytes)) return;  // Note [The allocation fast path]
  std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
  if (!lk.owns_lock()) {
    // Note [Concurrent allocators]: another thread is collecting. Below
    // the headroom, allocate without queueing behind it. Over it, wait for
    // that collection (bounded): allocating now would take the room it is
    // making for its own allocation, and one of us would fail for nothing.
    if (!detail::over_headroom(device_view(i, bytes), tuning_)) return;
    if (!wait_for_collection_lock(lk, 5.0)) return;
  }
  if (now() - refreshed_at_ > tuning_.refresh_seconds) refresh_device();  // other tenants: a bounded rate
  const detail::pressure_snapshot snap = snapshot(i, pressure_event::allocation, bytes);
  const detail::pressure_decision dec = detail::decide(snap, tuning_);
  if (dec.action == pressure_action::none) {
    publish_fast_path();
    return;
  }
  // A probe on the allocation's stream: work still running there when a
  // collection ends means the host ran ahead and the collection was hidden
  // (Note [Exposed GC time]).
  device_probe probe(*this, stream, &a);
  const double t0 = now();
  if (dec.action == pressure_action::finish_cycle) {
    finish_cycle(gc_reason::early);
  } else if (dec.action == pressure_action::step_cycle) {
    outcome o;
    if (step_full_cycle(gc_reason::early, &o)) learn_full(o);
  } else {
    if (opts_.verbose) explain_early(snap, dec);
    for (std::size_t j = 0; j < device_count(); ++j) dev_[j].collected_since_quiet += device(j).since_mark();
    if (dec.headroom) ++headroom_collections_;
    begin_minor(dec.hidden && lag_guessed_ ? snap.lag : 0, lag_guessed_ ? 0 : snap.lag, true);
    const outcome o = run_collection(gc_kind::minor, gc_reason::early);
    // Note [No collection storms]: a headroom collection that found little
    // on this device doubles the young bytes the next one needs there.
    const device_outcome& od = o.devices[i];
    device_state& d = dev_[i];
    d.backoff = od.reclaimed * 4 < od.young_before ? std::max(d.backoff * 2, opts_.min_young_bytes) : 0;
    finish_minor(o, gc_reason::early);
  }
  // Note [The guess is what a queued iteration leaves]: the device ran
  // queued work all through the pause only if it is still busy at its end
  // (Note [A pause the device outlasted is not credited], device_lag.hpp);
  // busy at the end, it was busy at the start (the probe's event was
  // recorded then).
  const double paused = probe.busy() ? now() - t0 : 0;
  for (std::size_t j = 0; j < device_count(); ++j) dev_[j].lag.host_paused(paused);
  publish_fast_path();
  probe.rethrow();
}

void pressure_policy::iteration() {
  std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
  if (!lk.owns_lock()) return;  // another thread's collection: its counters stay
  start_budget();  // Note [The budget starts with the loop]
  // Note [The device's lag]: an event per device at every iteration hint.
  const double t = now();
  for (std::size_t i = 0; i < device_count(); ++i)
    dev_[i].lag.hint(device(i).streams(), dev_[i].last_stream.load(std::memory_order_relaxed), t);
  hint_work(t);
  const double resumed = now();  // Note [The next iteration is queued after the hint]
  for (std::size_t i = 0; i < device_count(); ++i) dev_[i].lag.hint_ended(resumed);
  headroom_collections_ = 0;
  for (std::size_t i = 0; i < device_count(); ++i) dev_[i].backoff = 0;
  publish_fast_path();
}

void pressure_policy::quiet_moment(bool will_block) {
  std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
  if (!lk.owns_lock()) return;
  start_budget();
  if (will_block) {
    // No stream to poll: assume the device is busy for the smoothed slack.
    const double t0 = now(), slack = slack_estimate();
    block_work([&] { return now() - t0 < slack; });
  } else {
    hint_work(now());
  }
  publish_fast_path();
}

void pressure_policy::device_added(std::size_t) {
  refresh_device();
  publish_fast_path();
}

// Note [Collect in the device's time] (policy.cpp): what is due runs while
// the device works: a minor whole (Note [Minors at syncs run whole]), a
// whole-heap cycle slice by slice, each stopping short of the end of the
// expected slack so that the work stays hidden (Note [Sliced cycles]).
void pressure_policy::before_block(device_allocator&, const std::function<bool()>& device_busy) {
  start_budget();
  block_work(device_busy);
  publish_fast_path();
}

// Note [Idle syncs collect what is due]: a sync whose device is already
// done is still the loop's quiet moment (its iteration's temporaries are
// dead): what is due there at no lag runs, exposed, within the budget.
// Before, only busy syncs collected; bindings whose compute runs on the
// calling thread (Lua, Node, Guile, CPython, .NET on the host backend)
// sync an idle device every iteration, so every collection there waited
// for the headroom (10.7-11.5 MiB young under a 12 MiB soft limit: 6x
// the oracle's peak on steady).
void pressure_policy::at_idle_sync(device_allocator&) {
  start_budget();
  block_work([] { return false; });
  publish_fast_path();
}

void pressure_policy::after_sync(device_allocator& on, bool waited, double device_done_at) {
  const std::size_t i = device_index(on);
  std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
  if (i == device_count() || !lk.owns_lock()) return;
  dev_[i].lag.synced(now(), waited, device_done_at);
  publish_fast_path();
}

std::size_t pressure_policy::young_all() const noexcept {
  std::size_t y = 0;
  for (std::size_t i = 0, n = device_count(); i < n; ++i) y += device(i).since_mark();
  return y;
}

// Device i as the model sees it, with an allocation of `bytes` to come.
// Reads only relaxed atomics and the allocator (Note [Concurrent allocators]).
detail::device_snapshot pressure_policy::device_view(std::size_t i, std::size_t bytes) const {
  const device_allocator& a = device(i);
  const device_state& d = dev_[i];
  detail::device_snapshot v;
  v.young = a.since_mark() + bytes;
  v.live = a.live_bytes() + bytes;
  v.reserved = a.reserved_bytes() + bytes;
  v.soft = a.soft_limit();
  v.hard = a.hard_limit();
  v.device_free = d.device_free.load(std::memory_order_relaxed);
  v.reserved_at_refresh = d.reserved_at_refresh.load(std::memory_order_relaxed);
  return v;
}

// The model's inputs at `event` for device i (under the collection lock);
// `at`: the event's time, if not now (Note [A hint decides at its time]).
detail::pressure_snapshot pressure_policy::snapshot(std::size_t i, pressure_event event, std::size_t bytes, double at) {
  detail::pressure_snapshot s;
  s.event = event;
  s.device = i;
  s.dev = device_view(i, bytes);
  const device_state& d = dev_[i];
  s.dev.live_after = d.live_after;
  s.dev.floor = d.floor;
  s.dev.rate = d.rate;
  s.dev.yield = d.yield;
  s.dev.futile = d.futile;
  s.dev.backoff = d.backoff;
  s.dev.stretch = d.stretch;
  s.cost_known = minor_cost_.known();
  if (s.cost_known) {
    const auto price = minor_cost_.price(static_cast<double>(young_all() + bytes));
    s.pause = price.pause;
    s.pause_growth = price.growth;
    s.pause_slope = price.slope;
  }
  // At a sync the lag is the slack: a minor there runs whole (Note [Minors
  // at syncs run whole]); its exposed part is pause - slack.
  s.lag = event == pressure_event::sync ? slack_estimate() : 0;
  // Note [A guess before the first sync]
  const double t = at >= 0 ? at : now(), guess = lag_guess_share_ * s.pause;
  lag_guessed_ = false;
  for (std::size_t j = 0; j < device_count(); ++j) {
    double lag = dev_[j].lag.lag(t, guess);
    // At a sync the device still runs the iteration just queued (an idle
    // one is seen by the caller and counts no lag): at least a guess's worth.
    if (event == pressure_event::sync && !dev_[j].lag.measured()) lag = std::max(lag, guess);
    lag_guessed_ = lag_guessed_ || (!dev_[j].lag.measured() && lag > s.lag && guess > 0);
    s.lag = std::max(s.lag, lag);
  }
  // Note [A smaller minor is tried] against a lag the device had: a try on
  // the guess (Note [A guess before the first sync]) tests nothing.
  s.smaller_wanted = event == pressure_event::sync && !lag_guessed_ &&
                     minor_cost_.wants_smaller(static_cast<double>(young_all()));
  s.loop_unpriced = loop_started_ >= 0 && !minor_cost_.loop_priced();
  s.exposed = budget_spent(s.pause);  // Note [The budget starts with the loop], Note [A budget of one second]
  s.wall = budget_wall();
  s.headroom_collections = headroom_collections_;
  s.cycle = cycle_active();
  s.minor_cycle = minor_cycle_active();
  if (s.cycle && !s.minor_cycle) {
    s.cycle_exposed = s.exposed - exposed_at_cycle_start_;
    s.cycle_wall = t - cycle_started_;
    // Note [Finishing a cycle costs its rest]: the learned cost of a
    // whole cycle less what this one ran; before one was learned, at
    // least as much again as it ran (its progress is not known).
    const double done = cycle_seconds();
    s.cycle_rest = std::max(expected_full_cost() - done, full_cost_ > 0 ? 0.0 : done);
  }
  s.syncing = syncing_;
  return s;
}

// An iteration hint or a quiet moment that will not block, at host time
// `at`.
// Note [A hint decides at its time]
// A hint's decisions read the lag at the hint's own time, not a few
// microseconds later when the policy gets to them: before a sync measured
// the device, the lag of one queued iteration is the guess, a predicted
// minor's length (Note [The guess is what a queued iteration leaves]), and
// read later it was always that minor less the policy's own microseconds:
// not hidden. On the H100 (1 GiB host heap, a sync every 8) the first hint
// read 22.384 ms of lag against a 22.388 ms minor.
void pressure_policy::hint_work(double at) {
  // Note [Quiet moments defer to syncs]: a loop that synchronizes gets its
  // exposed collections at its syncs, where the device hides part of
  // them; only hidden ones run at hints. A loop syncs if a sync came
  // within the last 64 hints (a device_lag's window), not only since the
  // last hint: with a sync every 8 iterations and 25 ms minors (the H200,
  // a 1 GiB host heap) the seven hints between two syncs took minors the
  // lag could not hide, 12 of 45 exposed, 15% of wall.
  const std::uint64_t syncs = sync_count();
  hints_since_sync_ = syncs != syncs_at_quiet_ ? 0 : hints_since_sync_ + 1;
  syncing_ = syncs > 0 && hints_since_sync_ <= 64;
  syncs_at_quiet_ = syncs;

  bool minor = false, step = false;
  double lag_known = 0;  // the lag the minor runs against (Note [Charging what the lag hid])
  double guessed = 0;    // or the guessed lag it is hidden in (Note [A guess before the first sync])
  for (std::size_t i = 0; i < device_count(); ++i) {
    learn_stretch(i, at);
    const detail::pressure_snapshot snap = snapshot(i, pressure_event::hint, 0, at);
    const detail::pressure_decision dec = detail::decide(snap, tuning_);
    // A hint that skips is logged too (young bytes worth a minor at all): on
    // the H100 at K = 8 the skips set the peak (RESULTS.md, 2026-12-07).
    const bool collects = dec.action == pressure_action::minor;
    if (opts_.verbose && (collects || snap.dev.young >= tuning_.min_young_bytes))
      std::fprintf(stderr,
                   "gcpressure[pressure]: at a hint%s: young %s, threshold %s, predicted minor %.3f ms, lag %.3f ms%s\n",
                   collects ? "" : ", no minor", format_bytes(snap.dev.young).c_str(),
                   format_bytes(dec.threshold).c_str(), snap.pause * 1e3, snap.lag * 1e3,
                   dec.hidden ? ", hidden" : snap.syncing ? "" : ", no sync lately");
    if (dec.action == pressure_action::minor && dec.hidden && lag_guessed_) guessed = std::max(guessed, snap.lag);
    minor = minor || dec.action == pressure_action::minor;
    if (!lag_guessed_) lag_known = std::max(lag_known, snap.lag);
    step = step || dec.action == pressure_action::step_cycle;
  }
  if (!step && !minor) return;
  // Hidden or not is measured on the primary device's last stream (Note
  // [Exposed GC time]); a runtime's own probe around the hint, if any, is
  // the same measurement.
  device_probe probe(*this, dev_[0].last_stream.load(std::memory_order_relaxed), &device(0));
  if (step) {
    outcome o;
    if (step_full_cycle(gc_reason::quiet_moment, &o)) learn_full(o);
  } else {
    begin_minor(guessed, lag_known, true);
    finish_minor(run_collection(gc_kind::minor, gc_reason::quiet_moment), gc_reason::quiet_moment);
  }
  probe.rethrow();
}

// True if some device asks for a minor at this sync (`idle`: the device
// is done, nothing is hidden). `*guessed`: the guessed lag that minor is
// hidden in, if only on the guess (Note [A guess before the first sync]),
// which it then tests; else 0.
bool pressure_policy::sync_due(bool idle, double* guessed) {
  for (std::size_t i = 0; i < device_count(); ++i) {
    detail::pressure_snapshot s = snapshot(i, pressure_event::sync, 0);
    if (idle) s.lag = 0;
    const detail::pressure_decision dec = detail::decide(s, tuning_);
    if (opts_.verbose && dec.action != pressure_action::minor && s.dev.young >= tuning_.min_young_bytes)
      std::fprintf(stderr,  // the 52x repetitions (RESULTS.md, 2026-12-06 session 15): why a sync waits
                   "gcpressure[pressure]: at a sync, no minor on device %zu: young %s, threshold %s, predicted "
                   "minor %.3f ms, lag %.3f ms%s, rate %s/s, yield %.2f, futile x%.0f, exposed %.1f ms of %.1f ms\n",
                   i, format_bytes(s.dev.young).c_str(), format_bytes(dec.threshold).c_str(), s.pause * 1e3,
                   s.lag * 1e3, idle ? " (idle)" : "", format_bytes(static_cast<std::size_t>(s.dev.rate)).c_str(),
                   s.dev.yield, s.dev.futile, s.exposed * 1e3, s.wall * 1e3);
    if (dec.action != pressure_action::minor) continue;
    *guessed = !idle && dec.hidden && lag_guessed_ ? s.lag : 0;
    probing_ = dec.probe;
    learning_ = dec.learn && s.dev.young < dec.threshold;
    return true;
  }
  return false;
}

void pressure_policy::block_work(const std::function<bool()>& device_busy) {
  minor_cost_.sync_passed();  // Note [Tries are paced in syncs]
  const double deadline = now() + slack_estimate();
  const auto room = [&] { return now() + opts_.slice_seconds <= deadline && device_busy(); };
  if (!cycle_active()) {
    double guessed = 0;
    if (!sync_due(!device_busy(), &guessed)) return;
    // Note [Minors at syncs run whole]
    // bdwgc's incremental minor cannot be sliced finer than what it does
    // with the world stopped (the O(heap blocks) part): measured on the
    // host backend at a 256 MiB heap, a minor of 5.5 ms ran as two slices
    // of 2.5-6 ms each, the second at the next sync and exposed, so
    // slicing doubled the minor; on the H200 at 1 GiB, 823 slices overran
    // the slack (1.28 s of 2.0 s of wall exposed, RESULTS.md 2026-12-02
    // evening). So a minor due at a sync runs whole, as soon as the host
    // gets there (the slack then hides what it can); whole-heap cycles
    // still run in slices (their mark is long and does slice).
    if (opts_.verbose) {  // the prediction is made here only for the line
      const double pause = minor_cost_.known() ? minor_cost_.predict(static_cast<double>(young_all())) : 0;
      std::fprintf(stderr, "gcpressure[pressure]: at a sync: young %s, predicted minor %.3f ms, slack %.3f ms%s\n",
                   format_bytes(young_all()).c_str(), pause * 1e3, slack_estimate() * 1e3,
                   probing_ ? " (a smaller minor tried)" : learning_ ? " (the loop's first, to learn its cost)" : "");
    }
    begin_minor(guessed, device_busy() ? slack_estimate() : 0);
    finish_minor(run_collection(gc_kind::minor, gc_reason::quiet_moment), gc_reason::quiet_moment);
    if (!cycle_active()) return;
  }
  while (room()) {
    const gc_kind k = minor_cycle_active() ? gc_kind::minor : gc_kind::incremental_full;
    outcome o;
    if (!step_cycle(k, gc_reason::quiet_moment, &o)) continue;
    if (k == gc_kind::minor) finish_minor(o, gc_reason::quiet_moment);
    else learn_full(o);
    if (!cycle_active()) return;
  }
}

// Note [The allocation fast path]
// before_allocate runs before every allocation (a pool hit costs ~100 ns).
// When no cycle is in progress and the allocation stays under its
// device's bounds last published under the collection lock, and the
// devices' free memory was read less than refresh_seconds ago, nothing can
// be due: return with a few relaxed loads and one clock read, without the
// lock or the cost model. The bounds are decide()'s own: the young
// threshold at the best lag the device can have (fast_young_bound) and the
// headroom's (fast_bounds); a cycle in progress disables the fast path.
bool pressure_policy::nothing_due(std::size_t i, device_allocator& a, std::size_t bytes) const noexcept {
  const device_state& d = dev_[i];
  if (d.fast_young.load(std::memory_order_relaxed) == 0) return false;
  if (a.reserved_bytes() + bytes > d.fast_reserved.load(std::memory_order_relaxed)) return false;
  if (now() - fast_refreshed_.load(std::memory_order_relaxed) >= tuning_.refresh_seconds) return false;
  return take_allowance(i, bytes);  // Note [Allowances of the fast path]
}

bool pressure_policy::take_allowance(std::size_t i, std::size_t bytes) const noexcept {
  const device_state& d = dev_[i];
  thread_allowance& t = t_allowance[i];
  const std::uint64_t epoch = d.fast_epoch.load(std::memory_order_acquire);
  if (t.epoch != epoch) t = {epoch, 0};
  if (bytes < t.left) {
    t.left -= bytes;
    return true;
  }
  auto& pool = const_cast<std::atomic<std::size_t>&>(d.fast_allowance);
  std::size_t avail = pool.load(std::memory_order_relaxed), chunk;
  do {
    if (avail <= bytes) return false;
    chunk = std::min(avail, std::max(avail / 16, bytes + 1));
  } while (!pool.compare_exchange_weak(avail, avail - chunk, std::memory_order_relaxed));
  t.left += chunk - bytes;
  return true;
}

void pressure_policy::publish_fast_path() noexcept {
  const bool off = cycle_active();
  fast_refreshed_.store(refreshed_at_, std::memory_order_relaxed);
  const bool known = minor_cost_.known();
  const detail::cost_model::minor_price price =
      known ? minor_cost_.price(static_cast<double>(young_all())) : detail::cost_model::minor_price{};
  for (std::size_t i = 0; i < device_count(); ++i) {
    device_state& d = dev_[i];
    if (off) {
      d.fast_young.store(0, std::memory_order_relaxed);
      continue;
    }
    detail::device_snapshot v = device_view(i, 0);
    v.live_after = d.live_after;
    v.floor = d.floor;
    v.rate = d.rate;
    v.yield = d.yield;
    v.futile = d.futile;
    v.stretch = d.stretch;
    const detail::headroom_bounds b = detail::fast_bounds(v, tuning_);
    d.fast_live.store(b.live, std::memory_order_relaxed);
    d.fast_reserved.store(b.reserved, std::memory_order_relaxed);
    bool lag_possible = false;
    for (std::size_t j = 0; j < device_count(); ++j) lag_possible = lag_possible || dev_[j].lag.possible();
    const std::size_t young = detail::fast_young_bound(v, known, price.pause, lag_possible, tuning_, price.growth, price.slope);
    d.fast_young.store(std::max<std::size_t>(young, 1), std::memory_order_relaxed);
    // Note [Allowances of the fast path]: reconciled with the real counters here.
    const std::size_t young_now = v.young, live_now = v.live;
    const std::size_t room = std::min(young > young_now ? young - young_now : 0,
                                      b.live > live_now ? b.live - live_now : 0);
    d.fast_allowance.store(room, std::memory_order_relaxed);
    d.fast_epoch.store(g_fast_epoch.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_release);
  }
}

}  // namespace detail

std::unique_ptr<gc_policy> make_pressure_policy(const std::vector<device_allocator*>& devices, collector& c,
                                                policy_options o) {
  return std::make_unique<detail::pressure_policy>(devices, c, o);
}

}  // namespace gcpressure
