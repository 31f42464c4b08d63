// The policy base: timing, counters, exposed GC time, the synchronize hint
// and the collector half of the reclaim ladder. The "pressure" policy is in
// pressure_policy.cpp (events) and pressure_learn.cpp (what it learns), the
// baselines in baselines.cpp.
//
// Note [Timing is injected]
// Every time the base and the policies read comes from policy_options::clock
// (steady_clock by default), so tests drive decisions with a fake clock and a
// fake collector whose collections advance it.
#include "gcpressure/policy.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <utility>
#include <thread>
#include <vector>

#include "gcpressure/collection_scope.hpp"
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
  // Leaked, as the stream_ops singletons are: a policy may still read the
  // clock on another thread while exit() runs static destructors (UBSan saw
  // a destroyed clock in ShutdownAfterMain.ExitRacesAllocatingThreadAndFinalizers).
  static const steady_source* s = new steady_source;
  return *s;
}

policy_options policy_options::from_config(const config& c) {
  policy_options o;
  o.gc_budget = c.gc_budget;
  o.every_n = c.every_n;
  o.verbose = c.verbose;
  o.soft_limit_set = c.soft_limit.is_set();
  return o;
}

namespace {
const std::vector<device_allocator*>& checked(const std::vector<device_allocator*>& devices) {
  GCPRESSURE_EXPECTS(!devices.empty(), "gc_policy: no device to serve");
  for (std::size_t i = 0; i < devices.size(); ++i) {
    GCPRESSURE_EXPECTS(devices[i] != nullptr, "gc_policy: a null device allocator");
    for (std::size_t j = 0; j < i; ++j)
      GCPRESSURE_EXPECTS(devices[j] != devices[i], "gc_policy: one device allocator listed twice");
  }
  return devices;
}
}  // namespace

gc_policy::gc_policy(device_allocator& a, collector& c, policy_options o)
    : gc_policy(std::vector<device_allocator*>{&a}, c, o) {}

gc_policy::gc_policy(const std::vector<device_allocator*>& devices, collector& c, policy_options o)
    : alloc_(*checked(devices).front()),
      gc_(c),
      opts_(o),
      clock_(o.clock ? o.clock : &steady_clock_source()),
      start_(clock_->now()),
      counters0_(c.counters()),
      reclaimed_by_device_(detail::device_list::capacity, 0) {
  GCPRESSURE_EXPECTS(o.gc_budget > 0 && o.gc_budget <= 1, "policy_options.gc_budget must be in (0, 1]");
  GCPRESSURE_EXPECTS(o.every_n >= 1, "policy_options.every_n must be >= 1");
  GCPRESSURE_EXPECTS(devices.size() <= detail::device_list::capacity, "gc_policy: more than 64 devices");
  for (device_allocator* d : devices) devices_.push_back(d);
  for (device_allocator* d : devices) d->set_hook(this);
}

gc_policy::~gc_policy() {
  for (std::size_t i = 0, n = devices_.size(); i < n; ++i)
    if (devices_[i]->hook() == this) devices_[i]->set_hook(nullptr);
}

std::unique_lock<std::recursive_timed_mutex> gc_policy::lock_collection() {
  std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
  if (!lk.owns_lock()) {
    gc_.waiting_for_collection(true);
    lk.lock();
    gc_.waiting_for_collection(false);
  }
  return lk;
}

bool gc_policy::wait_for_collection_lock(std::unique_lock<std::recursive_timed_mutex>& lk, double limit) {
  if (lk.try_lock()) return true;
  // Polled, not try_lock_for: that is pthread_mutex_clocklock, which GCC
  // 12's ThreadSanitizer does not intercept (it then reports the unlock as
  // one of an unlocked mutex).
  gc_.waiting_for_collection(true);
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit);
  bool got = false;
  while (!(got = lk.try_lock()) && std::chrono::steady_clock::now() <= end)
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  gc_.waiting_for_collection(false);
  return got;
}

void gc_policy::add_device(device_allocator& a) {
  auto lk = lock_collection();
  GCPRESSURE_EXPECTS(device_index(a) == device_count(), "add_device: the policy serves this device already");
  GCPRESSURE_EXPECTS(device_count() < detail::device_list::capacity, "add_device: more than 64 devices");
  devices_.push_back(&a);
  device_added(device_count() - 1);
  a.set_hook(this);
}

std::vector<device_allocator*> gc_policy::devices() const {
  std::vector<device_allocator*> v;
  for (std::size_t i = 0, n = devices_.size(); i < n; ++i) v.push_back(devices_[i]);
  return v;
}

std::size_t gc_policy::device_index(const device_allocator& a) const noexcept {
  const std::size_t n = devices_.size();
  std::size_t i = 0;
  while (i < n && devices_[i] != &a) ++i;
  return i;
}

void gc_policy::drain_all() noexcept {
  for (std::size_t i = 0, n = devices_.size(); i < n; ++i) devices_[i]->drain();
}

void gc_policy::mark_all() noexcept {
  for (std::size_t i = 0, n = devices_.size(); i < n; ++i) devices_[i]->mark();
}

void gc_policy::sample_before(outcome& o) const {
  o.devices.assign(devices_.size(), device_outcome{});
  o.young_before = 0;
  for (std::size_t i = 0; i < o.devices.size(); ++i) {
    o.devices[i].young_before = devices_[i]->since_mark();
    o.devices[i].live_before = devices_[i]->live_bytes();
    o.young_before += o.devices[i].young_before;
  }
}

void gc_policy::sample_after(outcome& o) const {
  // A device added since sample_before (or no sample at all): nothing of
  // its was reclaimed by this collection.
  for (std::size_t i = o.devices.size(), n = devices_.size(); i < n; ++i)
    o.devices.push_back(device_outcome{devices_[i]->live_bytes(), 0, 0, devices_[i]->since_mark()});
  o.live_after = o.reclaimed = 0;
  for (std::size_t i = 0; i < o.devices.size(); ++i) {
    device_outcome& d = o.devices[i];
    d.live_after = devices_[i]->live_bytes();
    // Note [What a cycle reclaimed]: bytes allocated while it ran (the
    // since-mark counter moved on from young_before; no mark comes between)
    // are live_before's too. Without them a whole-heap cycle sliced over
    // iterations counted only the net fall of live bytes: on the H100
    // (promote, 256 MiB host heap) the first cycle reported 0 B while live
    // rose 1.80 -> 2.16 GiB over its iterations, which doubled the next
    // cycle's need (full_backoff) and no second cycle came in 300 iterations.
    const std::size_t young_now = devices_[i]->since_mark();
    const std::size_t during = young_now > d.young_before ? young_now - d.young_before : 0;
    const std::size_t had = d.live_before + during;
    d.reclaimed = had > d.live_after ? had - d.live_after : 0;
    o.live_after += d.live_after;
    o.reclaimed += d.reclaimed;
  }
}

double gc_policy::wall_seconds() const noexcept { return clock_->now() - start_; }

void gc_policy::record(gc_kind kind, gc_reason reason, const outcome& o, double pause) {
  std::lock_guard<std::mutex> lk(stats_mu_);
  stats_.by_kind[static_cast<int>(kind)]++;
  stats_.by_reason[static_cast<int>(reason)]++;
  stats_.gc_seconds += o.seconds;
  stats_.longest_pause_seconds = std::max(stats_.longest_pause_seconds, pause);
  stats_.reclaimed_bytes += o.reclaimed;
  for (std::size_t i = 0; i < o.devices.size() && i < reclaimed_by_device_.size(); ++i)
    reclaimed_by_device_[i] += o.devices[i].reclaimed;
  ++collections_;
  if (opts_.verbose)
    std::fprintf(stderr,
                 "gcpressure[%s]: %s collection (%s) %.3f ms (collector %.3f, finalizers %.3f, frees %.3f), "
                 "reclaimed %s, live %s\n",
                 name(), to_string(kind), to_string(reason), o.seconds * 1e3, pause * 1e3, o.finalize_seconds * 1e3,
                 o.drain_seconds * 1e3, format_bytes(o.reclaimed).c_str(), format_bytes(o.live_after).c_str());
}

namespace {
// Note [No nested collections]: a collection runs runtime code (finalizers)
// that may allocate or ask for a collection on this thread; a runtime's
// collector is not re-entrant, so such a nested request does nothing. The
// fact is the one of Note [Inside a collection] (collection_scope.hpp).

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
// hidden (exact). Completed: the device finished somewhere inside it.
// Without a probe (no stream known) everything is exposed.
// Errors of the stream operations reach the caller: record() throws from
// the constructor; a failed query() is kept and rethrown by rethrow() once
// the collection bookkeeping is done (the device counts as done meanwhile).
//
// Note [Exposed GC time, measured]
// Where the device finished inside a collection, the probe asks the backend
// how long the stream has been idle (stream_ops::idle_seconds: CUDA times
// the probe's event against one recorded on an idle stream of its own; the
// host backend stamps each task's end): the collection's part after that is
// exposed, the part before it hidden. A backend that cannot tell counts the
// whole collection as exposed, an upper bound, and the stats say so
// (exposed_gc_seconds_untimed). Counted whole, a 31 ms minor that the device
// outlasted but for its last 0.1 ms was 31 ms exposed: on the H200 at a 1 GiB
// host heap, a sync every 32 iterations, the probe's figure was 0.80 s of a
// run that took 0.30 s longer than the oracle's (session 23). The policy's
// budget, guess and lag still learn from the probe's figure (own_exposed_
// seconds, less what the lag hid: Note [Charging what the lag hid]): learning
// from the measured one changes decisions, and is prepared on the branch
// s24-measured until it has run on the GPU (bench/results/gpu-2026-12-07-s24/).
gc_policy::device_probe::device_probe(gc_policy& p, stream_ref stream, device_allocator* on)
    : p_(p), ops_(&(on ? *on : p.alloc_).streams()), event_(ops_->record_timed(stream)), prev_(t_probe) {
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
    error_ = std::current_exception();
  }
  (done_ ? done_at_ : last_busy_at_) = p_.now();
  return !done_;
}

// Asked only when a collection ends with the device done (account_exposure),
// once: a sync that collects nothing pays no timing (CUDA: an event record
// and an event wait).
double gc_policy::device_probe::idle_from() {
  if (!idle_asked_ && done_ && !error_ && ops_ && event_) {
    idle_asked_ = true;
    try {
      const double idle = ops_->idle_seconds(event_);
      if (idle >= 0) idle_from_ = std::max(p_.now() - idle, last_busy_at_);
    } catch (...) {  // unknown: the upper bound
    }
  }
  return idle_from_;
}

void gc_policy::device_probe::rethrow() {
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void gc_policy::account_exposure(double seconds) {
  device_probe* probe = t_probe && &t_probe->p_ == this ? t_probe : nullptr;
  const bool hidden = probe && probe->busy();
  // The collection ran [end - seconds, end]: exposed after the device went idle.
  const double idle_from = probe && !hidden ? probe->idle_from() : -std::numeric_limits<double>::infinity();
  const bool timed = idle_from > -std::numeric_limits<double>::infinity();
  const double end = now();
  const double exposed = hidden ? 0 : timed ? std::clamp(end - idle_from, 0.0, seconds) : seconds;
  if (opts_.verbose && seconds >= 1e-4) {  // --verbose: each part of a collection, as the probe saw it
    const char* what = cycle_active() ? "a slice" : "a collection";
    if (exposed > 0 && exposed < seconds)
      std::fprintf(stderr, "gcpressure[%s]:   %.3f ms, %.3f ms of it exposed (%s)\n", name(), seconds * 1e3,
                   exposed * 1e3, what);
    else
      std::fprintf(stderr, "gcpressure[%s]:   %.3f ms %s (%s)\n", name(), seconds * 1e3,
                   exposed > 0 ? "exposed" : "hidden", what);
  }
  std::lock_guard<std::mutex> lk(stats_mu_);
  stats_.exposed_gc_seconds += exposed;
  stats_.hidden_gc_seconds += seconds - exposed;
  if (exposed > 0 && !timed) stats_.exposed_gc_seconds_untimed += exposed;
  if (!hidden) probe_exposed_ += seconds;  // what the budget counts (own_exposed_seconds)
}

gc_policy::outcome gc_policy::run_collection(gc_kind kind, gc_reason reason) {
  outcome o;
  if (in_collection()) {
    sample_after(o);
    return o;
  }
  auto lk = lock_collection();
  if (cycle_active()) {
    // One cycle at a time (Note [Sliced cycles]): finish the one in
    // progress; it is the collection asked for unless that is a blocking full.
    const gc_kind k = cycle_;
    while (!step_cycle(k, reason, &o, true)) {
    }
    if (kind != gc_kind::blocking_full) return o;
    o = outcome{};
  }
  collection_scope scope;
  drain_all();  // frees already queued are not this collection's work
  sample_before(o);
  const double t0 = now();
  if (kind == gc_kind::minor && gc_.minor_is_whole_heap()) kind = gc_kind::blocking_full;
  switch (kind) {
    case gc_kind::minor: gc_.collect_minor(); break;
    case gc_kind::blocking_full: gc_.collect_full(); break;
    case gc_kind::incremental_full:
      gc_.start_full();
      while (!gc_.step_full(opts_.slice_seconds)) {
      }
      break;
  }
  const double pause = now() - t0;
  gc_.run_finalizers();
  const double t_fin = now();
  drain_all();
  o.seconds = now() - t0;
  o.finalize_seconds = t_fin - t0 - pause;
  o.drain_seconds = o.seconds - (t_fin - t0);
  sample_after(o);
  mark_all();
  account_exposure(o.seconds);
  if (kind == gc_kind::incremental_full) {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.blocking_cycles++;  // finished in one go: a blocking collection
  }
  record(kind, reason, o, pause);
  return o;
}

// Note [Sliced cycles]
bool gc_policy::step_cycle(gc_kind kind, gc_reason reason, outcome* out, bool back_to_back) {
  if (in_collection()) {
    if (out) {
      *out = outcome{};
      sample_after(*out);
    }
    return true;  // the outer collection does the work
  }
  collection_scope scope;
  auto lk = lock_collection();
  const double t0 = now();
  if (!cycle_active()) {
    drain_all();
    sample_before(cycle_before_);
    cycle_seconds_ = 0;
    cycle_run_ = 0;
    cycle_blocking_ = false;
    cycle_ = kind;
    if (kind == gc_kind::minor) gc_.start_minor();
    else gc_.start_full();
  }
  const bool done = cycle_ == gc_kind::minor ? gc_.step_minor(opts_.slice_seconds) : gc_.step_full(opts_.slice_seconds);
  const double slice = now() - t0;
  cycle_seconds_ += slice;
  // Note [A cycle run back to back is blocking]: slices run one after the
  // other (memory is needed now) are one pause, the sum of those slices.
  cycle_run_ = back_to_back ? cycle_run_ + slice : slice;
  if (back_to_back) cycle_blocking_ = true;
  account_exposure(slice);
  {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.incremental_slices++;
    stats_.longest_pause_seconds = std::max(stats_.longest_pause_seconds, cycle_run_);
    stats_.gc_seconds += slice;  // counted as it happens so that pacing sees it
  }
  if (!done) return false;
  const gc_kind finished = cycle_;
  cycle_ = gc_kind::blocking_full;
  const double t1 = now();
  gc_.run_finalizers();
  drain_all();
  outcome o = cycle_before_;
  sample_after(o);
  const double fin = now() - t1;
  account_exposure(fin);
  o.seconds = fin;  // slices are already in gc_seconds
  mark_all();
  if (cycle_blocking_) {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.blocking_cycles++;
  }
  record(finished, reason, o, 0);
  o.seconds = cycle_seconds_ + fin;
  if (out) *out = o;
  return true;
}

void gc_policy::collect(gc_kind kind) { run_collection(kind, gc_reason::user); }

void gc_policy::finish_cycle() {
  if (in_collection()) return;
  auto lk = lock_collection();
  if (!cycle_active()) return;
  const gc_kind k = cycle_;
  while (!step_cycle(k, gc_reason::quiet_moment, nullptr, false)) {
  }
}

void gc_policy::before_block(device_allocator&, const std::function<bool()>&) { quiet_moment(true); }

// Note [Collect in the device's time]
// A GPU-bound loop's host spends most of each iteration waiting for the
// device. Collection work done in that wait costs nothing. synchronize()
// records an event (everything queued so far), lets the policy run what is
// due while the event is pending (before_block), then blocks on the event.
// The slack — time from the call until the device was done — is smoothed
// (0.75/0.25) and tells the policy how much work fits. Collection work at a
// sync does not bias it: the device's completion is observed by polling
// between slices (a sample in the middle of the last two polls) or, if it is
// still busy afterwards, exactly when the wait ends. (A first version took a
// sync with collections as "at least this long", which let slices that ran
// past the device's end inflate the estimate that allowed them.)
void gc_policy::synchronize(stream_ref stream, device_allocator* on) {
  device_allocator& dev = on ? *on : alloc_;
  GCPRESSURE_EXPECTS(device_index(dev) < device_count(), "synchronize: the device is not one this policy serves");
  stream_ops& ops = dev.streams();
  if (in_collection()) {  // from inside a collection: only wait
    event_ref e = ops.record(stream);
    struct rel {
      stream_ops& o;
      event_ref e;
      ~rel() { o.release(e); }
    } r{ops, e};
    ops.synchronize(e);
    return;
  }
  // The device finished either after the host blocked (exact: the wait
  // ends then) or between two polls during before_block (the midpoint; off
  // by at most half a slice).
  const double t0 = now();
  double sample = 0;
  bool waited = false;
  {
    device_probe probe(*this, stream, &dev);
    if (probe.busy()) {
      waited = true;
      {
        std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
        if (lk.owns_lock()) before_block(dev, [&probe] { return probe.busy(); });
      }
      const double t1 = now();
      const bool still = probe.busy();
      probe.rethrow();
      if (still) {
        ops.synchronize(probe.event_);
        sample = now() - t0;
      } else {
        sample = 0.5 * (probe.last_busy_at_ + probe.done_at_) - t0;
      }
      std::lock_guard<std::mutex> s(stats_mu_);
      stats_.sync_wait_seconds += now() - t1;
    } else {
      std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
      if (lk.owns_lock()) at_idle_sync(dev);
      probe.rethrow();
    }
  }
  {
    std::lock_guard<std::mutex> s(stats_mu_);
    stats_.syncs++;
    // Note [A smoothed slack starts as a mean]: the weight of a new sample
    // is 1/n for the first four (their mean), then 0.25. Seeded by the
    // first sample alone, one short first sync (the H100 at a 256 MiB host
    // heap: 1.25 ms, a minor ran in it) held the estimate under the loop's
    // 5 ms for six syncs (1.25, 2.18, 2.89, 3.43, 3.83, 4.19 ms), and the
    // loop's minors waited for it (bench/RESULTS.md, 2026-12-07 session 19).
    const double w = std::max(0.25, 1.0 / static_cast<double>(stats_.syncs));
    slack_ = (1 - w) * slack_ + w * sample;
    stats_.slack_seconds = slack_;
  }
  // When the device was done (clock time): the window of Note [The
  // device's time is the fastest window's] ends there, not when the sync
  // returned after collections that outlasted the device.
  after_sync(dev, waited, t0 + sample);
}

double gc_policy::device_wait_seconds() const noexcept {
  std::lock_guard<std::mutex> s(stats_mu_);
  return stats_.sync_wait_seconds + stats_.hidden_gc_seconds;
}

double gc_policy::own_exposed_seconds() const noexcept {
  std::lock_guard<std::mutex> s(stats_mu_);
  return probe_exposed_;
}

gc_policy::exposure gc_policy::own_exposure() const noexcept {
  std::lock_guard<std::mutex> s(stats_mu_);
  return {stats_.exposed_gc_seconds, stats_.exposed_gc_seconds_untimed};
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
      auto lk = lock_collection();
      if (cycle_active()) {
        const gc_kind k = cycle_;
        while (!step_cycle(k, gc_reason::ladder, nullptr, true)) {
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
  out.finalized = 0;
  const std::size_t n = devices_.size();
  for (std::size_t i = 0; i < n; ++i) out.finalized += devices_[i]->deferred().pushed();
  out.policy_devices = static_cast<std::uint32_t>(n);
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
  out.exposed_gc_seconds_untimed += out.runtime_gc_seconds;
  out.exposed_gc_seconds_charged = std::max(0.0, probe_exposed_ + out.runtime_gc_seconds - uncharged_seconds());
}

void gc_policy::fill_stats_for(const device_allocator& a, collection_stats& out) const {
  fill_stats(out);
  const std::size_t i = device_index(a);
  if (device_count() == 1 || i == device_count()) return;
  out.finalized = a.deferred().pushed();
  std::lock_guard<std::mutex> lk(stats_mu_);
  out.reclaimed_bytes = reclaimed_by_device_[i];
  out.reclaimed_per_collection = collections_ ? static_cast<double>(out.reclaimed_bytes) / collections_ : 0;
}

}  // namespace gcpressure
