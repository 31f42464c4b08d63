// A device_heap over several devices (Note [One policy, N devices]): one
// Boehm collector and one policy, an allocator per device, buffers that
// return to the device they came from. Host backend: two simulated devices.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gcpressure/boehm.hpp"
#include "gcpressure/config.hpp"
#include "gcpressure/error.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;
namespace gb = gcpressure::boehm;
using gcp_test::clear_stack;

namespace {

std::vector<gcp::allocator_options> two_host_devices(std::size_t hard0, std::size_t hard1) {
  std::vector<gcp::allocator_options> v(2);
  for (int i = 0; i < 2; ++i) {
    v[i].backend = gcp::backend_kind::host;
    v[i].device = i;
    v[i].host_capacity = std::size_t{1} << 30;
    v[i].hard_limit.bytes = i == 0 ? hard0 : hard1;
  }
  return v;
}

// Allocates `n` buffers of `bytes` on `device` and drops them.
[[gnu::noinline]] void alloc_and_drop(gb::device_heap& h, std::size_t device, int n, std::size_t bytes) {
  for (int i = 0; i < n; ++i) static_cast<char*>(gb::device_heap::data(h.alloc(bytes, nullptr, device)))[0] = 1;
  clear_stack();
}

[[gnu::noinline]] void collect_all(gb::device_heap& h) {
  clear_stack();
  h.collect(gcp::gc_kind::blocking_full);
}

bool settled(gb::device_heap& h) {
  return gcp_test::settle(
      [&] {
        h.gc().run_finalizers();
        for (std::size_t d = 0; d < h.device_count(); ++d) h.allocator(d).drain();
      },
      [&] { return h.allocator(0).live_bytes() == 0 && h.allocator(1).live_bytes() == 0; },
      std::chrono::milliseconds(2000));
}

}  // namespace

// Garbage on both devices is found by the one collector and returns to the
// device it came from; pressure on the small device drives collections there.
TEST(BoehmDevices, BuffersReturnToTheirOwnDevice) {
  gb::init();
  gb::device_heap h(two_host_devices(256 * MiB, 32 * MiB), "pressure");
  ASSERT_EQ(h.device_count(), 2u);
  alloc_and_drop(h, 1, 640, 1 * MiB);  // 20x device 1's hard limit
  alloc_and_drop(h, 0, 64, 1 * MiB);
  EXPECT_EQ(h.stats(1).ooms, 0u);
  EXPECT_LE(h.stats(1).requested.peak, static_cast<std::int64_t>(32 * MiB));
  EXPECT_EQ(h.stats(1).device, 1);
  collect_all(h);
  if (!settled(h)) {
    collect_all(h);  // one transient conservative reference is allowed (tests/test_boehm.cpp)
    ASSERT_TRUE(settled(h)) << "live: " << h.allocator(0).live_bytes() << " / " << h.allocator(1).live_bytes();
  }
  const gcp::allocator_stats s0 = h.stats(0), s1 = h.stats(1);
  EXPECT_EQ(s1.frees, 640u);
  EXPECT_EQ(s0.frees, 64u);
  EXPECT_EQ(h.allocator(1).deferred().pushed(), 640u) << "each block finalized once, onto its own device's queue";
  EXPECT_EQ(h.allocator(0).deferred().pushed(), 64u);
  EXPECT_EQ(s0.gc.policy_devices, 2u);
  EXPECT_EQ(s0.gc.by_kind, s1.gc.by_kind) << "one policy: the same collections seen from either device";
  // Per-device attribution: device 1's reclaimed bytes are more than device
  // 0 ever held, and neither device counts more than its own. Not all 640
  // MiB: blocks finalized in Boehm's own collections (it collects by itself
  // as its heap grows, often under TSan) are freed by the next allocation's
  // drain, outside any policy collection, and are not the policy's reclaimed
  // bytes (263-598 MiB of 640 under TSan; a ">= 600 MiB" here failed there).
  // The bound per build, from what was measured (issue 25): Release 625-640
  // MiB in 8 runs, Debug+ASan 632-634 in 4: at least 576 (90%) there; TSan
  // 263-598: at least 192 there. frees and pushed() above are exact.
#if defined(__SANITIZE_THREAD__)
  constexpr std::size_t min_reclaimed = 192 * MiB;
#else
  constexpr std::size_t min_reclaimed = 576 * MiB;
#endif
  std::printf("device 1: %.1f MiB of 640 reclaimed by policy collections; device 0: %.1f of 64\n",
              static_cast<double>(s1.gc.reclaimed_bytes) / MiB, static_cast<double>(s0.gc.reclaimed_bytes) / MiB);
  EXPECT_GE(s1.gc.reclaimed_bytes, min_reclaimed) << "device 1's own share, reclaimed by the policy's collections";
  EXPECT_LE(s1.gc.reclaimed_bytes, 640 * MiB);
  EXPECT_LE(s0.gc.reclaimed_bytes, 64 * MiB);
}

TEST(BoehmDevices, UnsafeFreeDeviceOfAndBadIndices) {
  gb::init();
  gb::device_heap h(two_host_devices(64 * MiB, 64 * MiB), "at_limit");
  gb::buffer* b = h.alloc(1 * MiB, nullptr, 1);
  EXPECT_EQ(h.device_of(b), 1u);
  EXPECT_EQ(h.allocator(1).live_bytes(), 1 * MiB);
  EXPECT_EQ(h.allocator(0).live_bytes(), 0u);
  h.unsafe_free(b);
  EXPECT_EQ(h.allocator(1).live_bytes(), 0u);
  EXPECT_THROW(h.unsafe_free(b), gcp::logic_error);
  EXPECT_THROW(h.alloc(1 * MiB, nullptr, 2), gcp::logic_error);
  EXPECT_THROW(h.allocator(2), gcp::logic_error);
  EXPECT_THROW(h.stats(2), gcp::logic_error);
  EXPECT_THROW(h.synchronize(nullptr, 2), gcp::logic_error);
  h.synchronize(nullptr, 1);  // the host device's default stream: returns
  gb::device_heap other(two_host_devices(64 * MiB, 64 * MiB), "at_limit");
  gb::buffer* c = other.alloc(1 * MiB, nullptr, 1);
  EXPECT_THROW(h.device_of(c), gcp::logic_error);
  EXPECT_THROW(h.unsafe_free(c), gcp::logic_error) << "same device index, another heap";
  other.unsafe_free(c);
  h.shutdown();
  EXPECT_EQ(h.device_count(), 0u);
  EXPECT_THROW(h.alloc(1, nullptr, 0), gcp::logic_error);
}

// GCPRESSURE_DEVICES makes a heap over the devices it lists.
TEST(BoehmDevices, EnvironmentListsTheDevices) {
  gb::init();
  gcp_test::env_guard env;
  setenv("GCPRESSURE_BACKEND", "host", 1);
  setenv("GCPRESSURE_HOST_CAPACITY", "64MiB", 1);
  setenv("GCPRESSURE_DEVICES", "3, 5", 1);
  gb::device_heap h;
  ASSERT_EQ(h.device_count(), 2u);
  EXPECT_EQ(h.stats(0).device, 3);
  EXPECT_EQ(h.stats(1).device, 5);
  gcp::options o;
  o.device = 2;  // the program asks for one device: the list does not apply
  gb::device_heap one(o);
  EXPECT_EQ(one.device_count(), 1u);
  EXPECT_EQ(one.stats().device, 2);
  setenv("GCPRESSURE_DEVICES", "1,1", 1);
  EXPECT_THROW(gb::device_heap{}, gcp::logic_error);
}
