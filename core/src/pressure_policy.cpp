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
//                  by the measured yield, times the futile stretch (Note
//                  [Collections that find nothing]), capped by the headroom.
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
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "cost_model.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/policy.hpp"

namespace gcpressure {


namespace {

constexpr int k_headroom_collections_per_iteration = 2;  // Note [No collection storms]
constexpr double k_max_futile_stretch = 16;               // Note [Collections that find nothing]

// Note [Per-device state]
// What the policy learns about device memory is per device (Note [One
// policy, N devices] in policy.hpp): its floor, old and live bytes, its
// allocation rate and yield, its headroom and the other tenants' share of
// it. What it learns about the collector is shared: the cost of a minor
// (which depends on the host heap, and on the young objects of all devices
// together), the cost and wall time of a whole-heap cycle, the exposed time.
struct device_state {
  // Guarded by collect_mu_.
  double rate = 0, yield = 1.0;  // young bytes per second; share of young bytes gone at a collection
  std::size_t live_after = 0, old = 0, floor = 0;  // Note [Generations of device bytes]
  double stretch = 0;            // Note [Quiet moments]: bytes per stretch between hints
  std::size_t young_at_quiet = 0, collected_since_quiet = 0;
  std::size_t backoff = 0;       // Note [No collection storms]
  double futile = 1;             // Note [Collections that find nothing]: the alloc budget's stretch
  // Relaxed atomics: read without the lock (Note [Concurrent allocators],
  // Note [The allocation fast path]).
  std::atomic<std::size_t> device_free{0}, reserved_at_refresh{0};
  std::atomic<std::size_t> fast_young{0}, fast_live{0}, fast_reserved{0};  // 0 fast_young: slow path
};

class pressure_policy final : public gc_policy {
 public:
  pressure_policy(const std::vector<device_allocator*>& d, collector& c, policy_options o)
      : gc_policy(d, c, o), dev_(new device_state[detail::device_list::capacity]) {
    last_end_ = now();
    own_full_seen_ = c.counters().own_full_collections;
    refresh_device();
  }
  const char* name() const noexcept override { return "pressure"; }

  void before_allocate(device_allocator& a, std::size_t bytes, stream_ref stream) override {
    const std::size_t i = device_index(a);
    if (i == device_count() || nothing_due(i, a, bytes)) return;  // Note [The allocation fast path]
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) {
      // Note [Concurrent allocators]: another thread is collecting. Below
      // the headroom, allocate without queueing behind it. Over it, wait for
      // that collection (bounded): allocating now would take the room it is
      // making for its own allocation, and one of us would fail for nothing.
      if (!over_headroom(i, a, bytes)) return;
      if (!wait_for_collection_lock(lk, 5.0)) return;
    }
    if (now() - refreshed_at_ > 0.1) refresh_device();  // other tenants: a bounded rate
    device_state& d = dev_[i];
    const std::size_t young = a.since_mark() + bytes;
    const std::size_t budget = alloc_budget(i);
    const bool over = over_headroom(i, a, bytes);
    // A probe on the allocation's stream: work still running there when a
    // collection ends means the host ran ahead and the collection was hidden
    // (Note [Exposed GC time]).
    if (cycle_active()) {
      // Finish the cycle at once when memory is needed now (a blocking
      // collection: Note [Whole-heap cycles pay ...]); otherwise a whole-heap
      // cycle is paced by the exposed budget, a sliced minor waits for syncs.
      const bool need = young >= budget || over;
      if (!need && (minor_cycle_active() || exposed_fraction() >= opts_.gc_budget)) return;
      device_probe probe(*this, stream, &a);
      outcome o;
      if (need) finish_cycle(gc_reason::early);
      else if (step_full_cycle(gc_reason::early, &o)) after_full(o);
      probe.rethrow();
      return;
    }
    const bool headroom_due = over && young >= std::max(opts_.min_young_bytes, d.backoff) &&
                              headroom_collections_ < k_headroom_collections_per_iteration;
    if (young < budget && !headroom_due) {
      publish_fast_path();
      return;
    }
    if (opts_.verbose) explain_early(i, young, budget, over);
    device_probe probe(*this, stream, &a);
    for (std::size_t j = 0; j < device_count(); ++j) dev_[j].collected_since_quiet += device(j).since_mark();
    if (young < budget) ++headroom_collections_;
    begin_minor();
    const outcome o = run_collection(gc_kind::minor, gc_reason::early);
    // Note [No collection storms]: a headroom collection that found little
    // on this device doubles the young bytes the next one needs there.
    const device_outcome& od = o.devices[i];
    d.backoff = od.reclaimed * 4 < od.young_before ? std::max(d.backoff * 2, opts_.min_young_bytes) : 0;
    finish_minor(o, gc_reason::early);
    publish_fast_path();
    probe.rethrow();
  }

  void iteration() override {
    quiet_moment(false);
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;  // another thread's collection: its counters stay
    headroom_collections_ = 0;
    for (std::size_t i = 0; i < device_count(); ++i) dev_[i].backoff = 0;
  }

  void quiet_moment(bool will_block) override {
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;
    quiet_work(will_block);
    publish_fast_path();
  }

 protected:
  void device_added(std::size_t) override {
    refresh_device();
    publish_fast_path();
  }

  // Note [Collect in the device's time] (policy.cpp): what is due runs while
  // the device works, slice by slice, stopping a slice short of the end of
  // the expected slack so that the work stays hidden. A minor that does not
  // fit runs as a sliced cycle over several syncs where the collector can
  // (Note [Sliced cycles]).
  void before_block(device_allocator&, const std::function<bool()>& device_busy) override {
    block_work(device_busy);
    publish_fast_path();
  }

 private:
  std::size_t young_of(std::size_t i) const noexcept { return device(i).since_mark(); }
  std::size_t young_all() const noexcept {
    std::size_t y = 0;
    for (std::size_t i = 0, n = device_count(); i < n; ++i) y += device(i).since_mark();
    return y;
  }

  void quiet_work(bool will_block) {
    if (will_block) {
      // No stream to poll: assume the device is busy for the smoothed slack.
      const double t0 = now(), slack = slack_estimate();
      block_work([&] { return now() - t0 < slack; });
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
    // are alive instead of in the middle of the work. Any device may ask.
    bool due = false;
    for (std::size_t i = 0; i < device_count(); ++i) due = quiet_due(i) || due;
    if (due) {
      begin_minor();
      finish_minor(run_collection(gc_kind::minor, gc_reason::quiet_moment), gc_reason::quiet_moment);
    }
  }

  // Updates device i's stretch bookkeeping; true if it wants a collection now.
  bool quiet_due(std::size_t i) {
    device_state& d = dev_[i];
    const std::size_t young = young_of(i);
    const std::size_t total = young + d.collected_since_quiet;
    const double stretch = static_cast<double>(total > d.young_at_quiet ? total - d.young_at_quiet : 0);
    d.stretch = d.stretch > 0 ? 0.75 * d.stretch + 0.25 * stretch : stretch;
    d.young_at_quiet = young;
    d.collected_since_quiet = 0;
    const std::size_t budget = alloc_budget(i);
    const bool enough = young >= static_cast<std::size_t>(opts_.quiet_fraction * static_cast<double>(budget));
    const bool would_cross = static_cast<double>(young) + d.stretch >= static_cast<double>(budget);
    return young >= opts_.min_young_bytes / 2 && enough && would_cross;
  }

  // True if some device's young bytes reached its sync budget.
  bool sync_due() const {
    for (std::size_t i = 0; i < device_count(); ++i) {
      const std::size_t young = young_of(i);
      if (young >= std::max(opts_.min_young_bytes, sync_budget(i, young))) return true;
    }
    return false;
  }

  void block_work(const std::function<bool()>& device_busy) {
    const double deadline = now() + slack_estimate();
    const auto room = [&] { return now() + opts_.slice_seconds <= deadline && device_busy(); };
    if (!cycle_active()) {
      if (!sync_due()) return;
      // A whole minor only where it surely fits; a sliced one otherwise.
      const double share = gc_.has_incremental_minor() ? 0.5 : 1.0;
      const bool fits =
          minor_cost_.known() && minor_cost_.predict(static_cast<double>(young_all())) <= share * slack_estimate();
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
  // When no cycle is in progress and the allocation stays under its
  // device's young budget, headroom and device-free threshold last computed
  // under the collection lock, and the devices' free memory was read less
  // than 0.1 s ago, nothing can be due: return with a few relaxed loads and
  // one clock read, without the lock or the cost model. The thresholds are
  // published by the slow paths; a cycle in progress disables the fast path.
  bool nothing_due(std::size_t i, device_allocator& a, std::size_t bytes) const noexcept {
    const device_state& d = dev_[i];
    const std::size_t young_limit = d.fast_young.load(std::memory_order_relaxed);
    if (young_limit == 0 || a.since_mark() + bytes >= young_limit) return false;
    if (a.live_bytes() + bytes > d.fast_live.load(std::memory_order_relaxed)) return false;
    if (a.reserved_bytes() + bytes > d.fast_reserved.load(std::memory_order_relaxed)) return false;
    return now() - fast_refreshed_.load(std::memory_order_relaxed) < 0.1;
  }

  void publish_fast_path() noexcept {
    const bool off = cycle_active();
    fast_refreshed_.store(refreshed_at_, std::memory_order_relaxed);
    for (std::size_t i = 0; i < device_count(); ++i) {
      device_state& d = dev_[i];
      if (off) {
        d.fast_young.store(0, std::memory_order_relaxed);
        continue;
      }
      const device_allocator& a = device(i);
      const std::size_t hard = a.hard_limit() / 20 * 19;
      d.fast_live.store(std::min(a.soft_limit(), hard), std::memory_order_relaxed);
      const std::size_t free_then = d.device_free.load(std::memory_order_relaxed);
      const std::size_t at = d.reserved_at_refresh.load(std::memory_order_relaxed);
      d.fast_reserved.store(free_then > 0 ? at + free_then - free_then / 10 : ~std::size_t{0},
                            std::memory_order_relaxed);
      d.fast_young.store(alloc_budget(i), std::memory_order_relaxed);
    }
  }

  double exposed_fraction() const {
    const double wall = wall_seconds();
    return wall > 0 ? own_exposed_seconds() / wall : 0;
  }

  // The alloc budget's memory term: max(growth x floor, min_young_bytes).
  double memory_floor(const device_state& d) const {
    return std::max(opts_.growth * static_cast<double>(d.floor), static_cast<double>(opts_.min_young_bytes));
  }

  // Note [Two young budgets]: device i's alloc budget. Until the first
  // whole-heap collection the floor is 0: every old byte is suspect, so the
  // first cycle comes early and measures the true floor.
  std::size_t alloc_budget(std::size_t i) const {
    const device_state& d = dev_[i];
    const double mem = memory_floor(d);
    double b = std::max(mem, time_floor(i, minor_cost_.known() ? minor_cost_.predict(mem) : 0)) /
               std::clamp(d.yield, 0.5, 1.0) * d.futile;
    return static_cast<std::size_t>(std::min(b, headroom(i)));
  }

  // Note [Two young budgets]: device i's sync budget, for `young` bytes now.
  std::size_t sync_budget(std::size_t i, std::size_t young) const {
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
    if (wall > 0 && (own_exposed_seconds() + exposed) / wall > opts_.gc_budget) return alloc_budget(i);
    const double b = std::max(static_cast<double>(opts_.min_young_bytes), time_floor(i, exposed));
    return static_cast<std::size_t>(std::min({b, static_cast<double>(alloc_budget(i)), headroom(i)}));
  }

  // --verbose: why an allocation-time collection was taken, with every term
  // of device i's alloc budget (Note [Two young budgets]).
  void explain_early(std::size_t i, std::size_t young, std::size_t budget, bool over) const {
    const device_state& d = dev_[i];
    const double mem = memory_floor(d);
    const double cost = minor_cost_.known() ? minor_cost_.predict(mem) : 0;
    std::fprintf(stderr,
                 "gcpressure[pressure]: early on device %zu: young %s, alloc budget %s (growth x floor %s, "
                 "predicted minor %.1f us x rate %s/s / gc budget %.2f = %s, yield %.2f, futile x%.0f, headroom %s)%s\n",
                 i, format_bytes(young).c_str(), format_bytes(budget).c_str(),
                 format_bytes(static_cast<std::size_t>(mem)).c_str(), cost * 1e6,
                 format_bytes(static_cast<std::size_t>(d.rate)).c_str(), opts_.gc_budget,
                 format_bytes(static_cast<std::size_t>(time_floor(i, cost))).c_str(), d.yield, d.futile,
                 format_bytes(static_cast<std::size_t>(headroom(i))).c_str(), over ? ", over the headroom" : "");
  }

  // Young bytes on device i that keep collections costing `cost` each within
  // the GC budget at that device's allocation rate. A collection resets
  // every device's young bytes, so collections come at the rate of the
  // device that fills its budget first: per-device floors bound it.
  double time_floor(std::size_t i, double cost) const {
    const double rate = dev_[i].rate;
    if (rate <= 0 || cost <= 0) return 0;
    return cost * rate / opts_.gc_budget;
  }

  // Room for young bytes on device i under its soft limit and free memory.
  double headroom(std::size_t i) const {
    const device_state& d = dev_[i];
    const double live = static_cast<double>(d.live_after);
    const double soft = static_cast<double>(device(i).soft_limit());
    double room = soft > live ? soft - live : 0;
    const std::size_t free_then = d.device_free.load(std::memory_order_relaxed);
    if (free_then > 0) room = std::min(room, 0.9 * static_cast<double>(free_then));
    return std::max(room, static_cast<double>(opts_.min_young_bytes));
  }

  // True when this allocation would take live bytes past the soft limit, or
  // allocated bytes near the hard limit or the device's free memory
  // (Note [No collection storms]: cached bytes do not count).
  bool over_headroom(std::size_t i, device_allocator& a, std::size_t bytes) const {
    const std::size_t live = a.live_bytes() + bytes;
    if (live > a.soft_limit()) return true;
    if (live > a.hard_limit() / 20 * 19) return true;
    // Free device memory (other processes count), refreshed at a bounded
    // rate. Read without the collection lock by threads that wait for
    // another's collection (Note [Concurrent allocators]): relaxed atomics.
    const device_state& d = dev_[i];
    const std::size_t reserved = a.reserved_bytes() + bytes;
    const std::size_t at_refresh = d.reserved_at_refresh.load(std::memory_order_relaxed);
    const std::size_t free_then = d.device_free.load(std::memory_order_relaxed);
    const std::size_t grown = reserved > at_refresh ? reserved - at_refresh : 0;
    return free_then > 0 && grown + free_then / 10 > free_then;
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

  void learn_rate(const outcome& o) {
    const double interval = now() - last_end_ - o.seconds;
    for (std::size_t i = 0; i < o.devices.size(); ++i) {
      device_state& d = dev_[i];
      if (interval <= 0 || o.devices[i].young_before == 0) continue;
      const double r = static_cast<double>(o.devices[i].young_before) / interval;
      d.rate = d.rate > 0 ? 0.75 * d.rate + 0.25 * r : r;
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
    for (std::size_t i = 0; i < o.devices.size(); ++i) {
      device_state& d = dev_[i];
      const device_outcome& od = o.devices[i];
      // Yield: the share of the young bytes that is gone, whoever freed it
      // (the runtime's own collections free handles too, unseen by
      // `reclaimed`). Smoothed: one minor measured while finalizers were
      // still queued (seen on the H200: 0.5 of 4 GiB found, 15 GiB by the
      // next) must not quadruple the next budget.
      const std::size_t grew = od.live_after > d.live_after ? od.live_after - d.live_after : 0;
      const std::size_t gone = od.young_before > grew ? od.young_before - grew : 0;
      if (od.young_before > 0)
        d.yield = 0.75 * d.yield + 0.25 * static_cast<double>(gone) / static_cast<double>(od.young_before);
      if (od.young_before >= opts_.min_young_bytes) {  // Note [Collections that find nothing]
        if (od.reclaimed * 16 >= od.young_before) d.futile = 1.0;
        else if (gone * 2 >= od.young_before) d.futile = std::min(d.futile * 2, k_max_futile_stretch);
      }
      d.live_after = od.live_after;
      d.old = od.live_after;  // every survivor is old now
      if (gc_.minor_is_whole_heap()) d.floor = od.live_after;  // and nothing old is garbage
    }
    refresh_device();
  }

  void after_full(const outcome& o) {
    learn_rate(o);
    full_cost_ = full_cost_ > 0 ? 0.75 * full_cost_ + 0.25 * o.seconds : o.seconds;
    const double wall = now() - cycle_started_;
    full_wall_ = full_wall_ > 0 ? 0.75 * full_wall_ + 0.25 * wall : wall;
    full_backoff_ = o.reclaimed * 4 < suspect_at_start_ ? std::min(full_backoff_ * 2, 64.0) : 1;
    for (std::size_t i = 0; i < o.devices.size(); ++i) {
      dev_[i].live_after = o.devices[i].live_after;
      dev_[i].floor = dev_[i].old = o.devices[i].live_after;
    }
    refresh_device();
  }

  void finish_minor(const outcome& o, gc_reason reason) {
    after_minor(o);
    for (std::size_t i = 0; i < device_count(); ++i) dev_[i].young_at_quiet = 0;
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
  // young bytes they hold]: a cycle is worth it when one device's suspected
  // garbage is (the most-pressed device decides, never the sum).
  bool full_worth(std::size_t* suspect_sum) {
    const double expected_wall = full_wall_ > 0 ? full_wall_ : 2 * expected_full_cost();
    bool worth = false;
    *suspect_sum = 0;
    for (std::size_t i = 0; i < device_count(); ++i) {
      device_state& d = dev_[i];
      d.old = std::min(d.old, device(i).live_bytes());
      const std::size_t suspect = d.old > d.floor ? d.old - d.floor : 0;
      *suspect_sum += suspect;
      if (suspect < opts_.min_young_bytes) continue;
      // Note [Collections that find nothing]: this device's runtime frees its
      // young bytes itself, none were promoted as garbage: old is live.
      if (d.futile > 1 && !pressing(i)) continue;
      // Garbage on a device nobody allocates from costs nothing until its
      // memory is needed: an idle device asks for a cycle only when pressed.
      if (d.rate <= 0 && !pressing(i)) continue;
      const double held = d.rate * expected_wall;
      const std::size_t young_budget = sync_count() > 0 ? sync_budget(i, young_of(i)) : alloc_budget(i);
      const bool enough = static_cast<double>(suspect) >= full_backoff_ * std::max(held, static_cast<double>(young_budget));
      worth = worth || enough || pressing(i);
    }
    return worth;
  }

  bool pressing(std::size_t i) const { return dev_[i].live_after > device(i).soft_limit() / 10 * 8; }
  double expected_full_cost() const { return full_cost_ > 0 ? full_cost_ : 5 * minor_cost_.mean(); }

  void maybe_start_full(gc_reason reason) {
    const std::uint64_t own_full = gc_.counters().own_full_collections;
    if (own_full != own_full_seen_) {  // the runtime ran a whole-heap collection itself
      own_full_seen_ = own_full;
      for (std::size_t i = 0; i < device_count(); ++i) dev_[i].floor = dev_[i].old = device(i).live_bytes();
      return;
    }
    std::size_t suspect = 0;
    if (!full_worth(&suspect)) return;
    bool any_pressing = false;
    for (std::size_t i = 0; i < device_count(); ++i) any_pressing = any_pressing || pressing(i);
    const double wall = wall_seconds();
    const bool in_device_time = sync_count() > 0 && slack_estimate() > 0;
    const bool affordable =
        in_device_time || (wall > 0 && (own_exposed_seconds() + expected_full_cost()) / wall <= opts_.gc_budget);
    if (!affordable && !any_pressing) return;
    cycle_started_ = now();
    suspect_at_start_ = suspect;
    outcome o;
    if (step_full_cycle(reason, &o)) after_full(o);
  }

  std::unique_ptr<device_state[]> dev_;  // one per device (capacity: add_device)
  detail::cost_model minor_cost_;
  double minor_exposed_ = 0, exposed_at_minor_start_ = 0;  // smoothed exposed seconds per minor
  std::uint64_t minor_exposed_samples_ = 0;
  bool minor_at_sync_ = false;
  double full_cost_ = 0, full_wall_ = 0;
  double cycle_started_ = 0;
  // A cycle that found less than a quarter of the suspected garbage doubles
  // the suspicion the next one needs (the live set grew instead).
  double full_backoff_ = 1;
  std::size_t suspect_at_start_ = 0;
  std::uint64_t own_full_seen_ = 0;
  int headroom_collections_ = 0;  // Note [No collection storms]
  std::atomic<double> fast_refreshed_{0};
  std::uint64_t syncs_at_quiet_ = 0;
  double refreshed_at_ = 0;
  double last_end_ = 0;
};

}  // namespace

std::unique_ptr<gc_policy> make_pressure_policy(const std::vector<device_allocator*>& devices, collector& c,
                                                policy_options o) {
  return std::make_unique<pressure_policy>(devices, c, o);
}

}  // namespace gcpressure
