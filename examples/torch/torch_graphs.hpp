// torch_graphs.hpp — CUDA graph capture in libgcpressure_torch.so (internal).
//
// Note [Graph capture]
// torch.cuda.graph / torch.compile(mode="reduce-overhead") capture a stream's
// work into a graph that is replayed later with the same addresses. While a
// stream captures (global mode by default), the allocator must not query or
// synchronise events, wait across streams, free with cudaFree, or run a
// collection (its finalizers would free memory the graph still names); a
// stream-ordered cudaMallocAsync on the capturing stream would become a
// graph node whose memory the pool must never cache. And every block the
// graph used must stay out of eager hands for the graph's lifetime, or a
// replay overwrites someone else's tensor.
//
// So, as PyTorch's caching allocator does with its private pools:
//  - An allocation on a capturing stream (cudaStreamGetCaptureInfo) is served
//    by a graph pool: a pool_resource of its own over cudaMalloc made with the
//    thread's capture mode relaxed, with stream ops that never report an
//    event complete (blocks are reused on their own stream only: no event is
//    queried) and no policy hook (no collection). The hard limit still holds:
//    graph pools' bytes plus the main pool's reserved bytes.
//  - Blocks freed later return to their graph pool, never to the main pool:
//    only captures into that pool reuse them.
//  - The Python side (gcpressure_torch.install) wraps CUDAGraph.capture_begin
//    / capture_end: a capture announced there goes to the pool named by its
//    `pool=` argument (shared by graphs that share it) or to a pool of its
//    own; the pool is released (its idle segments cudaFree'd) once every
//    graph that captured into it has been destroyed and its blocks are free,
//    never while an announced capture is running. A capture nobody announced
//    (raw cudaStreamBeginCapture) gets an anonymous pool that is never
//    released: conservative, its memory stays reserved until exit.
//  - While an announced capture runs, eager allocations on other streams skip
//    the policy's hook and collector steps (hook_gate): no collection starts
//    while any stream captures.
// What this does not cover: an eager allocation on another stream during a
// global-mode capture still goes through the main pool, whose cross-stream
// reuse may query an event (illegal while any stream captures in global
// mode). PyTorch's own capture code allocates only on the capturing stream.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "gcpressure/allocator.hpp"
#include "gcpressure/policy.hpp"
#include "gcpressure/pool_resource.hpp"

namespace gcp_torch {

using gcpressure::stream_ref;

// A graph pool's name: PyTorch's MempoolId_t (two integers), or {0, n} for a
// pool we named.
using pool_key = std::pair<std::uint64_t, std::uint64_t>;

class graph_upstream;

// One device's graph pools (Note [Graph capture]). Thread-safe.
class graph_memory {
 public:
  // `main`: the device's allocator (its hard limit and reserved bytes bound
  // the graph pools too). host: the host backend (graph pools in host memory).
  graph_memory(gcpressure::device_allocator& main, int device, bool host);
  ~graph_memory();
  graph_memory(const graph_memory&) = delete;
  graph_memory& operator=(const graph_memory&) = delete;

  // The capture id of `s` (0: not capturing). On the host backend only the
  // test hook (set_test_capture) makes a stream capture.
  std::uint64_t capture_id(stream_ref s) const noexcept;
  // Capture-safe allocation for a stream in capture `capture`. Throws
  // out_of_memory (nothing can be collected during a capture).
  void* allocate(std::size_t bytes, stream_ref s, std::uint64_t capture);
  // Returns false when `p` is not a graph block (then it is the main pool's).
  // Finalizer-safe in the sense of gcp_torch_free: no CUDA, no Python.
  bool deallocate(void* p, std::size_t bytes, stream_ref s) noexcept;

  // capture_begin / capture_end as announced by the Python hooks. begin maps
  // the capture running on `s` to pool `key` (a use of it until release;
  // {0, 0}: a new pool of its own, whose key is written back). Returns false
  // if `s` is not capturing.
  bool begin(stream_ref s, pool_key& key);
  void end(stream_ref s);
  // A graph that captured into `key` was destroyed.
  void release(pool_key key);
  // Frees the segments of released pools whose blocks are all free; never
  // while an announced capture runs. Returns the bytes freed.
  std::size_t release_retired();

  std::size_t reserved_bytes() const noexcept { return reserved_.load(std::memory_order_relaxed); }
  std::string stats_json() const;

  // Test hook (CPU tests): `s` captures with id `id` (0: no longer).
  void set_test_capture(stream_ref s, std::uint64_t id);

  // Announced captures running, all devices (hook_gate reads it).
  static std::atomic<int>& active_captures() noexcept;

 private:
  struct graph_pool;
  friend class graph_upstream;
  graph_pool& pool_for_locked(std::uint64_t capture);
  std::size_t release_retired_locked();

  gcpressure::device_allocator& main_;
  int device_;
  bool host_;
  mutable std::mutex mu_;
  std::unordered_map<std::uint64_t, graph_pool*> by_capture_;   // running captures
  std::map<pool_key, std::unique_ptr<graph_pool>> pools_;
  std::uint64_t next_anonymous_ = 1;
  std::atomic<int> npools_{0};            // fast path: no pool, nothing to look up at a free
  // Fast path of a free with graph pools: the address range every graph
  // segment ever made lies in (only grows, so a pointer outside is not ours).
  std::atomic<std::uintptr_t> lo_{~std::uintptr_t{0}}, hi_{0};
  void note_range(const void* p, std::size_t bytes) noexcept;
  std::atomic<std::size_t> reserved_{0};  // all graph pools' segments
  std::atomic<stream_ref> test_stream_{nullptr};
  std::atomic<std::uint64_t> test_id_{0};
  std::uint64_t allocations_ = 0, captures_announced_ = 0, captures_anonymous_ = 0, pools_released_ = 0;
  std::size_t bytes_released_ = 0;
};

// The allocator's hook: the policy, except while an announced capture runs
// (no collection then), timed when profiling (Note [Where the microseconds go]).
class hook_gate final : public gcpressure::allocation_hook {
 public:
  explicit hook_gate(gcpressure::gc_policy& p) : policy_(p) {}
  void before_allocate(gcpressure::device_allocator& a, std::size_t bytes, stream_ref s) override;
  bool reclaim(gcpressure::device_allocator& a, gcpressure::ladder_step step) override;
  void fill_stats(gcpressure::collection_stats& out) const override { policy_.fill_stats(out); }
  // Device `a`'s share of the one policy (Note [One policy, N devices]).
  void fill_stats_for(const gcpressure::device_allocator& a, gcpressure::collection_stats& out) const override {
    policy_.fill_stats_for(a, out);
  }
  std::uint64_t skipped() const noexcept { return skipped_.load(std::memory_order_relaxed); }

 private:
  gcpressure::gc_policy& policy_;
  std::atomic<std::uint64_t> skipped_{0};
};

}  // namespace gcp_torch
