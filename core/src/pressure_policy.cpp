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
#include <array>
#include <cmath>
#include <atomic>
#include <cstdio>
#include <limits>
#include <utility>
#include <vector>

#include "cost_model.hpp"
#include "device_lag.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/policy.hpp"
#include "pressure_model.hpp"

namespace gcpressure {

namespace {

using detail::pressure_action;
using detail::pressure_event;

// Note [Per-device state]
// What the policy learns about device memory is per device (Note [One
// policy, N devices] in policy.hpp): its floor, old and live bytes, its
// allocation rate and yield, its headroom, its lag and the other tenants'
// share of it. What it learns about the collector is shared: the cost of a
// minor (which depends on the host heap, and on the young objects of all
// devices together), the cost and wall time of a whole-heap cycle, the
// exposed time.
struct device_state {
  // Guarded by collect_mu_.
  double rate = 0, yield = 1.0;  // young bytes per second; share of young bytes gone at a collection
  double rate_bytes = 0, rate_seconds = 0;  // Note [The allocation rate is per wall second]
  std::size_t live_after = 0, old = 0, floor = 0;  // Note [Generations of device bytes]
  double stretch = 0;            // Note [Quiet moments]: bytes per stretch between hints
  double last_hint_at = 0;       // Note [The allocation rate is per wall second]
  std::uint64_t hints_seen = 0;
  std::size_t young_at_quiet = 0, collected_since_quiet = 0;
  std::size_t backoff = 0;       // Note [No collection storms]
  double futile = 1;             // Note [Collections that find nothing]: the threshold's stretch
  detail::device_lag lag;        // Note [The device's lag]
  // Relaxed atomics: read without the lock (Note [Concurrent allocators],
  // Note [The allocation fast path]).
  std::atomic<stream_ref> last_stream{nullptr};  // of the last allocation: hints record on it
  std::atomic<std::size_t> device_free{0}, reserved_at_refresh{0};
  std::atomic<std::size_t> fast_young{0}, fast_live{0}, fast_reserved{0};  // 0 fast_young: slow path
  // Note [Allowances of the fast path]: written at a grant, not per allocation.
  alignas(64) std::atomic<std::size_t> fast_allowance{0};
  std::atomic<std::uint64_t> fast_epoch{0};
};

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

class pressure_policy final : public gc_policy {
 public:
  pressure_policy(const std::vector<device_allocator*>& d, collector& c, policy_options o)
      : gc_policy(d, c, o), tuning_(detail::pressure_tuning::from(o)),
        dev_(new device_state[detail::device_list::capacity]) {
    last_end_ = now();
    own_full_seen_ = c.counters().own_full_collections;
    refresh_device();
  }
  const char* name() const noexcept override { return "pressure"; }

  void before_allocate(device_allocator& a, std::size_t bytes, stream_ref stream) override {
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
    if (dec.action == pressure_action::finish_cycle) {
      finish_cycle(gc_reason::early);
    } else if (dec.action == pressure_action::step_cycle) {
      outcome o;
      if (step_full_cycle(gc_reason::early, &o)) learn_full(o);
    } else {
      if (opts_.verbose) explain_early(snap, dec);
      for (std::size_t j = 0; j < device_count(); ++j) dev_[j].collected_since_quiet += device(j).since_mark();
      if (dec.headroom) ++headroom_collections_;
      begin_minor(dec.hidden && lag_guessed_, lag_guessed_ ? 0 : snap.lag, true);
      const outcome o = run_collection(gc_kind::minor, gc_reason::early);
      // Note [No collection storms]: a headroom collection that found little
      // on this device doubles the young bytes the next one needs there.
      const device_outcome& od = o.devices[i];
      device_state& d = dev_[i];
      d.backoff = od.reclaimed * 4 < od.young_before ? std::max(d.backoff * 2, opts_.min_young_bytes) : 0;
      finish_minor(o, gc_reason::early);
    }
    publish_fast_path();
    probe.rethrow();
  }

  void iteration() override {
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;  // another thread's collection: its counters stay
    // Note [The device's lag]: an event per device at every iteration hint.
    const double t = now();
    for (std::size_t i = 0; i < device_count(); ++i)
      dev_[i].lag.hint(device(i).streams(), dev_[i].last_stream.load(std::memory_order_relaxed), t);
    hint_work();
    const double resumed = now();  // Note [The next iteration is queued after the hint]
    for (std::size_t i = 0; i < device_count(); ++i) dev_[i].lag.hint_ended(resumed);
    headroom_collections_ = 0;
    for (std::size_t i = 0; i < device_count(); ++i) dev_[i].backoff = 0;
    publish_fast_path();
  }

  void quiet_moment(bool will_block) override {
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;
    if (will_block) {
      // No stream to poll: assume the device is busy for the smoothed slack.
      const double t0 = now(), slack = slack_estimate();
      block_work([&] { return now() - t0 < slack; });
    } else {
      hint_work();
    }
    publish_fast_path();
  }

 protected:
  void device_added(std::size_t) override {
    refresh_device();
    publish_fast_path();
  }

  // Note [Collect in the device's time] (policy.cpp): what is due runs while
  // the device works: a minor whole (Note [Minors at syncs run whole]), a
  // whole-heap cycle slice by slice, each stopping short of the end of the
  // expected slack so that the work stays hidden (Note [Sliced cycles]).
  void before_block(device_allocator&, const std::function<bool()>& device_busy) override {
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
  void at_idle_sync(device_allocator&) override {
    block_work([] { return false; });
    publish_fast_path();
  }

  void after_sync(device_allocator& on, bool waited, double device_done_at) override {
    const std::size_t i = device_index(on);
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (i == device_count() || !lk.owns_lock()) return;
    dev_[i].lag.synced(now(), waited, device_done_at);
    publish_fast_path();
  }

 private:
  std::size_t young_of(std::size_t i) const noexcept { return device(i).since_mark(); }
  std::size_t young_all() const noexcept {
    std::size_t y = 0;
    for (std::size_t i = 0, n = device_count(); i < n; ++i) y += device(i).since_mark();
    return y;
  }

  // Device i as the model sees it, with an allocation of `bytes` to come.
  // Reads only relaxed atomics and the allocator (Note [Concurrent allocators]).
  detail::device_snapshot device_view(std::size_t i, std::size_t bytes) const {
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

  // The model's inputs at `event` for device i (under the collection lock).
  detail::pressure_snapshot snapshot(std::size_t i, pressure_event event, std::size_t bytes) {
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
    s.pause = s.cost_known ? minor_cost_.predict(static_cast<double>(young_all() + bytes)) : 0;
    // At a sync the lag is the slack: a minor there runs whole (Note [Minors
    // at syncs run whole]); its exposed part is pause - slack.
    s.lag = event == pressure_event::sync ? slack_estimate() : 0;
    // Note [A guess before the first sync]
    const double t = now(), guess = lag_guess_share_ * s.pause;
    lag_guessed_ = false;
    for (std::size_t j = 0; j < device_count(); ++j) {
      double lag = dev_[j].lag.lag(t, guess);
      // At a sync the device still runs the iteration just queued (an idle
      // one is seen by the caller and counts no lag): at least a guess's worth.
      if (event == pressure_event::sync && !dev_[j].lag.measured()) lag = std::max(lag, guess);
      lag_guessed_ = lag_guessed_ || (!dev_[j].lag.measured() && lag > s.lag && guess > 0);
      s.lag = std::max(s.lag, lag);
    }
    s.exposed = charged_exposed();
    s.wall = wall_seconds();
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

  // An iteration hint or a quiet moment that will not block.
  void hint_work() {
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

    bool minor = false, step = false, on_guess = false;
    double lag_known = 0;  // the lag the minor runs against (Note [Charging what the lag hid])
    const double t_hint = now();
    for (std::size_t i = 0; i < device_count(); ++i) {
      learn_stretch(i, t_hint);
      const detail::pressure_snapshot snap = snapshot(i, pressure_event::hint, 0);
      const detail::pressure_decision dec = detail::decide(snap, tuning_);
      if (opts_.verbose && dec.action == pressure_action::minor)
        std::fprintf(stderr,
                     "gcpressure[pressure]: at a hint: young %s, threshold %s, predicted minor %.3f ms, lag %.3f ms%s\n",
                     format_bytes(snap.dev.young).c_str(), format_bytes(dec.threshold).c_str(), snap.pause * 1e3,
                     snap.lag * 1e3, dec.hidden ? ", hidden" : snap.syncing ? "" : ", no sync lately");
      on_guess = on_guess || (dec.action == pressure_action::minor && dec.hidden && lag_guessed_);
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
      begin_minor(on_guess, lag_known, true);
      finish_minor(run_collection(gc_kind::minor, gc_reason::quiet_moment), gc_reason::quiet_moment);
    }
    probe.rethrow();
  }

  // True if some device asks for a minor at this sync (`idle`: the device
  // is done, nothing is hidden). `*on_guess`: that minor is hidden only on
  // the guess (Note [A guess before the first sync]), which it then tests.
  bool sync_due(bool idle, bool* on_guess) {
    for (std::size_t i = 0; i < device_count(); ++i) {
      detail::pressure_snapshot s = snapshot(i, pressure_event::sync, 0);
      if (idle) s.lag = 0;
      const detail::pressure_decision dec = detail::decide(s, tuning_);
      if (dec.action != pressure_action::minor) continue;
      *on_guess = !idle && dec.hidden && lag_guessed_;
      return true;
    }
    return false;
  }

  void block_work(const std::function<bool()>& device_busy) {
    const double deadline = now() + slack_estimate();
    const auto room = [&] { return now() + opts_.slice_seconds <= deadline && device_busy(); };
    if (!cycle_active()) {
      bool on_guess = false;
      if (!sync_due(!device_busy(), &on_guess)) return;
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
        std::fprintf(stderr, "gcpressure[pressure]: at a sync: young %s, predicted minor %.3f ms, slack %.3f ms\n",
                     format_bytes(young_all()).c_str(), pause * 1e3, slack_estimate() * 1e3);
      }
      begin_minor(on_guess, device_busy() ? slack_estimate() : 0);
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
  bool nothing_due(std::size_t i, device_allocator& a, std::size_t bytes) const noexcept {
    const device_state& d = dev_[i];
    if (d.fast_young.load(std::memory_order_relaxed) == 0) return false;
    if (a.reserved_bytes() + bytes > d.fast_reserved.load(std::memory_order_relaxed)) return false;
    if (now() - fast_refreshed_.load(std::memory_order_relaxed) >= tuning_.refresh_seconds) return false;
    return take_allowance(i, bytes);  // Note [Allowances of the fast path]
  }

  bool take_allowance(std::size_t i, std::size_t bytes) const noexcept {
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

  void publish_fast_path() noexcept {
    const bool off = cycle_active();
    fast_refreshed_.store(refreshed_at_, std::memory_order_relaxed);
    const bool known = minor_cost_.known();
    const double pause = known ? minor_cost_.predict(static_cast<double>(young_all())) : 0;
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
      const std::size_t young = detail::fast_young_bound(v, known, pause, lag_possible, tuning_);
      d.fast_young.store(std::max<std::size_t>(young, 1), std::memory_order_relaxed);
      // Note [Allowances of the fast path]: reconciled with the real counters here.
      const std::size_t young_now = v.young, live_now = v.live;
      const std::size_t room = std::min(young > young_now ? young - young_now : 0,
                                        b.live > live_now ? b.live - live_now : 0);
      d.fast_allowance.store(room, std::memory_order_relaxed);
      d.fast_epoch.store(g_fast_epoch.fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_release);
    }
  }

  double exposed_fraction() const {
    const double wall = wall_seconds();
    return wall > 0 ? charged_exposed() / wall : 0;
  }

  // --verbose: why an allocation-time collection was taken, with every term
  // of the model (Note [One decision over an explicit model]).
  void explain_early(const detail::pressure_snapshot& s, const detail::pressure_decision& dec) const {
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
  void refresh_device() {
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

  double smooth(double old, double sample) const {
    return old > 0 ? (1 - tuning_.smoothing) * old + tuning_.smoothing * sample : sample;
  }

  // Note [Quiet moments]: the young bytes allocated between two hints.
  void learn_stretch(std::size_t i, double t) {
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
  void learn_rate_at_hint(device_state& d, double bytes, double t) {
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
  void learn_rate(const outcome& o) {
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
  void begin_minor(bool on_guess = false, double lag = 0, bool from_events = false) {
    exposed_at_minor_start_ = charged_exposed();
    lag_at_minor_start_ = lag;
    lag_from_events_ = from_events;
    minor_on_guess_ = on_guess;
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
  void charge_minor(const outcome& o) {
    // A sliced minor finished by a cycle's steps had no begin_minor: its
    // slices are charged as measured.
    if (!std::exchange(minor_begun_, false)) return;
    const double measured = charged_exposed() - exposed_at_minor_start_;
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

  // The exposed GC seconds the budget counts (Note [Charging what the lag hid]).
  double charged_exposed() const noexcept { return own_exposed_seconds() - overcharge_.load(std::memory_order_relaxed); }
  double uncharged_seconds() const noexcept override { return overcharge_.load(std::memory_order_relaxed); }

  // `loop`: the minor belongs to the loop, and its yield is the loop's (Note
  // [Set-up minors teach the cost only]; their futility is not learned
  // either way: a set-up keeps its bytes, so none are gone).
  void learn_minor(const outcome& o, bool loop) {
    learn_rate(o);
    // Note [A guess before the first sync]: a minor taken as hidden on the
    // guess that was a quarter exposed or more halves it.
    if (minor_on_guess_ && charged_exposed() - exposed_at_minor_start_ > 0.25 * o.seconds)
      lag_guess_share_ = lag_guess_share_ > 1.0 / 16 ? lag_guess_share_ / 2 : 0;
    minor_on_guess_ = false;
    charge_minor(o);
    minor_cost_.add(static_cast<double>(o.young_before), o.seconds);
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
        else if (gone * 2 >= od.young_before) d.futile = std::min(d.futile * 2, tuning_.max_futile_stretch);
      }
      d.live_after = od.live_after;
      d.old = od.live_after;  // every survivor is old now
      if (gc_.minor_is_whole_heap()) d.floor = od.live_after;  // and nothing old is garbage
    }
    refresh_device();
  }

  void learn_full(const outcome& o) {
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

  void finish_minor(const outcome& o, gc_reason reason) {
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

  void finish_cycle(gc_reason reason) {
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
  bool full_worth(std::size_t* suspect_sum) {
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

  bool pressing(std::size_t i) const {
    return static_cast<double>(dev_[i].live_after) > tuning_.pressing_share * static_cast<double>(device(i).soft_limit());
  }
  double expected_full_cost() const { return full_cost_ > 0 ? full_cost_ : 5 * minor_cost_.mean(); }

  // Whole-heap cycles run in slices: in the device's time at syncs, or
  // paced by the exposed budget slice by slice (decide()), so a cycle may
  // start whenever the exposed budget has room for a slice — with or
  // without slack — or a device is pressed.
  void maybe_start_full(gc_reason reason) {
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

  const detail::pressure_tuning tuning_;
  std::unique_ptr<device_state[]> dev_;  // one per device (capacity: add_device)
  detail::cost_model minor_cost_;
  double exposed_at_minor_start_ = 0, lag_at_minor_start_ = 0;
  bool lag_from_events_ = false;  // begin_minor's `from_events`
  // Note [Charging what the lag hid]; written under the collection lock,
  // read by stats() from any thread.
  std::atomic<double> overcharge_{0};
  bool minor_begun_ = false;  // begin_minor() set the two above for the minor in progress
  bool lag_guessed_ = false;        // the last snapshot's lag rests on the guess
  bool minor_on_guess_ = false;     // the minor in progress was taken on it
  double lag_guess_share_ = 1;      // the guess, x the predicted pause (Note [A guess before the first sync])
  double full_cost_ = 0, full_wall_ = 0;
  double cycle_started_ = 0, exposed_at_cycle_start_ = 0;
  // A cycle that found less than a quarter of the suspected garbage doubles
  // the suspicion the next one needs (the live set grew instead).
  double full_backoff_ = 1;
  std::size_t suspect_at_start_ = 0;
  std::uint64_t own_full_seen_ = 0;
  int headroom_collections_ = 0;  // Note [No collection storms]
  std::atomic<double> fast_refreshed_{0};
  std::uint64_t syncs_at_quiet_ = 0;
  bool syncing_ = false;          // a sync came within the last 64 hints
  std::uint64_t hints_since_sync_ = 0;
  double refreshed_at_ = 0;
  double last_end_ = 0;
  bool rate_started_ = false;  // Note [The allocation rate is per wall second]
  bool floor_known_ = false;   // Note [A floor before the first whole-heap collection]
};

}  // namespace

std::unique_ptr<gc_policy> make_pressure_policy(const std::vector<device_allocator*>& devices, collector& c,
                                                policy_options o) {
  return std::make_unique<pressure_policy>(devices, c, o);
}

}  // namespace gcpressure
