// The policy base (timing, counters, the collector half of the reclaim
// ladder) and the "pressure" policy.
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
//   floor  = device bytes live right after the last whole-heap cycle,
// and treats old - floor as old bytes that may be garbage: promoted
// temporaries. Minor collections handle young garbage; a whole-heap cycle is
// scheduled only when the suspected old garbage is worth a young budget, and
// it runs incrementally, one bounded slice per allocation, paced by the GC
// time budget. A blocking full collection is never scheduled; only the reclaim
// ladder runs one, when an allocation would otherwise fail.
//
// Note [Budgets are measured]
// The young budget is the larger of (a) growth x the live set the last
// collection left and (b) the bytes that keep minor-collection time within
// the GC budget at the measured allocation rate and the measured cost of a
// minor collection (c_minor * rate / budget), scaled up when collections
// reclaim little of what was allocated. It is capped by the headroom under
// the soft limit and under the device's free memory.
#include "gcpressure/policy.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <utility>
#include <vector>

#include "gcpressure/error.hpp"

namespace gcpressure {

namespace {
using clock_type = std::chrono::steady_clock;

class steady_source final : public clock_source {
 public:
  double now() const noexcept override {
    return std::chrono::duration<double>(clock_type::now().time_since_epoch()).count();
  }
};
}  // namespace

const clock_source& steady_clock_source() noexcept {
  static const steady_source s;
  return s;
}

policy_options policy_options::from_config(const config& c) {
  policy_options o;
  o.gc_budget = c.gc_budget;
  o.every_n = c.every_n;
  o.verbose = c.verbose;
  return o;
}

gc_policy::gc_policy(device_allocator& a, collector& c, policy_options o)
    : alloc_(a),
      gc_(c),
      opts_(o),
      clock_(o.clock ? o.clock : &steady_clock_source()),
      start_(clock_->now()),
      counters0_(c.counters()) {
  GCPRESSURE_EXPECTS(o.gc_budget > 0 && o.gc_budget <= 1, "policy_options.gc_budget must be in (0, 1]");
  GCPRESSURE_EXPECTS(o.every_n >= 1, "policy_options.every_n must be >= 1");
  a.set_hook(this);
}

gc_policy::~gc_policy() {
  if (alloc_.hook() == this) alloc_.set_hook(nullptr);
}

double gc_policy::wall_seconds() const noexcept { return clock_->now() - start_; }

void gc_policy::record(gc_kind kind, gc_reason reason, const outcome& o, double pause) {
  std::lock_guard<std::mutex> lk(stats_mu_);
  stats_.by_kind[static_cast<int>(kind)]++;
  stats_.by_reason[static_cast<int>(reason)]++;
  stats_.gc_seconds += o.seconds;
  stats_.longest_pause_seconds = std::max(stats_.longest_pause_seconds, pause);
  stats_.reclaimed_bytes += o.reclaimed;
  ++collections_;
  if (opts_.verbose)
    std::fprintf(stderr, "gcpressure[%s]: %s collection (%s) %.3f ms, reclaimed %s, live %s\n", name(),
                 to_string(kind), to_string(reason), o.seconds * 1e3, format_bytes(o.reclaimed).c_str(),
                 format_bytes(o.live_after).c_str());
}

namespace {
// Note [No nested collections]: a collection runs runtime code (finalizers)
// that may allocate or ask for a collection on this thread; a runtime's
// collector is not re-entrant, so such a nested request does nothing.
thread_local int t_collecting = 0;
struct collecting_scope {
  collecting_scope() { ++t_collecting; }
  ~collecting_scope() { --t_collecting; }
};

// The probe collections on this thread are measured against (innermost).
thread_local gc_policy::device_probe* t_probe = nullptr;
}  // namespace

// Note [Exposed GC time]
// A collection costs the user only the part of it during which the host
// would otherwise have been working. When the host collects while the device
// still runs work queued before the collection (at a synchronize, or when the
// host ran ahead of the device), that part is free. The probe records an
// event on the stream when it is made; after each collection (or slice) the
// policy asks whether it has completed. Still busy: the whole collection was
// hidden (exact). Completed: the device finished somewhere inside it, and the
// whole collection is counted as exposed — an upper bound, as tight as the
// slices are short. Without a probe (no stream known) everything is exposed.
gc_policy::device_probe::device_probe(gc_policy& p, stream_ref stream) : p_(p), prev_(t_probe) {
  try {
    ops_ = &p.alloc_.streams();
    event_ = ops_->record(stream);
  } catch (...) {
    ops_ = nullptr;  // no event: every collection under this probe counts as exposed
    event_ = nullptr;
  }
  t_probe = this;
}

gc_policy::device_probe::~device_probe() {
  t_probe = prev_;
  if (ops_ && event_) ops_->release(event_);
}

bool gc_policy::device_probe::busy() {
  if (done_ || !ops_ || !event_) return false;
  try {
    done_ = ops_->query(event_);
  } catch (...) {
    done_ = true;
  }
  return !done_;
}

void gc_policy::account_exposure(double seconds) {
  const bool hidden = t_probe && &t_probe->p_ == this && t_probe->busy();
  std::lock_guard<std::mutex> lk(stats_mu_);
  (hidden ? stats_.hidden_gc_seconds : stats_.exposed_gc_seconds) += seconds;
}

gc_policy::outcome gc_policy::run_collection(gc_kind kind, gc_reason reason) {
  outcome o;
  if (t_collecting) {
    o.live_after = alloc_.live_bytes();
    return o;
  }
  collecting_scope scope;
  std::lock_guard<std::recursive_timed_mutex> lk(collect_mu_);
  alloc_.drain();  // frees already queued are not this collection's work
  o.young_before = alloc_.since_mark();
  const std::size_t before = alloc_.live_bytes();
  const double t0 = now();
  if (kind == gc_kind::minor && gc_.minor_is_whole_heap()) kind = gc_kind::blocking_full;
  switch (kind) {
    case gc_kind::minor: gc_.collect_minor(); break;
    case gc_kind::blocking_full: gc_.collect_full(); break;
    case gc_kind::incremental_full:
      if (!full_active_) gc_.start_full();
      while (!gc_.step_full(opts_.slice_seconds)) {
      }
      full_active_ = false;
      break;
  }
  const double pause = now() - t0;
  gc_.run_finalizers();
  alloc_.drain();
  o.seconds = now() - t0;
  o.live_after = alloc_.live_bytes();
  o.reclaimed = before > o.live_after ? before - o.live_after : 0;
  alloc_.mark();
  account_exposure(o.seconds);
  if (kind == gc_kind::incremental_full) {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.blocking_cycles++;  // finished in one go: a blocking collection
  }
  record(kind, reason, o, pause);
  return o;
}

bool gc_policy::step_full_cycle(gc_reason reason, outcome* out, bool back_to_back) {
  if (t_collecting) {
    if (out) out->live_after = alloc_.live_bytes();
    return true;  // the outer collection does the work
  }
  collecting_scope scope;
  std::lock_guard<std::recursive_timed_mutex> lk(collect_mu_);
  const double t0 = now();
  if (!full_active_) {
    alloc_.drain();
    full_live_before_ = alloc_.live_bytes();
    full_young_before_ = alloc_.since_mark();
    full_seconds_ = 0;
    full_run_ = 0;
    full_blocking_ = false;
    full_active_ = true;
    gc_.start_full();
  }
  const bool done = gc_.step_full(opts_.slice_seconds);
  const double slice = now() - t0;
  full_seconds_ += slice;
  // Note [A cycle run back to back is blocking]: slices run one after the
  // other (memory is needed now) are one pause, the sum of those slices.
  full_run_ = back_to_back ? full_run_ + slice : slice;
  if (back_to_back) full_blocking_ = true;
  account_exposure(slice);
  {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.incremental_slices++;
    stats_.longest_pause_seconds = std::max(stats_.longest_pause_seconds, full_run_);
    stats_.gc_seconds += slice;  // counted as it happens so that pacing sees it
  }
  if (!done) return false;
  full_active_ = false;
  const double t1 = now();
  gc_.run_finalizers();
  alloc_.drain();
  outcome o;
  o.young_before = full_young_before_;
  o.live_after = alloc_.live_bytes();
  o.reclaimed = full_live_before_ > o.live_after ? full_live_before_ - o.live_after : 0;
  const double fin = now() - t1;
  account_exposure(fin);
  o.seconds = fin;  // slices are already in gc_seconds
  alloc_.mark();
  if (full_blocking_) {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.blocking_cycles++;
  }
  record(gc_kind::incremental_full, reason, o, 0);
  o.seconds = full_seconds_ + fin;
  if (out) *out = o;
  return true;
}

void gc_policy::collect(gc_kind kind) { run_collection(kind, gc_reason::user); }

void gc_policy::before_block(const std::function<bool()>&) { quiet_moment(true); }

// Note [Collect in the device's time]
// A GPU-bound loop's host spends most of each iteration waiting for the
// device. Collection work done in that wait costs nothing. synchronize()
// records an event (everything queued so far), lets the policy run what is
// due while the event is pending (before_block), then blocks on the event.
// The slack — time from the call until the device was seen done, when no
// collection ran — is smoothed (0.75/0.25) and tells the policy how much
// work fits. A sync during which collections ran gives a censored sample
// (the device was busy at least that long): it only raises the estimate.
void gc_policy::synchronize(stream_ref stream) {
  stream_ops& ops = alloc_.streams();
  if (t_collecting) {  // from inside a collection: only wait
    event_ref e = ops.record(stream);
    struct rel {
      stream_ops& o;
      event_ref e;
      ~rel() { o.release(e); }
    } r{ops, e};
    ops.synchronize(e);
    return;
  }
  const double t0 = now();
  double sample = -1;
  bool censored = false;
  {
    device_probe probe(*this, stream);
    if (probe.busy()) {
      collection_stats before;
      fill_stats(before);
      {
        std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
        if (lk.owns_lock()) before_block([&probe] { return probe.busy(); });
      }
      collection_stats after;
      fill_stats(after);
      const bool collected = after.gc_seconds > before.gc_seconds;
      const double t1 = now();
      if (!collected) {
        if (probe.event_) ops.synchronize(probe.event_);
        sample = now() - t0;
      } else {
        censored = true;
        const bool still = probe.busy();
        if (probe.event_) ops.synchronize(probe.event_);
        sample = still ? now() - t0 : t1 - t0;  // busy through the collection: at least this much slack
      }
      std::lock_guard<std::mutex> s(stats_mu_);
      stats_.sync_wait_seconds += now() - t1;
    } else {
      sample = 0;  // the device was already done: no slack
    }
  }
  std::lock_guard<std::mutex> s(stats_mu_);
  stats_.syncs++;
  if (sample >= 0) {
    if (censored && sample < slack_) {
      // a censored sample never lowers the estimate
    } else {
      slack_ = stats_.syncs == 1 ? sample : 0.75 * slack_ + 0.25 * sample;
    }
    stats_.slack_seconds = slack_;
  }
}

double gc_policy::slack_estimate() const noexcept {
  std::lock_guard<std::mutex> s(stats_mu_);
  return slack_;
}

std::uint64_t gc_policy::sync_count() const noexcept {
  std::lock_guard<std::mutex> s(stats_mu_);
  return stats_.syncs;
}

bool gc_policy::reclaim(device_allocator&, ladder_step step) {
  switch (step) {
    case ladder_step::finish_and_drain: {
      std::lock_guard<std::recursive_timed_mutex> lk(collect_mu_);
      if (full_active_) {
        while (!step_full_cycle(gc_reason::ladder, nullptr, true)) {
        }
      } else {
        run_collection(gc_kind::minor, gc_reason::ladder);
      }
      return true;
    }
    case ladder_step::full_collection:
    case ladder_step::full_collection_2:
      run_collection(gc_kind::blocking_full, gc_reason::ladder);
      return true;
    default: return false;
  }
}

void gc_policy::fill_stats(collection_stats& out) const {
  const collector_counters c = gc_.counters();
  std::lock_guard<std::mutex> lk(stats_mu_);
  out = stats_;
  out.policy = name();
  out.finalized = alloc_.deferred().pushed();
  out.reclaimed_per_collection = collections_ ? static_cast<double>(stats_.reclaimed_bytes) / collections_ : 0;
  auto delta = [](auto now, auto then) { return now > then ? now - then : decltype(now){}; };
  out.runtime_collections = delta(c.own_collections, counters0_.own_collections);
  out.runtime_full_collections = delta(c.own_full_collections, counters0_.own_full_collections);
  out.runtime_gc_seconds = delta(c.own_seconds, counters0_.own_seconds);
  out.runtime_seconds_exact = c.own_seconds_exact;
  out.collector_collections = delta(c.collections, counters0_.collections);
  out.gc_seconds_all = out.gc_seconds + out.runtime_gc_seconds;
  // The runtime's own collections ran inside its allocator, on the critical
  // path as far as anyone can tell: all exposed.
  out.exposed_gc_seconds += out.runtime_gc_seconds;
}

// --- the pressure policy -------------------------------------------------------

namespace {

class pressure_policy final : public gc_policy {
 public:
  pressure_policy(device_allocator& a, collector& c, policy_options o) : gc_policy(a, c, o) {
    last_end_ = now();
  }
  const char* name() const noexcept override { return "pressure"; }

  void before_allocate(device_allocator& a, std::size_t bytes, stream_ref) override {
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) {
      // Note [Concurrent allocators]: another thread is collecting. Below
      // the headroom, allocate without queueing behind it. Over it, wait for
      // that collection (bounded): allocating now would take the room it is
      // making for its own allocation, and one of us would fail for nothing.
      if (!over_headroom(a, bytes)) return;
      if (!lk.try_lock_for(std::chrono::seconds(5))) return;
    }
    const std::size_t young = a.since_mark() + bytes;
    const std::size_t budget = young_budget();
    const bool over = over_headroom(a, bytes);
    if (full_cycle_active()) {
      // Pace the whole-heap cycle: a slice while GC time is within budget,
      // and slices until it completes once memory needs it.
      const bool need = young >= budget || over;
      if (need || gc_fraction() < opts_.gc_budget) {
        outcome o;
        bool done = step_full_cycle(gc_reason::early, &o);
        while (!done && need) done = step_full_cycle(gc_reason::early, &o);
        if (done) after_full(o);
      }
      return;
    }
    if (young >= budget || (over && young >= opts_.min_young_bytes)) {
      collected_since_quiet_ += young - bytes;
      after_minor(run_collection(gc_kind::minor, gc_reason::early));
      maybe_start_full(gc_reason::early);
    }
  }

  void quiet_moment(bool will_block) override {
    (void)will_block;
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;
    if (full_cycle_active()) {
      if (gc_fraction() < opts_.gc_budget) {
        outcome o;
        if (step_full_cycle(gc_reason::quiet_moment, &o)) after_full(o);
      }
      return;
    }
    // Note [Quiet moments]: collect here when the next stretch of work (as
    // much as was allocated since the last quiet moment) would cross the
    // young budget anyway: the collection then happens where few temporaries
    // are alive instead of in the middle of the work, without collecting
    // more often than the budget asks for.
    const std::size_t young = alloc_.since_mark();
    const std::size_t total = young + collected_since_quiet_;
    const double stretch = static_cast<double>(total > young_at_quiet_ ? total - young_at_quiet_ : 0);
    stretch_ = stretch_ > 0 ? 0.75 * stretch_ + 0.25 * stretch : stretch;
    young_at_quiet_ = young;
    collected_since_quiet_ = 0;
    const std::size_t budget = young_budget();
    // quiet_fraction bounds how early: never below that share of the budget.
    const bool enough = young >= static_cast<std::size_t>(opts_.quiet_fraction * static_cast<double>(budget));
    const bool would_cross = static_cast<double>(young) + stretch_ >= static_cast<double>(budget);
    if (young >= opts_.min_young_bytes / 2 && enough && would_cross) {
      after_minor(run_collection(gc_kind::minor, gc_reason::quiet_moment));
      young_at_quiet_ = 0;
      maybe_start_full(gc_reason::quiet_moment);
    }
  }

 private:
  double gc_fraction() {
    collection_stats s;
    fill_stats(s);
    const double wall = wall_seconds();
    return wall > 0 ? s.gc_seconds / wall : 0;
  }

  // Note [Budgets are measured]
  std::size_t young_budget() const {
    const double mem = std::max(opts_.growth * static_cast<double>(live_after_), static_cast<double>(opts_.min_young_bytes));
    const double time_floor = time_floor_bytes();
    double b = std::max(mem, time_floor) / std::clamp(yield_, 0.25, 1.0);
    const std::size_t soft = alloc_.soft_limit();
    const double head = soft > live_after_ ? static_cast<double>(soft - live_after_) : 0;
    b = std::min(b, std::max(head, static_cast<double>(opts_.min_young_bytes)));
    return static_cast<std::size_t>(b);
  }

  // True when this allocation would take live bytes past the soft limit, or
  // reserved bytes near the hard limit or the device's free memory.
  bool over_headroom(device_allocator& a, std::size_t bytes) {
    const std::size_t live = a.live_bytes() + bytes;
    const std::size_t reserved = a.reserved_bytes() + bytes;
    if (live > a.soft_limit()) return true;
    if (reserved > a.hard_limit() / 20 * 19) return true;
    // Free device memory (other processes count): refreshed at collections.
    // Read without the collection lock by threads that wait for another's
    // collection (Note [Concurrent allocators]): relaxed atomics.
    const std::size_t at_refresh = reserved_at_refresh_.load(std::memory_order_relaxed);
    const std::size_t free_then = device_free_.load(std::memory_order_relaxed);
    const std::size_t grown = reserved > at_refresh ? reserved - at_refresh : 0;
    return free_then > 0 && grown + free_then / 10 > free_then;
  }

  void refresh_device() {
    try {
      device_free_.store(alloc_.device_memory().free, std::memory_order_relaxed);
      reserved_at_refresh_.store(alloc_.reserved_bytes(), std::memory_order_relaxed);
    } catch (...) {
      device_free_.store(0, std::memory_order_relaxed);
    }
  }

  // Note [Minor cost is fixed + per young byte]
  // A minor collection costs a fixed part (roots, dirty pages, re-protecting
  // the heap: O(heap) with mprotect dirty bits) plus a part that grows with
  // the young objects it must mark and sweep. Only the fixed part is
  // amortised by collecting less often: at allocation rate r and young budget
  // Y the GC fraction is a*r/Y + b*r. So the time floor is
  // Y = a*r / (budget - b*r); treating the whole cost as fixed makes Y and the
  // cost chase each other upwards (seen: 10 ms -> 112 ms minors, 3 -> 188 MiB
  // budgets). When b*r alone exceeds the budget no young budget can meet it,
  // and memory, not time, decides.
  double time_floor_bytes() const {
    if (rate_ <= 0 || samples_.empty()) return 0;
    double a, b;
    fit_cost(&a, &b);
    const double room = opts_.gc_budget - b * rate_;
    if (room <= opts_.gc_budget * 0.1) return 0;
    return a * rate_ / room;
  }

  // Least squares over the recent (young bytes, seconds) samples.
  void fit_cost(double* a, double* b) const {
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
      *b = 0;
      return;
    }
    *b = std::max(0.0, (n * sxy - sx * sy) / den);
    *a = std::max(0.0, (sy - *b * sx) / n);
    if (*b == 0) *a = sy / n;
  }

  void learn(const outcome& o, double* cost) {
    const double interval = now() - last_end_ - o.seconds;
    if (interval > 0 && o.young_before > 0) {
      const double r = static_cast<double>(o.young_before) / interval;
      rate_ = rate_ > 0 ? 0.75 * rate_ + 0.25 * r : r;
    }
    // The first collection pays one-time costs (the runtime's first mark of
    // a freshly built heap: 100+ ms for an empty Boehm heap in incremental
    // mode); learning from it would inflate the time floor for many
    // collections. Later samples are clamped to 8x the estimate for the same
    // reason (one slow outlier must not turn into a huge young budget).
    if (++cost_samples_ > 1) {
      const double x = *cost > 0 ? std::min(o.seconds, 8 * *cost) : o.seconds;
      *cost = *cost > 0 ? 0.75 * *cost + 0.25 * x : x;
      if (cost == &c_minor_) {
        if (samples_.size() == 16) samples_.erase(samples_.begin());
        samples_.emplace_back(static_cast<double>(o.young_before), x);
      }
    }
    if (o.young_before > 0) yield_ = std::min(1.0, static_cast<double>(o.reclaimed) / static_cast<double>(o.young_before));
    last_end_ = now();
    live_after_ = o.live_after;
    refresh_device();
  }

  void after_minor(const outcome& o) {
    learn(o, &c_minor_);
    old_ = o.live_after;  // every survivor is old now
    if (gc_.minor_is_whole_heap()) floor_ = o.live_after;  // and nothing old is garbage
  }

  void after_full(const outcome& o) {
    // The cycle's cost is learned separately: it must not inflate c_minor.
    const double interval_cost = o.seconds;
    c_full_ = c_full_ > 0 ? 0.75 * c_full_ + 0.25 * interval_cost : interval_cost;
    last_end_ = now();
    live_after_ = o.live_after;
    old_ = floor_ = o.live_after;
    refresh_device();
  }

  // Note [Generations of device bytes]
  void maybe_start_full(gc_reason reason) {
    const std::size_t live = alloc_.live_bytes();
    old_ = std::min(old_, live);
    const std::size_t suspect = old_ > floor_ ? old_ - floor_ : 0;
    if (suspect == 0) return;
    const std::size_t budget = young_budget();
    const bool pressing = live_after_ > alloc_.soft_limit() / 10 * 8;
    const bool worth = suspect >= std::max(budget, opts_.min_young_bytes) || pressing;
    if (!worth) return;
    const double expected = c_full_ > 0 ? c_full_ : 5 * c_minor_;
    collection_stats s;
    fill_stats(s);
    const double wall = wall_seconds();
    const bool affordable = wall > 0 && (s.gc_seconds + expected) / wall <= opts_.gc_budget;
    if (!affordable && !pressing) return;
    outcome o;
    if (step_full_cycle(reason, &o)) after_full(o);
  }

  double c_minor_ = 0, c_full_ = 0, rate_ = 0, yield_ = 1.0;
  std::vector<std::pair<double, double>> samples_;  // (young bytes, seconds) of recent minors
  std::uint64_t cost_samples_ = 0;
  // Quiet-moment bookkeeping: bytes allocated per stretch between hints.
  double stretch_ = 0;
  std::size_t young_at_quiet_ = 0, collected_since_quiet_ = 0;
  std::size_t live_after_ = 0, old_ = 0, floor_ = 0;
  std::atomic<std::size_t> device_free_{0}, reserved_at_refresh_{0};
  double last_end_ = 0;
};

}  // namespace

std::unique_ptr<gc_policy> make_pressure_policy(device_allocator& a, collector& c, policy_options o) {
  return std::make_unique<pressure_policy>(a, c, o);
}

}  // namespace gcpressure
