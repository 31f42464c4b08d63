// gcpressure/policy.hpp — pressure policies: when to ask the runtime's
// collector for which collection, so that device memory stays bounded.
//
// A policy is bound to one collector and one or more device_allocators (one
// per device: Note [One policy, N devices]); it installs itself as every
// allocator's hook (Note [The hook point]) and removes itself when destroyed.
// Policies: "pressure" (ours) and the baselines, named by policy_names() —
// see docs/DESIGN.md and core/src/baselines.cpp for what each one does.
//
// Thread safety: all public members are thread-safe. None may be called from
// a finalizer. Collections never run while an allocator lock is held.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/clock.hpp"
#include "gcpressure/collector.hpp"

namespace gcpressure {

struct policy_options {
  double gc_budget = 0.05;             // fraction of wall time collections may take
  int every_n = 1;                     // every_iteration: collect every N iterations (or allocations)
  bool every_n_allocations = false;    // every_iteration: count allocations, not iterations
  double slice_seconds = 0.001;        // longest slice of a sliced cycle (Note [Sliced cycles])
  double quiet_fraction = 0.5;         // at a quiet moment, collect once this much of the young budget is used
  double growth = 1.0;                 // young budget as a multiple of the live set left by the last collection
  std::size_t min_young_bytes = std::size_t{1} << 20;  // never collect more often than every 1 MiB
  bool verbose = false;
  // cudajl: a soft limit was set explicitly (GCPRESSURE_SOFT_LIMIT), so
  // CUDA.jl would size pressure by it (JULIA_CUDA_SOFT_MEMORY_LIMIT). The
  // allocator cannot tell: its soft limit defaults to 75% of the hard one.
  bool soft_limit_set = false;
  // Time source (not owned; must outlive the policy). nullptr: steady clock.
  const clock_source* clock = nullptr;

  static policy_options from_config(const config& c);
};

namespace detail {
// The devices a policy serves, in order: appended (under the policy's
// collection lock), never removed, so a reader without the lock sees a
// consistent prefix. Thread-safe; finalizer-safe.
class device_list {
 public:
  static constexpr std::size_t capacity = 64;
  std::size_t size() const noexcept { return n_.load(std::memory_order_acquire); }
  device_allocator* operator[](std::size_t i) const noexcept { return at_[i].load(std::memory_order_relaxed); }
  void push_back(device_allocator* a) noexcept {  // one writer at a time
    const std::size_t n = n_.load(std::memory_order_relaxed);
    at_[n].store(a, std::memory_order_relaxed);
    n_.store(n + 1, std::memory_order_release);
  }

 private:
  std::array<std::atomic<device_allocator*>, capacity> at_{};
  std::atomic<std::size_t> n_{0};
};
}  // namespace detail

// Note [One policy, N devices]
// A process with several GPUs has one host heap and one collector, so one
// policy decides for all of them: every device keeps its own allocator
// (pool, limits, statistics), and the policy keeps its budgets, floors and
// rates per device. A collection is started by the most-pressed device (each
// device's young bytes against that device's own budget, never the sum), so
// an idle device never forces one; and because every collection frees
// garbage on every device, each one drains, measures and marks them all,
// accounting what it reclaimed per device. A runtime that meets its devices
// one by one (PyTorch's allocator is called per device, lazily) adds them
// with add_device(); the set only grows (at most 64).
class gc_policy : public allocation_hook {
 public:
  gc_policy(device_allocator& a, collector& c, policy_options o);
  // One policy over `devices` (at least one, no duplicates); devices()[0]
  // is the primary one. The set is
  // fixed for the policy's lifetime. Throws logic_error on a bad set.
  gc_policy(const std::vector<device_allocator*>& devices, collector& c, policy_options o);
  ~gc_policy() override;
  gc_policy(const gc_policy&) = delete;
  gc_policy& operator=(const gc_policy&) = delete;

  virtual const char* name() const noexcept = 0;

  // The runtime's hints. quiet_moment(): few temporaries are alive.
  // will_block: the host is about to wait for the device (CUDA.jl's
  // maybe_collect(will_block=true)); a runtime that can route its stream
  // synchronizes through synchronize() should do that instead.
  // iteration(): an iteration boundary (also quiet).
  // Thread-safe; not from a finalizer.
  virtual void quiet_moment(bool will_block = false) { (void)will_block; }
  virtual void iteration() { quiet_moment(); }

  // The host is about to wait for all work queued on `stream` so far. Runs
  // collection work that is due while that work is still running, in bounded
  // slices, polling the stream between them, and only then blocks until it
  // has completed (Note [Collect in the device's time]). Measures the slack:
  // how long the device still worked after the host had nothing left to do.
  // `on`: the device `stream` belongs to (nullptr: the primary one).
  // Thread-safe; not from a finalizer or a collection (then it only blocks).
  void synchronize(stream_ref stream, device_allocator* on = nullptr);

  // While alive, collections run on this thread are checked against an event
  // recorded on `stream` now: a collection after which the device is still
  // busy overlapped device work entirely (hidden); otherwise it is exposed.
  class device_probe {
   public:
    // `on`: the device `stream` belongs to (nullptr: the primary one).
    device_probe(gc_policy& p, stream_ref stream, device_allocator* on = nullptr);
    ~device_probe();
    device_probe(const device_probe&) = delete;
    device_probe& operator=(const device_probe&) = delete;
    bool busy();
    // Rethrows the error a query() raised, once (see policy.cpp).
    void rethrow();

   private:
    friend class gc_policy;
    gc_policy& p_;
    stream_ops* ops_ = nullptr;
    event_ref event_ = nullptr;
    device_probe* prev_ = nullptr;
    bool done_ = false;
    double last_busy_at_ = 0, done_at_ = 0;  // when busy() last saw it busy / first saw it done
    // When the device went idle, if the backend could tell (Note [Exposed
    // GC time, measured]); -infinity: unknown, every pause after the event
    // counts as exposed.
    double idle_from_ = -std::numeric_limits<double>::infinity();
    bool idle_asked_ = false;
    double idle_from();  // asks the backend once, after busy() saw it done
    std::exception_ptr error_;
  };

  // A collection the user asked for (reason "user"): runs it, its finalizers
  // and the drain.
  void collect(gc_kind kind);

  // Finishes the cycle in progress, if any, and records it (reason
  // quiet_moment). The collector counts a sliced cycle when its mark ends,
  // which the mutator's own allocations can reach between two of the
  // policy's steps; the policy records it at its next step. A runtime that
  // reads its statistics at the end of a run calls this first, so that the
  // two counts agree. Thread-safe; not from a finalizer.
  void finish_cycle();

  // allocation_hook
  bool reclaim(device_allocator& a, ladder_step step) override;
  void fill_stats(collection_stats& out) const override;
  // The policy's statistics as seen from device `a`: the collections are
  // shared, `reclaimed_bytes` and `finalized` are that device's.
  void fill_stats_for(const device_allocator& a, collection_stats& out) const override;

  // Serves `a` too from now on (installs itself as its hook). logic_error if
  // it is served already or 64 devices are. Thread-safe; not from a
  // finalizer or a collection.
  void add_device(device_allocator& a);

  // The primary device's allocator, and all of them (primary first; a
  // snapshot). Thread-safe; finalizer-safe.
  device_allocator& allocator() noexcept { return alloc_; }
  std::vector<device_allocator*> devices() const;
  std::size_t device_count() const noexcept { return devices_.size(); }
  device_allocator& device(std::size_t i) const noexcept { return *devices_[i]; }
  // Index of `a` among the devices, or device_count() if it is not one.
  std::size_t device_index(const device_allocator& a) const noexcept;
  collector& gc() noexcept { return gc_; }
  const policy_options& options() const noexcept { return opts_; }
  double wall_seconds() const noexcept;
  double now() const noexcept { return clock_->now(); }
  // The smoothed slack at syncs (0 until measured) and how many syncs were
  // seen. Thread-safe; finalizer-safe.
  double slack_estimate() const noexcept;
  std::uint64_t sync_count() const noexcept;
  // Exposed seconds of the collections this policy ran (not the runtime's
  // own), as the probe bounds them: a collection during which the device
  // finished counts whole (Note [Exposed GC time, measured]: what the budget
  // learns from). Thread-safe; finalizer-safe.
  double own_exposed_seconds() const noexcept;
  // The same collections' exposed seconds as measured where the backend
  // times the device's idle moment, and the part of them that was not
  // timed (counted whole): Note [Exposed GC time, measured]. Thread-safe;
  // finalizer-safe.
  struct exposure {
    double measured = 0, untimed = 0;
  };
  exposure own_exposure() const noexcept;
  // Seconds the host waited for the device in syncs, plus the policy's
  // collection time that device work hid: the time device work left idle
  // on the host. Thread-safe; finalizer-safe.
  double device_wait_seconds() const noexcept;

 protected:
  // What a collection did to one device.
  struct device_outcome {
    std::size_t live_before = 0;
    std::size_t reclaimed = 0;     // live bytes it freed there
    std::size_t live_after = 0;
    std::size_t young_before = 0;  // bytes allocated there since the previous collection
  };
  struct outcome {
    double seconds = 0;            // wall time of the collection + finalizers + drain
    double finalize_seconds = 0;   // of which finalizers (run_finalizers)
    double drain_seconds = 0;      // of which the drain of the frees they queued
    std::size_t reclaimed = 0;     // the sums over devices of the per-device figures
    std::size_t live_after = 0;
    std::size_t young_before = 0;
    std::vector<device_outcome> devices;  // one per devices(), same order
  };
  // Runs a whole collection of `kind` (blocking_full or minor; an
  // incremental_full is finished in one go), then finalizers and the drain,
  // then records it. Resets the allocator's since-mark.
  outcome run_collection(gc_kind kind, gc_reason reason);
  // Note [Sliced cycles]: a whole-heap cycle (incremental_full), or a minor
  // on a collector with incremental minors, runs as a cycle of slices.
  // step_cycle() advances the cycle of `kind` by one slice, starting it if
  // none is active (only one cycle at a time: a request for the other kind
  // advances the active one). Returns true (with `out` filled) when the cycle
  // completed. back_to_back: this slice follows the previous one at once
  // because memory is needed now; such a run is one blocking pause (counted
  // in blocking_cycles, its pause the sum of the slices).
  bool step_cycle(gc_kind kind, gc_reason reason, outcome* out, bool back_to_back = false);
  bool step_full_cycle(gc_reason reason, outcome* out, bool back_to_back = false) {
    return step_cycle(gc_kind::incremental_full, reason, out, back_to_back);
  }
  bool cycle_active() const noexcept { return cycle_ != gc_kind::blocking_full; }
  bool minor_cycle_active() const noexcept { return cycle_ == gc_kind::minor; }
  bool full_cycle_active() const noexcept { return cycle_ == gc_kind::incremental_full; }
  // Seconds of slices the cycle in progress has run (collection lock held).
  double cycle_seconds() const noexcept { return cycle_seconds_; }
  void record(gc_kind kind, gc_reason reason, const outcome& o, double pause);

  // Called by synchronize() while the device is still busy, with the
  // collection lock held: the policy runs the work it wants done before the
  // host blocks. `device_busy()` polls the stream (cheap). Default:
  // quiet_moment(true). Collections run from here are measured as hidden
  // while the device stays busy (Note [Exposed GC time]).
  // `on`: the device whose stream the host is about to wait for.
  virtual void before_block(device_allocator& on, const std::function<bool()>& device_busy);
  // Called by synchronize() instead when the device was already done (with
  // the collection lock held): a quiet moment at which nothing is hidden.
  // Default: nothing.
  virtual void at_idle_sync(device_allocator& on) { (void)on; }
  // Called by synchronize() after the wait (without the collection lock):
  // the device `on` is done with everything queued before the call;
  // `waited`: it was still busy when the host called. Default: nothing.
  virtual void after_sync(device_allocator& on, bool waited, double device_done_at) {
    (void)on, (void)waited, (void)device_done_at;
  }
  // add_device() added device `i`; called with the collection lock held,
  // before the device's allocations reach the policy.
  virtual void device_added(std::size_t i) { (void)i; }
  // Exposed seconds that the policy's budget does not count (stats'
  // exposed_gc_seconds_charged). Thread-safe; finalizer-safe. Default: none.
  virtual double uncharged_seconds() const noexcept { return 0; }


  device_allocator& alloc_;                // devices_[0]
  detail::device_list devices_;
  collector& gc_;
  policy_options opts_;
  // Serialises collections the policy runs. Never an allocator lock: frees
  // from finalizers take only the pool lock, which is never held here.
  std::recursive_timed_mutex collect_mu_;
  // collect_mu_, held; a wait for it is announced to the collector (Note
  // [Waiting for a collection]). Every blocking acquisition goes through
  // here or through wait_for_collection_lock().
  std::unique_lock<std::recursive_timed_mutex> lock_collection();
  // Polls collect_mu_ into `lk` for up to `limit` seconds, announced the
  // same way; false if it stayed busy.
  bool wait_for_collection_lock(std::unique_lock<std::recursive_timed_mutex>& lk, double limit);

 private:
  void account_exposure(double seconds);
  // Collection bookkeeping over every device (Note [One policy, N devices]).
  void drain_all() noexcept;
  void mark_all() noexcept;
  void sample_before(outcome& o) const;  // young_before and live (in reclaimed) per device
  void sample_after(outcome& o) const;   // live_after, reclaimed and the sums

  const clock_source* clock_;
  mutable std::mutex stats_mu_;
  collection_stats stats_;
  double probe_exposed_ = 0;  // own_exposed_seconds (under stats_mu_)
  std::uint64_t collections_ = 0;
  double start_;
  collector_counters counters0_;  // the collector's counters when the policy was made
  std::vector<std::size_t> reclaimed_by_device_;  // guarded by stats_mu_
  double slack_ = 0;              // guarded by stats_mu_

  // Incremental whole-heap cycle state (guarded by collect_mu_).
  // The cycle in progress (Note [Sliced cycles]), guarded by collect_mu_.
  // blocking_full stands for "none".
  gc_kind cycle_ = gc_kind::blocking_full;
  double cycle_seconds_ = 0;
  outcome cycle_before_;  // per-device young and live bytes when the cycle started
  double cycle_run_ = 0;         // length of the current run of back-to-back slices
  bool cycle_blocking_ = false;  // some slices of this cycle ran back to back
};

// Creates a policy by name (one of policy_names()). Throws logic_error naming
// the bad name and the known ones.
std::unique_ptr<gc_policy> make_policy(const std::string& name, device_allocator& a, collector& c,
                                       policy_options o = {});
// The same over several devices (Note [One policy, N devices]).
std::unique_ptr<gc_policy> make_policy(const std::string& name, const std::vector<device_allocator*>& devices,
                                       collector& c, policy_options o = {});

// Names of every policy, for help text and benchmarks (nullptr-terminated).
// The one list: option tables, error texts, the C API's
// gcpressure_policy_names(), the fuzzer and CMake's GCPRESSURE_POLICY_NAMES
// (checked by a test) all come from it. Thread-safe; finalizer-safe.
const char* const* policy_names() noexcept;

// Whether `name` is one of policy_names(). Thread-safe; finalizer-safe.
bool is_policy_name(std::string_view name) noexcept;

// policy_names() joined by `sep`, the last two by `last_sep` (empty: `sep`):
// policy_names_text(", ", " or ") is "pressure, at_limit, ... or
// explicit_free". Thread-safe; allocates (not finalizer-safe).
std::string policy_names_text(std::string_view sep, std::string_view last_sep = {});

}  // namespace gcpressure
