// Internal: the one owner of process-wide Boehm state (bdwgc settings, the
// whole-heap cycle, the collection counters). Every boehm_collector
// delegates to it; nothing else in the bridge changes those settings.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

#include "boehm_gc.hpp"
#include "gcpressure/collector.hpp"

namespace gcpressure::boehm::detail {

// Note [One owner of process-wide Boehm state]
// bdwgc's full frequency, time limit and "collection in progress" are
// process-wide, yet each device_heap has its own boehm_collector. A minor
// swaps the settings and restores them; a whole-heap cycle is started by
// forcing the frequency to 0 for one start. Done per instance and unlocked,
// two heaps collecting at once interleave the swaps and can leave Boehm with
// the minor's settings for good. So the runtime serialises every collector
// call that touches settings or cycle state under one mutex (mu_), and owns
// the cycle state. The mutex is never held while finalizers may run:
// GC_gcollect runs them inline when finalization is not on demand (Guile),
// so collect_full and the non-incremental paths run outside it; a
// finalizer that allocates and reaches the policy again would otherwise
// deadlock. Lock order: mu_, then Boehm's allocation lock; Boehm's callbacks
// (run with the allocation lock held) never take mu_.
class boehm_runtime {
 public:
  // The process's runtime (never destroyed: Boehm's callbacks outlive statics).
  static boehm_runtime& instance() noexcept;

  // Installs the start and collection-event callbacks, chaining the ones a
  // runtime installed before (Guile's). Called once, by boehm::init.
  void install_hooks();
  // Boehm's own settings (what every swap restores to). Not for use while
  // collector calls run on other threads (init time).
  void configure(int full_freq, unsigned long time_limit_ms);

  // The collector interface (see boehm_collector). Thread-safe; not from a
  // finalizer.
  void collect_minor();
  // Note [Sliced minors]: a partial cycle in time-limited slices.
  void start_minor();
  bool step_minor(double budget_seconds);
  void start_full();
  bool step_full(double budget_seconds);
  bool full_in_progress() const noexcept;
  void collect_full();

  collector_counters counters() const;
  // Collections completed inside collector calls (or the policy's whole-heap
  // cycle completed by the mutator): the policy's share of GC_get_gc_no().
  std::uint64_t policy_collections() const noexcept { return policy_collections_.load(std::memory_order_relaxed); }

 private:
  friend struct interface_call;
  static void GC_CALLBACK start_hook();
  static void GC_CALLBACK event_hook(GC_EventType e);
  void count_completion(bool in_call) noexcept;
  void finish_runtime_cycle();

  std::mutex mu_;
  // Whole-heap cycle the policy started (guarded by mu_; read atomically).
  std::atomic<bool> full_active_{false};
  GC_word full_start_no_ = 0;
  // Sliced minor the policy started (guarded by mu_), and whether its
  // completion, wherever it happens, is still to be counted as the policy's.
  bool minor_active_ = false;
  GC_word minor_start_no_ = 0;
  std::atomic<bool> minor_by_policy_{false};

  // Written by Boehm's callbacks under its allocation lock; read anywhere.
  std::atomic<std::uint64_t> policy_collections_{0}, own_collections_{0};
  std::atomic<std::uint64_t> full_collections_{0}, own_full_collections_{0};
  std::atomic<std::int64_t> interface_ns_{0}, own_ns_{0};
  // Per cycle, under Boehm's allocation lock (plain: one holder at a time).
  bool cycle_full_ = false;       // the cycle in progress marks the whole heap
  bool cycle_by_policy_ = false;  // ... and a collector call started it
  std::int64_t own_collection_t0_ = 0;  // GC_EVENT_START outside collector calls
  std::int64_t own_piece_t0_ = 0;       // a stopped mark or a reclaim outside them
};

}  // namespace gcpressure::boehm::detail
