// tests/test_pool.cpp — pool_resource (reuse, split, coalesce, trim, stream-aware
// reuse) and the host backend's streams; exact accounting under random
// sequences and limiting_adaptor are in test_pool_accounting.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/pool_resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using namespace std::chrono_literals;
using gcp_test::misuse_capture;
using gcp_test::overlap;

namespace {

// Note [A stream the test controls]
// Work queued on a host_stream waits at a gate until the test opens it, so
// "the stream's work has not run yet" holds by construction whatever the
// load (these tests used to sleep 100-300 ms in the work and race it, and
// failed when a loaded machine lost the race). A gate opens when it
// is destroyed too: declared after the streams, the test's gate opens
// before their destructors join their workers, even when an ASSERT returns
// early. A call that must wait for gated work runs on another thread
// (returns_only_after): it must not return while the gate is shut (watched
// for 100 ms: on a loaded machine a pool that does not wait may go unseen
// there, a correct one never fails), then the gate opens and it must return.
class gate {
  struct state {
    std::mutex mu;
    std::condition_variable cv;
    bool open = false;
  };

 public:
  // What the queued work holds (a copy shares the gate; it never opens it).
  class waiter {
   public:
    explicit waiter(std::shared_ptr<state> s) : s_(std::move(s)) {}
    void wait() const {
      std::unique_lock<std::mutex> lk(s_->mu);
      s_->cv.wait(lk, [this] { return s_->open; });
    }

   private:
    std::shared_ptr<state> s_;
  };
  gate() = default;
  gate(const gate&) = delete;
  gate& operator=(const gate&) = delete;
  ~gate() { open(); }
  waiter holder() const { return waiter(s_); }
  void open() const {
    {
      std::lock_guard<std::mutex> lk(s_->mu);
      s_->open = true;
    }
    s_->cv.notify_all();
  }

 private:
  std::shared_ptr<state> s_ = std::make_shared<state>();
};

// Runs call() on another thread; fails if it returns before `g` opens.
template <class F>
auto returns_only_after(const gate& g, F call) {
  auto f = std::async(std::launch::async, call);
  EXPECT_EQ(f.wait_for(100ms), std::future_status::timeout)
      << "returned while the stream's work was still held at the gate";
  g.open();
  return f.get();
}

// Allocates `n` bytes on `s`, queues a "kernel" on `s` (it waits at `g`,
// then write(p), then `done`) and frees the block on `s`, stream-ordered
// behind that kernel. Returns the block.
template <class Write>
void* free_behind_gated_kernel(pool_resource& pool, host_stream& s, std::size_t n, const gate& g,
                               std::atomic<bool>& done, Write write) {
  void* p = pool.allocate(n, s.ref());
  s.enqueue([p, &done, write, w = g.holder()] {
    w.wait();
    write(p);
    done = true;
  });
  pool.deallocate(p, n, s.ref());
  return p;
}

}  // namespace

// --- host backend basics ---------------------------------------------------------

TEST(HostStream, RunsTasksInOrder) {
  host_stream s;
  std::vector<int> order;
  for (int i = 0; i < 200; ++i) s.enqueue([&order, i] { order.push_back(i); });
  s.synchronize();
  ASSERT_EQ(order.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(order[i], i);
}

TEST(HostStream, EventsTrackQueuedWork) {
  host_stream s;
  gate g;  // Note [A stream the test controls]
  std::atomic<bool> ran{false};
  s.enqueue([&ran, w = g.holder()] {
    w.wait();
    ran = true;
  });
  stream_ops& ops = host_stream_ops();
  event_ref e = ops.record(s.ref());
  EXPECT_FALSE(ops.query(e)) << "event completed while earlier work is still held";
  returns_only_after(g, [&] { ops.synchronize(e); });
  EXPECT_TRUE(ran.load()) << "synchronize(event) returned before the work ran";
  EXPECT_TRUE(ops.query(e));
  ops.release(e);

  event_ref d = ops.record(nullptr);  // default stream is synchronous
  EXPECT_TRUE(ops.query(d));
  ops.release(d);
  event_ref z = synchronous_stream_ops().record(nullptr);
  EXPECT_TRUE(synchronous_stream_ops().query(z));
  synchronous_stream_ops().release(z);
}

// Note [Exposed GC time, measured]: the host backend says how long a stream
// has had nothing to run: since its last task ended, 0 while it has work.
TEST(HostStream, IdleSecondsCountFromTheLastTasksEnd) {
  using clk = std::chrono::steady_clock;
  host_stream s;
  stream_ops& ops = host_stream_ops();
  gate g;  // Note [A stream the test controls]
  s.enqueue([w = g.holder()] { w.wait(); });
  event_ref e = ops.record_timed(s.ref());
  const auto released = clk::now();
  returns_only_after(g, [&] { ops.synchronize(e); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double idle = ops.idle_seconds(e);
  const double most = std::chrono::duration<double>(clk::now() - released).count();
  EXPECT_GE(idle, 0.019);  // it slept 20 ms after the task ended
  EXPECT_LE(idle, most);   // the task ended after its gate opened
  gate g2;
  s.enqueue([w = g2.holder()] { w.wait(); });
  EXPECT_EQ(ops.idle_seconds(e), 0.0) << "the stream has work again";
  returns_only_after(g2, [&] { s.synchronize(); });
  ops.release(e);
  event_ref d = ops.record_timed(nullptr);  // the synchronous default stream: nothing to time
  EXPECT_EQ(ops.idle_seconds(d), -1.0);
  ops.release(d);
  EXPECT_EQ(synchronous_stream_ops().idle_seconds(nullptr), -1.0);
}

TEST(HostResource, UsedAndOutstanding) {
  host_resource h(64 * MiB);
  EXPECT_EQ(h.capacity(), 64 * MiB);
  EXPECT_EQ(h.used(), 0u);
  void* a = h.allocate(MiB);
  void* b = h.allocate(3 * MiB);
  EXPECT_GE(h.used(), 4 * MiB);
  EXPECT_EQ(h.outstanding(), 2u);
  EXPECT_EQ(h.memory_info().total, 64 * MiB);
  EXPECT_EQ(h.memory_info().free, 64 * MiB - h.used());
  h.deallocate(a, MiB);
  h.deallocate(b, 3 * MiB);
  EXPECT_EQ(h.used(), 0u);
  EXPECT_EQ(h.outstanding(), 0u);
}

TEST(HostResource, CapacityEnforced) {
  host_resource h(8 * MiB);
  void* a = h.allocate(6 * MiB);
  EXPECT_THROW((void)h.allocate(4 * MiB), gcpressure::out_of_memory);
  EXPECT_EQ(h.outstanding(), 1u);
  h.deallocate(a, 6 * MiB);
  void* b = h.allocate(8 * MiB);  // the whole capacity is usable again
  h.deallocate(b, 8 * MiB);
}

TEST(HostResource, StreamOrderedFreeCountsUntilItRuns) {
  host_resource h(64 * MiB);
  host_stream s;
  constexpr std::size_t n = MiB;
  void* p = h.allocate(n, s.ref());
  const std::size_t used = h.used();
  gate g;  // Note [A stream the test controls]
  std::atomic<bool> wrote{false};
  s.enqueue([&wrote, p, w = g.holder()] {
    w.wait();
    std::memset(p, 0x11, n);  // the "kernel" still uses p after the free was issued
    wrote = true;
  });
  h.deallocate(p, n, s.ref());
  EXPECT_FALSE(wrote.load());
  EXPECT_EQ(h.used(), used) << "stream-ordered free released memory before the stream's work ran";
  g.open();
  s.synchronize();
  EXPECT_TRUE(wrote.load());
  EXPECT_EQ(h.used(), 0u);
  EXPECT_EQ(h.outstanding(), 0u);
}

// --- pool: sizes and basic accounting ---------------------------------------------------

TEST(Pool, RoundedSize) {
  host_resource h(64 * MiB);
  pool_resource pool(h);
  EXPECT_EQ(pool.rounded_size(1), 512u);
  EXPECT_EQ(pool.rounded_size(512), 512u);
  EXPECT_EQ(pool.rounded_size(513), 1024u);
  EXPECT_EQ(pool.rounded_size(1000), 1024u);
  EXPECT_EQ(pool.rounded_size(MiB), MiB);
  for (std::size_t n : {std::size_t{1}, std::size_t{777}, 5 * KiB + 3, MiB + 1, 11 * MiB + 5}) {
    EXPECT_GE(pool.rounded_size(n), n);
    EXPECT_EQ(pool.rounded_size(n) % gcpressure::alignment, 0u);
  }
}

TEST(Pool, CountersForOneBlock) {
  host_resource h(64 * MiB);
  pool_resource pool(h);
  void* p = pool.allocate(1000);
  pool_counters c = pool.counters();
  EXPECT_EQ(c.requested, 1000u);
  EXPECT_EQ(c.allocated, pool.rounded_size(1000));
  EXPECT_EQ(c.live_blocks, 1u);
  EXPECT_EQ(c.segments, 1u);
  EXPECT_EQ(c.reserved, 2 * MiB) << "requests <= 1 MiB come from 2 MiB small segments";
  EXPECT_EQ(c.upstream_allocations, 1u);
  EXPECT_EQ(h.used(), c.reserved);
  EXPECT_TRUE(pool.owns_live(p));
  EXPECT_EQ(pool.live_size(p), 1000u);
  EXPECT_FALSE(pool.owns_live(static_cast<char*>(p) + 256));
  EXPECT_EQ(pool.live_size(static_cast<char*>(p) + 256), 0u);

  pool.deallocate(p, 1000);
  c = pool.counters();
  EXPECT_EQ(c.requested, 0u);
  EXPECT_EQ(c.allocated, 0u);
  EXPECT_EQ(c.live_blocks, 0u);
  EXPECT_EQ(c.reserved, 2 * MiB) << "a freed block stays cached";
  EXPECT_EQ(c.upstream_frees, 0u);
  EXPECT_FALSE(pool.owns_live(p));
  EXPECT_EQ(pool.live_size(p), 0u);
}

TEST(Pool, SegmentSizesFollowOptions) {
  host_resource h(256 * MiB);
  pool_resource pool(h);
  // Ordered so that no request fits into the free remainder of an earlier
  // segment: each one must create a segment of the documented size.
  void* s = pool.allocate(MiB);  // small: 2 MiB segment
  EXPECT_EQ(pool.counters().reserved, 2 * MiB);
  void* l = pool.allocate(11 * MiB);  // large: own segment rounded to 2 MiB -> 12 MiB
  EXPECT_EQ(pool.counters().reserved, 14 * MiB);
  void* l2 = pool.allocate(11 * MiB + 1);  // -> 12 MiB
  EXPECT_EQ(pool.counters().reserved, 26 * MiB);
  void* m = pool.allocate(MiB + 1);  // medium: 20 MiB segment
  EXPECT_EQ(pool.counters().reserved, 46 * MiB);
  EXPECT_EQ(pool.counters().segments, 4u);
  EXPECT_EQ(h.used(), 46 * MiB);
  pool.deallocate(s, MiB);
  pool.deallocate(m, MiB + 1);
  pool.deallocate(l, 11 * MiB);
  pool.deallocate(l2, 11 * MiB + 1);
  EXPECT_EQ(pool.trim(), 46 * MiB);
  EXPECT_EQ(h.used(), 0u);
}

TEST(Pool, CustomOptions) {
  host_resource h(64 * MiB);
  pool_options o;
  o.small_threshold = 64 * KiB;
  o.small_segment = 256 * KiB;
  o.min_block = 1024;
  pool_resource pool(h, o);
  EXPECT_EQ(pool.rounded_size(1), 1024u);
  void* p = pool.allocate(10);
  EXPECT_EQ(pool.counters().reserved, 256 * KiB);
  pool.deallocate(p, 10);
}

// --- pool: reuse, split, coalesce ------------------------------------------------------

TEST(Pool, ReuseSameSizeSameStream) {
  host_resource h(64 * MiB);
  pool_resource pool(h);
  void* p = pool.allocate(4096);
  pool.deallocate(p, 4096);
  const pool_counters before = pool.counters();
  void* q = pool.allocate(4096);
  const pool_counters after = pool.counters();
  EXPECT_EQ(q, p) << "the freed block was not reused";
  EXPECT_EQ(after.upstream_allocations, before.upstream_allocations);
  EXPECT_EQ(after.hits, before.hits + 1);
  EXPECT_EQ(h.used(), 2 * MiB);
  pool.deallocate(q, 4096);

  // The same for a large block with its own segment.
  void* big = pool.allocate(30 * MiB);
  pool.deallocate(big, 30 * MiB);
  const auto ups = pool.counters().upstream_allocations;
  void* big2 = pool.allocate(30 * MiB);
  EXPECT_EQ(big2, big);
  EXPECT_EQ(pool.counters().upstream_allocations, ups);
  pool.deallocate(big2, 30 * MiB);
}

TEST(Pool, SplitTwoSmallFromOneSegment) {
  host_resource h(64 * MiB);
  pool_resource pool(h);
  void* a = pool.allocate(4096);
  void* b = pool.allocate(8192);
  const pool_counters c = pool.counters();
  EXPECT_EQ(c.upstream_allocations, 1u);
  EXPECT_EQ(c.segments, 1u);
  EXPECT_EQ(c.live_blocks, 2u);
  EXPECT_FALSE(overlap(a, 4096, b, 8192));
  const auto d = std::abs(static_cast<char*>(a) - static_cast<char*>(b));
  EXPECT_LT(static_cast<std::size_t>(d), 2 * MiB) << "not from the same 2 MiB segment";
  pool.deallocate(a, 4096);
  pool.deallocate(b, 8192);
}

TEST(Pool, CoalesceAdjacentFreeBlocks) {
  host_resource h(64 * MiB);
  pool_resource pool(h);
  // Fill one 2 MiB small segment with four 512 KiB blocks.
  std::vector<char*> blk;
  for (int i = 0; i < 4; ++i) blk.push_back(static_cast<char*>(pool.allocate(512 * KiB)));
  ASSERT_EQ(pool.counters().upstream_allocations, 1u) << "four 512 KiB blocks should share one segment";
  std::sort(blk.begin(), blk.end());
  for (int i = 1; i < 4; ++i) ASSERT_EQ(blk[i] - blk[i - 1], static_cast<std::ptrdiff_t>(512 * KiB));
  // Free two neighbours; their union (1 MiB) exists only if they coalesce.
  pool.deallocate(blk[1], 512 * KiB);
  pool.deallocate(blk[2], 512 * KiB);
  EXPECT_EQ(pool.counters().free_blocks, 1u) << "adjacent free blocks were not merged";
  void* m = pool.allocate(MiB);
  EXPECT_EQ(m, blk[1]);
  EXPECT_EQ(pool.counters().upstream_allocations, 1u) << "coalesced block was not used";
  EXPECT_EQ(pool.counters().segments, 1u);
  pool.deallocate(m, MiB);
  pool.deallocate(blk[0], 512 * KiB);
  pool.deallocate(blk[3], 512 * KiB);
  // Everything merged back into a single free block.
  EXPECT_EQ(pool.counters().free_blocks, 1u);
  void* whole = pool.allocate(MiB);
  void* whole2 = pool.allocate(MiB);
  EXPECT_EQ(pool.counters().upstream_allocations, 1u);
  pool.deallocate(whole, MiB);
  pool.deallocate(whole2, MiB);
}

// --- pool: returning memory upstream -----------------------------------------------------

TEST(Pool, ReleaseCachedReturnsIdleSegments) {
  host_resource h(128 * MiB);
  pool_resource pool(h);
  void* keep = pool.allocate(4096);   // small segment stays busy
  void* big = pool.allocate(16 * MiB);  // own large segment
  void* med = pool.allocate(5 * MiB);   // medium segment
  const std::size_t reserved = pool.counters().reserved;
  EXPECT_EQ(h.used(), reserved);
  pool.deallocate(big, 16 * MiB);
  pool.deallocate(med, 5 * MiB);
  EXPECT_EQ(h.used(), reserved) << "freeing blocks must not return memory by itself";

  const std::size_t released = pool.release_cached();
  EXPECT_EQ(released, 16 * MiB + 20 * MiB);
  EXPECT_EQ(pool.counters().reserved, 2 * MiB);
  EXPECT_EQ(h.used(), 2 * MiB) << "host memory did not drop";
  EXPECT_EQ(pool.counters().segments, 1u);
  EXPECT_EQ(pool.counters().upstream_frees, 2u);
  EXPECT_TRUE(pool.owns_live(keep));
  EXPECT_EQ(pool.release_cached(), 0u) << "the busy segment must not be released";

  pool.deallocate(keep, 4096);
  EXPECT_EQ(pool.trim(), 2 * MiB);
  EXPECT_EQ(h.used(), 0u);
  EXPECT_EQ(pool.counters().reserved, 0u);
  EXPECT_EQ(pool.counters().segments, 0u);
}

TEST(Pool, DestructorReturnsSegments) {
  host_resource h(64 * MiB);
  {
    pool_resource pool(h);
    void* a = pool.allocate(4096);
    void* b = pool.allocate(12 * MiB);
    pool.deallocate(a, 4096);
    pool.deallocate(b, 12 * MiB);
    EXPECT_GT(h.used(), 0u);
  }
  EXPECT_EQ(h.used(), 0u);
  EXPECT_EQ(h.outstanding(), 0u);
}

TEST(Pool, DestructorReportsLiveBlocks) {
  misuse_capture misuse;
  host_resource h(64 * MiB);
  void* p = nullptr;
  {
    pool_resource pool(h);
    p = pool.allocate(4096);  // never freed: the user's bug
  }
  EXPECT_GE(misuse.count(), 1) << "a pool destroyed with live blocks must report them";
  // The segment under a live block is leaked rather than freed, so that a late
  // free of the block cannot touch freed memory. Hand it back here (the first
  // block of a fresh pool starts its segment) to keep leak checkers quiet.
  ASSERT_EQ(h.outstanding(), 1u);
  EXPECT_EQ(h.used(), 2 * MiB);
  misuse.reset();
  h.deallocate(p, 2 * MiB);
  EXPECT_EQ(misuse.count(), 0) << misuse.last();
  EXPECT_EQ(h.outstanding(), 0u);
}

TEST(Pool, MisuseCounted) {
  host_resource h(64 * MiB);
  pool_resource pool(h);
  misuse_capture misuse;
  void* p = pool.allocate(4096);
  pool.deallocate(p, 4096);
  pool.deallocate(p, 4096);  // double free
  int x = 0;
  pool.deallocate(&x, sizeof x);  // foreign
  EXPECT_EQ(misuse.count(), 2);
  EXPECT_EQ(pool.counters().misuse_errors, 2u);
  EXPECT_EQ(pool.counters().live_blocks, 0u);
  EXPECT_EQ(pool.counters().requested, 0u);
}

TEST(Pool, WrongSizeOnDeallocateReported) {
  host_resource h(64 * MiB);
  pool_resource pool(h);
  misuse_capture misuse;
  void* p = pool.allocate(4096);
  pool.deallocate(p, 8192);
  EXPECT_GE(misuse.count(), 1) << "size mismatch not reported";
  // Whether or not the block was freed, the counters stay consistent.
  const pool_counters c = pool.counters();
  if (pool.owns_live(p)) {
    EXPECT_EQ(c.requested, 4096u);
    pool.deallocate(p, 4096);
  }
  EXPECT_EQ(pool.counters().requested, 0u);
  EXPECT_EQ(pool.counters().live_blocks, 0u);
}

// --- pool: stream-aware reuse ---------------------------------------------------------------

TEST(PoolStreams, NotReusedOnOtherStreamBeforeWorkRan) {
  host_resource h(256 * MiB);
  host_stream A, B;  // streams outlive the pool (see StreamDestroyedWhileItsBlocksAreCached)
  pool_resource pool(h);
  constexpr std::size_t n = 4096;
  gate g;  // Note [A stream the test controls]
  std::atomic<bool> done{false};
  void* p = free_behind_gated_kernel(pool, A, n, g, done, [](void* b) { gcp_test::fill_pattern(b, n, 4242); });
  void* q = pool.allocate(n, B.ref());
  ASSERT_FALSE(done.load());  // held at the gate
  EXPECT_FALSE(overlap(p, n, q, n)) << "block freed on A was handed to B while A's work was still queued";
  // B's own "kernel" writes its block at once.
  std::memset(q, 0xB0, n);
  g.open();
  A.synchronize();
  ASSERT_TRUE(done.load());
  if (!overlap(p, n, q, n)) {
    EXPECT_TRUE(gcp_test::check_pattern(p, n, 4242)) << "A's data was overwritten";
  }
  pool.deallocate(q, n, B.ref());
  pool.trim();
  EXPECT_EQ(pool.counters().live_blocks, 0u);
}

TEST(PoolStreams, ReusedAtOnceOnSameStream) {
  host_resource h(256 * MiB);
  host_stream A;
  pool_resource pool(h);
  constexpr std::size_t n = 4096;
  gate g;  // Note [A stream the test controls]
  std::atomic<bool> done{false};
  void* p = free_behind_gated_kernel(pool, A, n, g, done, [](void* b) { std::memset(b, 0xA1, n); });
  const auto ups = pool.counters().upstream_allocations;
  void* q = pool.allocate(n, A.ref());  // later work on A runs after the kernel: safe
  EXPECT_FALSE(done.load());  // held at the gate: the allocation did not wait for A
  EXPECT_EQ(q, p) << "same-stream reuse must not wait for the stream";
  EXPECT_EQ(pool.counters().upstream_allocations, ups);
  g.open();
  A.synchronize();
  pool.deallocate(q, n, A.ref());
}

TEST(PoolStreams, ReusableOnOtherStreamAfterWaitPending) {
  host_resource h(256 * MiB);
  host_stream A, B;  // streams outlive the pool (see StreamDestroyedWhileItsBlocksAreCached)
  pool_resource pool(h);
  constexpr std::size_t n = 4096;
  gate g;  // Note [A stream the test controls]
  std::atomic<bool> done{false};
  void* p = free_behind_gated_kernel(pool, A, n, g, done, [](void* b) { std::memset(b, 0xA2, n); });
  EXPECT_GE(pool.counters().pending_blocks, 1u) << "a block freed behind queued work should be pending";
  const std::size_t waited = returns_only_after(g, [&] { return pool.wait_pending(); });
  EXPECT_GE(waited, 1u);
  EXPECT_TRUE(done.load()) << "wait_pending returned before A's work ran";
  EXPECT_EQ(pool.counters().pending_blocks, 0u);
  EXPECT_GE(pool.counters().events_waited, 1u);
  const auto ups = pool.counters().upstream_allocations;
  void* q = pool.allocate(n, B.ref());
  EXPECT_EQ(q, p) << "after wait_pending the block must be reusable by another stream";
  EXPECT_EQ(pool.counters().upstream_allocations, ups);
  pool.deallocate(q, n, B.ref());
  B.synchronize();
}

TEST(PoolStreams, WaitPendingCoversFreesAfterAnEarlierEvent) {
  // An event recorded on A (by B's cross-stream lookup) covers only the frees
  // before it. A block freed on A later, behind more slow work, must not become
  // reusable by B when wait_pending() waits for the old event only.
  host_resource h(256 * MiB);
  host_stream A, B;
  pool_resource pool(h);
  constexpr std::size_t n = 64 * KiB;
  void* x = pool.allocate(n, A.ref());
  gate g1, g2;  // Note [A stream the test controls]
  std::atomic<bool> w1{false}, w2{false};
  A.enqueue([&w1, w = g1.holder()] {
    w.wait();
    w1 = true;
  });
  pool.deallocate(x, n, A.ref());
  // B misses in its own lists and looks at A's blocks (records an event on A).
  void* b1 = pool.allocate(4096, B.ref());
  ASSERT_FALSE(w1.load());  // held at g1
  // More work and another free on A after that event.
  void* y = pool.allocate(3 * n, A.ref());
  A.enqueue([&w2, y, w = g2.holder()] {
    w.wait();
    gcp_test::fill_pattern(y, 3 * n, 99);
    w2 = true;
  });
  pool.deallocate(y, 3 * n, A.ref());
  // The old event completes (g1 open, its work done); the work before y's
  // free is still held at g2: wait_pending() must wait for that too.
  g1.open();
  gcp_test::settle([] {}, [&] { return w1.load(); }, 60s);
  ASSERT_TRUE(w1.load());
  returns_only_after(g2, [&] { return pool.wait_pending(); });
  EXPECT_TRUE(w2.load()) << "wait_pending() returned while work queued before a free on A was still running";
  void* q = pool.allocate(3 * n, B.ref());
  const bool w2_at_alloc = w2.load();
  EXPECT_TRUE(!overlap(q, 3 * n, y, 3 * n) || w2_at_alloc)
      << "block freed on A handed to B while A's work on it was still queued";
  A.synchronize();
  pool.deallocate(q, 3 * n, B.ref());
  pool.deallocate(b1, 4096, B.ref());
  pool.trim();
}

TEST(PoolStreams, NoMemoryReturnedBeforePendingWorkRan) {
  // A segment whose only block was freed behind queued work may be released
  // upstream only in stream order: the memory must stay valid until the work
  // ran (h.used() counts a stream-ordered host free until it runs).
  host_resource h(256 * MiB);
  host_stream A;
  pool_resource pool(h);
  void* p = pool.allocate(4096, A.ref());
  gate g;  // Note [A stream the test controls]
  std::atomic<bool> done{false};
  A.enqueue([p, &done, w = g.holder()] {
    w.wait();
    std::memset(p, 0xA3, 4096);  // a use-after-free if the memory went back too early
    done = true;
  });
  pool.deallocate(p, 4096, A.ref());
  const std::size_t released = pool.release_cached();
  EXPECT_TRUE(released == 0 || released == 2 * MiB) << released;
  EXPECT_EQ(h.used(), 2 * MiB) << "memory returned upstream while A's work still uses it";
  // trim() may return at once (the segment already released in stream order
  // above) or wait for A's work (still cached): either way, while the gate
  // is shut the memory stays with the host resource.
  auto trimmed = std::async(std::launch::async, [&] { return pool.trim(); });
  (void)trimmed.wait_for(100ms);
  EXPECT_FALSE(done.load());
  EXPECT_EQ(h.used(), 2 * MiB) << "trim returned memory before A's work ran";
  g.open();
  trimmed.get();
  A.synchronize();
  EXPECT_TRUE(done.load());
  EXPECT_EQ(pool.counters().reserved, 0u) << "trim must leave nothing cached";
  EXPECT_EQ(h.used(), 0u);
}

TEST(PoolStreams, ForgetStreamBeforeDestroyingIt) {
  // Note [Destroying a stream] (pool_resource.hpp): a stream that freed blocks
  // into the pool is forgotten before it is destroyed. forget_stream() waits
  // for its work once and hands its cached blocks to every stream; after that
  // the pool never touches the stream again (ASan build: no use after free).
  host_resource h(256 * MiB);
  host_stream B;
  {
    pool_resource pool(h);
    auto A = std::make_unique<host_stream>();
    void* p = pool.allocate(4096, A->ref());
    void* keep = pool.allocate(8192, A->ref());  // keeps A's segment from being released
    gate g;  // Note [A stream the test controls]
    std::atomic<bool> done{false};
    A->enqueue([p, &done, w = g.holder()] {
      w.wait();
      std::memset(p, 0xA4, 4096);
      done = true;
    });
    pool.deallocate(p, 4096, A->ref());
    returns_only_after(g, [&] { pool.forget_stream(A->ref()); });
    EXPECT_TRUE(done.load()) << "forget_stream returned before the stream's work ran";
    A.reset();  // now gone
    // B reuses the block freed on A at once: no new segment.
    const auto ups = pool.counters().upstream_allocations;
    void* q = pool.allocate(4096, B.ref());
    EXPECT_EQ(q, p) << "forget_stream did not hand A's cached block to other streams";
    EXPECT_EQ(pool.counters().upstream_allocations, ups);
    EXPECT_EQ(pool.counters().pending_blocks, 0u);
    void* q2 = pool.allocate(4096, B.ref());
    pool.deallocate(q, 4096, B.ref());
    pool.deallocate(q2, 4096, B.ref());
    pool.deallocate(keep, 8192, B.ref());  // allocated on the forgotten stream, freed on B
    pool.trim();
    B.synchronize();
    EXPECT_EQ(pool.counters().live_blocks, 0u);
    EXPECT_EQ(pool.counters().reserved, 0u);
    pool.forget_stream(B.ref());  // forgetting twice / a stream with nothing cached is harmless
    pool.forget_stream(B.ref());
    void* r = pool.allocate(4096, B.ref());
    pool.deallocate(r, 4096, B.ref());
  }  // pool destructor: must not touch A
  B.synchronize();
  EXPECT_EQ(h.used(), 0u);
  EXPECT_EQ(h.outstanding(), 0u);
}

TEST(PoolStreams, ForgetUnknownStreamIsHarmless) {
  host_resource h(64 * MiB);
  host_stream A;
  pool_resource pool(h);
  pool.forget_stream(A.ref());
  pool.forget_stream(nullptr);
  void* p = pool.allocate(4096, A.ref());
  pool.deallocate(p, 4096, A.ref());
  pool.forget_stream(A.ref());
  EXPECT_EQ(pool.counters().live_blocks, 0u);
  EXPECT_EQ(pool.trim(), 2 * MiB);
}
