// gcpressure/boehm.hpp — device buffers owned by Boehm GC objects, and the
// Boehm implementation of the collector interface.
//
// This header does not include <gc.h>: runtimes that already include it (and
// define GC_THREADS) are not disturbed, and those that don't need not.
//
// Note [A device buffer is a GC object]
// alloc() returns a small pointer-free GC object (GC_generic_malloc with
// GC_I_PTRFREE, from the global free lists: Note [Handles come from the
// global free lists]) {hidden device pointer, bytes, stream, allocator slot}
// with a finalizer (no order). When it becomes
// unreachable, a collection finds it and its finalizer pushes the block onto
// the allocator's deferred-free queue — never calling CUDA, never taking an
// allocator lock (Note [Finalizers only queue]). The block returns to the
// pool, ordered on its stream, at the next allocation, drain, or on the
// finalizer thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/policy.hpp"

namespace gcpressure::boehm {

struct runtime_options {
  bool incremental = true;        // generational + incremental mode (mprotect dirty bits here)
  unsigned long time_limit_ms = 2;  // Boehm's own slice length in incremental mode
  bool finalizer_thread = true;   // GC_set_finalize_on_demand(1) + a thread woken by the notifier
  int full_freq = -1;             // partial collections between full ones; -1: Boehm's default (19)
  bool skip_vendor_roots = true;  // do not scan CUDA/cuBLAS/NCCL data segments as roots
};

// Initialises Boehm for the process once: GC_INIT, thread registration,
// incremental mode, on-demand finalization, the finalizer thread. Call it
// from the main thread before other threads allocate. Thread-safe and
// idempotent (later options are ignored). Not callable from a finalizer.
// If a runtime already initialised bdwgc with its own finalizer notifier
// (Guile), its finalization and mode are kept (Note [Sharing bdwgc with a
// runtime]).
void init(const runtime_options& o = {});
bool initialized() noexcept;

// Registers the calling thread with Boehm for the scope's lifetime (for
// threads not created through Boehm's pthread wrappers). No-op if the thread
// is already registered.
class thread_scope {
 public:
  thread_scope();
  ~thread_scope();
  thread_scope(const thread_scope&) = delete;
  thread_scope& operator=(const thread_scope&) = delete;

 private:
  bool registered_ = false;
};

// The collector interface over Boehm. collect_minor(): a partial collection
// (GC_start_incremental_collection + GC_collect_a_little until done; a full
// blocking one when incremental mode is off). start_full()/step_full(): a
// whole-heap cycle in slices (full frequency forced to 0 for its start).
// collect_full(): GC_gcollect (blocking). Thread-safe; not from a finalizer.
class boehm_collector final : public collector {
 public:
  boehm_collector();
  const char* name() const noexcept override { return "boehm"; }
  void collect_minor() override;
  bool has_incremental_full() const noexcept override;
  bool minor_is_whole_heap() const noexcept override;
  void start_full() override;
  bool step_full(double budget_seconds) override;
  bool full_in_progress() const override;
  void collect_full() override;
  std::size_t run_finalizers() override;
  // Process-wide (one bdwgc per process): collections == GC_get_gc_no();
  // own_* are Boehm's collections completed outside every collector call
  // (Note [Every collection is counted]); own_seconds is exact only without
  // incremental mode. Thread-safe; finalizer-safe.
  collector_counters counters() const override;
  // Process-wide: collections completed inside collector calls (any
  // boehm_collector), plus a whole-heap cycle start_full() began that the
  // mutator finished. GC_get_gc_no() == policy_collections() +
  // counters().own_collections, counted from boehm::init(). Thread-safe;
  // finalizer-safe.
  static std::uint64_t policy_collections() noexcept;
};

// The handle a runtime's array object points to. Opaque; a GC object.
struct buffer;

// One device: allocator + Boehm collector + policy, and GC-owned buffers.
// Thread safety: every member is thread-safe for threads registered with
// Boehm. From a finalizer: only unsafe_free() and the static accessors.
class device_heap {
 public:
  explicit device_heap(allocator_options a = {}, const std::string& policy = "pressure", policy_options p = {});
  // From GCPRESSURE_* (backend, limits, policy, budget). Throws logic_error on a bad value.
  static std::unique_ptr<device_heap> from_env();
  // Note [Shutdown]: later finalizers of this heap's buffers do nothing; their
  // blocks go back with the allocator. data() on them throws logic_error.
  ~device_heap();
  device_heap(const device_heap&) = delete;
  device_heap& operator=(const device_heap&) = delete;

  // A GC-owned device buffer of `bytes` on `stream`. Never returns null:
  // throws out_of_memory (after the reclaim ladder) or logic_error (0 bytes).
  buffer* alloc(std::size_t bytes, stream_ref stream = nullptr);

  // Frees at once (CUDA.jl's unsafe_free!); the later finalizer does nothing.
  // A second unsafe_free, or one on a buffer of another heap, is logic_error.
  void unsafe_free(buffer* b);

  // The device pointer; logic_error after unsafe_free or heap shutdown.
  static void* data(const buffer* b);
  static std::size_t size(const buffer* b) noexcept;
  static stream_ref stream(const buffer* b) noexcept;
  static bool is_live(const buffer* b) noexcept;

  // Hints for the policy (see gc_policy). Thread-safe (registered threads);
  // not from a finalizer or from inside a collection.
  // quiet_moment: few temporaries are alive. will_block: the host is about
  // to wait for the device (for runtimes that cannot route their syncs
  // through synchronize()).
  void quiet_moment(bool will_block = false) { policy_->quiet_moment(will_block); }
  void iteration() { policy_->iteration(); }
  // The host is about to wait for the work queued on `stream`: due
  // collection work runs while that work still runs, then this blocks until
  // it has completed (gc_policy::synchronize). Use it instead of the
  // runtime's own stream sync. Thread-safe; not from a finalizer.
  void synchronize(stream_ref stream = nullptr) { policy_->synchronize(stream); }
  void collect(gc_kind k) { policy_->collect(k); }

  device_allocator& allocator() noexcept { return *alloc_; }
  gc_policy& policy() noexcept { return *policy_; }
  boehm_collector& gc() noexcept { return collector_; }
  allocator_stats stats() const { return alloc_->stats(); }

 private:
  std::unique_ptr<device_allocator> alloc_;
  boehm_collector collector_;
  std::unique_ptr<gc_policy> policy_;
  std::uint32_t slot_ = 0;
  std::uint32_t generation_ = 0;
};

// Handles finalized whose heap was already gone (Note [Shutdown]).
std::uint64_t orphaned_finalizations() noexcept;

}  // namespace gcpressure::boehm
