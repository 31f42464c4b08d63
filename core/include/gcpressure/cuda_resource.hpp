// gcpressure/cuda_resource.hpp — CUDA device resources.
//
// Declared in every build; in a build without CUDA (GCPRESSURE_WITH_CUDA=OFF)
// constructors throw logic_error and cuda_available() returns false. All CUDA
// calls of core/ live in core/src/cuda_backend.cu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "gcpressure/resource.hpp"

namespace gcpressure {

// True when the library was built with CUDA and a device is usable.
// Thread-safe; callable from a finalizer: no (may initialise the runtime).
bool cuda_available() noexcept;
// Number of CUDA devices (0 without CUDA or without a driver).
int cuda_device_count() noexcept;
// Why cuda_available() is false, in the driver's words ("" when it is true).
const char* cuda_unavailable_reason() noexcept;
// "gcpressure: no usable CUDA device (REASON); use OPTION host or auto": the
// one message for a CUDA backend asked for where none is usable, `option`
// spelt as the entry point spells it (--backend, backend).
std::string no_cuda_device_message(std::string_view option);

// Stream helpers so that tests, benchmarks and examples need not include
// cuda_runtime.h. Throw cuda_error on failure.
stream_ref cuda_stream_create();
void cuda_stream_destroy(stream_ref s) noexcept;
void cuda_stream_synchronize(stream_ref s);
void cuda_device_synchronize();
// Copies between host and device memory (synchronous on the stream).
void cuda_memcpy_to_host(void* dst, const void* src, std::size_t bytes, stream_ref s);
void cuda_memcpy_to_device(void* dst, const void* src, std::size_t bytes, stream_ref s);
// Queues a kernel on `s` that spins for about `nanos` ns and then fills
// `bytes` bytes at `p` with `value` (tests of stream-ordered frees).
void cuda_launch_slow_fill(void* p, std::size_t bytes, unsigned char value, unsigned long long nanos,
                           stream_ref s);
// Stream ops for cudaStream_t refs.
stream_ops& cuda_stream_ops() noexcept;

// CUDA graph capture (used by the PyTorch plug-in, examples/torch). The
// capture sequence id of `s` (cudaStreamGetCaptureInfo), or 0 when `s` is not
// capturing, and always 0 without CUDA. An invalidated capture still counts
// as capturing. Thread-safe; never blocks; legal while any stream captures.
std::uint64_t cuda_stream_capture_id(stream_ref s) noexcept;
// While alive, this thread's stream-capture mode is relaxed
// (cudaThreadExchangeStreamCaptureMode): a cudaMalloc made in it is legal
// while a stream captures in global mode, as PyTorch's caching allocator does
// for its graph pools (the graph keeps the address; replays allocate
// nothing). Event queries and synchronisation stay illegal. Thread-safe
// (per thread); no-op without CUDA.
class cuda_relaxed_capture_scope {
 public:
  cuda_relaxed_capture_scope() noexcept;
  ~cuda_relaxed_capture_scope();
  cuda_relaxed_capture_scope(const cuda_relaxed_capture_scope&) = delete;
  cuda_relaxed_capture_scope& operator=(const cuda_relaxed_capture_scope&) = delete;

 private:
  int prev_ = -1;  // the thread's previous mode; -1: nothing to restore
};

// cudaMalloc / cudaFree. cudaFree synchronises the device, so frees are
// trivially ordered.
class cuda_resource final : public device_resource {
 public:
  explicit cuda_resource(int device = 0);
  int device() const noexcept { return device_; }

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  device_memory_info do_memory_info() const override;
  stream_ops& do_streams() noexcept override { return cuda_stream_ops(); }
  const char* do_name() const noexcept override { return "cuda"; }
  int device_;
};

// cudaMallocAsync / cudaFreeAsync on a per-device memory pool created by this
// resource, with a configurable release threshold (bytes the driver pool keeps
// cached across synchronisations).
class cuda_async_resource final : public device_resource {
 public:
  explicit cuda_async_resource(int device = 0, std::size_t release_threshold = 0);
  ~cuda_async_resource() override;
  int device() const noexcept { return device_; }

 private:
  void* do_allocate(std::size_t bytes, stream_ref stream) override;
  void do_deallocate(void* p, std::size_t bytes, stream_ref stream) noexcept override;
  device_memory_info do_memory_info() const override;
  stream_ops& do_streams() noexcept override { return cuda_stream_ops(); }
  const char* do_name() const noexcept override { return "cuda_async"; }
  int device_;
  void* pool_ = nullptr;  // cudaMemPool_t
};

}  // namespace gcpressure
