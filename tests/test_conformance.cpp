// tests/test_conformance.cpp — one typed suite run against every resource stack.
//
// Each stack is the device_resource contract of resource.hpp: aligned, writable,
// distinct blocks; 0 bytes -> logic_error; impossible sizes -> out_of_memory or
// logic_error (never a crash, never a bogus pointer); misuse on deallocate ->
// reported to the misuse handler, never a crash, resource still usable.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/pool_resource.hpp"
#include "gcpressure/resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using gcp_test::expect_rejected;
using gcp_test::misuse_capture;

namespace {

constexpr std::size_t kHostCapacity = 512 * MiB;
constexpr std::size_t kLimit = 256 * MiB;

struct host_stack {
  static constexpr const char* label = "host";
  static constexpr std::size_t usable = kHostCapacity;
  host_resource host{kHostCapacity};
  host_stream stream;  // outlives every resource above the host
  device_resource& top() { return host; }
};

struct pool_stack {
  static constexpr const char* label = "pool(host)";
  static constexpr std::size_t usable = kHostCapacity;
  host_resource host{kHostCapacity};
  host_stream stream;
  pool_resource pool{host};
  device_resource& top() { return pool; }
};

struct limit_stack {
  static constexpr const char* label = "limiting(host)";
  static constexpr std::size_t usable = kLimit;
  host_resource host{kHostCapacity};
  host_stream stream;
  limiting_adaptor limit{host, kLimit};
  device_resource& top() { return limit; }
};

struct pool_limit_stack {
  static constexpr const char* label = "pool(limiting(host))";
  static constexpr std::size_t usable = kLimit;
  host_resource host{kHostCapacity};
  host_stream stream;
  limiting_adaptor limit{host, kLimit};
  pool_resource pool{limit};
  device_resource& top() { return pool; }
};

template <class Stack>
class ResourceConformance : public ::testing::Test {
 protected:
  Stack stack;
  device_resource& r() { return stack.top(); }
};

struct stack_names {
  template <class T>
  static std::string GetName(int) {
    std::string s = T::label;
    for (auto& c : s)
      if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
    return s;
  }
};

using all_stacks = ::testing::Types<host_stack, pool_stack, limit_stack, pool_limit_stack>;
TYPED_TEST_SUITE(ResourceConformance, all_stacks, stack_names);

}  // namespace

TYPED_TEST(ResourceConformance, AlignedAndWritable) {
  const std::size_t sizes[] = {1, 7, 255, 256, 257, 511, 512, 513, 4096, 100000, MiB - 1, MiB, MiB + 1,
                               3 * MiB, 10 * MiB, 10 * MiB + 1, 21 * MiB};
  std::uint32_t seed = 1;
  for (std::size_t n : sizes) {
    SCOPED_TRACE("bytes=" + std::to_string(n));
    void* p = this->r().allocate(n);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % gcpressure::alignment, 0u);
    gcp_test::fill_pattern(p, n, seed);
    EXPECT_TRUE(gcp_test::check_pattern(p, n, seed));
    this->r().deallocate(p, n);
    ++seed;
  }
}

TYPED_TEST(ResourceConformance, DistinctNonOverlappingBlocks) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<std::size_t> small(1, 64 * 1024);
  struct blk {
    char* p;
    std::size_t n;
  };
  std::vector<blk> blocks;
  for (int i = 0; i < 300; ++i) {
    std::size_t n = (i % 50 == 49) ? 3 * MiB + small(rng) : small(rng);
    void* p = this->r().allocate(n);
    ASSERT_NE(p, nullptr);
    blocks.push_back({static_cast<char*>(p), n});
    gcp_test::fill_pattern(p, n, static_cast<std::uint32_t>(i));
  }
  // Every block still holds its own pattern: no other block was written over it.
  for (std::size_t i = 0; i < blocks.size(); ++i)
    EXPECT_TRUE(gcp_test::check_pattern(blocks[i].p, blocks[i].n, static_cast<std::uint32_t>(i))) << "block " << i;
  auto sorted = blocks;
  std::sort(sorted.begin(), sorted.end(), [](const blk& a, const blk& b) { return a.p < b.p; });
  for (std::size_t i = 1; i < sorted.size(); ++i)
    EXPECT_LE(sorted[i - 1].p + sorted[i - 1].n, sorted[i].p) << "blocks overlap";
  for (auto& b : blocks) this->r().deallocate(b.p, b.n);
}

TYPED_TEST(ResourceConformance, ZeroSizeIsLogicError) {
  EXPECT_THROW((void)this->r().allocate(0), gcpressure::logic_error);
  // Still usable afterwards.
  void* p = this->r().allocate(64);
  ASSERT_NE(p, nullptr);
  this->r().deallocate(p, 64);
}

TYPED_TEST(ResourceConformance, AbsurdSizesRejected) {
  const std::size_t absurd[] = {std::numeric_limits<std::size_t>::max(),
                                std::numeric_limits<std::size_t>::max() - 100,
                                std::numeric_limits<std::size_t>::max() / 2,
                                std::size_t{1} << 50,
                                gcpressure::max_request_bytes + 1};
  for (std::size_t n : absurd)
    expect_rejected([&] { return this->r().allocate(n); }, std::string(TypeParam::label) + " bytes=" + std::to_string(n));
  // A rejection must leave the resource intact.
  void* p = this->r().allocate(MiB);
  ASSERT_NE(p, nullptr);
  std::memset(p, 0x5a, MiB);
  this->r().deallocate(p, MiB);
}

TYPED_TEST(ResourceConformance, BeyondCapacityIsOutOfMemory) {
  // Legal sizes (<= max_request_bytes) that the stack cannot provide: a real
  // out-of-memory, so it must be out_of_memory (a std::bad_alloc).
  const std::size_t too_big[] = {TypeParam::usable + 1, TypeParam::usable + 64 * MiB, std::size_t{1} << 40,
                                 gcpressure::max_request_bytes};
  for (std::size_t n : too_big) {
    SCOPED_TRACE("bytes=" + std::to_string(n));
    EXPECT_THROW((void)this->r().allocate(n), gcpressure::out_of_memory);
    EXPECT_THROW((void)this->r().allocate(n), std::bad_alloc);
  }
  void* p = this->r().allocate(4096);
  ASSERT_NE(p, nullptr);
  this->r().deallocate(p, 4096);
}

TYPED_TEST(ResourceConformance, ForeignPointerReported) {
  misuse_capture misuse;
  alignas(256) static char foreign[4096];
  this->r().deallocate(foreign, sizeof foreign);
  EXPECT_GE(misuse.count(), 1) << "deallocate of a foreign pointer was not reported";
  EXPECT_FALSE(misuse.last().empty());

  // An interior pointer of a live block is foreign too.
  misuse.reset();
  void* p = this->r().allocate(8192);
  this->r().deallocate(static_cast<char*>(p) + 256, 4096);
  EXPECT_GE(misuse.count(), 1) << "deallocate of an interior pointer was not reported";
  this->r().deallocate(p, 8192);

  // The resource keeps working and its blocks are intact.
  misuse.reset();
  std::vector<void*> ps;
  for (int i = 0; i < 8; ++i) ps.push_back(this->r().allocate(MiB));
  for (void* q : ps) this->r().deallocate(q, MiB);
  EXPECT_EQ(misuse.count(), 0) << "correct use reported as misuse: " << misuse.last();
}

TYPED_TEST(ResourceConformance, DoubleFreeReported) {
  misuse_capture misuse;
  void* p = this->r().allocate(1024);
  this->r().deallocate(p, 1024);
  EXPECT_EQ(misuse.count(), 0) << misuse.last();
  this->r().deallocate(p, 1024);
  EXPECT_GE(misuse.count(), 1) << "double free was not reported";

  // Still usable, and the double free did not corrupt accounting enough to
  // refuse memory that is available (the limit stacks count bytes handed out).
  misuse.reset();
  void* big = nullptr;
  ASSERT_NO_THROW(big = this->r().allocate(TypeParam::usable / 2));
  this->r().deallocate(big, TypeParam::usable / 2);
  void* q = this->r().allocate(1024);
  ASSERT_NE(q, nullptr);
  this->r().deallocate(q, 1024);
  EXPECT_EQ(misuse.count(), 0) << misuse.last();
}

TYPED_TEST(ResourceConformance, MemoryInfoAndName) {
  const device_memory_info mi = this->r().memory_info();
  EXPECT_EQ(mi.total, kHostCapacity);
  EXPECT_LE(mi.free, mi.total);
  ASSERT_NE(this->r().name(), nullptr);
  EXPECT_STRNE(this->r().name(), "");
}

TYPED_TEST(ResourceConformance, StreamOrderedUseOnHostStream) {
  // Allocate on a host_stream, let queued work use the block, free it on the
  // same stream while the work may still be queued: no crash, data correct.
  host_stream& s = this->stack.stream;  // declared before the resources: outlives them
  constexpr std::size_t n = 64 * 1024;
  std::atomic<bool> ok{false};
  void* p = this->r().allocate(n, s.ref());
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(p) % gcpressure::alignment, 0u);
  s.enqueue([p, &ok] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gcp_test::fill_pattern(p, n, 77);
    ok = gcp_test::check_pattern(p, n, 77);
  });
  this->r().deallocate(p, n, s.ref());
  s.synchronize();
  EXPECT_TRUE(ok.load());
}
