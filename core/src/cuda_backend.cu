// cuda_backend.cu — every CUDA runtime call of core/ (see cuda_resource.hpp).
//
// Compiled only when GCPRESSURE_WITH_CUDA=ON; cuda_absent.cpp stands in otherwise.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "gcpressure/config.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"

namespace gcpressure {
namespace {

void check(cudaError_t err, const char* call, const char* file, int line) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();  // so the next, unrelated call does not report this failure again
  detail::throw_cuda_error(file, line, call, static_cast<int>(err), cudaGetErrorName(err), cudaGetErrorString(err));
}

// Frees and destructors can run from static destructors after the runtime has
// begun tearing down; those failures are expected and harmless (the driver
// reclaims everything), anything else is reported, never thrown.
bool exiting(cudaError_t err) noexcept {
  return err == cudaErrorCudartUnloading || err == cudaErrorContextIsDestroyed;
}

void check_noexcept(cudaError_t err, const char* call, const char* file, int line) noexcept {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  if (exiting(err)) return;
  try {
    detail::report_misuse(std::string(detail::source_name(file)) + ":" + std::to_string(line) + ": " + call + " failed: " +
                          cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
  } catch (...) {  // std::string ran out of memory: nothing sensible left to report with
  }
}

}  // namespace
}  // namespace gcpressure

#define GCP_CUDA_TRY(call) ::gcpressure::check((call), #call, __FILE__, __LINE__)
#define GCP_CUDA_TRY_AS(err, name) ::gcpressure::check((err), (name), __FILE__, __LINE__)
#define GCP_CUDA_WARN(call) ::gcpressure::check_noexcept((call), #call, __FILE__, __LINE__)
#define GCP_CUDA_WARN_AS(err, name) ::gcpressure::check_noexcept((err), (name), __FILE__, __LINE__)

namespace gcpressure {
namespace {

// Makes `device` current for a scope and restores the caller's device, so
// that a resource of device 1 does not silently move the caller's work.
// Never throws: callers decide whether status() is fatal.
class device_guard {
 public:
  explicit device_guard(int device) noexcept {
    status_ = cudaGetDevice(&prev_);
    if (status_ == cudaSuccess && prev_ != device) {
      status_ = cudaSetDevice(device);
      restore_ = status_ == cudaSuccess;
    }
  }
  ~device_guard() {
    if (restore_) (void)cudaSetDevice(prev_);
  }
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;
  cudaError_t status() const noexcept { return status_; }

 private:
  int prev_ = 0;
  bool restore_ = false;
  cudaError_t status_ = cudaSuccess;
};

cudaStream_t as_stream(stream_ref s) noexcept { return static_cast<cudaStream_t>(s); }

void require_device(int device) {
  const int n = cuda_device_count();
  if (n == 0) throw logic_error(no_cuda_device_message("backend"));
  if (device < 0 || device >= n)
    GCPRESSURE_FAIL("CUDA device " + std::to_string(device) + " does not exist (" + std::to_string(n) +
                    " device(s))");
}

device_memory_info mem_info(int device) {
  device_guard g(device);
  GCP_CUDA_TRY_AS(g.status(), "cudaSetDevice");
  device_memory_info info;
  GCP_CUDA_TRY(cudaMemGetInfo(&info.free, &info.total));
  return info;
}

// Callers (and the pool's ladder) rely on an out_of_memory that explains itself.
[[noreturn]] void throw_oom(const char* call, cudaError_t err, std::size_t bytes, int device) {
  (void)cudaGetLastError();  // allocation failures are not sticky, but the last-error slot is set
  std::string msg = std::string(call) + " could not allocate " + std::to_string(bytes) + " bytes (" +
                    format_bytes(bytes) + ") on CUDA device " + std::to_string(device) + ": " +
                    cudaGetErrorString(err);
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess)
    msg += "; device free " + format_bytes(free) + " of " + format_bytes(total);
  else
    (void)cudaGetLastError();
  throw out_of_memory(std::move(msg));
}

void check_request(std::size_t bytes, int device) {
  if (bytes == 0) GCPRESSURE_FAIL("allocation of 0 bytes");
  if (bytes > max_request_bytes)
    throw out_of_memory("request of " + std::to_string(bytes) + " bytes on CUDA device " + std::to_string(device) +
                        " exceeds the largest possible request (" + std::to_string(max_request_bytes) + " bytes)");
}

// Two kernels rather than one: a lone spinning thread gives a delay that does
// not depend on how many fill blocks fit on the device at once.
__global__ void spin_kernel(unsigned long long nanos) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  // Safety net: should globaltimer not advance on some setup, the clock64
  // bound (generous: 8 cycles per ns) still ends the wait instead of hanging
  // the stream.
  const long long c0 = clock64();
  const long long max_cycles = static_cast<long long>(nanos) * 8 + 1000;
  do {
#if __CUDA_ARCH__ >= 700
    __nanosleep(256);
#endif
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanos && clock64() - c0 < max_cycles);
}

__global__ void fill_kernel(unsigned char* p, std::size_t bytes, unsigned char value) {
  const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < bytes; i += stride)
    p[i] = value;
}

// Events are bound to the device of the stream they were recorded on, so the
// free list is kept per device; handing out a node (not the raw event) lets
// release() know where the event belongs without asking CUDA.
struct event_node {
  cudaEvent_t event = nullptr;
  int device = 0;
  bool timed = false;  // created with timing (record_timed)
};

class cuda_events final : public stream_ops {
 public:
  // Timing off: these events only order work, and timing makes record/query slower.
  event_ref record(stream_ref s) override { return record_on(s, false); }
  event_ref record_timed(stream_ref s) override { return record_on(s, true); }

  // Note [Exposed GC time, measured] (policy.cpp): a timed event recorded
  // now on a stream of our own, which has no work, completes at once; the
  // device's clock between the two is how long ago `e` completed. The user's
  // stream is not used: work queued there since `e` would make us wait.
  double idle_seconds(event_ref e) override {
    auto* n = static_cast<event_node*>(e);
    if (n == nullptr || !n->timed) return -1;
    cudaStream_t own = own_stream(n->device);
    event_node* now = static_cast<event_node*>(record_on(own, true));
    struct rel {
      cuda_events& ops;
      event_node* n;
      ~rel() { ops.release(n); }
    } r{*this, now};
    GCP_CUDA_TRY(cudaEventSynchronize(now->event));
    float ms = 0;
    GCP_CUDA_TRY(cudaEventElapsedTime(&ms, n->event, now->event));
    return ms > 0 ? 1e-3 * ms : 0;
  }

  bool query(event_ref e) override {
    const cudaError_t err = cudaEventQuery(static_cast<event_node*>(e)->event);
    if (err == cudaErrorNotReady) {
      (void)cudaGetLastError();  // not-ready is a state, not a failure; keep it out of the last-error slot
      return false;
    }
    GCP_CUDA_TRY_AS(err, "cudaEventQuery");
    return true;
  }

  void synchronize(event_ref e) override {
    GCP_CUDA_TRY(cudaEventSynchronize(static_cast<event_node*>(e)->event));
  }

  void release(event_ref e) noexcept override {
    auto* n = static_cast<event_node*>(e);
    if (n == nullptr) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      try {
        auto& list = free_[key(n->device, n->timed)];
        if (list.size() < max_cached) {
          list.push_back(n);
          return;
        }
      } catch (...) {  // out of host memory: destroy the event instead of caching it
      }
    }
    GCP_CUDA_WARN(cudaEventDestroy(n->event));
    delete n;
  }

 private:
  // Enough for every pending cross-stream free of a busy pool; more are destroyed.
  static constexpr std::size_t max_cached = 1024;

  static int key(int device, bool timed) { return 2 * device + (timed ? 1 : 0); }

  event_ref record_on(stream_ref s, bool timed) {
    int device = 0;
#if CUDART_VERSION >= 12080
    GCP_CUDA_TRY(cudaStreamGetDevice(as_stream(s), &device));
#else
    GCP_CUDA_TRY(cudaGetDevice(&device));  // older runtimes cannot ask the stream; assume the caller's device
#endif
    event_node* n = take(key(device, timed));
    if (n == nullptr) {
      device_guard g(device);
      GCP_CUDA_TRY_AS(g.status(), "cudaSetDevice");
      cudaEvent_t e = nullptr;
      GCP_CUDA_TRY(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming));
      n = new event_node{e, device, timed};
    }
    const cudaError_t err = cudaEventRecord(n->event, as_stream(s));
    if (err != cudaSuccess) {
      release(n);
      GCP_CUDA_TRY_AS(err, "cudaEventRecord");
    }
    return n;
  }

  // One non-blocking stream per device, never destroyed (the ops outlive main).
  cudaStream_t own_stream(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    cudaStream_t& s = own_[device];
    if (s == nullptr) {
      device_guard g(device);
      GCP_CUDA_TRY_AS(g.status(), "cudaSetDevice");
      GCP_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    }
    return s;
  }

  event_node* take(int k) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find(k);
    if (it == free_.end() || it->second.empty()) return nullptr;
    event_node* n = it->second.back();
    it->second.pop_back();
    return n;
  }

  std::mutex mu_;
  std::unordered_map<int, std::vector<event_node*>> free_;  // by key(device, timed)
  std::unordered_map<int, cudaStream_t> own_;
};

}  // namespace

bool cuda_available() noexcept { return cuda_device_count() > 0; }

namespace {

// Asked once: without a driver every call would re-probe and fail again.
struct cuda_probe {
  int count = 0;
  std::string reason;  // why none is usable: the driver's words
};

const cuda_probe& probe() noexcept {
  static const cuda_probe p = [] {
    cuda_probe r;
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      r.reason = cudaGetErrorString(e);
      n = 0;
    } else if (n == 0) {
      r.reason = "the driver lists no device";
    }
    r.count = n;
    return r;
  }();
  return p;
}

}  // namespace

int cuda_device_count() noexcept { return probe().count; }

const char* cuda_unavailable_reason() noexcept { return probe().reason.c_str(); }

stream_ref cuda_stream_create() {
  cudaStream_t s = nullptr;
  // Non-blocking: the streams must not serialise with the legacy default
  // stream, or cross-stream tests would pass no matter what the pool does.
  GCP_CUDA_TRY(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void cuda_stream_destroy(stream_ref s) noexcept {
  if (s != nullptr) GCP_CUDA_WARN(cudaStreamDestroy(as_stream(s)));
}

void cuda_stream_synchronize(stream_ref s) { GCP_CUDA_TRY(cudaStreamSynchronize(as_stream(s))); }

void cuda_device_synchronize() { GCP_CUDA_TRY(cudaDeviceSynchronize()); }

void cuda_memcpy_to_host(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  GCP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, as_stream(s)));
  GCP_CUDA_TRY(cudaStreamSynchronize(as_stream(s)));
}

void cuda_memcpy_to_device(void* dst, const void* src, std::size_t bytes, stream_ref s) {
  GCP_CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, as_stream(s)));
  GCP_CUDA_TRY(cudaStreamSynchronize(as_stream(s)));
}

void cuda_launch_slow_fill(void* p, std::size_t bytes, unsigned char value, unsigned long long nanos,
                           stream_ref s) {
  if (nanos > 0) {
    spin_kernel<<<1, 1, 0, as_stream(s)>>>(nanos);
    GCP_CUDA_TRY_AS(cudaGetLastError(), "spin_kernel<<<>>>");
  }
  if (bytes == 0) return;
  constexpr unsigned threads = 256;
  const std::size_t wanted = (bytes + threads - 1) / threads;
  const unsigned blocks = static_cast<unsigned>(std::min<std::size_t>(wanted, 4096));
  fill_kernel<<<blocks, threads, 0, as_stream(s)>>>(static_cast<unsigned char*>(p), bytes, value);
  GCP_CUDA_TRY_AS(cudaGetLastError(), "fill_kernel<<<>>>");
}

stream_ops& cuda_stream_ops() noexcept {
  // Leaked on purpose: pools destroyed by static destructors release events
  // through it, possibly after a function-local static would have died.
  static cuda_events* ops = new cuda_events;
  return *ops;
}

std::uint64_t cuda_stream_capture_id(stream_ref s) noexcept {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  unsigned long long id = 0;
  if (cudaStreamGetCaptureInfo(as_stream(s), &status, &id) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  if (status == cudaStreamCaptureStatusNone) return 0;
  return id != 0 ? id : ~std::uint64_t{0};  // capturing, whatever the id says
}

cuda_relaxed_capture_scope::cuda_relaxed_capture_scope() noexcept {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess) prev_ = static_cast<int>(mode);
  else (void)cudaGetLastError();
}

cuda_relaxed_capture_scope::~cuda_relaxed_capture_scope() {
  if (prev_ < 0) return;
  auto mode = static_cast<cudaStreamCaptureMode>(prev_);
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) (void)cudaGetLastError();
}

// --- cuda_resource -----------------------------------------------------------

cuda_resource::cuda_resource(int device) : device_(device) { require_device(device); }

void* cuda_resource::do_allocate(std::size_t bytes, stream_ref) {
  check_request(bytes, device_);
  device_guard g(device_);
  GCP_CUDA_TRY_AS(g.status(), "cudaSetDevice");
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) throw_oom("cudaMalloc", err, bytes, device_);
  GCP_CUDA_TRY_AS(err, "cudaMalloc");
  return p;
}

void cuda_resource::do_deallocate(void* p, std::size_t, stream_ref) noexcept {
  if (p == nullptr) return;
  device_guard g(device_);
  if (g.status() != cudaSuccess) return GCP_CUDA_WARN_AS(g.status(), "cudaSetDevice");
  GCP_CUDA_WARN(cudaFree(p));  // synchronises the device: no stream ordering needed
}

device_memory_info cuda_resource::do_memory_info() const { return mem_info(device_); }

// --- cuda_async_resource -------------------------------------------------------

cuda_async_resource::cuda_async_resource(int device, std::size_t release_threshold) : device_(device) {
  require_device(device);
  int supported = 0;
  GCP_CUDA_TRY(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
  if (supported == 0)
    GCPRESSURE_FAIL("CUDA device " + std::to_string(device) + " does not support stream-ordered memory pools");

  // An own pool rather than the device's default one: the release threshold
  // and trimming then affect only memory this resource handed out.
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = device;
  cudaMemPool_t pool = nullptr;
  GCP_CUDA_TRY(cudaMemPoolCreate(&pool, &props));
  std::uint64_t threshold = release_threshold;
  const cudaError_t err = cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold);
  if (err != cudaSuccess) {
    (void)cudaMemPoolDestroy(pool);
    GCP_CUDA_TRY_AS(err, "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
  }
  pool_ = pool;
}

cuda_async_resource::~cuda_async_resource() {
  // Blocks still outstanding keep the pool's memory alive until they are
  // freed; CUDA releases it then, so no synchronisation here.
  if (pool_ != nullptr) GCP_CUDA_WARN(cudaMemPoolDestroy(static_cast<cudaMemPool_t>(pool_)));
}

void* cuda_async_resource::do_allocate(std::size_t bytes, stream_ref stream) {
  check_request(bytes, device_);
  // The guard makes a null stream mean this device's default stream.
  device_guard g(device_);
  GCP_CUDA_TRY_AS(g.status(), "cudaSetDevice");
  void* p = nullptr;
  const cudaError_t err =
      cudaMallocFromPoolAsync(&p, bytes, static_cast<cudaMemPool_t>(pool_), as_stream(stream));
  if (err == cudaErrorMemoryAllocation) throw_oom("cudaMallocFromPoolAsync", err, bytes, device_);
  GCP_CUDA_TRY_AS(err, "cudaMallocFromPoolAsync");
  return p;
}

void cuda_async_resource::do_deallocate(void* p, std::size_t, stream_ref stream) noexcept {
  if (p == nullptr) return;
  device_guard g(device_);
  if (g.status() != cudaSuccess) return GCP_CUDA_WARN_AS(g.status(), "cudaSetDevice");
  GCP_CUDA_WARN(cudaFreeAsync(p, as_stream(stream)));
}

device_memory_info cuda_async_resource::do_memory_info() const { return mem_info(device_); }

}  // namespace gcpressure
