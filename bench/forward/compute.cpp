// compute.cpp — the loop's asynchronous compute (detail::compute): the CPU on
// a host_stream's worker thread, or cuBLAS on a CUDA stream. See Note
// [Kernels take device pointers, not GC objects] in detail.hpp.
#include <cstring>
#include <string>

#include "detail.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"

#ifdef GCPRESSURE_HAVE_CUDA
#include "cuda_kernels.hpp"
#endif

namespace fwd::detail {

namespace {

// Column-major y(d x n) = W(d x d) * x(d x n), four output columns at a time so
// that each column of W is read once per four (the compiler vectorises the
// inner loop). About 20 GFLOP/s on one core of the development machine.
void host_sgemm(const float* __restrict W, const float* __restrict x, float* __restrict y, int d, int n) {
  const std::size_t ld = static_cast<std::size_t>(d);
  int j = 0;
  for (; j + 4 <= n; j += 4) {
    float* __restrict y0 = y + ld * j;
    float* __restrict y1 = y0 + ld;
    float* __restrict y2 = y1 + ld;
    float* __restrict y3 = y2 + ld;
    for (int i = 0; i < d; ++i) y0[i] = y1[i] = y2[i] = y3[i] = 0.f;
    for (int k = 0; k < d; ++k) {
      const float* __restrict w = W + ld * k;
      const float a0 = x[ld * j + k], a1 = x[ld * (j + 1) + k], a2 = x[ld * (j + 2) + k], a3 = x[ld * (j + 3) + k];
      for (int i = 0; i < d; ++i) {
        const float wi = w[i];
        y0[i] += wi * a0;
        y1[i] += wi * a1;
        y2[i] += wi * a2;
        y3[i] += wi * a3;
      }
    }
  }
  for (; j < n; ++j) {
    float* __restrict y0 = y + ld * j;
    for (int i = 0; i < d; ++i) y0[i] = 0.f;
    for (int k = 0; k < d; ++k) {
      const float* __restrict w = W + ld * k;
      const float a = x[ld * j + k];
      for (int i = 0; i < d; ++i) y0[i] += w[i] * a;
    }
  }
}

void host_bias_relu(const float* t, const float* b, float* y, int d, int n) {
  const std::size_t ld = static_cast<std::size_t>(d);
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < d; ++i) {
      const float v = t[ld * j + i] + b[i];
      y[ld * j + i] = v > 0.f ? v : 0.f;
    }
}

// The host backend's "device": kernels run in order on the host_stream's
// worker thread while the loop's thread runs ahead, as on a GPU. The worker
// touches only the raw pointers captured here.
class host_compute final : public compute {
 public:
  gcp::stream_ref stream() noexcept override { return stream_.ref(); }
  void gemm(const float* W, const float* x, float* y, int d, int n) override {
    stream_.enqueue([=] { host_sgemm(W, x, y, d, n); });
  }
  void bias_relu(const float* t, const float* b, float* y, int d, int n) override {
    stream_.enqueue([=] { host_bias_relu(t, b, y, d, n); });
  }
  void fill(void* p, std::size_t bytes) override {
    stream_.enqueue([=] { std::memset(p, 0x5a, bytes); });
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    stream_.synchronize();
    std::memcpy(dst, src, bytes);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    stream_.synchronize();
    std::memcpy(dst, src, bytes);
  }
  void wait() override { stream_.synchronize(); }

 private:
  gcp::host_stream stream_;
};

#ifdef GCPRESSURE_HAVE_CUDA
// Note [A replica's device is current when it queues]
// CUDA queues work on the current device: a stream, a cuBLAS handle and a
// kernel launch belong to the device current when they are made. With one
// replica per device (--devices N) the loop's thread moves between devices
// every iteration, so this compute makes its device current when it creates
// its stream and handle and before every call that queues work or copies
// (cudaSetDevice to the device already current is cheap). The allocators
// switch devices themselves (core/src/cuda_backend.cu restores the caller's).
class cuda_compute final : public compute {
 public:
  explicit cuda_compute(int device) : device_(device) {
    cuda::set_device(device_);
    stream_ = gcp::cuda_stream_create();
    try {
      ctx_ = cuda::create(stream_, device_);
    } catch (...) {
      gcp::cuda_stream_destroy(stream_);
      throw;
    }
  }
  ~cuda_compute() override {
    cuda::destroy(ctx_);
    gcp::cuda_stream_destroy(stream_);
  }
  gcp::stream_ref stream() noexcept override { return stream_; }
  void gemm(const float* W, const float* x, float* y, int d, int n) override { cuda::sgemm(ctx_, W, x, y, d, n); }
  void bias_relu(const float* t, const float* b, float* y, int d, int n) override {
    cuda::bias_relu(ctx_, t, b, y, d, n);
  }
  void fill(void* p, std::size_t bytes) override { cuda::fill(ctx_, p, bytes); }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    cuda::set_device(device_);
    gcp::cuda_memcpy_to_device(dst, src, bytes, stream_);
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    cuda::set_device(device_);
    gcp::cuda_memcpy_to_host(dst, src, bytes, stream_);
  }
  void wait() override { gcp::cuda_stream_synchronize(stream_); }

 private:
  int device_;
  gcp::stream_ref stream_ = nullptr;
  cuda::context* ctx_ = nullptr;
};
#endif

}  // namespace

std::unique_ptr<compute> make_compute(bool cuda, int device) {
  if (!cuda) return std::make_unique<host_compute>();
#ifdef GCPRESSURE_HAVE_CUDA
  if (device < 0 || (device > 0 && device >= gcp::cuda_device_count()))
    GCPRESSURE_FAIL("forward_loop: CUDA device " + std::to_string(device) + " asked for, but " +
                    std::to_string(gcp::cuda_device_count()) + " are usable");
  return std::make_unique<cuda_compute>(device);
#else
  (void)device;
  GCPRESSURE_FAIL("forward_loop: this build has no CUDA (configure with GCPRESSURE_WITH_CUDA=ON)");
#endif
}

}  // namespace fwd::detail
