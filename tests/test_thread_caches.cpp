// Per-thread caches in front of the pool (Note [Thread caches] in
// core/src/pool_cache.cpp): exact accounting after every drain and trim
// under 8 racing threads with upstream faults, cross-stream reuse only
// after the freeing stream's work, a thread's cache returned at its exit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <future>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/pool_resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;

namespace {

// Fails every `period`-th upstream allocation (a segment): out_of_memory.
class faulty_resource final : public device_resource {
 public:
  explicit faulty_resource(unsigned period) : period_(period) {}
  std::uint64_t failed() const { return failed_.load(); }

 private:
  void* do_allocate(std::size_t bytes, stream_ref s) override {
    if (++calls_ % period_ == 0) {
      failed_.fetch_add(1);
      throw out_of_memory("faulty_resource: injected failure");
    }
    return host_.allocate(bytes, s);
  }
  void do_deallocate(void* p, std::size_t bytes, stream_ref s) noexcept override { host_.deallocate(p, bytes, s); }
  device_memory_info do_memory_info() const override { return host_.memory_info(); }
  stream_ops& do_streams() noexcept override { return host_.streams(); }
  const char* do_name() const noexcept override { return "faulty host"; }
  host_resource host_{std::size_t{1} << 30};
  unsigned period_;
  std::atomic<std::uint64_t> calls_{0}, failed_{0};
};

struct live_block {
  void* p;
  std::size_t bytes;
};

}  // namespace

TEST(ThreadCaches, OneThreadsHitsAreExactAndNeedNoSegment) {
  host_resource h(256 * MiB);
  pool_resource pool(h);
  host_stream s;
  pool.deallocate(pool.allocate(4000, s.ref()), 4000, s.ref());
  const auto before = pool.counters();
  for (int i = 0; i < 1000; ++i) pool.deallocate(pool.allocate(4000, s.ref()), 4000, s.ref());
  const auto c = pool.counters();
  EXPECT_EQ(c.upstream_allocations, before.upstream_allocations);
  EXPECT_EQ(c.hits, before.hits + 1000);
  EXPECT_EQ(c.requested_stat.current, 0);
  EXPECT_EQ(c.requested_stat.peak, 4000) << "one thread: the peak is exact";
  EXPECT_EQ(c.requested_stat.total, 1001 * 4000);
  EXPECT_EQ(c.blocks_stat.peak, 1);
  EXPECT_GT(c.local_cached, 0u) << "the freed block stays in this thread's cache";
  EXPECT_EQ(pool.release_cached(), 2 * MiB) << "release_cached must flush the cache first";
  EXPECT_EQ(pool.counters().local_cached, 0u);
  EXPECT_EQ(pool.counters().reserved, 0u);
}

TEST(ThreadCaches, ABlockFreedOnAStreamGoesToAnotherOnlyAfterItsWork) {
  host_resource h(256 * MiB);
  pool_resource pool(h);
  host_stream A, B;
  std::promise<void> go;
  std::shared_future<void> open = go.get_future().share();
  void* p = pool.allocate(4096, A.ref());
  A.enqueue([open] { open.wait(); });  // A's work is still running when p is freed
  pool.deallocate(p, 4096, A.ref());
  std::vector<void*> on_b;
  for (int i = 0; i < 200; ++i) on_b.push_back(pool.allocate(4096, B.ref()));  // this thread's cache holds p (on A)
  std::thread other([&] {  // another thread, another stream
    for (int i = 0; i < 200; ++i) on_b.push_back(pool.allocate(4096, B.ref()));
  });
  other.join();
  pool.release_cached();  // every cache flushed into the shared lists: p is there, pending
  for (int i = 0; i < 200; ++i) on_b.push_back(pool.allocate(4096, B.ref()));
  for (void* q : on_b) EXPECT_NE(q, p) << "p reused on B while A's work before its free was queued";
  go.set_value();
  A.synchronize();
  pool.wait_pending();
  EXPECT_EQ(pool.counters().pending_blocks, 0u) << "after A's work and wait_pending, p is safe for every stream";
  for (void* q : on_b) pool.deallocate(q, 4096, B.ref());
  pool.forget_stream(A.ref());
  pool.forget_stream(B.ref());
  EXPECT_EQ(pool.counters().requested_stat.current, 0);
}

TEST(ThreadCaches, AThreadsCacheReturnsAtItsExit) {
  host_resource h(256 * MiB);
  pool_resource pool(h);
  host_stream s;
  void* kept = nullptr;
  std::thread t([&] {
    for (int i = 0; i < 100; ++i) pool.deallocate(pool.allocate(8192, s.ref()), 8192, s.ref());
    kept = pool.allocate(8192, s.ref());
  });
  t.join();
  auto c = pool.counters();
  EXPECT_EQ(c.local_cached, 0u) << "the ended thread's cached blocks must be back in the shared lists";
  EXPECT_EQ(c.requested_stat.current, 8192);
  EXPECT_EQ(c.allocations, 101u);
  EXPECT_EQ(pool.live_size(kept), 8192u) << "its live block is still found";
  pool.deallocate(kept, 8192, s.ref());
  s.synchronize();
  pool.trim();
  c = pool.counters();
  EXPECT_EQ(c.requested_stat.current, 0);
  EXPECT_EQ(c.reserved, 0u);
  EXPECT_EQ(c.frees, 101u);
}

// Note [Frees the caches never served] (pool_cache.cpp): a free naming a size
// no cache serves looks in the shared table first; a block a cache holds,
// freed with such a size, a shared block freed with a small size, a double
// free and bytes 0 still find (or miss) the right table.
TEST(ThreadCaches, FreesNamingTheWrongSideFindTheRightTable) {
  gcp_test::misuse_capture misuse;
  host_resource h(256 * MiB);
  host_stream s;  // outlives the pool, which returns its segments on it
  pool_resource pool(h);
  void* small = pool.allocate(4096, s.ref());  // from this thread's cache
  void* large = pool.allocate(MiB, s.ref());   // from the shared pool
  EXPECT_EQ(pool.free_if_live(small, MiB, s.ref()), 4096u) << "a checked free with the wrong size frees nothing";
  EXPECT_EQ(pool.free_if_live(large, 4096, s.ref()), MiB);
  EXPECT_EQ(pool.counters().requested_stat.current, static_cast<std::int64_t>(MiB + 4096));
  EXPECT_EQ(pool.free_if_live(large, MiB, s.ref()), MiB);
  EXPECT_EQ(pool.free_if_live(large, MiB, s.ref()), 0u) << "a double free misses both tables";
  EXPECT_EQ(pool.deallocate_sized(small, 2 * MiB, s.ref()), 4096u) << "an unchecked free frees it anyway";
  EXPECT_EQ(misuse.count(), 1);
  void* again = pool.allocate(MiB, s.ref());
  EXPECT_EQ(pool.deallocate_sized(again, 0, s.ref()), MiB) << "bytes 0: the full search";
  EXPECT_EQ(misuse.count(), 1);
  const auto c = pool.counters();
  EXPECT_EQ(c.requested_stat.current, 0);
  EXPECT_EQ(c.blocks_stat.current, 0);
  EXPECT_EQ(c.allocations, 3u);
  EXPECT_EQ(c.frees, 3u);
}

// 8 threads, a stream each, mixed sizes (cached and shared), frees of each
// other's blocks, an upstream that fails every 7th segment, and rounds in
// which the main thread checks the totals after a drain and a trim while
// the caches of the threads that ended and of those still running hold
// blocks. Every round starts fresh threads (caches retire and are made).
TEST(ThreadCaches, EightRacingThreadsWithFaultsKeepExactAccounting) {
  constexpr int threads = 8, rounds = 3, steps = 3000;
  faulty_resource up(7);
  const allocator_options o = gcp_test::host_opts(64 * MiB);
  device_allocator a(up, o);
  std::vector<std::unique_ptr<host_stream>> streams;
  for (int t = 0; t < threads; ++t) streams.push_back(std::make_unique<host_stream>());
  std::mutex shared_mu;
  std::vector<live_block> handed;  // blocks one thread leaves for another to free
  std::atomic<std::uint64_t> ok_allocs{0}, ok_bytes{0}, ooms{0};
  std::uint64_t expect_allocs = 0, expect_bytes = 0;
  for (int r = 0; r < rounds; ++r) {
    std::vector<std::thread> ts;
    std::vector<std::vector<live_block>> kept(threads);
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(r * 100 + t));
        const stream_ref s = streams[static_cast<std::size_t>(t)]->ref();
        std::vector<live_block> mine;
        for (int i = 0; i < steps; ++i) {
          const std::size_t bytes = rng() % 8 == 0 ? 200 * KiB + rng() % (300 * KiB) : 1 + rng() % (64 * KiB);
          try {
            mine.push_back({a.allocate(bytes, s), bytes});
            ok_allocs.fetch_add(1);
            ok_bytes.fetch_add(bytes);
          } catch (const out_of_memory&) {
            ooms.fetch_add(1);
          }
          if (mine.size() > 16 || (!mine.empty() && rng() % 3 == 0)) {
            const live_block b = mine[rng() % mine.size()];
            mine.erase(std::find_if(mine.begin(), mine.end(), [&](const live_block& x) { return x.p == b.p; }));
            if (rng() % 4 == 0) {
              std::lock_guard<std::mutex> lk(shared_mu);
              handed.push_back(b);
            } else {
              a.free(b.p, b.bytes, s);
            }
          }
          if (rng() % 5 == 0) {
            live_block b{nullptr, 0};
            {
              std::lock_guard<std::mutex> lk(shared_mu);
              if (!handed.empty()) b = handed.back(), handed.pop_back();
            }
            if (b.p) a.free(b.p, b.bytes, s);  // a block of another thread, on this stream
          }
        }
        kept[static_cast<std::size_t>(t)] = mine;
      });
    for (auto& t : ts) t.join();
    expect_allocs = ok_allocs.load();
    expect_bytes = ok_bytes.load();
    std::size_t live = 0, blocks = 0;
    for (const auto& k : kept)
      for (const auto& b : k) live += b.bytes, ++blocks;
    for (const auto& b : handed) live += b.bytes, ++blocks;
    a.drain();
    auto s = a.stats();
    EXPECT_EQ(static_cast<std::size_t>(s.requested.current), live) << "round " << r << " after drain";
    EXPECT_EQ(static_cast<std::size_t>(s.active_blocks.current), blocks) << "round " << r;
    EXPECT_EQ(static_cast<std::uint64_t>(s.requested.total), expect_bytes) << "round " << r;
    EXPECT_EQ(s.allocations, expect_allocs) << "round " << r;
    EXPECT_GE(s.requested.peak, s.requested.current);
    EXPECT_LE(static_cast<std::size_t>(s.reserved.peak), 64 * MiB) << "over the hard limit";
    a.trim();
    s = a.stats();
    EXPECT_EQ(static_cast<std::size_t>(s.requested.current), live) << "round " << r << " after trim";
    EXPECT_EQ(static_cast<std::uint64_t>(s.requested.total), expect_bytes);
    // Free everything still live (from the main thread: blocks of ended threads).
    for (int t = 0; t < threads; ++t)
      for (const auto& b : kept[static_cast<std::size_t>(t)]) a.free(b.p, b.bytes, streams[static_cast<std::size_t>(t)]->ref());
    for (const auto& b : handed) a.free(b.p, b.bytes, nullptr);
    handed.clear();
  }
  for (auto& st : streams) st->synchronize();
  for (auto& st : streams) a.forget_stream(st->ref());
  a.trim();
  const auto s = a.stats();
  EXPECT_EQ(s.requested.current, 0);
  EXPECT_EQ(s.active_blocks.current, 0);
  EXPECT_EQ(s.reserved.current, 0) << "trim must see every cached byte";
  EXPECT_EQ(s.frees, s.allocations);
  EXPECT_GT(up.failed(), 0u) << "the faults must have been injected";
  EXPECT_GT(ooms.load(), 0u);
  std::printf("thread caches: %llu allocations, %llu OOMs (injected %llu)\n",
              static_cast<unsigned long long>(s.allocations), static_cast<unsigned long long>(ooms.load()),
              static_cast<unsigned long long>(up.failed()));
}
