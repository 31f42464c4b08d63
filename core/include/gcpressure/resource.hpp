// gcpressure/resource.hpp — the device memory resource interface (RMM style).
//
// Public non-virtual allocate/deallocate call private virtual do_*; adaptors
// (pool, limiting, statistics, fault injection) wrap an upstream resource.
//
// Thread safety: every resource in this library is thread-safe.
// From a finalizer: no. Finalizers only queue frees (deferred_free_queue).
#pragma once

#include <cstddef>

#include "gcpressure/types.hpp"

namespace gcpressure {

// Events and stream synchronisation of one backend. The pool uses them for
// stream-aware reuse: a block freed on stream A may be handed to stream B only
// after an event recorded on A (after the free) has completed.
class stream_ops {
 public:
  virtual ~stream_ops() = default;
  // An event that completes when all work queued on `s` so far has completed.
  virtual event_ref record(stream_ref s) = 0;
  // Non-blocking: has the event completed?
  virtual bool query(event_ref e) = 0;
  // Blocks until the event has completed.
  virtual void synchronize(event_ref e) = 0;
  // Frees the event. noexcept: safe during process exit.
  virtual void release(event_ref e) noexcept = 0;
  // Note [Exposed GC time, measured] (core/src/policy.cpp): an event for
  // idle_seconds(); backends that cannot time their events return record(s).
  virtual event_ref record_timed(stream_ref s) { return record(s); }
  // For a completed event of record_timed() (query() returned true): for how
  // many seconds the stream it was recorded on has had nothing to run (0 if
  // it has work again); -1 where the backend cannot tell. Does not wait for
  // the stream's work. Thread-safe like record().
  virtual double idle_seconds(event_ref e) {
    (void)e;
    return -1;
  }
};

// Stream ops for a backend whose work is always complete (synchronous).
stream_ops& synchronous_stream_ops() noexcept;

class device_resource {
 public:
  device_resource() = default;
  device_resource(const device_resource&) = delete;
  device_resource& operator=(const device_resource&) = delete;
  virtual ~device_resource() = default;

  // Returns memory of at least `bytes`, aligned to gcpressure::alignment,
  // usable by work on `stream`. Throws out_of_memory when the resource cannot
  // provide it, logic_error for bytes == 0.
  void* allocate(std::size_t bytes, stream_ref stream = nullptr) { return do_allocate(bytes, stream); }

  // Returns memory; ordered after the work already queued on `stream`.
  // Never throws; misuse is reported (Note [Misuse in noexcept paths]).
  void deallocate(void* p, std::size_t bytes, stream_ref stream = nullptr) noexcept {
    do_deallocate(p, bytes, stream);
  }

  device_memory_info memory_info() const { return do_memory_info(); }
  // Bytes this resource (and the ones below it) can still hand out before a
  // limit it enforces; SIZE_MAX when it enforces none. A hint, read without
  // reserving anything: another thread may take the bytes first. Thread-safe.
  std::size_t headroom() const noexcept { return do_headroom(); }
  stream_ops& streams() noexcept { return do_streams(); }
  const char* name() const noexcept { return do_name(); }

 private:
  virtual void* do_allocate(std::size_t bytes, stream_ref stream) = 0;
  virtual void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept = 0;
  virtual device_memory_info do_memory_info() const = 0;
  virtual std::size_t do_headroom() const noexcept { return static_cast<std::size_t>(-1); }
  virtual stream_ops& do_streams() noexcept { return synchronous_stream_ops(); }
  virtual const char* do_name() const noexcept = 0;
};

}  // namespace gcpressure
