// tests/test_threads.cpp — concurrency: many threads allocating, freeing,
// queueing deferred frees and draining, with exact accounting at the end.
// Every test body runs under a watchdog so that a deadlock fails the test
// instead of hanging ctest.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/host_resource.hpp"
#include "gcpressure/pool_resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using gcp_test::misuse_capture;
using gcp_test::run_with_watchdog;

namespace {

constexpr int kThreads = 8;
constexpr auto kWatchdog = std::chrono::seconds(120);

struct tblock {
  void* p;
  std::size_t n;
  std::uint64_t tag;
};

std::size_t thread_size(std::mt19937& rng) {
  const unsigned k = rng() % 100;
  if (k < 75) return 1 + rng() % (32 * KiB);
  if (k < 95) return 32 * KiB + rng() % MiB;
  return MiB + rng() % (4 * MiB);
}

allocator_options opts(std::size_t capacity, std::size_t hard = 0) {
  allocator_options o;
  o.backend = backend_kind::host;
  o.host_capacity = capacity;
  if (hard) o.hard_limit.bytes = hard;
  return o;
}

}  // namespace

TEST(Threads, AllocatorConcurrentWithDeferredFrees) {
  misuse_capture misuse;
  run_with_watchdog(kWatchdog, "8 threads allocate/free/defer/drain", [&] {
    device_allocator a(opts(std::size_t{4} << 30));
    std::atomic<std::uint64_t> total_requested{0}, allocs{0}, deferred_pushes{0};
    std::atomic<int> tag_errors{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      ts.emplace_back([&, t] {
        std::mt19937 rng(1000u + static_cast<unsigned>(t));
        std::vector<tblock> mine;
        std::uint64_t seq = 0;
        for (int i = 0; i < 2500; ++i) {
          if (mine.size() < 24 && (mine.empty() || rng() % 100 < 55)) {
            const std::size_t n = thread_size(rng);
            void* p = a.allocate(n);
            const std::uint64_t tag = (static_cast<std::uint64_t>(t) << 48) | ++seq;
            gcp_test::put_tags(p, n, tag);
            mine.push_back({p, n, tag});
            total_requested += n;
            ++allocs;
          } else {
            const std::size_t k = rng() % mine.size();
            const tblock b = mine[k];
            mine[k] = mine.back();
            mine.pop_back();
            if (!gcp_test::tags_ok(b.p, b.n, b.tag)) ++tag_errors;
            const unsigned how = rng() % 10;
            if (how < 6) {
              a.free(b.p, b.n);
            } else if (how < 9) {
              // As a finalizer would: queue it; some other thread drains it.
              if (a.deferred().push(b.p, b.n, nullptr))
                ++deferred_pushes;
              else
                a.free(b.p, b.n);
            } else {
              a.deallocate(b.p, b.n);
            }
          }
          if (i % 97 == 0) a.drain();
          if (i % 613 == 0) a.release_cached();
        }
        for (const tblock& b : mine) {
          if (!gcp_test::tags_ok(b.p, b.n, b.tag)) ++tag_errors;
          a.free(b.p, b.n);
        }
      });
    }
    for (auto& th : ts) th.join();
    a.drain();

    EXPECT_EQ(tag_errors.load(), 0) << "blocks handed to two threads at once (overlap)";
    EXPECT_GT(deferred_pushes.load(), 0u);
    const allocator_stats s = a.stats();
    EXPECT_EQ(s.requested.current, 0);
    EXPECT_EQ(s.allocated.current, 0);
    EXPECT_EQ(s.active_blocks.current, 0);
    EXPECT_EQ(s.requested.total, static_cast<std::int64_t>(total_requested.load()));
    EXPECT_EQ(s.allocations, allocs.load());
    EXPECT_EQ(s.frees, allocs.load());
    EXPECT_EQ(s.deferred_pending, 0u);
    EXPECT_EQ(s.misuse_errors, 0u);
    EXPECT_EQ(s.ooms, 0u);
    EXPECT_LE(s.requested.peak, s.requested.total);
    EXPECT_GE(s.reserved.peak, s.allocated.peak);
    EXPECT_EQ(a.deferred().pushed(), deferred_pushes.load());
    a.trim();
    EXPECT_EQ(a.reserved_bytes(), 0u);
  });
  EXPECT_EQ(misuse.count(), 0) << misuse.last();
}

TEST(Threads, DeferredQueueProducersAndDrainers) {
  // Pure queue test: 6 producers push, 2 drainers drain concurrently; every
  // entry is drained exactly once.
  run_with_watchdog(kWatchdog, "deferred_free_queue producers/drainers", [] {
    deferred_free_queue q;
    constexpr int producers = 6, per = 20000;
    std::vector<std::atomic<int>> seen(producers * per);
    std::atomic<int> producers_done{0};
    std::atomic<std::size_t> drained{0};
    auto sink = [&](void* p, std::size_t bytes, stream_ref) {
      const auto id = reinterpret_cast<std::uintptr_t>(p) - 1;
      EXPECT_EQ(bytes, id % 1000 + 1);
      seen[id].fetch_add(1);
    };
    std::vector<std::thread> ts;
    for (int t = 0; t < producers; ++t)
      ts.emplace_back([&, t] {
        for (int i = 0; i < per; ++i) {
          const std::uintptr_t id = static_cast<std::uintptr_t>(t) * per + i;
          ASSERT_TRUE(q.push(reinterpret_cast<void*>(id + 1), id % 1000 + 1, nullptr));
        }
        ++producers_done;
      });
    for (int d = 0; d < 2; ++d)
      ts.emplace_back([&] {
        while (producers_done.load() < producers) drained += q.drain(sink);
        drained += q.drain(sink);
      });
    for (auto& th : ts) th.join();
    drained += q.drain(sink);
    EXPECT_EQ(drained.load(), static_cast<std::size_t>(producers) * per);
    EXPECT_EQ(q.pending(), 0u);
    EXPECT_EQ(q.pending_bytes(), 0u);
    EXPECT_EQ(q.pushed(), static_cast<std::uint64_t>(producers) * per);
    int bad = 0;
    for (auto& s : seen) bad += s.load() != 1;
    EXPECT_EQ(bad, 0) << "entries drained zero or several times";
  });
}

TEST(Threads, PoolConcurrentOnOwnStreams) {
  misuse_capture misuse;
  run_with_watchdog(kWatchdog, "8 threads on a pool, one host_stream each", [&] {
    host_resource h(std::size_t{4} << 30);
    std::vector<std::unique_ptr<host_stream>> streams;  // outlive the pool
    for (int t = 0; t < kThreads; ++t) streams.push_back(std::make_unique<host_stream>());
    pool_resource pool(h);
    std::atomic<int> tag_errors{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        host_stream& s = *streams[t];
        std::mt19937 rng(77u + static_cast<unsigned>(t));
        std::vector<tblock> mine;
        std::uint64_t seq = 0;
        for (int i = 0; i < 2000; ++i) {
          if (mine.size() < 16 && (mine.empty() || rng() % 2)) {
            const std::size_t n = thread_size(rng);
            void* p = pool.allocate(n, s.ref());
            const std::uint64_t tag = (static_cast<std::uint64_t>(t + 1) << 48) | ++seq;
            // The stream's "kernel" writes the tags.
            s.enqueue([p, n, tag] { gcp_test::put_tags(p, n, tag); });
            mine.push_back({p, n, tag});
          } else {
            const std::size_t k = rng() % mine.size();
            const tblock b = mine[k];
            mine[k] = mine.back();
            mine.pop_back();
            s.enqueue([b, &tag_errors] {
              if (!gcp_test::tags_ok(b.p, b.n, b.tag)) ++tag_errors;
            });
            pool.deallocate(b.p, b.n, s.ref());
          }
          if (i % 500 == 250) pool.trim();
        }
        for (const tblock& b : mine) pool.deallocate(b.p, b.n, s.ref());
        s.synchronize();
        pool.wait_pending();
      });
    for (auto& th : ts) th.join();
    EXPECT_EQ(tag_errors.load(), 0) << "a block was reused by another stream while still in use";
    pool_counters c = pool.counters();
    EXPECT_EQ(c.requested, 0u);
    EXPECT_EQ(c.allocated, 0u);
    EXPECT_EQ(c.live_blocks, 0u);
    pool.trim();
    for (auto& s : streams) s->synchronize();  // the upstream frees are stream-ordered
    c = pool.counters();
    EXPECT_EQ(c.reserved, 0u);
    EXPECT_EQ(h.used(), 0u);
  });
  EXPECT_EQ(misuse.count(), 0) << misuse.last();
}

TEST(Threads, ConcurrentOutOfMemoryAndLadder) {
  // A hard limit well below what the threads want: allocations fail, the
  // reclaim ladder runs on several threads at once (trim, wait_streams...),
  // nothing deadlocks and the accounting is exact at the end. The limit is
  // below what one thread alone holds at its peak (8 blocks of 1-4 MiB), so
  // it is hit however the threads are scheduled: at 48 MiB only overlapping
  // threads reached it, and under a CPU hog (threads run one after another)
  // 2 rounds of 20 hit nothing.
  misuse_capture misuse;
  run_with_watchdog(kWatchdog, "concurrent out_of_memory + ladder", [&] {
    device_allocator a(opts(std::size_t{1} << 30, 16 * MiB));
    std::atomic<std::uint64_t> caught{0}, allocs{0};
    std::atomic<int> wrong_exception{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&, t] {
        std::mt19937 rng(555u + static_cast<unsigned>(t));
        std::vector<tblock> mine;
        for (int i = 0; i < 600; ++i) {
          if (mine.size() < 8 && (mine.empty() || rng() % 100 < 65)) {
            const std::size_t n = 1 * MiB + rng() % (3 * MiB);
            try {
              void* p = a.allocate(n);
              gcp_test::put_tags(p, n, static_cast<std::uint64_t>(i));
              mine.push_back({p, n, static_cast<std::uint64_t>(i)});
              ++allocs;
            } catch (const gcpressure::out_of_memory&) {
              ++caught;
            } catch (...) {
              ++wrong_exception;
            }
          } else {
            const std::size_t k = rng() % mine.size();
            const tblock b = mine[k];
            mine[k] = mine.back();
            mine.pop_back();
            if (rng() % 3 == 0)
              a.deferred().push(b.p, b.n, nullptr);
            else
              a.free(b.p, b.n);
          }
          EXPECT_LE(a.reserved_bytes(), 16 * MiB) << "hard limit exceeded";
        }
        for (const tblock& b : mine) a.free(b.p, b.n);
      });
    for (auto& th : ts) th.join();
    a.drain();
    EXPECT_EQ(wrong_exception.load(), 0);
    EXPECT_GT(caught.load(), 0u) << "test precondition: the limit should have been hit";
    const allocator_stats s = a.stats();
    EXPECT_EQ(s.ooms, caught.load());
    EXPECT_EQ(s.allocations, allocs.load());
    EXPECT_EQ(s.frees, allocs.load());
    EXPECT_EQ(s.requested.current, 0);
    EXPECT_EQ(s.active_blocks.current, 0);
    EXPECT_LE(static_cast<std::size_t>(s.reserved.peak), 16 * MiB);
    EXPECT_GE(s.ladder[static_cast<int>(ladder_step::release_cache)], 1u);
    a.trim();
    EXPECT_EQ(a.reserved_bytes(), 0u);
  });
  EXPECT_EQ(misuse.count(), 0) << misuse.last();
}

TEST(Threads, LimitChangedWhileAllocating) {
  run_with_watchdog(kWatchdog, "set_hard_limit during allocation", [] {
    device_allocator a(opts(std::size_t{1} << 30, 256 * MiB));
    std::atomic<bool> stop{false};
    std::thread changer([&] {
      std::mt19937 rng(3);
      while (!stop.load()) {
        a.set_hard_limit((32 + rng() % 224) * MiB);
        a.set_soft_limit((16 + rng() % 16) * MiB);
        std::this_thread::yield();
      }
    });
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&, t] {
        std::mt19937 rng(t);
        for (int i = 0; i < 800; ++i) {
          const std::size_t n = 1 + rng() % (2 * MiB);
          try {
            void* p = a.allocate(n);
            a.free(p, n);
          } catch (const gcpressure::out_of_memory&) {
          }
        }
      });
    for (auto& th : ts) th.join();
    stop = true;
    changer.join();
    EXPECT_EQ(a.live_bytes(), 0u);
    EXPECT_EQ(a.stats().active_blocks.current, 0);
  });
}
