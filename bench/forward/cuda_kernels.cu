// cuda_kernels.cu — see cuda_kernels.hpp.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>

#include "cuda_kernels.hpp"

namespace fwd::cuda {

struct context {
  cublasHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  int device = 0;
};

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}

void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(s)));
}

__global__ void bias_relu_kernel(const float* __restrict__ t, const float* __restrict__ b, float* __restrict__ y,
                                 int d, long long total) {
  for (long long k = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; k < total;
       k += static_cast<long long>(gridDim.x) * blockDim.x) {
    const float v = t[k] + b[k % d];
    y[k] = v > 0.f ? v : 0.f;
  }
}

}  // namespace

void set_device(int device) { check(cudaSetDevice(device), "cudaSetDevice"); }

context* create(void* stream, int device) {
  auto* c = new context;
  c->stream = static_cast<cudaStream_t>(stream);
  c->device = device;
  try {
    set_device(device);
    check(cublasCreate(&c->handle), "cublasCreate");
    check(cublasSetStream(c->handle, c->stream), "cublasSetStream");
  } catch (...) {
    if (c->handle) cublasDestroy(c->handle);
    delete c;
    throw;
  }
  return c;
}

void destroy(context* c) noexcept {
  if (!c) return;
  (void)cudaSetDevice(c->device);  // the handle's device; nothing to report from a destructor
  if (c->handle) cublasDestroy(c->handle);
  delete c;
}

void sgemm(context* c, const float* W, const float* x, float* y, int d, int n) {
  const float one = 1.f, zero = 0.f;
  set_device(c->device);
  check(cublasSgemm(c->handle, CUBLAS_OP_N, CUBLAS_OP_N, d, n, d, &one, W, d, x, d, &zero, y, d), "cublasSgemm");
}

void bias_relu(context* c, const float* t, const float* b, float* y, int d, int n) {
  const long long total = static_cast<long long>(d) * n;
  const int threads = 256;
  const int blocks = static_cast<int>(total / threads + 1 < 4096 ? total / threads + 1 : 4096);
  set_device(c->device);
  bias_relu_kernel<<<blocks, threads, 0, c->stream>>>(t, b, y, d, total);
  check(cudaGetLastError(), "bias_relu kernel launch");
}

void fill(context* c, void* p, unsigned long long bytes) {
  set_device(c->device);
  check(cudaMemsetAsync(p, 0x5a, static_cast<std::size_t>(bytes), c->stream), "cudaMemsetAsync");
}

}  // namespace fwd::cuda
