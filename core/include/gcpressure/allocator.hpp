// gcpressure/allocator.hpp — one device's allocator: upstream → limit → pool,
// accounting, the deferred-free queue and the hook the pressure policy uses.
//
// See docs/DESIGN.md for the path of a block and who may call what from where.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "gcpressure/config.hpp"
#include "gcpressure/deferred_free_queue.hpp"
#include "gcpressure/pool_resource.hpp"
#include "gcpressure/resource.hpp"
#include "gcpressure/stats.hpp"

namespace gcpressure {

class device_allocator;

// Note [The hook point]
// The pressure policy plugs in here and nowhere else. before_allocate() runs
// before every allocation, outside every allocator lock, and may collect and
// drain. reclaim() runs the collector-side steps of the reclaim ladder after
// a failure; the allocator runs the pool-side steps itself and retries the
// allocation after every step. Re-entrancy: code the hook runs (a collection,
// a runtime's finalizers) may allocate from the same allocator on the same
// thread. The hook runs that code inside a collection_scope (gc_policy
// does), and an allocation made inside one is served without calling the
// hook, so no collection ever nests inside another (Note [Inside a
// collection], collection_scope.hpp).
class allocation_hook {
 public:
  virtual ~allocation_hook() = default;
  virtual void before_allocate(device_allocator& a, std::size_t bytes, stream_ref s) = 0;
  // Performs `step` if it is a collector step (finish_and_drain,
  // full_collection, full_collection_2). Returns true if it did something.
  virtual bool reclaim(device_allocator& a, ladder_step step) = 0;
  // Adds the hook's own counters (collections, pauses) to a stats snapshot.
  virtual void fill_stats(collection_stats& out) const = 0;
  // The counters as seen from allocator `a` (a hook serving several
  // allocators reports each one's share). Default: fill_stats().
  virtual void fill_stats_for(const device_allocator& a, collection_stats& out) const {
    (void)a;
    fill_stats(out);
  }
};

struct allocator_options {
  backend_kind backend = backend_kind::host;
  int device = 0;
  std::size_t host_capacity = std::size_t{16} << 30;
  // Host backend: a file whose capacity this process shares with others
  // (GCPRESSURE_HOST_SHARED; Note [Shared simulated capacity]); "" = private.
  // Device 0 uses the file itself, device d > 0 the file "<host_shared>.<d>".
  std::string host_shared;
  // Either limit may be a percentage of available memory ("80%avail", Note
  // [Limits of available memory]): re-resolved by refresh_limits().
  size_spec soft_limit;  // unset: 75% of the hard limit
  size_spec hard_limit;  // unset: device total
  bool pool = true;
  pool_options pool_opts;
  std::size_t async_release_threshold = 0;

  // From the GCPRESSURE_* environment (backend "auto": cuda_async when a GPU
  // is usable, host otherwise). Throws logic_error on a bad value.
  static allocator_options from_config(const config& c);
  // One per device of c.device_list() (Note [One policy, N devices]), the
  // same settings on each; a percentage limit resolves against each device.
  static std::vector<allocator_options> per_device(const config& c);
};

// Thread safety: every member function is thread-safe unless noted.
// From a finalizer: only deferred().push() and the noexcept getters marked
// "finalizer-safe"; everything else may take locks or collect.
class device_allocator {
 public:
  explicit device_allocator(allocator_options opts = {});
  // Wraps a caller-made upstream (e.g. a fault-injecting adaptor); the
  // allocator does not own it and it must outlive the allocator.
  device_allocator(device_resource& upstream, allocator_options opts);
  ~device_allocator();
  device_allocator(const device_allocator&) = delete;
  device_allocator& operator=(const device_allocator&) = delete;

  // Allocates `bytes` usable on `stream`. Runs the hook, drains deferred frees,
  // and on failure the reclaim ladder. Throws logic_error for 0 bytes,
  // out_of_memory (with the full report) when nothing helped.
  void* allocate(std::size_t bytes, stream_ref stream = nullptr);

  // Checked free: throws logic_error on a double free, a foreign pointer or a
  // size that differs from the allocation's. Stream-ordered on `stream`.
  void free(void* p, std::size_t bytes, stream_ref stream = nullptr);
  // Unchecked free for noexcept paths: misuse is reported, never thrown.
  void deallocate(void* p, std::size_t bytes, stream_ref stream = nullptr) noexcept;

  // Finalizer-safe: the queue finalizers push blocks onto.
  deferred_free_queue& deferred() noexcept { return deferred_; }
  const deferred_free_queue& deferred() const noexcept { return deferred_; }
  // Returns every queued block to the pool. Returns the bytes drained.
  std::size_t drain() noexcept;

  void set_hook(allocation_hook* h) noexcept { hook_.store(h, std::memory_order_release); }
  allocation_hook* hook() const noexcept { return hook_.load(std::memory_order_acquire); }

  // Pool maintenance: see pool_resource. Without a pool these return 0.
  std::size_t release_cached() noexcept;
  std::size_t wait_pending();
  std::size_t trim();
  // See pool_resource::forget_stream; call before destroying a stream.
  void forget_stream(stream_ref s);

  // Limits in bytes (resolved). set_* are thread-safe and take effect at
  // once; they pin the limit (a "%avail" limit stops following).
  std::size_t soft_limit() const noexcept { return soft_limit_.load(std::memory_order_relaxed); }
  std::size_t hard_limit() const noexcept { return limiter_->limit(); }
  void set_soft_limit(std::size_t bytes) noexcept;
  void set_hard_limit(std::size_t bytes) noexcept;

  // Note [Limits of available memory] (config.hpp): reads the device's free
  // memory once (cudaMemGetInfo on CUDA), records the available bytes (free
  // + this allocator's reserved bytes: available_bytes()) and re-resolves the
  // limits given as "%avail". Returns the device memory it read (a caller
  // that also wants the free memory needs no second driver call). Throws
  // what memory_info() throws. Thread-safe; not finalizer-safe
  // (a driver call and a lock). Call it at a bounded rate: the pressure
  // policy does with its device refresh; allocate() does at most every 0.1 s
  // when a limit follows available memory, and once after a failure.
  device_memory_info refresh_limits();
  // Finalizer-safe: the available bytes last seen (0 before any refresh).
  std::size_t available_bytes() const noexcept { return available_.load(std::memory_order_relaxed); }
  // Finalizer-safe: refreshes that saw a headroom change (allocator_stats).
  std::uint64_t headroom_changes() const noexcept { return headroom_changes_.load(std::memory_order_relaxed); }
  // True when a limit is given as "%avail" and not pinned. Finalizer-safe.
  bool limits_follow_available() const noexcept { return follows_.load(std::memory_order_relaxed); }

  // Finalizer-safe cheap getters.
  std::size_t live_bytes() const noexcept;
  std::size_t reserved_bytes() const noexcept { return limiter_->used(); }
  std::size_t since_mark() const noexcept;
  std::uint64_t allocation_count() const noexcept;
  void mark() noexcept;
  void reset_peaks() noexcept;

  device_memory_info device_memory() const;
  backend_kind backend() const noexcept { return opts_.backend; }
  int device() const noexcept { return opts_.device; }
  stream_ops& streams() noexcept { return top().streams(); }
  // True if `p` is a live block of this allocator (needs the pool).
  bool owns(const void* p) const noexcept;

  allocator_stats stats() const;
  std::string stats_text() const { return to_text(stats()); }
  std::string stats_json() const { return to_json(stats()); }

 private:
  device_resource& top() noexcept;
  void build_stack(device_resource& upstream);
  void* try_allocate(std::size_t bytes, stream_ref stream);
  void account_free(std::size_t requested, std::size_t rounded) noexcept;
  [[noreturn]] void throw_oom(std::size_t bytes, const std::string& tried, const char* cause);
  std::string cached_detail(std::size_t cached) const;  // throw_oom's word on the cached bytes
  void resolve_limits(std::size_t available);
  bool refresh_due() noexcept;
  bool limit_grew_on_refresh() noexcept;

  allocator_options opts_;
  std::unique_ptr<device_resource> owned_upstream_;
  device_resource* upstream_ = nullptr;
  std::unique_ptr<limiting_adaptor> limiter_;
  std::unique_ptr<pool_resource> pool_;
  std::atomic<std::size_t> soft_limit_{0};
  // Note [Limits of available memory]. limits_mu_ serialises refreshes and
  // set_*; the limits themselves are atomics read without it.
  std::mutex limits_mu_;
  std::atomic<bool> follows_{false};
  bool hard_follows_ = false, soft_follows_ = false, soft_from_hard_ = false;
  std::size_t soft_base_ = 0;                        // a soft limit in bytes, capped by a following hard one
  std::size_t seen_available_ = 0, seen_hard_ = 0;  // at the last headroom change
  std::atomic<std::size_t> available_{0}, available_min_{0};
  std::atomic<std::uint64_t> headroom_changes_{0};
  std::atomic<std::int64_t> next_refresh_ns_{0};
  std::atomic<allocation_hook*> hook_{nullptr};
  deferred_free_queue deferred_;
  detail::stat_counter requested_, allocated_, active_;
  std::atomic<std::uint64_t> total_requested_{0};  // no-pool path
  std::atomic<std::uint64_t> mark_base_{0};
  std::atomic<std::uint64_t> allocs_{0}, frees_{0}, misuse_{0}, ooms_{0};
  std::array<std::atomic<std::uint64_t>, ladder_step_count> ladder_{};
  // Live blocks when there is no pool (pointer -> requested bytes).
  mutable std::mutex nopool_mu_;
  std::unique_ptr<struct nopool_table> nopool_;
};

// Creates the upstream resource the options name. Throws logic_error for a
// CUDA backend in a build without CUDA or on a machine without a GPU.
std::unique_ptr<device_resource> make_resource(const allocator_options& opts);

}  // namespace gcpressure
