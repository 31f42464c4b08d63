// gcpressure/collector.hpp — what the pressure policy needs from a runtime's
// garbage collector. Boehm (gc_bridge/) is the first implementation; Guile,
// Lua and CPython implement it through the C API. Nothing in the policy may
// assume more than this.
//
// Thread safety: implementations must accept calls from any thread that the
// runtime allows to allocate. None of these may be called from a finalizer.
// The policy makes every call that collects or runs finalizers inside a
// collection_scope (Note [Inside a collection]): the runtime code a call
// runs on this thread (its finalizers) never reaches the policy again. A
// collector that hands the work to another thread enters the scope there.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gcpressure {

// Note [Every collection is counted]
// The policy knows what it asked for; the runtime also collects on its own
// (Boehm on host allocation and every GC_full_freq-th partial cycle, CPython
// on its allocation counts). A collector reports both: totals, and the part
// the runtime ran outside any call of this interface ("own"). The identity
// the benchmarks check: collections == policy-started + own, where
// policy-started are the collections completed inside this interface's calls.
struct collector_counters {
  std::uint64_t collections = 0;       // every collection the runtime completed, ours or its own (exact for Boehm)
  std::uint64_t full_collections = 0;  // whole-heap ones among them (when known)
  double seconds = 0;                  // time in collections, ours or its own (see own_seconds_exact)
  std::size_t heap_bytes = 0;          // the runtime's own heap size (0 if unknown)
  // Started by the runtime itself, outside every call of this interface.
  std::uint64_t own_collections = 0;
  std::uint64_t own_full_collections = 0;
  double own_seconds = 0;
  // false: own_seconds (and so seconds) is a lower bound (e.g. Boehm's
  // incremental mark slices run inside its allocator are not timed).
  bool own_seconds_exact = false;
};

class collector {
 public:
  virtual ~collector() = default;
  virtual const char* name() const noexcept = 0;

  // A young-generation (minor / partial) collection, run to completion.
  // Young garbage is found; objects that survived an earlier collection may
  // not be (they are "old").
  virtual void collect_minor() = 0;
  // True when the runtime has no young generation, so collect_minor() marks
  // the whole heap (bdwgc without incremental mode, as under Guile). The
  // policy then records such collections as blocking full ones and knows
  // they free old garbage too.
  virtual bool minor_is_whole_heap() const noexcept { return false; }

  // Whole-heap cycles in bounded slices. A collector without them runs a
  // blocking full collection in step_full() and reports it completed. The
  // policy keeps track of the cycle it started (Note [Sliced cycles]).
  // Starts a whole-heap cycle if none is in progress.
  virtual void start_full() = 0;
  // Advances the cycle for about `budget_seconds`; true when it completed.
  virtual bool step_full(double budget_seconds) = 0;

  // A minor collection in bounded slices (Boehm in incremental mode with a
  // time limit: its mark runs while the mutator runs). start_minor() starts
  // it; step_minor() advances it for about `budget_seconds` and returns true
  // when it completed. Default: no such thing — start_minor() runs
  // collect_minor() to completion and step_minor() reports it done.
  virtual bool has_incremental_minor() const noexcept { return false; }
  virtual void start_minor() { collect_minor(); }
  virtual bool step_minor(double budget_seconds) {
    (void)budget_seconds;
    return true;
  }

  // Blocking whole-heap collection (stop-the-world where the runtime has
  // one). Used by the reclaim ladder and by baselines, never by the pressure
  // policy in a steady state.
  virtual void collect_full() = 0;

  // Runs finalizers that collections made pending; returns how many ran
  // (or an estimate; 0 if unknown).
  virtual std::size_t run_finalizers() = 0;

  virtual collector_counters counters() const = 0;

  // Note [Waiting for a collection]
  // Called with true on a thread about to block because another thread
  // holds the policy's collection lock (it is collecting), and with false
  // on the same thread once the wait is over; never nested, never inside a
  // collection. A runtime whose collections need a lock that an allocating
  // thread may hold lets it go here, so that the collecting thread can
  // finish; and a thread that hands collections to a thread that can take
  // that lock learns, from these calls, that the lock's holder is waiting
  // for it (the PyTorch plug-in, Note [GIL and the collection lock] in
  // examples/torch/torch_python.cpp). Must not throw, collect or allocate.
  virtual void waiting_for_collection(bool begins) noexcept { (void)begins; }
};

}  // namespace gcpressure
