// gcpressure/pool_resource.hpp — a stream-aware caching pool over any upstream.
//
// Best fit with splitting and coalescing (PyTorch caching allocator style):
// requests up to 1 MiB come from 2 MiB "small" segments, up to 10 MiB from
// segments of up to 20 MiB (a whole number of the request that opened one,
// rounded to 2 MiB), larger ones get their own segment rounded to 2 MiB. Near
// the upstream's limit segments are exact-size (Note [Segments near the
// limit] in core/src/pool_resource.cpp). Free blocks are indexed per owning
// stream. See Note [Stream-aware reuse] in
// core/src/pool_streams.cpp.
//
// Thread safety: all members are thread-safe. From a finalizer: no (takes the
// pool lock); finalizers queue frees instead (deferred_free_queue). A pool hit
// of a request up to 128 KiB on a stream this thread freed such a block on
// takes only this thread's own cache lock (Note [Thread caches] in
// core/src/pool_cache.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <atomic>
#include <memory>

#include <mutex>
#include <unordered_map>

#include "gcpressure/resource.hpp"
#include "gcpressure/stats.hpp"

namespace gcpressure {

struct pool_options {
  std::size_t small_threshold = std::size_t{1} << 20;     // <= this: small pool
  std::size_t small_segment = std::size_t{2} << 20;       // small pool segment size
  std::size_t medium_threshold = std::size_t{10} << 20;   // <= this: medium segments
  std::size_t medium_segment = std::size_t{20} << 20;
  std::size_t large_round = std::size_t{2} << 20;         // larger: own segment rounded to this
  std::size_t min_block = 512;                            // rounding of every request
  // Note [Thread caches] (core/src/pool_cache.cpp): a cache of free blocks
  // per thread in front of the shared pool, for requests up to 128 KiB.
  bool thread_caches = true;
};

struct pool_counters {
  std::size_t reserved = 0;     // bytes held from upstream
  std::size_t allocated = 0;    // bytes in live blocks (rounded)
  std::size_t requested = 0;    // bytes callers asked for, live
  std::size_t live_blocks = 0;
  std::size_t free_blocks = 0;
  std::size_t segments = 0;
  std::size_t pending_blocks = 0;  // free blocks waiting on an event before cross-stream reuse
  std::size_t releasable = 0;      // cached bytes in wholly free segments (what release_cached() can return)
  std::size_t largest_free = 0;    // the largest free block: the largest request served without a new segment
  std::size_t local_cached = 0;    // free bytes in per-thread caches (release_cached() flushes them first)
  std::uint64_t hits = 0, upstream_allocations = 0, upstream_frees = 0, upstream_failures = 0;
  std::uint64_t misuse_errors = 0, events_waited = 0;
  std::uint64_t allocations = 0, frees = 0;
  stat_value requested_stat, allocated_stat, blocks_stat;  // {current, peak, total}
};

namespace detail {
struct pool_impl;
}

class pool_resource final : public device_resource {
 public:
  // `upstream` must outlive the pool. Its stream_ops are used for events.
  explicit pool_resource(device_resource& upstream, pool_options opts = {});
  ~pool_resource() override;  // returns every segment upstream (live blocks: reported, leaked)

  // Size a request is rounded to. Thread-safe; callable from a finalizer.
  std::size_t rounded_size(std::size_t bytes) const noexcept;

  // Returns idle segments (entirely free, no pending stream work) upstream
  // without waiting. Returns the bytes released.
  std::size_t release_cached() noexcept;
  // Waits for the work behind every free made so far (making those blocks
  // reusable by any stream). Returns the number of events waited for. Never a
  // device-wide sync. Waits without the pool lock (Note [Waiting outside the
  // lock]): other threads keep allocating meanwhile; their frees stay pending.
  std::size_t wait_pending();
  // wait_pending() then release_cached(). Returns the bytes released.
  std::size_t trim();

  // Note [Destroying a stream]: the pool records events on the streams that
  // freed its cached blocks, so a stream that freed blocks into the pool must
  // be forgotten before it is destroyed. forget_stream() waits for the
  // stream's work (without the pool lock) and hands its cached blocks to
  // every stream.
  void forget_stream(stream_ref stream);

  // True if `p` is the start of a live block of this pool. Thread-safe.
  bool owns_live(const void* p) const noexcept;
  // The requested size of the live block at `p`, or 0 if none.
  std::size_t live_size(const void* p) const noexcept;

  // deallocate() that reports what it did: the requested size of the block
  // freed, or 0 when `p` was not a live block (misuse, reported).
  std::size_t deallocate_sized(void* p, std::size_t bytes, stream_ref stream) noexcept;
  // The checked free's one lookup: frees `p` only if it is a live block
  // allocated with exactly `bytes`. Returns the live block's requested size
  // (0: not live); the block was freed iff that equals `bytes`.
  std::size_t free_if_live(void* p, std::size_t bytes, stream_ref stream) noexcept;

  pool_counters counters() const noexcept;
  device_resource& upstream() noexcept { return upstream_; }

  // Lock-free mirrors of the accounting (finalizer-safe): bytes live as
  // requested, and the running total of requested bytes.
  std::size_t live_bytes() const noexcept;
  std::uint64_t total_requested() const noexcept;
  std::uint64_t allocations() const noexcept;
  void reset_peaks() noexcept;

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  device_memory_info do_memory_info() const override { return upstream_.memory_info(); }
  stream_ops& do_streams() noexcept override { return upstream_.streams(); }
  const char* do_name() const noexcept override { return "pool"; }

  device_resource& upstream_;
  std::unique_ptr<detail::pool_impl> impl_;
};

// Fails upstream allocations that would take the bytes it has handed out past
// a limit, before the upstream is asked (RMM's limiting_resource_adaptor).
// Thread-safe; the limit can change at run time.
class limiting_adaptor final : public device_resource {
 public:
  limiting_adaptor(device_resource& upstream, std::size_t limit) : upstream_(upstream), limit_(limit) {}
  void set_limit(std::size_t limit) noexcept { limit_.store(limit, std::memory_order_relaxed); }
  std::size_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
  // Bytes handed out and not yet returned (rounded to 256).
  std::size_t used() const noexcept { return static_cast<std::size_t>(usage_.current()); }
  stat_value usage() const noexcept { return usage_.get(); }
  // The reserved peak restarts at what is reserved now (device_allocator::reset_peaks).
  void reset_peak() noexcept { usage_.reset_peak(); }

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  device_memory_info do_memory_info() const override { return upstream_.memory_info(); }
  std::size_t do_headroom() const noexcept override;
  stream_ops& do_streams() noexcept override { return upstream_.streams(); }
  const char* do_name() const noexcept override { return "limiting"; }

  device_resource& upstream_;
  std::atomic<std::size_t> limit_;
  std::mutex mu_;  // serialises the check-and-add against the limit; guards live_
  detail::stat_counter usage_;
  // Upstream allocations are rare (segments), so a map is cheap here; it
  // lets a double free never corrupt the count.
  std::unordered_map<void*, std::size_t> live_;
};

}  // namespace gcpressure
