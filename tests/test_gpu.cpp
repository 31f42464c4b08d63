// test_gpu.cpp — the CUDA resources on a real device (ctest label "gpu").
//
// Every test skips itself where there is no CUDA device (or a build without
// CUDA), so this binary passes, doing nothing, on CI machines.
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/cuda_resource.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/pool_resource.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;
using gcp_test::cuda_stream;
using gcp_test::count_not;

namespace {

constexpr unsigned long long ms = 1000ull * 1000ull;  // nanoseconds

bool aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % gcp::alignment == 0; }

// Bytes of device block `p` that differ from `value` (reads synchronously on `s`).
// Writes a position-dependent pattern, reads it back, compares.
void round_trip(void* p, std::size_t bytes, gcp::stream_ref s) {
  std::vector<unsigned char> out(bytes), in(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) out[i] = static_cast<unsigned char>(i * 131 + 7);
  gcp::cuda_memcpy_to_device(p, out.data(), bytes, s);
  gcp::cuda_memcpy_to_host(in.data(), p, bytes, s);
  EXPECT_EQ(0, std::memcmp(out.data(), in.data(), bytes)) << bytes << " bytes did not round-trip";
}

const std::size_t sizes[] = {1, 4 * KiB, 1 * MiB, 64 * MiB};

void check_resource(gcp::device_resource& r, gcp::stream_ref s) {
  for (std::size_t n : sizes) {
    SCOPED_TRACE(std::string(r.name()) + " " + std::to_string(n) + " bytes");
    void* p = r.allocate(n, s);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(aligned(p)) << p;
    round_trip(p, n, s);
    r.deallocate(p, n, s);
  }
  gcp::cuda_stream_synchronize(s);
}

// 2^46 bytes (64 TiB): more than any device has, below max_request_bytes, so
// CUDA itself must refuse it.
constexpr std::size_t absurd = std::size_t{1} << 46;

void check_oom(gcp::device_resource& r, gcp::stream_ref s) {
  try {
    void* p = r.allocate(absurd, s);
    r.deallocate(p, absurd, s);
    FAIL() << r.name() << " allocated 64 TiB";
  } catch (const gcp::out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(absurd)), std::string::npos) << e.what();
  }
  // The failure must not linger in CUDA's last-error slot and break later calls.
  void* p = r.allocate(4 * KiB, s);
  round_trip(p, 4 * KiB, s);
  r.deallocate(p, 4 * KiB, s);
  gcp::cuda_stream_synchronize(s);
}

}  // namespace

TEST(Gpu, DeviceCountAndMemoryInfo) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_GT(gcp::cuda_device_count(), 0);
  gcp::cuda_resource r;
  const auto info = r.memory_info();
  EXPECT_GT(info.total, 0u);
  EXPECT_LE(info.free, info.total);
}

TEST(Gpu, CudaResourceRoundTrip) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gcp::cuda_resource r;
  EXPECT_STREQ(r.name(), "cuda");
  check_resource(r, nullptr);
}

TEST(Gpu, CudaAsyncResourceRoundTrip) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  cuda_stream st;
  gcp::cuda_async_resource r;
  EXPECT_STREQ(r.name(), "cuda_async");
  check_resource(r, st.s);
  check_resource(r, nullptr);  // the device's default stream
}

TEST(Gpu, ZeroBytesIsLogicError) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gcp::cuda_resource r;
  gcp::cuda_async_resource a;
  EXPECT_THROW(r.allocate(0), gcp::logic_error);
  EXPECT_THROW(a.allocate(0), gcp::logic_error);
}

TEST(Gpu, BadDeviceIsLogicError) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_THROW(gcp::cuda_resource(gcp::cuda_device_count()), gcp::logic_error);
  EXPECT_THROW(gcp::cuda_async_resource(-1), gcp::logic_error);
}

TEST(Gpu, CudaResourceOutOfMemory) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gcp::cuda_resource r;
  check_oom(r, nullptr);
}

TEST(Gpu, CudaAsyncResourceOutOfMemory) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  cuda_stream st;
  gcp::cuda_async_resource r;
  check_oom(r, st.s);
}

TEST(Gpu, OutOfMemoryIsBadAlloc) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gcp::cuda_resource r;
  EXPECT_THROW(r.allocate(absurd), std::bad_alloc);
}

TEST(Gpu, EventsFollowStreamWork) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  cuda_stream st;
  gcp::cuda_async_resource r;
  auto& ops = gcp::cuda_stream_ops();
  void* p = r.allocate(1 * MiB, st.s);
  // Twice: the second round runs on an event recycled from the free list.
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const unsigned char v = round == 0 ? 0x11 : 0x22;
    gcp::cuda_launch_slow_fill(p, 1 * MiB, v, 50 * ms, st.s);
    gcp::event_ref e = ops.record(st.s);
    ASSERT_NE(e, nullptr);
    EXPECT_FALSE(ops.query(e)) << "event complete while a 50 ms kernel should still run";
    ops.synchronize(e);
    EXPECT_TRUE(ops.query(e));
    EXPECT_EQ(count_not(p, 1 * MiB, v, st.s), 0u);
    ops.release(e);
  }
  r.deallocate(p, 1 * MiB, st.s);
  gcp::cuda_stream_synchronize(st.s);
}

// Note [Exposed GC time, measured]: a timed event says how long ago the
// work before it ended, on the device's clock, without waiting for the
// user's stream; untimed events cannot tell.
TEST(Gpu, TimedEventsSayHowLongTheStreamHasBeenIdle) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  using clk = std::chrono::steady_clock;
  cuda_stream st;
  gcp::cuda_resource r;
  auto& ops = gcp::cuda_stream_ops();
  void* p = r.allocate(4 * KiB);
  gcp::cuda_launch_slow_fill(p, 4 * KiB, 0, 0, st.s);  // loads the kernels first
  gcp::cuda_stream_synchronize(st.s);
  for (int round = 0; round < 2; ++round) {  // the second on recycled events
    SCOPED_TRACE("round " + std::to_string(round));
    gcp::cuda_launch_slow_fill(p, 4 * KiB, 0x5A, 20 * ms, st.s);
    const auto queued = clk::now();
    gcp::event_ref e = ops.record_timed(st.s);
    ops.synchronize(e);
    std::this_thread::sleep_for(std::chrono::milliseconds(15));
    const double idle = ops.idle_seconds(e);
    const double most = std::chrono::duration<double>(clk::now() - queued).count() - 0.019;
    EXPECT_GE(idle, 0.014) << "it slept 15 ms after the kernel ended";
    EXPECT_LE(idle, most) << "the kernel ran 20 ms after it was queued";
    ops.release(e);
  }
  gcp::event_ref u = ops.record(st.s);
  ops.synchronize(u);
  EXPECT_EQ(ops.idle_seconds(u), -1.0) << "an untimed event cannot tell";
  ops.release(u);
  r.deallocate(p, 4 * KiB);
}

TEST(Gpu, SlowFillTakesAboutItsTime) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  cuda_stream st;
  gcp::cuda_resource r;
  void* p = r.allocate(4 * KiB);
  gcp::cuda_launch_slow_fill(p, 4 * KiB, 0, 0, st.s);  // loads the kernels before timing
  gcp::cuda_stream_synchronize(st.s);
  const auto t0 = std::chrono::steady_clock::now();
  gcp::cuda_launch_slow_fill(p, 4 * KiB, 0x5A, 30 * ms, st.s);
  gcp::cuda_stream_synchronize(st.s);
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, std::chrono::milliseconds(29));
  EXPECT_LT(took, std::chrono::seconds(5));
  EXPECT_EQ(count_not(p, 4 * KiB, 0x5A, st.s), 0u);
  r.deallocate(p, 4 * KiB);
}

// A block freed on stream A while a slow kernel on A still writes to it is
// taken by stream B, which writes 0xCD at once. If the pool handed the block
// to B without waiting for A's work, A's late 0xAB fill lands on top of B's
// data and the final read sees 0xAB. Either the pool gives B other memory, or
// the memory it gives must hold B's 0xCD in the end.
namespace {
// The streams must outlive the pool: its free blocks remember their streams.
void cross_stream_case(gcp::pool_resource& pool, std::size_t n, const cuda_stream& a, const cuda_stream& b) {
  SCOPED_TRACE(std::to_string(n) + " bytes");
  auto& ops = gcp::cuda_stream_ops();

  void* p = pool.allocate(n, a.s);
  gcp::cuda_launch_slow_fill(p, n, 0xAB, 50 * ms, a.s);
  gcp::event_ref fill_done = ops.record(a.s);
  pool.deallocate(p, n, a.s);

  void* q = nullptr;
  try {
    q = pool.allocate(n, b.s);
  } catch (const gcp::out_of_memory&) {
    // No other memory; the pool must not have taken p without waiting. Wait
    // for A's frees explicitly, then p is fair game.
    pool.wait_pending();
    EXPECT_TRUE(ops.query(fill_done));
    // The block is still cached: A's fill must be intact in it.
    EXPECT_EQ(count_not(p, n, 0xAB, a.s), 0u) << "the pool's cached block was written behind its back";
    q = pool.allocate(n, b.s);
  }
  const bool reused = gcp_test::overlap(p, n, q, n);
  if (reused) {
    EXPECT_TRUE(ops.query(fill_done)) << "block of stream A handed to B while A's kernel still ran";
  }

  gcp::cuda_launch_slow_fill(q, n, 0xCD, 0, b.s);
  gcp::cuda_stream_synchronize(a.s);
  gcp::cuda_stream_synchronize(b.s);
  EXPECT_EQ(count_not(q, n, 0xCD, b.s), 0u) << (reused ? "stream A's late fill overwrote B's data" : "");
  ops.release(fill_done);
  pool.deallocate(q, n, b.s);
  gcp::cuda_stream_synchronize(b.s);
}
}  // namespace

TEST(GpuPool, CrossStreamReuseWaitsForFreeingStream) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  cuda_stream a, b;
  gcp::cuda_async_resource up;
  gcp::pool_resource pool(up);
  for (std::size_t n : {std::size_t{4 * KiB}, 1 * MiB, 64 * MiB}) cross_stream_case(pool, n, a, b);
}

// Room for one 64 MiB segment only: B cannot get fresh memory, so the pool
// must either reuse A's block (after waiting) or fail; both are checked.
TEST(GpuPool, CrossStreamReuseUnderLimitWaitsForFreeingStream) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  cuda_stream a, b;
  gcp::cuda_async_resource up;
  gcp::limiting_adaptor limit(up, 96 * MiB);
  gcp::pool_resource pool(limit);
  cross_stream_case(pool, 64 * MiB, a, b);
  pool.trim();
  EXPECT_EQ(limit.used(), 0u);
}

TEST(GpuPool, SameStreamReuseIsImmediate) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  cuda_stream a;
  gcp::cuda_async_resource up;
  gcp::pool_resource pool(up);
  void* p = pool.allocate(1 * MiB, a.s);
  gcp::cuda_launch_slow_fill(p, 1 * MiB, 0xAB, 20 * ms, a.s);
  pool.deallocate(p, 1 * MiB, a.s);
  // Stream order already puts later work on A after the fill.
  void* q = pool.allocate(1 * MiB, a.s);
  EXPECT_EQ(q, p);
  gcp::cuda_launch_slow_fill(q, 1 * MiB, 0xCD, 0, a.s);
  EXPECT_EQ(count_not(q, 1 * MiB, 0xCD, a.s), 0u);
  pool.deallocate(q, 1 * MiB, a.s);
  gcp::cuda_stream_synchronize(a.s);
}

namespace {
void check_allocator(gcp::backend_kind backend, bool pool) {
  SCOPED_TRACE(std::string(gcp::to_string(backend)) + (pool ? " with pool" : " without pool"));
  cuda_stream st;
  gcp::allocator_options o;
  o.backend = backend;
  o.pool = pool;
  gcp::device_allocator a(o);
  EXPECT_EQ(a.backend(), backend);
  for (std::size_t n : sizes) {
    void* p = a.allocate(n, st.s);
    EXPECT_TRUE(aligned(p));
    EXPECT_EQ(a.stats().requested.current, static_cast<std::int64_t>(n));
    round_trip(p, n, st.s);
    a.free(p, n, st.s);
    EXPECT_EQ(a.stats().requested.current, 0);
  }
  const auto s = a.stats();
  EXPECT_EQ(s.allocations, std::size(sizes));
  EXPECT_EQ(s.frees, std::size(sizes));
  EXPECT_GT(s.device_memory.total, 0u);
  a.trim();
  gcp::cuda_stream_synchronize(st.s);
}
}  // namespace

TEST(GpuAllocator, CudaAsyncBackendAccounting) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_allocator(gcp::backend_kind::cuda_async, true);
  check_allocator(gcp::backend_kind::cuda_async, false);
}

TEST(GpuAllocator, CudaBackendAccounting) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  check_allocator(gcp::backend_kind::cuda, true);
  check_allocator(gcp::backend_kind::cuda, false);
}

TEST(GpuAllocator, OutOfMemoryThroughTheAllocator) {
  if (!gcpressure::cuda_available()) GTEST_SKIP() << "no CUDA device";
  gcp::allocator_options o;
  o.backend = gcp::backend_kind::cuda_async;
  gcp::device_allocator a(o);
  EXPECT_THROW(a.allocate(absurd), gcp::out_of_memory);
  EXPECT_EQ(a.stats().requested.current, 0);
  void* p = a.allocate(4 * KiB);
  a.free(p, 4 * KiB);
  EXPECT_EQ(a.stats().requested.current, 0);
}
