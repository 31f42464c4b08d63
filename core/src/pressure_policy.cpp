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
// Note [Two young budgets]
// A collection at a synchronize, while the device still works, is free up to
// the slack. So the policy has two thresholds:
//   sync budget  = bytes after which a collection at a sync is due: the
//                  minimum when the predicted minor fits in the slack;
//                  otherwise the exposed part x allocation rate / GC budget;
//   alloc budget = bytes after which a collection at an allocation is due:
//                  max(growth x floor, minor cost x rate / GC budget) divided
//                  by the measured yield, capped by the headroom.
// With no syncs (CPU-bound loops, runtimes that never wait) only the alloc
// budget acts: the first version's behaviour. The GC budget is closed-loop on
// exposed time: a sync collection whose exposed part would take the policy's
// exposed GC time over gc_budget x wall time waits.
//
// Note [No collection storms]
// Near the hard limit reserved bytes include the pool's cache, which is
// reclaimable without any collection (the ladder's release_cache step). The
// headroom test therefore uses allocated bytes; and collections that the
// headroom alone asks for back off exponentially in young bytes while they
// reclaim little, and at most two run per iteration hint.
#include <algorithm>
#include <atomic>
#include <vector>

#include "gcpressure/policy.hpp"

namespace gcpressure {

namespace detail {

// Note [Minor cost is fixed + per young byte]
// A minor collection costs a fixed part (roots, dirty pages, re-protecting
// the heap: O(heap) with mprotect dirty bits) plus a part that grows with
// the young objects it must mark and sweep. Least squares over the recent
// (young bytes, seconds) samples separates the two; treating the whole cost
// as fixed makes the young budget and the cost chase each other upwards.
// The first sample (the runtime's first mark of a freshly built heap) is
// skipped, later ones are clamped to 8x the running estimate.
class cost_model {
 public:
  void add(double young, double seconds) {
    if (++seen_ == 1) return;
    const double x = ema_ > 0 ? std::min(seconds, 8 * ema_) : seconds;
    ema_ = ema_ > 0 ? 0.75 * ema_ + 0.25 * x : x;
    if (samples_.size() == 16) samples_.erase(samples_.begin());
    samples_.emplace_back(young, x);
  }
  bool known() const noexcept { return !samples_.empty(); }
  double mean() const noexcept { return ema_; }
  // Fixed part a and per-byte part b of a collection's cost.
  void fit(double* a, double* b) const {
    *a = ema_;
    *b = 0;
    if (samples_.empty()) return;
    const double n = static_cast<double>(samples_.size());
    double sx = 0, sy = 0, sxx = 0, sxy = 0, ymin = samples_.front().second;
    for (const auto& [x, y] : samples_) {
      sx += x;
      sy += y;
      sxx += x * x;
      sxy += x * y;
      ymin = std::min(ymin, y);
    }
    const double den = n * sxx - sx * sx;
    if (samples_.size() < 3 || den <= 1e-9 * n * sxx) {
      *a = ymin;  // no spread in young sizes: call the cheapest one fixed
      return;
    }
    *b = std::max(0.0, (n * sxy - sx * sy) / den);
    *a = std::max(0.0, (sy - *b * sx) / n);
    if (*b == 0) *a = sy / n;
  }
  double predict(double young) const {
    double a, b;
    fit(&a, &b);
    return a + b * young;
  }

 private:
  std::vector<std::pair<double, double>> samples_;
  double ema_ = 0;
  std::uint64_t seen_ = 0;
};

}  // namespace detail

namespace {

constexpr int k_headroom_collections_per_iteration = 2;  // Note [No collection storms]

class pressure_policy final : public gc_policy {
 public:
  pressure_policy(device_allocator& a, collector& c, policy_options o) : gc_policy(a, c, o) {
    last_end_ = now();
    own_full_seen_ = c.counters().own_full_collections;
    refresh_device();
  }
  const char* name() const noexcept override { return "pressure"; }

  void before_allocate(device_allocator& a, std::size_t bytes, stream_ref stream) override {
    if (nothing_due(a, bytes)) return;  // Note [The allocation fast path]
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) {
      // Note [Concurrent allocators]: another thread is collecting. Below
      // the headroom, allocate without queueing behind it. Over it, wait for
      // that collection (bounded): allocating now would take the room it is
      // making for its own allocation, and one of us would fail for nothing.
      if (!over_headroom(a, bytes)) return;
      if (!lk.try_lock_for(std::chrono::seconds(5))) return;
    }
    if (now() - refreshed_at_ > 0.1) refresh_device();  // other tenants: a bounded rate
    const std::size_t young = a.since_mark() + bytes;
    const std::size_t budget = alloc_budget();
    const bool over = over_headroom(a, bytes);
    // A probe on the allocation's stream: work still running there when a
    // collection ends means the host ran ahead and the collection was hidden
    // (Note [Exposed GC time]).
    if (cycle_active()) {
      // Finish the cycle at once when memory is needed now (a blocking
      // collection: Note [Whole-heap cycles pay ...]); otherwise a whole-heap
      // cycle is paced by the exposed budget, a sliced minor waits for syncs.
      const bool need = young >= budget || over;
      if (!need && (minor_cycle_active() || exposed_fraction() >= opts_.gc_budget)) return;
      device_probe probe(*this, stream);
      outcome o;
      if (need) finish_cycle(gc_reason::early);
      else if (step_full_cycle(gc_reason::early, &o)) after_full(o);
      probe.rethrow();
      return;
    }
    const bool headroom_due = over && young >= std::max(opts_.min_young_bytes, backoff_) &&
                              headroom_collections_ < k_headroom_collections_per_iteration;
    if (young < budget && !headroom_due) {
      publish_fast_path(budget);
      return;
    }
    device_probe probe(*this, stream);
    collected_since_quiet_ += young - bytes;
    if (young < budget) ++headroom_collections_;
    begin_minor();
    const outcome o = run_collection(gc_kind::minor, gc_reason::early);
    // Note [No collection storms]: a headroom collection that found little
    // doubles the young bytes the next one needs.
    backoff_ = o.reclaimed * 4 < o.young_before ? std::max(backoff_ * 2, opts_.min_young_bytes) : 0;
    finish_minor(o, gc_reason::early);
    publish_fast_path(alloc_budget());
    probe.rethrow();
  }

  void iteration() override {
    quiet_moment(false);
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;  // another thread's collection: its counters stay
    headroom_collections_ = 0;
    backoff_ = 0;
  }

  void quiet_moment(bool will_block) override {
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;
    quiet_work(will_block);
    publish_fast_path(alloc_budget());
  }

 protected:
  // Note [Collect in the device's time] (policy.cpp): what is due runs while
  // the device works, slice by slice, stopping a slice short of the end of
  // the expected slack so that the work stays hidden. A minor that does not
  // fit runs as a sliced cycle over several syncs where the collector can
  // (Note [Sliced cycles]).
  void before_block(const std::function<bool()>& device_busy) override {
    block_work(device_busy);
    publish_fast_path(alloc_budget());
  }

 private:
  void quiet_work(bool will_block) {
    if (will_block) {
      // No stream to poll: assume the device is busy for the smoothed slack.
      const double t0 = now(), slack = slack_estimate();
      before_block([&] { return now() - t0 < slack; });
      return;
    }
    // Note [Quiet moments defer to syncs]: a loop that also synchronizes
    // gets its collections there, where the device hides them; a collection
    // at the hint would be on the host's path.
    const std::uint64_t syncs = sync_count();
    const bool syncing = syncs != syncs_at_quiet_;
    syncs_at_quiet_ = syncs;
    if (syncing) return;
    if (cycle_active()) {
      if (full_cycle_active() && exposed_fraction() < opts_.gc_budget) {
        outcome o;
        if (step_full_cycle(gc_reason::quiet_moment, &o)) after_full(o);
      }
      return;
    }
    // Note [Quiet moments]: collect here when the next stretch of work (as
    // much as was allocated since the last quiet moment) would cross the
    // alloc budget anyway: the collection then happens where few temporaries
    // are alive instead of in the middle of the work.
    const std::size_t young = alloc_.since_mark();
    const std::size_t total = young + collected_since_quiet_;
    const double stretch = static_cast<double>(total > young_at_quiet_ ? total - young_at_quiet_ : 0);
    stretch_ = stretch_ > 0 ? 0.75 * stretch_ + 0.25 * stretch : stretch;
    young_at_quiet_ = young;
    collected_since_quiet_ = 0;
    const std::size_t budget = alloc_budget();
    const bool enough = young >= static_cast<std::size_t>(opts_.quiet_fraction * static_cast<double>(budget));
    const bool would_cross = static_cast<double>(young) + stretch_ >= static_cast<double>(budget);
    if (young >= opts_.min_young_bytes / 2 && enough && would_cross) {
      begin_minor();
      finish_minor(run_collection(gc_kind::minor, gc_reason::quiet_moment), gc_reason::quiet_moment);
    }
  }

  void block_work(const std::function<bool()>& device_busy) {
    const double deadline = now() + slack_estimate();
    const auto room = [&] { return now() + opts_.slice_seconds <= deadline && device_busy(); };
    if (!cycle_active()) {
      const std::size_t young = alloc_.since_mark();
      if (young < std::max(opts_.min_young_bytes, sync_budget(young))) return;
      // A whole minor only where it surely fits; a sliced one otherwise.
      const double share = gc_.has_incremental_minor() ? 0.5 : 1.0;
      const bool fits =
          minor_cost_.known() && minor_cost_.predict(static_cast<double>(young)) <= share * slack_estimate();
      if (!gc_.has_incremental_minor() || fits) {
        if (!room() && minor_cost_.known()) return;
        begin_minor(true);
        finish_minor(run_collection(gc_kind::minor, gc_reason::quiet_moment), gc_reason::quiet_moment);
        if (!cycle_active()) return;
      }
    }
    while (room()) {
      const gc_kind k = minor_cycle_active() || !cycle_active() ? gc_kind::minor : gc_kind::incremental_full;
      if (!cycle_active()) begin_minor(true);
      outcome o;
      if (!step_cycle(k, gc_reason::quiet_moment, &o)) continue;
      if (k == gc_kind::minor) finish_minor(o, gc_reason::quiet_moment);
      else after_full(o);
      if (!cycle_active()) return;
    }
  }

  // Note [The allocation fast path]
  // before_allocate runs before every allocation (a pool hit costs ~100 ns).
  // When no cycle is in progress and the allocation stays under the young
  // budget, the headroom and the device-free threshold last computed under
  // the collection lock, and the device's free memory was read less than
  // 0.1 s ago, nothing can be due: return with a few relaxed loads and one
  // clock read, without the lock or the cost model. The thresholds are
  // published by the slow paths; a cycle in progress disables the fast path.
  bool nothing_due(device_allocator& a, std::size_t bytes) const noexcept {
    if (fast_young_.load(std::memory_order_relaxed) == 0) return false;
    if (a.since_mark() + bytes >= fast_young_.load(std::memory_order_relaxed)) return false;
    if (a.live_bytes() + bytes > fast_live_.load(std::memory_order_relaxed)) return false;
    if (a.reserved_bytes() + bytes > fast_reserved_.load(std::memory_order_relaxed)) return false;
    return now() - fast_refreshed_.load(std::memory_order_relaxed) < 0.1;
  }

  void publish_fast_path(std::size_t budget) noexcept {
    if (cycle_active()) {
      fast_young_.store(0, std::memory_order_relaxed);
      return;
    }
    const std::size_t hard = alloc_.hard_limit() / 20 * 19;
    fast_live_.store(std::min(alloc_.soft_limit(), hard), std::memory_order_relaxed);
    const std::size_t free_then = device_free_.load(std::memory_order_relaxed);
    const std::size_t at = reserved_at_refresh_.load(std::memory_order_relaxed);
    fast_reserved_.store(free_then > 0 ? at + free_then - free_then / 10 : ~std::size_t{0}, std::memory_order_relaxed);
    fast_refreshed_.store(refreshed_at_, std::memory_order_relaxed);
    fast_young_.store(budget, std::memory_order_relaxed);
  }

  double exposed_fraction() const {
    const double wall = wall_seconds();
    return wall > 0 ? own_exposed_seconds() / wall : 0;
  }

  // Until the first whole-heap collection the floor is 0: every old byte is
  // suspect, so the first cycle comes early and measures the true floor.
  double floor_estimate() const noexcept { return static_cast<double>(floor_); }

  // Note [Two young budgets]: the alloc budget.
  std::size_t alloc_budget() const {
    const double mem = std::max(opts_.growth * floor_estimate(), static_cast<double>(opts_.min_young_bytes));
    double b = std::max(mem, time_floor(minor_cost_.known() ? minor_cost_.predict(mem) : 0)) /
               std::clamp(yield_, 0.5, 1.0);
    return static_cast<std::size_t>(std::min(b, headroom()));
  }

  // Note [Two young budgets]: the sync budget, for `young` bytes now.
  std::size_t sync_budget(std::size_t young) const {
    // Learn the cost where it is cheapest. Then the exposed part of a minor
    // as measured (Note [Exposed GC time]); before that, the part of a whole
    // minor that outlasts the slack (a sliced one is assumed to fit).
    if (!minor_cost_.known()) return opts_.min_young_bytes;
    double exposed = minor_exposed_;
    if (minor_exposed_samples_ == 0)
      exposed = gc_.has_incremental_minor()
                    ? 0
                    : std::max(0.0, minor_cost_.predict(static_cast<double>(young)) - slack_estimate());
    if (exposed <= 1e-4) return opts_.min_young_bytes;
    const double wall = wall_seconds();
    if (wall > 0 && (own_exposed_seconds() + exposed) / wall > opts_.gc_budget) return alloc_budget();
    const double b = std::max(static_cast<double>(opts_.min_young_bytes), time_floor(exposed));
    return static_cast<std::size_t>(std::min({b, static_cast<double>(alloc_budget()), headroom()}));
  }

  // Young bytes that keep collections costing `cost` each within the GC
  // budget at the measured allocation rate.
  double time_floor(double cost) const {
    if (rate_ <= 0 || cost <= 0) return 0;
    return cost * rate_ / opts_.gc_budget;
  }

  // Room for young bytes under the soft limit and the device's free memory.
  double headroom() const {
    const double live = static_cast<double>(live_after_);
    const double soft = static_cast<double>(alloc_.soft_limit());
    double room = soft > live ? soft - live : 0;
    const std::size_t free_then = device_free_.load(std::memory_order_relaxed);
    if (free_then > 0) room = std::min(room, 0.9 * static_cast<double>(free_then));
    return std::max(room, static_cast<double>(opts_.min_young_bytes));
  }

  // True when this allocation would take live bytes past the soft limit, or
  // allocated bytes near the hard limit or the device's free memory
  // (Note [No collection storms]: cached bytes do not count).
  bool over_headroom(device_allocator& a, std::size_t bytes) const {
    const std::size_t live = a.live_bytes() + bytes;
    if (live > a.soft_limit()) return true;
    if (live > a.hard_limit() / 20 * 19) return true;
    // Free device memory (other processes count), refreshed at a bounded
    // rate. Read without the collection lock by threads that wait for
    // another's collection (Note [Concurrent allocators]): relaxed atomics.
    const std::size_t reserved = a.reserved_bytes() + bytes;
    const std::size_t at_refresh = reserved_at_refresh_.load(std::memory_order_relaxed);
    const std::size_t free_then = device_free_.load(std::memory_order_relaxed);
    const std::size_t grown = reserved > at_refresh ? reserved - at_refresh : 0;
    return free_then > 0 && grown + free_then / 10 > free_then;
  }

  void refresh_device() {
    refreshed_at_ = now();
    try {
      device_free_.store(alloc_.device_memory().free, std::memory_order_relaxed);
      reserved_at_refresh_.store(alloc_.reserved_bytes(), std::memory_order_relaxed);
    } catch (...) {
      device_free_.store(0, std::memory_order_relaxed);
    }
  }

  void learn_rate(const outcome& o) {
    const double interval = now() - last_end_ - o.seconds;
    if (interval > 0 && o.young_before > 0) {
      const double r = static_cast<double>(o.young_before) / interval;
      rate_ = rate_ > 0 ? 0.75 * rate_ + 0.25 * r : r;
    }
    last_end_ = now();
  }

  // The exposed seconds of the minor that starts now are measured from here;
  // only minors run at syncs teach the sync budget what they expose.
  void begin_minor(bool at_sync = false) {
    exposed_at_minor_start_ = own_exposed_seconds();
    minor_at_sync_ = at_sync;
  }

  void after_minor(const outcome& o) {
    learn_rate(o);
    if (minor_at_sync_) {
      const double exposed = std::max(0.0, own_exposed_seconds() - exposed_at_minor_start_);
      minor_exposed_ = minor_exposed_samples_++ ? 0.75 * minor_exposed_ + 0.25 * exposed : exposed;
      minor_at_sync_ = false;
    }
    minor_cost_.add(static_cast<double>(o.young_before), o.seconds);
    // Yield: the share of the young bytes that is gone, whoever freed it
    // (the runtime's own collections free handles too, unseen by `reclaimed`).
    if (o.young_before > 0) {
      const std::size_t grew = o.live_after > live_after_ ? o.live_after - live_after_ : 0;
      const std::size_t gone = o.young_before > grew ? o.young_before - grew : 0;
      // Smoothed: one minor measured while finalizers were still queued
      // (seen on the H200: 0.5 of 4 GiB found, 15 GiB by the next) must not
      // quadruple the next budget.
      const double y = static_cast<double>(gone) / static_cast<double>(o.young_before);
      yield_ = 0.75 * yield_ + 0.25 * y;
    }
    live_after_ = o.live_after;
    old_ = o.live_after;  // every survivor is old now
    if (gc_.minor_is_whole_heap()) set_floor(o.live_after);  // and nothing old is garbage
    refresh_device();
  }

  void after_full(const outcome& o) {
    learn_rate(o);
    full_cost_ = full_cost_ > 0 ? 0.75 * full_cost_ + 0.25 * o.seconds : o.seconds;
    const double wall = now() - cycle_started_;
    full_wall_ = full_wall_ > 0 ? 0.75 * full_wall_ + 0.25 * wall : wall;
    full_backoff_ = o.reclaimed * 4 < suspect_at_start_ ? std::min(full_backoff_ * 2, 64.0) : 1;
    live_after_ = o.live_after;
    set_floor(o.live_after);
    refresh_device();
  }

  void set_floor(std::size_t live) { floor_ = old_ = live; }

  void finish_minor(const outcome& o, gc_reason reason) {
    after_minor(o);
    young_at_quiet_ = 0;
    maybe_start_full(reason);
  }

  void finish_cycle(gc_reason reason) {
    const gc_kind k = minor_cycle_active() ? gc_kind::minor : gc_kind::incremental_full;
    outcome o;
    bool done = step_cycle(k, reason, &o, false);
    while (!done) done = step_cycle(k, reason, &o, true);
    if (k == gc_kind::minor) finish_minor(o, reason);
    else after_full(o);
  }

  // Note [Generations of device bytes], Note [Whole-heap cycles pay for the
  // young bytes they hold].
  void maybe_start_full(gc_reason reason) {
    const std::size_t live = alloc_.live_bytes();
    const std::uint64_t own_full = gc_.counters().own_full_collections;
    if (own_full != own_full_seen_) {  // the runtime ran a whole-heap collection itself
      own_full_seen_ = own_full;
      set_floor(live);
      return;
    }
    old_ = std::min(old_, live);
    const std::size_t suspect = old_ > floor_ ? old_ - floor_ : 0;
    if (suspect < opts_.min_young_bytes) return;
    const double expected_cost = full_cost_ > 0 ? full_cost_ : 5 * minor_cost_.mean();
    const double expected_wall = full_wall_ > 0 ? full_wall_ : 2 * expected_cost;
    const double held = rate_ * expected_wall;
    const std::size_t young_budget = sync_count() > 0 ? sync_budget(alloc_.since_mark()) : alloc_budget();
    const bool pressing = live_after_ > alloc_.soft_limit() / 10 * 8;
    const bool worth =
        static_cast<double>(suspect) >= full_backoff_ * std::max(held, static_cast<double>(young_budget)) || pressing;
    if (!worth) return;
    const double wall = wall_seconds();
    const bool in_device_time = sync_count() > 0 && slack_estimate() > 0;
    const bool affordable =
        in_device_time || (wall > 0 && (own_exposed_seconds() + expected_cost) / wall <= opts_.gc_budget);
    if (!affordable && !pressing) return;
    cycle_started_ = now();
    suspect_at_start_ = suspect;
    outcome o;
    if (step_full_cycle(reason, &o)) after_full(o);
  }

  detail::cost_model minor_cost_;
  double minor_exposed_ = 0, exposed_at_minor_start_ = 0;  // smoothed exposed seconds per minor
  std::uint64_t minor_exposed_samples_ = 0;
  bool minor_at_sync_ = false;
  double full_cost_ = 0, full_wall_ = 0, rate_ = 0, yield_ = 1.0;
  double cycle_started_ = 0;
  // Quiet-moment bookkeeping: bytes allocated per stretch between hints.
  double stretch_ = 0;
  std::size_t young_at_quiet_ = 0, collected_since_quiet_ = 0;
  std::size_t live_after_ = 0, old_ = 0, floor_ = 0;
  // A cycle that found less than a quarter of the suspected garbage doubles
  // the suspicion the next one needs (the live set grew instead).
  double full_backoff_ = 1;
  std::size_t suspect_at_start_ = 0;
  std::uint64_t own_full_seen_ = 0;
  // Note [No collection storms]
  int headroom_collections_ = 0;
  std::size_t backoff_ = 0;
  std::atomic<std::size_t> device_free_{0}, reserved_at_refresh_{0};
  // Note [The allocation fast path]: 0 = take the slow path.
  std::atomic<std::size_t> fast_young_{0}, fast_live_{0}, fast_reserved_{0};
  std::atomic<double> fast_refreshed_{0};
  std::uint64_t syncs_at_quiet_ = 0;
  double refreshed_at_ = 0;
  double last_end_ = 0;
};

}  // namespace

std::unique_ptr<gc_policy> make_pressure_policy(device_allocator& a, collector& c, policy_options o) {
  return std::make_unique<pressure_policy>(a, c, o);
}

}  // namespace gcpressure
