// Pool waits run outside the pool lock (Note [Waiting outside the lock] in
// core/src/pool_streams.cpp): a thread blocked in wait_pending() or
// forget_stream() on a slow stream does not stall another thread's pool hit,
// and a free made during that wait stays unsafe for other streams.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "gcpressure/host_resource.hpp"
#include "gcpressure/pool_resource.hpp"
#include "test_support.hpp"

using namespace gcpressure;
using namespace std::chrono_literals;

namespace {

constexpr std::size_t big = std::size_t{2} << 20;  // above the small-pool threshold

// host_stream_ops() that counts the threads blocked in synchronize(), so a
// test knows that a waiter is inside its wait.
class watched_ops final : public stream_ops {
 public:
  event_ref record(stream_ref s) override { return inner_.record(s); }
  bool query(event_ref e) override { return inner_.query(e); }
  void synchronize(event_ref e) override {
    blocked_.fetch_add(1);
    inner_.synchronize(e);
    blocked_.fetch_sub(1);
  }
  void release(event_ref e) noexcept override { inner_.release(e); }
  int blocked() const { return blocked_.load(); }

 private:
  stream_ops& inner_ = host_stream_ops();
  std::atomic<int> blocked_{0};
};

class watched_resource final : public device_resource {
 public:
  watched_ops ops;

 private:
  void* do_allocate(std::size_t bytes, stream_ref s) override { return host_.allocate(bytes, s); }
  void do_deallocate(void* p, std::size_t bytes, stream_ref s) noexcept override { host_.deallocate(p, bytes, s); }
  device_memory_info do_memory_info() const override { return host_.memory_info(); }
  stream_ops& do_streams() noexcept override { return ops; }
  const char* do_name() const noexcept override { return "watched host"; }
  host_resource host_{std::size_t{256} << 20};
};

// A task that holds its stream until open() (or 60 s: never a hang).
class gate {
 public:
  void hold(host_stream& s) {
    s.enqueue([this] {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait_for(lk, 60s, [this] { return open_; });
    });
  }
  void open() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
};

bool wait_until_blocked(const watched_ops& ops) {
  const auto end = std::chrono::steady_clock::now() + 30s;
  while (ops.blocked() == 0)
    if (std::chrono::steady_clock::now() > end) return false;
    else std::this_thread::sleep_for(1ms);
  return true;
}

// Streams A (slow: held by a gate) and B (idle), a pool whose B lists hold a
// small block safe to hit, a large block freed on A behind the gate, and a
// thread that blocks in a pool call waiting for A (start()).
pool_options no_thread_caches() {
  pool_options o;
  o.thread_caches = false;
  return o;
}

struct slow_stream_fixture {
  watched_resource up;
  host_stream A, B;
  // The shared pool's waits are under test: the counts below (pending
  // blocks) are the shared lists'. Thread caches: test_thread_caches.cpp.
  pool_resource pool{up, no_thread_caches()};
  gate g;
  void* on_a = nullptr;
  std::thread blocker;
  std::atomic<bool> returned{false};

  slow_stream_fixture() {
    void* hit = pool.allocate(4 * KiB, B.ref());
    pool.deallocate(hit, 4 * KiB, B.ref());
    pool.wait_pending();  // B's block is now safe and idle
    on_a = pool.allocate(big, A.ref());  // a segment of its own: never merges with B's
    g.hold(A);
    pool.deallocate(on_a, big, A.ref());  // pending behind the gate
  }
  ~slow_stream_fixture() {
    finish();
    A.synchronize();
    B.synchronize();
  }
  template <class F>
  void start(F call) {
    blocker = std::thread([this, call] {
      call(pool);
      returned = true;
    });
  }
  // A pool hit on B while the blocker waits for A. The blocker cannot return
  // before the gate opens, and only this thread opens it: had the hit waited
  // for the blocker, `returned` would be true here (after the gate's 60 s).
  void* hit_on_b_while_blocked(const char* what) {
    if (!wait_until_blocked(up.ops)) {
      ADD_FAILURE() << what << " never blocked on A's event";
      return nullptr;
    }
    const auto before = pool.counters();
    void* p = pool.allocate(4 * KiB, B.ref());
    EXPECT_FALSE(returned.load()) << "a pool hit on B waited for another thread's " << what << " on A";
    EXPECT_EQ(pool.counters().upstream_allocations, before.upstream_allocations) << "not a pool hit";
    return p;
  }
  void finish() {
    g.open();
    if (blocker.joinable()) blocker.join();
  }
};

}  // namespace

TEST(PoolConcurrency, WaitPendingOnASlowStreamDoesNotStallAnotherThreadsPoolHit) {
  slow_stream_fixture f;
  f.start([](pool_resource& pool) { pool.wait_pending(); });
  void* p = f.hit_on_b_while_blocked("wait_pending");
  ASSERT_NE(p, nullptr);
  void* q = f.pool.allocate(big, f.B.ref());  // B's own lists have no large block: looks at A's
  EXPECT_NE(q, f.on_a) << "A's block handed to B while A's work was still queued";
  // A free on A during the wait: later than anything the waiter's event
  // covers, so it must stay pending after the waiter returns.
  void* late = f.pool.allocate(8 * KiB, f.A.ref());
  f.pool.deallocate(late, 8 * KiB, f.A.ref());
  f.finish();
  EXPECT_TRUE(f.returned.load());
  EXPECT_EQ(f.pool.counters().pending_blocks, 1u) << "only the free made during the wait is still pending";
  EXPECT_GE(f.pool.counters().events_waited, 1u);
  f.pool.deallocate(p, 4 * KiB, f.B.ref());
  f.pool.deallocate(q, big, f.B.ref());
  f.B.synchronize();
  f.pool.wait_pending();
  EXPECT_EQ(f.pool.counters().pending_blocks, 0u);
}

TEST(PoolConcurrency, ForgetStreamOnASlowStreamDoesNotStallAnotherThreadsPoolHit) {
  slow_stream_fixture f;
  host_stream* a = &f.A;
  f.start([a](pool_resource& pool) { pool.forget_stream(a->ref()); });
  void* p = f.hit_on_b_while_blocked("forget_stream");
  ASSERT_NE(p, nullptr);
  f.finish();
  EXPECT_EQ(f.pool.counters().pending_blocks, 0u) << "A's blocks belong to every stream once A is forgotten";
  f.pool.deallocate(p, 4 * KiB, f.B.ref());
}
