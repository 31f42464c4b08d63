// Internal: the one place that includes <gc.h> for the bridge's sources.
#pragma once

#ifndef GC_THREADS
#define GC_THREADS 1  // must precede gc.h: thread support and pthread redirects
#endif
#include <gc/gc.h>
#include <gc/gc_mark.h>

#include <atomic>
#include <cstdint>

#include "gcpressure/allocator.hpp"

namespace gcpressure::boehm::detail {

// Note [Allocator slots]
// A buffer names its heap by slot index + generation, never by pointer: a
// finalizer that runs after the heap is gone must see that and do nothing.
// Finalizers announce themselves in `users` before they look; shutdown clears
// `alloc`, bumps `generation` and waits until `users` is zero.
struct slot {
  std::atomic<device_allocator*> alloc{nullptr};
  std::atomic<std::uint32_t> generation{0};
  std::atomic<int> users{0};
  std::atomic<bool> taken{false};
};
inline constexpr std::uint32_t slot_count = 256;
slot* slots() noexcept;

// Drains every live heap's deferred queue (the finalizer thread does this).
void drain_all() noexcept;

}  // namespace gcpressure::boehm::detail
