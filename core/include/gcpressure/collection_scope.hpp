// gcpressure/collection_scope.hpp — the one per-thread fact "this thread is
// inside a collection (or its finalizers)", and the public way to enter it.
//
// Note [Inside a collection]
// A collection runs runtime code: finalizers, weak callbacks, __del__. It
// runs on the collecting thread, on a thread of the runtime's own (bdwgc's
// finalizer thread), or on a thread the collection was handed to (the
// PyTorch plug-in's helper, which takes the GIL for a thread that cannot).
// That code may allocate device memory, free it, or ask for a collection.
// Runtime collectors are not re-entrant (Lua's lua_gc refuses, CPython's
// gc.collect returns 0 at once, bdwgc's holds its allocation lock), and the
// policy's collection lock is held by the thread that started the
// collection, which may be waiting for this very code to finish. So while a
// thread is inside a collection:
//  - device_allocator::allocate serves it without calling the hook: no
//    policy decision, no wait for the collection lock, no collector step of
//    the reclaim ladder (the pool, the limit and the cheap steps only). It
//    never waits for the collection it is part of; it may fail with
//    out_of_memory where a collection would have helped.
//  - gc_policy starts no collection (collect, hints and the ladder do
//    nothing; synchronize only waits for the stream).
//  - the C API answers GCPRESSURE_ERR_BUSY to the calls marked "not from a
//    collection".
// Who enters it: gc_policy, around each collection it runs (the collector's
// calls, the finalizers it runs, the drain); and a runtime, for every thread
// that runs a collection or its finalizers on its behalf (gc_bridge's
// finalizer thread, the PyTorch plug-in's helper and CPython's own
// collections seen through gc.callbacks; from C: gcpressure_enter_collection).
// A hook other than gc_policy must do the same around runtime code it runs,
// or an allocation from that code calls it again.
// It is a depth, not a flag: scopes nest (a finalizer thread's scope inside
// a collection of the policy's on the same thread). It is per thread: other
// threads allocate through the hook as usual, and may wait for the lock.
#pragma once

namespace gcpressure {

// True while the calling thread is inside a collection_scope (or between
// enter_collection and leave_collection). Thread-safe; finalizer-safe.
bool in_collection() noexcept;

// For runtimes whose collector reports start and end as two events (CPython's
// gc.callbacks): enter, then leave exactly once on the same thread.
// leave_collection() returns false and changes nothing when the thread is not
// inside a collection (an end without its start). Thread-safe;
// finalizer-safe.
void enter_collection() noexcept;
bool leave_collection() noexcept;

// RAII: the calling thread is inside a collection for the object's lifetime.
// Nestable. Thread-safe; finalizer-safe. Destroy it on the thread that made it.
class collection_scope {
 public:
  collection_scope() noexcept { enter_collection(); }
  ~collection_scope() { leave_collection(); }
  collection_scope(const collection_scope&) = delete;
  collection_scope& operator=(const collection_scope&) = delete;
};

}  // namespace gcpressure
