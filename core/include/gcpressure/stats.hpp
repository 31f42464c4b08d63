// gcpressure/stats.hpp — accounting snapshots, as a struct, a text table and JSON.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "gcpressure/types.hpp"

namespace gcpressure {

// {current, peak, total} as in mimalloc: total is the sum of all increments.
struct stat_value {
  std::int64_t current = 0;
  std::int64_t peak = 0;
  std::int64_t total = 0;
};

namespace detail {
// Lock-free counter with a peak. Thread-safe; callable from a finalizer.
class stat_counter {
 public:
  void add(std::int64_t n) noexcept {
    const auto now = current_.fetch_add(n, std::memory_order_relaxed) + n;
    total_.fetch_add(n, std::memory_order_relaxed);
    auto p = peak_.load(std::memory_order_relaxed);
    while (now > p && !peak_.compare_exchange_weak(p, now, std::memory_order_relaxed)) {
    }
  }
  void sub(std::int64_t n) noexcept { current_.fetch_sub(n, std::memory_order_relaxed); }
  void reset_peak() noexcept { peak_.store(current_.load(std::memory_order_relaxed), std::memory_order_relaxed); }
  std::int64_t current() const noexcept { return current_.load(std::memory_order_relaxed); }
  stat_value get() const noexcept {
    return {current_.load(std::memory_order_relaxed), peak_.load(std::memory_order_relaxed),
            total_.load(std::memory_order_relaxed)};
  }

 private:
  std::atomic<std::int64_t> current_{0}, peak_{0}, total_{0};
};
}  // namespace detail

// Steps of the reclaim ladder, in the order they run after a failure.
enum class ladder_step : int {
  release_cache = 0,   // return cached, idle pool segments upstream
  finish_and_drain,    // finish the collection in progress, run finalizers, drain frees
  wait_streams,        // wait for the streams that hold pending frees
  full_collection,     // blocking whole-heap collection + finalizers + drain
  full_collection_2,   // the same again (finalizers can free objects that keep others alive)
  drain,               // drain the deferred-free queue once more
  trim,                // synchronise and return every idle segment upstream
};
inline constexpr int ladder_step_count = 7;
const char* to_string(ladder_step s) noexcept;

// Kinds and reasons of collections the policy asked for (issue: GC bridge).
enum class gc_kind : int { minor = 0, incremental_full, blocking_full };
inline constexpr int gc_kind_count = 3;
enum class gc_reason : int { early = 0, quiet_moment, ladder, user, baseline };
inline constexpr int gc_reason_count = 5;
const char* to_string(gc_kind k) noexcept;
const char* to_string(gc_reason r) noexcept;

struct collection_stats {
  std::array<std::uint64_t, gc_kind_count> by_kind{};
  std::array<std::uint64_t, gc_reason_count> by_reason{};
  std::uint64_t incremental_slices = 0;
  double gc_seconds = 0;          // time spent in collections the library asked for
  double longest_pause_seconds = 0;
  // Note [Exposed GC time] (core/src/policy.cpp): of gc_seconds, the part
  // that did not overlap outstanding device work: measured where the backend
  // times its events (CUDA, host), else an upper bound (a collection during
  // which the device finished counts whole: Note [Exposed GC time, measured]).
  double exposed_gc_seconds = 0;
  // Of exposed_gc_seconds, what was counted whole for want of a timed event
  // (and the runtime's own collections): the upper-bound part. 0: exact.
  double exposed_gc_seconds_untimed = 0;
  double hidden_gc_seconds = 0;   // gc_seconds - exposed: run while the device was still busy
  // The exposed time as the policy's GC budget counts it: the probe's upper
  // bound (every collection the device finished in, whole) less what the
  // device's lag is known to have hidden (Note [Charging what the lag hid],
  // core/src/pressure_learn.cpp); the bound itself for other policies.
  double exposed_gc_seconds_charged = 0;
  // Whole-heap cycles whose slices ran back to back because memory was
  // needed at once: blocking, their pause is the sum of the slices.
  std::uint64_t blocking_cycles = 0;
  // The synchronize hint (gc_policy::synchronize / quiet_moment(true)).
  std::uint64_t syncs = 0;
  double slack_seconds = 0;       // smoothed wait at a sync after the host had nothing left to do
  double sync_wait_seconds = 0;   // total time blocked in syncs (after any collection work)
  // The runtime's own collections (collector_counters "own_*") since the
  // policy was created, and every collection's time together.
  std::uint64_t runtime_collections = 0;
  std::uint64_t runtime_full_collections = 0;
  double runtime_gc_seconds = 0;  // a lower bound unless runtime_seconds_exact
  bool runtime_seconds_exact = false;
  std::uint64_t collector_collections = 0;  // the collector's own total count since the policy was created
  double gc_seconds_all = 0;      // gc_seconds + runtime_gc_seconds
  std::uint64_t finalized = 0;    // handles finalized (device blocks queued by finalizers)
  std::uint64_t reclaimed_bytes = 0;        // device bytes freed by finalizers after collections
  double reclaimed_per_collection = 0;      // mean device bytes reclaimed per collection
  std::string policy;             // name of the policy in charge ("" when none)
  // Devices the policy serves (Note [One policy, N devices]): with more than
  // one, the counts and times above are shared by all of them, while
  // finalized and reclaimed_* are this device's own.
  std::uint32_t policy_devices = 1;
};

struct allocator_stats {
  backend_kind backend = backend_kind::host;
  int device = 0;
  stat_value requested;      // live bytes as asked by callers
  stat_value allocated;      // live bytes after pool rounding
  stat_value reserved;       // bytes held from the upstream resource
  stat_value active_blocks;  // live allocations (count)
  std::uint64_t allocations = 0, frees = 0;
  std::uint64_t pool_hits = 0;          // allocations served from cache
  std::uint64_t upstream_allocations = 0, upstream_frees = 0, upstream_failures = 0;
  std::uint64_t cross_stream_waits = 0;  // events waited for by the ladder
  std::uint64_t misuse_errors = 0;
  std::uint64_t ooms = 0;                // out_of_memory thrown to callers
  std::size_t cached = 0;                // reserved - allocated
  std::size_t since_mark = 0;            // bytes allocated since mark()
  std::size_t deferred_pending = 0;      // frees queued by finalizers, not yet drained
  std::size_t soft_limit = 0, hard_limit = 0;
  device_memory_info device_memory;
  // Other tenants (Note [Limits of available memory]): device free + this
  // allocator's reserved bytes at the last refresh_limits(), the least seen,
  // and the refreshes at which it or the hard limit had moved by >= 10%
  // since the last such change.
  std::size_t available_bytes = 0, available_bytes_min = 0;
  std::uint64_t headroom_changes = 0;
  std::array<std::uint64_t, ladder_step_count> ladder{};  // times each step ran
  collection_stats gc;
};

// A table in the spirit of CUDA.pool_status(). Thread-safe.
std::string to_text(const allocator_stats& s);
// One JSON object (no trailing newline). Thread-safe.
std::string to_json(const allocator_stats& s);

}  // namespace gcpressure
