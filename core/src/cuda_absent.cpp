// cuda_absent.cpp — cuda_resource.hpp for a build without CUDA
// (GCPRESSURE_WITH_CUDA=OFF). Everything is declared in every build so that
// callers need no #ifdef; here it reports "no CUDA" instead.
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"

namespace gcpressure {
namespace {

[[noreturn]] void no_cuda() { GCPRESSURE_FAIL("gcpressure was built without CUDA (GCPRESSURE_WITH_CUDA=OFF)"); }

}  // namespace

bool cuda_available() noexcept { return false; }
int cuda_device_count() noexcept { return 0; }
const char* cuda_unavailable_reason() noexcept {
  return "this build of gcpressure has no CUDA: GCPRESSURE_WITH_CUDA=OFF";
}

stream_ref cuda_stream_create() { no_cuda(); }
void cuda_stream_destroy(stream_ref) noexcept {}
void cuda_stream_synchronize(stream_ref) { no_cuda(); }
void cuda_device_synchronize() { no_cuda(); }
void cuda_memcpy_to_host(void*, const void*, std::size_t, stream_ref) { no_cuda(); }
void cuda_memcpy_to_device(void*, const void*, std::size_t, stream_ref) { no_cuda(); }
void cuda_launch_slow_fill(void*, std::size_t, unsigned char, unsigned long long, stream_ref) { no_cuda(); }

// No CUDA stream can exist, so any ref a caller passes is the default stream,
// whose work (there is none) is always complete.
stream_ops& cuda_stream_ops() noexcept { return synchronous_stream_ops(); }
std::uint64_t cuda_stream_capture_id(stream_ref) noexcept { return 0; }
cuda_relaxed_capture_scope::cuda_relaxed_capture_scope() noexcept = default;
cuda_relaxed_capture_scope::~cuda_relaxed_capture_scope() = default;

// The constructors throw, so the members below can never run; they exist
// only to complete the classes' vtables.
cuda_resource::cuda_resource(int device) : device_(device) { no_cuda(); }
void* cuda_resource::do_allocate(std::size_t, stream_ref) { no_cuda(); }
void cuda_resource::do_deallocate(void*, std::size_t, stream_ref) noexcept {}
device_memory_info cuda_resource::do_memory_info() const { no_cuda(); }

cuda_async_resource::cuda_async_resource(int device, std::size_t) : device_(device) { no_cuda(); }
cuda_async_resource::~cuda_async_resource() = default;
void* cuda_async_resource::do_allocate(std::size_t, stream_ref) { no_cuda(); }
void cuda_async_resource::do_deallocate(void*, std::size_t, stream_ref) noexcept {}
device_memory_info cuda_async_resource::do_memory_info() const { no_cuda(); }

}  // namespace gcpressure
