// Note [Waiting for a collection] (collector.hpp): a thread about to block on
// the policy's collection lock is announced to the collector, before and
// after the wait, so that a runtime whose collection needs something the
// waiting thread holds (CPython's GIL, for the PyTorch plug-in) can let it
// go; without the announcement the two threads wait for each other.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/policy.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;
using namespace std::chrono_literals;

namespace {

// The first minor collection after arm() cannot finish until the gate opens: it stands
// for a collection that needs a lock another thread holds (the GIL). With
// `open_when_waited_for`, a thread announced as waiting for the collection
// lock opens it — what the plug-in does by letting the GIL go.
class gated_collector final : public gcp::collector {
 public:
  const char* name() const noexcept override { return "gated"; }
  void collect_minor() override {
    std::unique_lock<std::mutex> lk(mu_);
    ++minors_;
    if (!armed_) return;
    armed_ = false;
    started_ = true;
    cv_.notify_all();
    gate_timed_out_ = !cv_.wait_for(lk, 30s, [this] { return open_; });
  }
  void start_full() override {}
  bool step_full(double) override { return true; }
  void collect_full() override {}
  std::size_t run_finalizers() override { return 0; }
  gcp::collector_counters counters() const override { return {}; }

  void waiting_for_collection(bool begins) noexcept override {
    std::lock_guard<std::mutex> lk(mu_);
    events_.push_back({std::this_thread::get_id(), begins});
    if (begins && open_when_waited_for) {
      open_ = true;
      cv_.notify_all();
    }
  }

  bool open_when_waited_for = true;

  void arm() {
    std::lock_guard<std::mutex> lk(mu_);
    armed_ = true;
  }
  void wait_started() {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [this] { return started_; });
  }
  void open() {
    std::lock_guard<std::mutex> lk(mu_);
    open_ = true;
    cv_.notify_all();
  }
  struct event {
    std::thread::id thread;
    bool begins;
  };
  std::vector<event> events() {
    std::lock_guard<std::mutex> lk(mu_);
    return events_;
  }
  int minors() {
    std::lock_guard<std::mutex> lk(mu_);
    return minors_;
  }
  bool gate_timed_out() {
    std::lock_guard<std::mutex> lk(mu_);
    return gate_timed_out_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, started_ = false, open_ = false, gate_timed_out_ = false;
  int minors_ = 0;
  std::vector<event> events_;
};

void expect_one_announced_wait(gated_collector& gc, std::thread::id waiter) {
  const auto ev = gc.events();
  ASSERT_EQ(ev.size(), 2u) << "one wait: announced before and after";
  EXPECT_EQ(ev[0].thread, waiter);
  EXPECT_TRUE(ev[0].begins);
  EXPECT_EQ(ev[1].thread, waiter);
  EXPECT_FALSE(ev[1].begins);
  EXPECT_FALSE(gc.gate_timed_out()) << "the collection finished because the waiter let go, not by its 30 s limit";
}

}  // namespace

// A second collection asked for while the first holds the lock: the asking
// thread is announced, lets go what the first needs, and both complete.
TEST(WaitingForCollection, AThreadBlockedOnTheCollectionLockIsAnnounced) {
  gcp_test::run_with_watchdog(60s, "collection waiting for an announced waiter", [] {
    gcp::device_allocator a(gcp_test::host_opts(64 * MiB));
    gated_collector gc;
    auto policy = gcp::make_policy("pressure", a, gc);
    gc.arm();
    std::thread first([&] { policy->collect(gcp::gc_kind::minor); });
    gc.wait_started();
    policy->collect(gcp::gc_kind::minor);
    first.join();
    expect_one_announced_wait(gc, std::this_thread::get_id());
    EXPECT_EQ(gc.minors(), 2);
  });
}

// An allocation over the headroom waits (bounded) for the collection in
// progress: the same announcement. The control below shows it waited.
TEST(WaitingForCollection, AnAllocationOverTheHeadroomThatWaitsIsAnnounced) {
  gcp_test::run_with_watchdog(60s, "allocation waiting for an announced waiter", [] {
    gcp::device_allocator a(gcp_test::host_opts(32 * MiB));
    gated_collector gc;
    auto policy = gcp::make_policy("pressure", a, gc);
    void* live = a.allocate(30 * MiB);  // + 1 MiB: over 19/20 of the hard limit
    gc.arm();
    std::thread first([&] { policy->collect(gcp::gc_kind::minor); });
    gc.wait_started();
    void* p = nullptr;
    try {
      p = a.allocate(1 * MiB);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      gc.open();
    }
    first.join();
    expect_one_announced_wait(gc, std::this_thread::get_id());
    if (p) a.free(p, 1 * MiB);
    a.free(live, 30 * MiB);
  });
}

// The control: nobody holds the lock, nothing is announced; and a waiter
// that does not let go waits until the collection ends by other means.
TEST(WaitingForCollection, UncontendedNothingIsAnnouncedAndAWaiterWaitsForTheCollection) {
  gcp_test::run_with_watchdog(60s, "control", [] {
    gcp::device_allocator a(gcp_test::host_opts(64 * MiB));
    gated_collector gc;
    gc.open_when_waited_for = false;
    gc.arm();
    gc.open();
    auto policy = gcp::make_policy("pressure", a, gc);
    policy->collect(gcp::gc_kind::minor);
    EXPECT_TRUE(gc.events().empty());

    gcp::device_allocator b(gcp_test::host_opts(64 * MiB));
    gated_collector gated;
    gated.open_when_waited_for = false;
    auto p2 = gcp::make_policy("pressure", b, gated);
    gated.arm();
    std::thread first([&] { p2->collect(gcp::gc_kind::minor); });
    gated.wait_started();
    std::atomic<bool> second_done{false};
    std::thread second([&] {
      p2->collect(gcp::gc_kind::minor);
      second_done = true;
    });
    std::this_thread::sleep_for(100ms);  // long enough to have blocked; the check below holds at any speed
    EXPECT_FALSE(second_done.load()) << "the second collection cannot pass the first one's lock";
    gated.open();
    first.join();
    second.join();
    EXPECT_EQ(gated.events().size(), 2u);
  });
}
