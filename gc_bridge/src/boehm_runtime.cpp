// The one owner of process-wide Boehm state: settings swaps, the whole-heap
// cycle, and every collection counted by origin and kind.
#include "boehm_runtime.hpp"

#include <algorithm>
#include <chrono>

namespace gcpressure::boehm::detail {

namespace {

GC_on_collection_event_proc g_prev_event = nullptr;
GC_start_callback_proc g_prev_start = nullptr;  // e.g. Guile's before-GC hook

// Depth of collector calls on this thread (Note [Every collection is counted]).
thread_local int t_interface_depth = 0;

std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Settings a minor collection or a whole-heap start runs with.
struct gc_settings {
  int full_freq;
  unsigned long time_limit;
};

void* GC_CALLBACK swap_settings(void* p) {
  auto* s = static_cast<gc_settings*>(p);
  const gc_settings old{GC_get_full_freq(), GC_get_time_limit()};
  GC_set_full_freq(s->full_freq);
  GC_set_time_limit(s->time_limit);
  *s = old;
  return nullptr;
}

// Swaps the settings in for a scope (under Boehm's allocation lock each time).
class settings_scope {
 public:
  explicit settings_scope(gc_settings s) : saved_(s) { GC_call_with_alloc_lock(swap_settings, &saved_); }
  ~settings_scope() { GC_call_with_alloc_lock(swap_settings, &saved_); }
  settings_scope(const settings_scope&) = delete;
  settings_scope& operator=(const settings_scope&) = delete;

 private:
  gc_settings saved_;
};

}  // namespace

// A collector call on this thread: collections completed on it are the
// policy's, and its wall time is collection time.
struct interface_call {
  explicit interface_call(boehm_runtime& r) : r_(r), t0_(t_interface_depth++ == 0 ? now_ns() : 0) {}
  ~interface_call() {
    if (--t_interface_depth == 0) r_.interface_ns_.fetch_add(now_ns() - t0_, std::memory_order_relaxed);
  }
  interface_call(const interface_call&) = delete;
  interface_call& operator=(const interface_call&) = delete;

 private:
  boehm_runtime& r_;
  std::int64_t t0_;
};

boehm_runtime& boehm_runtime::instance() noexcept {
  static auto* r = new boehm_runtime;  // leaked: callbacks and detached threads outlive statics
  return *r;
}

// Note [Every collection is counted] (core/include/gcpressure/collector.hpp),
// for Boehm (checked against the 8.2.2 source, alloc.c):
// - GC_gc_no is incremented in exactly one place, GC_stopped_mark, when a
//   collection's final stopped mark completes; GC_EVENT_MARK_END follows at
//   once, on the same thread, under the allocation lock. So counting
//   MARK_END events by origin splits GC_get_gc_no() exactly.
// - Origin: a completion on a thread inside a collector call is the
//   policy's; so is the completion of a whole-heap cycle a collector call
//   started (start_full), wherever the mutator's allocations finish it.
//   Everything else is the runtime's own (allocation-triggered, GC_gcollect
//   outside the interface, the runtime's explicit collections).
// - Kind: the start callback (GC_notify_full_gc) fires when a whole-heap
//   collection starts: in GC_maybe_gc when GC_need_full_gc or n_partial_gcs
//   >= GC_full_freq (incremental mode), and in GC_try_to_collect_inner
//   (GC_gcollect, and every collection without incremental mode). The
//   completion that follows is whole-heap.
// - Time outside collector calls (own_seconds): GC_EVENT_START/END bracket
//   only GC_try_to_collect_inner (stop-the-world collections). In
//   incremental mode a cycle of GC_maybe_gc fires PRE_STOP_WORLD ..
//   POST_START_WORLD around each stopped mark (completed or abandoned at the
//   time limit) and RECLAIM_START/END around GC_finish_collection (sweep
//   set-up and finalization). Those are summed. Not covered, so own_seconds
//   is a lower bound in incremental mode: the mark work
//   GC_collect_a_little_inner does with the world running, inside
//   allocations, between stopped marks (GC_allocobj: at every free-list
//   refill while a time limit is set process-wide; with the default, none
//   (Note [Who advances a cycle]), once when a refill finds no free block);
//   GC_reclaim_all and GC_clear_marks
//   that GC_maybe_gc runs before a whole-heap cycle's first stopped mark;
//   GC_wait_for_reclaim (parallel markers). Without incremental mode every
//   collection is inside START/END: exact. Lazy sweeping during allocation
//   is allocation cost in either mode and never counted.
// - A collection abandoned by a user stop function (GC_set_stop_func) fires
//   START without END; its time is dropped at the next START.
void GC_CALLBACK boehm_runtime::start_hook() {
  boehm_runtime& r = instance();
  r.cycle_full_ = true;
  r.cycle_by_policy_ = t_interface_depth > 0;
  if (g_prev_start) g_prev_start();
}

void GC_CALLBACK boehm_runtime::event_hook(GC_EventType e) {
  boehm_runtime& r = instance();
  const bool in_call = t_interface_depth > 0;
  auto add_own = [&r](std::int64_t& t0) {
    if (t0) r.own_ns_.fetch_add(now_ns() - t0, std::memory_order_relaxed);
    t0 = 0;
  };
  switch (e) {
    case GC_EVENT_START:
      r.own_collection_t0_ = in_call ? 0 : now_ns();
      r.own_piece_t0_ = 0;
      break;
    case GC_EVENT_END: add_own(r.own_collection_t0_); break;
    case GC_EVENT_PRE_STOP_WORLD:
    case GC_EVENT_RECLAIM_START:
      if (!in_call && !r.own_collection_t0_) r.own_piece_t0_ = now_ns();
      break;
    case GC_EVENT_POST_START_WORLD:
    case GC_EVENT_RECLAIM_END:
      if (!r.own_collection_t0_) add_own(r.own_piece_t0_);
      break;
    case GC_EVENT_MARK_END: r.count_completion(in_call); break;
    default: break;
  }
  if (g_prev_event) g_prev_event(e);
}

void boehm_runtime::count_completion(bool in_call) noexcept {
  const bool full = cycle_full_;
  const bool sliced_minor = !full && minor_by_policy_.exchange(false, std::memory_order_relaxed);
  const bool policy = in_call || (full && cycle_by_policy_) || sliced_minor;
  (policy ? policy_collections_ : own_collections_).fetch_add(1, std::memory_order_relaxed);
  if (full) {
    full_collections_.fetch_add(1, std::memory_order_relaxed);
    if (!policy) own_full_collections_.fetch_add(1, std::memory_order_relaxed);
  }
  cycle_full_ = cycle_by_policy_ = false;
}

void boehm_runtime::install_hooks() {
  // Chain, never replace, the runtime's own hooks (Guile has both).
  g_prev_start = GC_get_start_callback();
  GC_set_start_callback(start_hook);
  g_prev_event = GC_get_on_collection_event();
  GC_set_on_collection_event(event_hook);
}

void boehm_runtime::configure(int full_freq, unsigned long time_limit_ms) {
  std::lock_guard<std::mutex> lk(mu_);
  gc_settings s{full_freq, time_limit_ms};
  GC_call_with_alloc_lock(swap_settings, &s);
}

void boehm_runtime::collect_minor() {
  if (!GC_is_incremental_mode()) {
    interface_call call(*this);
    GC_gcollect();  // outside mu_: may run finalizers inline
    return;
  }
  // Note [A minor stays minor]: bdwgc turns every (full_freq+1)-th partial
  // cycle into a full one, which here would be a stop-the-world whole-heap
  // mark (seen: an 893 ms pause at a 1 GiB heap). And with a time limit the
  // first stopped mark of a partial cycle is abandoned and redone (20-30 ms
  // wasted). So a minor the policy asks for runs with the full frequency out
  // of reach and no time limit: one short stopped mark of roots and dirty
  // pages. Whole-heap work happens only in start_full/step_full slices.
  std::lock_guard<std::mutex> lk(mu_);
  if (!minor_active_) finish_runtime_cycle();  // not the policy's sliced minor: the runtime's own
  interface_call call(*this);
  settings_scope minor({1 << 30, GC_TIME_UNLIMITED});
  GC_start_incremental_collection();
  while (GC_collect_a_little()) {
  }
}

// Note [Who advances a cycle]
// bdwgc 8.2.2, alloc.c: GC_allocobj calls GC_collect_a_little_inner(1) at
// every free-list refill when GC_incremental && GC_time_limit !=
// GC_TIME_UNLIMITED ("true incremental mode, not just generational"), and
// that runs GC_rate units of GC_mark_some, not bounded by time. With a time
// limit set process-wide, a cycle in progress therefore taxes every small
// allocation of the mutator (measured in the forward loop on the host
// backend at a 256 MiB heap: host time per iteration 0.25 -> 1.9 ms while
// sliced minors were in progress). So Boehm runs without a time limit
// (generational only) and the policy's slices set one just for themselves
// (settings_scope): cycles advance only when the policy steps them, at
// times it chooses and measures.
//
// Note [Sliced minors]
// Measured here (bdwgc 8.2.2, a 256 MiB heap of linked 64-byte objects,
// /tmp-style probe in docs/DESIGN.md): a partial collection with no time
// limit is one ~8 ms stopped mark plus ~2 ms of reclaim; with a 1 ms limit
// the same cycle runs as ~18 steps of at most ~1.3 ms with the world running
// between them (its first stopped mark is abandoned and redone: ~14 ms in
// all). Slices that short fit in the time the host waits for the device, so
// the policy runs minors this way at synchronize points. The cycle is
// started with the full frequency out of reach (it stays partial); each step
// runs with the time limit of its budget; between steps the mutator's own
// allocations may advance or finish it, and that completion still counts as
// the policy's (minor_by_policy_).
void boehm_runtime::start_minor() {
  if (!GC_is_incremental_mode()) {
    collect_minor();
    return;
  }
  std::lock_guard<std::mutex> lk(mu_);
  if (minor_active_ && GC_get_gc_no() == minor_start_no_) return;
  finish_runtime_cycle();
  interface_call call(*this);
  settings_scope partial({1 << 30, 1});
  minor_start_no_ = GC_get_gc_no();
  minor_by_policy_.store(true, std::memory_order_relaxed);
  GC_start_incremental_collection();
  minor_active_ = true;
}

bool boehm_runtime::step_minor(double budget_seconds) {
  if (!GC_is_incremental_mode()) return true;
  interface_call call(*this);
  std::lock_guard<std::mutex> lk(mu_);
  if (!minor_active_) return true;
  const auto limit_ms = static_cast<unsigned long>(std::max(1.0, budget_seconds * 1e3));
  settings_scope partial({1 << 30, limit_ms});
  const auto t0 = std::chrono::steady_clock::now();
  const auto budget = std::chrono::duration<double>(budget_seconds);
  while (GC_get_gc_no() == minor_start_no_) {
    if (!GC_collect_a_little() && GC_get_gc_no() == minor_start_no_) break;  // nothing in progress
    if (std::chrono::steady_clock::now() - t0 >= budget) return false;
  }
  minor_active_ = false;
  minor_by_policy_.store(false, std::memory_order_relaxed);
  return true;
}

// A cycle already under way (the runtime's own) would absorb a start: it is
// finished first, outside any interface_call, so that its completion counts
// as the runtime's (Note [Every collection is counted]); its time is the
// policy's to bear but not its collection.
void boehm_runtime::finish_runtime_cycle() {
  while (GC_collect_a_little()) {
  }
}

void boehm_runtime::start_full() {
  std::lock_guard<std::mutex> lk(mu_);
  // One cycle at a time; every heap's policy steps the same one. A cycle
  // whose stepper went away (its heap was destroyed) and that the mutator
  // finished since does not count as in progress.
  const bool incremental = GC_is_incremental_mode() != 0;
  if (full_active_.load() && !(incremental && GC_get_gc_no() != full_start_no_)) return;
  if (incremental) {
    finish_runtime_cycle();
  }
  interface_call call(*this);
  if (incremental) {
    // The next cycle is whole-heap (frequency 0), and its first stopped mark
    // is sliced too (a 1 ms limit, as start_minor): with Boehm's own setting
    // (no time limit, Note [Who advances a cycle]) the start would mark the
    // whole heap in one pause (seen: a 475 ms "cycle" in one 0.01 ms slice
    // after a start that took it all, BoehmFacts.MinorIsCheaperThanFull...).
    settings_scope whole_heap({0, 1});
    full_start_no_ = GC_get_gc_no();
    GC_start_incremental_collection();
  }
  full_active_.store(true);
}

bool boehm_runtime::step_full(double budget_seconds) {
  interface_call call(*this);
  std::unique_lock<std::mutex> lk(mu_);
  if (!full_active_.load()) return true;
  if (!GC_is_incremental_mode()) {
    full_active_.store(false);
    lk.unlock();
    GC_gcollect();  // outside mu_: may run finalizers inline
    return true;
  }
  // Note [Who advances a cycle]: the slice's own time limit.
  const auto limit_ms = static_cast<unsigned long>(std::max(1.0, budget_seconds * 1e3));
  settings_scope slice({GC_get_full_freq(), limit_ms});
  const auto t0 = std::chrono::steady_clock::now();
  const auto budget = std::chrono::duration<double>(budget_seconds);
  // The cycle is done once the collection count moved past its start (the
  // mutator's own allocations may have finished it for us).
  while (GC_get_gc_no() == full_start_no_) {
    if (!GC_collect_a_little() && GC_get_gc_no() == full_start_no_) {
      // Nothing in progress and the count did not move: the start did not
      // take (GC disabled); report done rather than spin.
      break;
    }
    if (std::chrono::steady_clock::now() - t0 >= budget) return false;
  }
  full_active_.store(false);
  return true;
}

bool boehm_runtime::full_in_progress() const noexcept { return full_active_.load(); }

void boehm_runtime::collect_full() {
  interface_call call(*this);
  GC_gcollect();  // outside mu_: may run finalizers inline
}

collector_counters boehm_runtime::counters() const {
  collector_counters c;
  c.collections = GC_get_gc_no();
  c.full_collections = full_collections_.load(std::memory_order_relaxed);
  c.own_collections = own_collections_.load(std::memory_order_relaxed);
  c.own_full_collections = own_full_collections_.load(std::memory_order_relaxed);
  c.own_seconds = static_cast<double>(own_ns_.load(std::memory_order_relaxed)) * 1e-9;
  c.seconds = static_cast<double>(interface_ns_.load(std::memory_order_relaxed)) * 1e-9 + c.own_seconds;
  c.own_seconds_exact = GC_is_incremental_mode() == 0;
  GC_word heap = 0, free_bytes = 0, unmapped = 0, since = 0, total = 0;
  GC_get_heap_usage_safe(&heap, &free_bytes, &unmapped, &since, &total);
  c.heap_bytes = heap > free_bytes ? heap - free_bytes : 0;
  return c;
}

}  // namespace gcpressure::boehm::detail
