// torch_profile.hpp — where an allocation's microseconds go (internal).
//
// Note [Where the microseconds go]
// With GCP_TORCH_PROFILE=1 in the environment (read once), the entry points
// time their parts with steady_clock and stats()["raw"]["profile"] reports
// calls and nanoseconds: the whole gcp_torch_alloc / gcp_torch_free, the
// capture check (cudaStreamGetCaptureInfo), the entry guard (GIL
// bookkeeping), the policy's per-allocation hook, and the rest of
// device_allocator::allocate (drain + pool). Off, each site costs one
// predictable branch. PyTorch's own share (CUDAPluggableAllocator's
// std::function call and its pointer map under a mutex) is outside the
// library: examples/torch/bench_small_step.py measures it as the difference.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>

namespace gcp_torch {

enum class prof_site { alloc, free, capture_check, entry_guard, policy_hook, allocate_core, count };

struct profile {
  std::atomic<std::uint64_t> calls[static_cast<int>(prof_site::count)]{};
  std::atomic<std::uint64_t> ns[static_cast<int>(prof_site::count)]{};
  static bool on() noexcept;
  std::string json() const;
};
profile& P() noexcept;

// Times a scope into `site` when profiling is on.
class prof_scope {
 public:
  explicit prof_scope(prof_site site) noexcept : site_(site), on_(profile::on()) {
    if (on_) t0_ = std::chrono::steady_clock::now();
  }
  ~prof_scope() {
    if (!on_) return;
    const auto d = std::chrono::steady_clock::now() - t0_;
    const int i = static_cast<int>(site_);
    P().calls[i].fetch_add(1, std::memory_order_relaxed);
    P().ns[i].fetch_add(static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()),
                        std::memory_order_relaxed);
  }
  prof_scope(const prof_scope&) = delete;
  prof_scope& operator=(const prof_scope&) = delete;

 private:
  prof_site site_;
  bool on_;
  std::chrono::steady_clock::time_point t0_{};
};

}  // namespace gcp_torch
