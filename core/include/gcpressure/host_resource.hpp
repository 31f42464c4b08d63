// gcpressure/host_resource.hpp — a simulated device backed by host memory.
//
// The default backend where there is no GPU (CI, laptops): every policy and
// test runs everywhere. Capacity is fixed, private to this resource or shared
// with other processes (a file: Note [Shared simulated capacity] in
// core/src/shared_capacity.hpp); pointers are real, readable,
// writable memory. Streams are host_stream objects: an in-order queue of tasks
// run by a worker thread, which simulates kernels that are still running when
// their buffers are dropped. Frees on a host_stream are stream-ordered (queued
// behind the stream's work), exactly like cudaFreeAsync.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "gcpressure/resource.hpp"

namespace gcpressure {

namespace detail {
struct host_stream_state;
class shared_capacity;
}

// An in-order work queue with its own worker thread. Thread-safe. Not callable
// from a finalizer (enqueue allocates). Destruction waits for queued work.
class host_stream {
 public:
  host_stream();
  ~host_stream();
  host_stream(const host_stream&) = delete;
  host_stream& operator=(const host_stream&) = delete;

  // Queues `fn` behind all earlier work on this stream.
  void enqueue(std::function<void()> fn);
  // Blocks until all work queued so far has run.
  void synchronize();
  // The stream_ref to pass to allocate/deallocate.
  stream_ref ref() noexcept { return this; }

  std::shared_ptr<detail::host_stream_state> state() const noexcept { return state_; }

 private:
  std::shared_ptr<detail::host_stream_state> state_;
};

class host_resource final : public device_resource {
 public:
  // `capacity`: simulated device memory in bytes (default 16 GiB).
  // `shared_path` non-empty: the capacity is shared with every process
  // (host_resource) that names the same file (GCPRESSURE_HOST_SHARED):
  // memory_info().free is what all of them left, and an allocation that
  // does not fit fails as on a full GPU. Throws logic_error if the file cannot
  // be used (not ours, another capacity, no free slot).
  explicit host_resource(std::size_t capacity = std::size_t{16} << 30, const std::string& shared_path = {});
  ~host_resource() override;

  std::size_t capacity() const noexcept { return capacity_; }
  // Bytes currently held by callers of this resource (stream-ordered frees
  // count until they run); other tenants' bytes are not included.
  std::size_t used() const noexcept;
  bool shared() const noexcept { return shared_ != nullptr; }
  // Number of live allocations.
  std::size_t outstanding() const noexcept;

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  device_memory_info do_memory_info() const override;
  stream_ops& do_streams() noexcept override;
  const char* do_name() const noexcept override { return "host"; }
  void release_now(void* p, std::size_t bytes) noexcept;

  std::size_t capacity_;
  mutable std::mutex mu_;
  std::size_t used_ = 0;
  std::unordered_map<void*, std::size_t> live_;  // pointer -> size: catches foreign/double frees
  std::unique_ptr<detail::shared_capacity> shared_;
  std::shared_ptr<struct host_resource_lifetime> lifetime_;
};

// Stream ops for host_stream refs (nullptr = synchronous default stream).
stream_ops& host_stream_ops() noexcept;

}  // namespace gcpressure
