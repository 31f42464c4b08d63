// detail.hpp — internals of gcpressure_forward shared by its .cpp files: the
// runtime's array object, the asynchronous compute and the workloads. Not
// installed; no <gc.h> here (only the .cpp files that allocate GC objects
// include it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <string>

#include "forward.hpp"
#include "gcpressure/boehm.hpp"

namespace fwd::detail {

namespace gcp = gcpressure;
namespace boehm = gcpressure::boehm;

// Whether `s` is one of `names` (nullptr-terminated).
bool in_list(const char* const* names, const std::string& s);

// A runtime's array object: a small GC host object pointing at its GC-owned
// device buffer (as a CuArray points at its storage). Dropping the darray
// drops the buffer.
struct darray {
  boehm::buffer* buf;
  int rows, cols;
  int kept;  // promote: held by the ring, so the layer chain must not free it
};

// The device arrays of one run and the oracle's frees. Thread-compatible
// (the loop's thread only).
class arrays {
 public:
  // Arrays on device `device` of `h` (its index there), queued on `s`.
  arrays(boehm::device_heap& h, gcp::stream_ref s, std::size_t device, bool oracle, bool global_objects)
      : heap_(h), stream_(s), device_(device), oracle_(oracle), global_(global_objects) {}
  // A d x n float array (GC host object + GC-owned device buffer).
  darray* make(int rows, int cols);
  // A byte array (rows = bytes / 4, cols = 1).
  darray* make_bytes(std::size_t bytes);
  // The array died: under the oracle it is freed now; otherwise nothing (the
  // collector finds it). Null, kept (darray::kept) and already-freed arrays
  // are ignored.
  void died(darray* a);
  bool oracle() const noexcept { return oracle_; }
  std::uint64_t bytes_allocated() const noexcept { return bytes_; }
  boehm::device_heap& heap() noexcept { return heap_; }

 private:
  boehm::device_heap& heap_;
  gcp::stream_ref stream_;
  std::size_t device_;
  bool oracle_;
  bool global_;  // Note [Array objects]
  std::uint64_t bytes_ = 0;
};

float* ptr(const darray* a);

// Note [Kernels take device pointers, not GC objects]
// Compute is queued (a CUDA stream, or a host_stream's worker thread) and
// runs after the host has moved on, perhaps after a collection. A queued
// kernel must therefore never read a GC host object: the worker thread is not
// registered with Boehm, its queue lives in malloc'd memory the collector does
// not scan, and the darray may be collected while the kernel waits. So the
// loop resolves every darray to its device pointer on the host thread when it
// enqueues (as a CUDA launch copies its arguments), and the kernel sees only
// raw pointers. The device memory itself stays valid: a dropped buffer's
// finalizer frees it on its stream, and the pool hands a block back out on
// the same stream only behind the work queued before the free (stream-ordered,
// Note [Stream-aware reuse]); unsafe_free (the oracle) is stream-ordered the
// same way.
class compute {
 public:
  virtual ~compute() = default;
  virtual gcp::stream_ref stream() noexcept = 0;
  // Column-major y(d x n) = W(d x d) * x(d x n), queued.
  virtual void gemm(const float* W, const float* x, float* y, int d, int n) = 0;
  // y = relu.(t .+ b), queued.
  virtual void bias_relu(const float* t, const float* b, float* y, int d, int n) = 0;
  // Writes every byte of p (a workload's array is used by the device), queued.
  virtual void fill(void* p, std::size_t bytes) = 0;
  // Synchronous copies: they wait for the queued work first.
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;
  // Blocks until the queued work is done (no policy hint).
  virtual void wait() = 0;
};

// cuda: cuBLAS on a new CUDA stream of CUDA device `device` (made current
// before every call that queues work or copies); otherwise the CPU on a
// host_stream's worker thread (`device` is then only the simulated device's
// index, which needs nothing of the compute). Throws logic_error when cuda
// is asked of a build without it.
std::unique_ptr<compute> make_compute(bool cuda, int device = 0);

// What a workload needs from the loop.
struct workload_context {
  arrays& arr;
  compute& comp;
  std::size_t hard_limit;
  int layers;
  std::size_t act_bytes;  // one activation (d x batch floats)
};

// A workload shapes the loop's allocations beyond the steady model
// (workload.cpp has each one's definition). Every hook runs on the loop's
// thread; an out_of_memory may escape any hook after the workload has let go
// of (and, under the oracle, freed) what it allocated in that hook.
class workload {
 public:
  virtual ~workload() = default;
  // At the start of iteration `it` (0-based), before the layers.
  virtual void begin_iteration(int /*it*/) {}
  // After layer l computed y from t. May keep either (sets darray::kept).
  virtual void after_layer(int /*it*/, int /*l*/, darray* /*t*/, darray* /*y*/) {}
  // After the last layer.
  virtual void end_iteration(int /*it*/) {}
  // Lets go of everything held (oracle: frees it). Called once at the end.
  virtual void release() {}
};

std::unique_ptr<workload> make_workload(const options& o, const workload_context& c);

}  // namespace fwd::detail
