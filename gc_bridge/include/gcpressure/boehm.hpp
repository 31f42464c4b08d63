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
#include <utility>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/policy.hpp"

namespace gcpressure::boehm {

struct runtime_options {
  bool incremental = true;        // generational + incremental mode (mprotect dirty bits here)
  // Boehm's own time limit outside the policy's slices. 0 (default): none —
  // generational mode only, so the mutator's allocations never do marking
  // work of a cycle in progress (bdwgc's GC_allocobj does "its share" only
  // with a limit set); the policy advances its cycles itself, in slices it
  // times (Note [Who advances a cycle] in gc_bridge/src/boehm_runtime.cpp).
  unsigned long time_limit_ms = 0;
  bool finalizer_thread = true;   // GC_set_finalize_on_demand(1) + a thread woken by the notifier
  int full_freq = -1;             // partial collections between full ones; -1: Boehm's default (19,
                                  // or GC_FULL_FREQUENCY) - Note [Who owns whole-heap cycles]
  bool skip_vendor_roots = true;  // do not scan CUDA/cuBLAS/NCCL data segments as roots
  // Parallel mark threads, the initiating one included (GC_set_markers_count
  // before GC_INIT); 0: Boehm decides (the number of CPUs). Boehm's GC_MARKERS
  // variable wins over this. No effect when bdwgc was initialised before
  // (by the runtime). Only stopped marks without a time limit run in
  // parallel (the policy's minors; not the time-limited slices). Default 1:
  // on a 16-core host parallel marking doubled a minor and slowed the
  // allocations after it (Note [One marker for minors] in
  // gc_bridge/src/boehm_collector.cpp).
  unsigned markers = 1;
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
  // Sliced partial cycles in incremental mode (Note [Sliced minors]).
  bool has_incremental_minor() const noexcept override;
  void start_minor() override;
  bool step_minor(double budget_seconds) override;
  bool minor_is_whole_heap() const noexcept override;
  void start_full() override;
  bool step_full(double budget_seconds) override;
  // Boehm only (the policy tracks its own cycle): a whole-heap cycle that
  // start_full() began has not completed yet. Thread-safe; finalizer-safe.
  bool full_in_progress() const noexcept;
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

// Note [Stale stack words] (device_heap.cpp): zeroes the stack below the
// caller's frame, where the frames of the code it called before ran, so that
// the collections it is about to ask for do not find array pointers those
// dead frames left. Thread-safe, finalizer-safe; about 1 us.
void clear_stale_stack() noexcept;

// The handle a runtime's array object points to. Opaque; a GC object.
struct buffer;

// One or more devices (Note [One policy, N devices] in policy.hpp): an
// allocator per device, one Boehm collector and one policy over all of them,
// and GC-owned buffers. Devices are numbered 0..device_count()-1 in the
// order given (GCPRESSURE_DEVICES="2,3": index 0 is CUDA device 2).
// Thread safety: every member is thread-safe for threads registered with
// Boehm, except shutdown() and the destructor. From a finalizer: only
// unsafe_free() and the static accessors. Calls boehm::init() (defaults)
// if the program did not.
class device_heap {
 public:
  // Note [The environment is the default layer] (config.hpp): the GCPRESSURE_*
  // variables over the built-in defaults, and what `o` sets over both.
  // Throws logic_error naming the variable or option on a bad value.
  device_heap() : device_heap(options{}) {}
  explicit device_heap(const options& o);
  // Everything given: no GCPRESSURE_* variable is read.
  device_heap(allocator_options a, const std::string& policy, policy_options p = {});
  // One policy over several devices, one allocator_options each (at least
  // one). Everything given: no GCPRESSURE_* variable is read.
  device_heap(const std::vector<allocator_options>& devices, const std::string& policy, policy_options p = {});
  // The same as device_heap(), on the heap.
  static std::unique_ptr<device_heap> from_env();
  // shutdown(), then the heap is gone.
  ~device_heap();
  device_heap(const device_heap&) = delete;
  device_heap& operator=(const device_heap&) = delete;

  // Note [Clean teardown]: a blocking whole-heap collection, the finalizers
  // it made pending, a drain, then the allocator is released. Buffers that
  // are garbage return their blocks first; the blocks of buffers still
  // live after that (a dead stack slot or a global still names them) are
  // freed with the heap, not leaked (Note [Blocks still allocated at
  // shutdown] in gc_bridge/src/device_heap.cpp; GCPRESSURE_VERBOSE=1 says
  // how many). Blocks taken through allocator() are the caller's: still
  // allocated ones are reported as leaked.
  // Note [Shutdown]: later finalizers of this heap's buffers do nothing;
  // their blocks went with the allocator; data() on them throws logic_error
  // and is_live() is false. Every other member throws logic_error
  // afterwards. Idempotent. Not thread-safe against other calls on this
  // heap (none may run meanwhile); not from a finalizer or a collection.
  void shutdown();

  // A GC-owned device buffer of `bytes` on `stream`. Never returns null:
  // throws out_of_memory (after the reclaim ladder) or logic_error (0 bytes).
  buffer* alloc(std::size_t bytes, stream_ref stream = nullptr) { return alloc(bytes, stream, 0); }
  // The same on device `device` (0..device_count()-1; else logic_error);
  // `stream` must belong to that device.
  buffer* alloc(std::size_t bytes, stream_ref stream, std::size_t device);

  // Thread-safe; finalizer-safe. 0 after shutdown().
  std::size_t device_count() const noexcept { return devices_.size(); }
  // The index of the device `b` lives on; logic_error if `b` is not a live
  // buffer of this heap's. Thread-safe.
  std::size_t device_of(const buffer* b) const;

  // Frees at once (CUDA.jl's unsafe_free!); the later finalizer does nothing.
  // A second unsafe_free, or one on a buffer of another heap, is logic_error.
  void unsafe_free(buffer* b);

  // The device pointer; logic_error after unsafe_free or heap shutdown.
  static void* data(const buffer* b);
  static std::size_t size(const buffer* b) noexcept;
  static stream_ref stream(const buffer* b) noexcept;
  // Not unsafe-freed, not finalized, and its heap is alive. Finalizer-safe.
  static bool is_live(const buffer* b) noexcept;

  // Hints for the policy (see gc_policy). Thread-safe (registered threads);
  // not from a finalizer or from inside a collection.
  // quiet_moment: few temporaries are alive. will_block: the host is about
  // to wait for the device (for runtimes that cannot route their syncs
  // through synchronize()).
  // Each hint first clears the stack below the caller's frame (Note [Stale
  // stack words], device_heap.cpp): inlined always, also at -O0, so that no
  // frame of its own lies over the words it clears (under ASan at -O0 the
  // frame of an outlined iteration() kept them).
  [[gnu::always_inline]] void quiet_moment(bool will_block = false) {
    clear_stale_stack();
    policy().quiet_moment(will_block);
  }
  [[gnu::always_inline]] void iteration() {
    clear_stale_stack();
    policy().iteration();
  }
  // The host is about to wait for the work queued on `stream`: due
  // collection work runs while that work still runs, then this blocks until
  // it has completed (gc_policy::synchronize). Use it instead of the
  // runtime's own stream sync. Thread-safe; not from a finalizer.
  [[gnu::always_inline]] void synchronize(stream_ref stream = nullptr) { synchronize(stream, 0); }
  // The same for a stream of device `device`.
  [[gnu::always_inline]] void synchronize(stream_ref stream, std::size_t device) {
    clear_stale_stack();
    policy().synchronize(stream, &allocator(device));
  }
  [[gnu::always_inline]] void collect(gc_kind k) {
    clear_stale_stack();
    policy().collect(k);
  }

  // Device `device`'s allocator and statistics (its gc section: the shared
  // policy's collections, that device's reclaimed bytes). logic_error after
  // shutdown() or for a device index out of range.
  device_allocator& allocator(std::size_t device = 0);
  gc_policy& policy();
  boehm_collector& gc() noexcept { return collector_; }
  allocator_stats stats(std::size_t device = 0) const;

 private:
  void open(const std::vector<allocator_options>& a, const std::string& policy, const policy_options& p);
  void release_slots() noexcept;
  std::pair<std::size_t, std::size_t> release_live_buffers();  // (buffers, bytes) freed

  // One per device: its allocator and the finalizer slot its buffers name.
  struct device_slot {
    std::unique_ptr<device_allocator> alloc;
    std::uint32_t slot = 0;
    std::uint32_t generation = 0;
    bool taken = false;
  };
  std::vector<device_slot> devices_;
  boehm_collector collector_;
  std::unique_ptr<gc_policy> policy_;
  bool verbose_ = false;  // policy_options.verbose: shutdown() says what it freed
};

// Handles finalized whose heap was already gone (Note [Shutdown]).
std::uint64_t orphaned_finalizations() noexcept;
// Buffers whose blocks device_heap::shutdown() freed because the collector
// still found them after its teardown collection (Note [Blocks still
// allocated at shutdown]), over every heap of the process. Thread-safe;
// finalizer-safe.
std::uint64_t blocks_freed_at_shutdown() noexcept;

// A GC object of `bytes`, scanned for pointers, from Boehm's global free
// lists: allocate the runtime's array object (the host object that points at
// a buffer) with this. An object from a thread-local free list (GC_MALLOC
// under GC_THREADS) is often born marked and then survives every partial
// collection until a whole-heap one, and so does the device buffer it keeps
// alive: minors would promote young device garbage (Note [Handles come from
// the global free lists] in device_heap.cpp; measured in
// tests/test_boehm_facts.cpp and bench/RESULTS.md). nullptr when the host
// heap is exhausted.
// Thread-safe for threads registered with Boehm; finalizer-safe.
void* alloc_array_object(std::size_t bytes) noexcept;

}  // namespace gcpressure::boehm
