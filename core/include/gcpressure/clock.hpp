// gcpressure/clock.hpp — the time source of the policies.
//
// Policies decide by measured time (GC cost, allocation rate, slack before a
// synchronize). Tests drive them with a fake clock so that those decisions
// are deterministic (Note [Timing is injected] in core/src/policy.cpp).
//
// Thread safety: now() is thread-safe and finalizer-safe in every
// implementation this library ships.
#pragma once

namespace gcpressure {

class clock_source {
 public:
  virtual ~clock_source() = default;
  // Monotonic seconds since an arbitrary origin.
  virtual double now() const noexcept = 0;
};

// std::chrono::steady_clock. Thread-safe; finalizer-safe.
const clock_source& steady_clock_source() noexcept;

}  // namespace gcpressure
