// cuda_kernels.hpp — the forward loop's CUDA compute: cuBLAS SGEMM and a
// broadcast bias + relu kernel, on one stream. Plain types only, so that this
// header needs neither CUDA nor gcpressure headers. Compiled only when
// GCPRESSURE_WITH_CUDA; errors throw std::runtime_error naming the call.
#pragma once

namespace fwd::cuda {

struct context;  // cublasHandle_t bound to one stream of one device

// Makes CUDA device `device` current for this thread (cudaSetDevice).
void set_device(int device);
// stream: a cudaStream_t (gcpressure::stream_ref) of CUDA device `device`.
// Every call below makes that device current first (Note [A replica's device
// is current when it queues], compute.cpp).
context* create(void* stream, int device);
void destroy(context* c) noexcept;

// Column-major y(d x n) = W(d x d) * x(d x n), all device pointers.
void sgemm(context* c, const float* W, const float* x, float* y, int d, int n);
// y[i + d*j] = max(0, t[i + d*j] + b[i]): relu.(t .+ b).
void bias_relu(context* c, const float* t, const float* b, float* y, int d, int n);
// Writes every byte of p (cudaMemsetAsync on the context's stream).
void fill(context* c, void* p, unsigned long long bytes);

}  // namespace fwd::cuda
