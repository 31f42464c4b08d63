// Note [Inside a collection] (collection_scope.hpp): the one per-thread
// "inside a collection" fact — its depth rules, what the allocator does for a
// thread inside it, and the case it exists for: a collection handed to
// another thread (the PyTorch plug-in's helper, a runtime's finalizer
// thread) whose finalizers allocate while the collecting thread holds the
// policy's collection lock and waits for them.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>

#include "gcpressure/allocator.hpp"
#include "gcpressure/collection_scope.hpp"
#include "gcpressure/collector.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;
using namespace std::chrono_literals;

namespace {

// Counts what the allocator asks of it; does nothing else.
struct counting_hook final : gcp::allocation_hook {
  void before_allocate(gcp::device_allocator&, std::size_t, gcp::stream_ref) override { ++before; }
  bool reclaim(gcp::device_allocator&, gcp::ladder_step) override {
    ++reclaims;
    return false;
  }
  void fill_stats(gcp::collection_stats&) const override {}
  int before = 0, reclaims = 0;
};

// What a finalizer run on another thread did.
struct helper_result {
  bool inside = false;        // in_collection() as the helper saw it
  bool small_served = false;  // 1 MiB: fits
  bool big_failed = false;    // over the hard limit: out_of_memory
  std::string big_message;
};

// A collector whose minor collection hands its "finalizers" to a new thread
// and waits for it, bounded, as the PyTorch plug-in's requester waits for its
// helper; the helper enters the collection scope (or, for the control, not).
class handoff_collector final : public gcp::collector {
 public:
  handoff_collector(gcp::device_allocator& a, bool helper_enters) : a_(a), enters_(helper_enters) {}
  const char* name() const noexcept override { return "handoff"; }
  // Only the first minor hands off; later ones (the control's ladder, on the
  // helper's thread) just count.
  void collect_minor() override {
    ++minors;
    if (!armed_) return;
    armed_ = false;
    std::packaged_task<helper_result()> task([this] { return finalize_elsewhere(); });
    result = task.get_future();
    helper_ = std::thread(std::move(task));
    done_in_collection = result.wait_for(wait) == std::future_status::ready;
  }
  void start_full() override {}
  bool step_full(double) override { return true; }
  void collect_full() override { ++fulls; }
  std::size_t run_finalizers() override { return 0; }
  gcp::collector_counters counters() const override { return {}; }
  void join() {
    if (helper_.joinable()) helper_.join();
  }

  std::chrono::milliseconds wait{30000};
  int minors = 0, fulls = 0;
  bool done_in_collection = false;
  std::future<helper_result> result;

 private:
  helper_result finalize_elsewhere() {
    std::optional<gcp::collection_scope> scope;
    if (enters_) scope.emplace();
    helper_result r;
    r.inside = gcp::in_collection();
    void* p = a_.allocate(1 * MiB);
    r.small_served = p != nullptr;
    try {
      a_.free(a_.allocate(64 * MiB), 64 * MiB);
    } catch (const gcp::out_of_memory& e) {
      r.big_failed = true;
      r.big_message = e.what();
    }
    a_.free(p, 1 * MiB);
    return r;
  }

  gcp::device_allocator& a_;
  bool enters_;
  bool armed_ = true;
  std::thread helper_;
};

}  // namespace

TEST(CollectionScope, DepthNestsPerThreadAndAnUnmatchedLeaveIsRefused) {
  EXPECT_FALSE(gcp::in_collection());
  EXPECT_FALSE(gcp::leave_collection()) << "a leave without an enter";
  EXPECT_FALSE(gcp::in_collection()) << "the refused leave changed the depth";
  {
    gcp::collection_scope outer;
    EXPECT_TRUE(gcp::in_collection());
    {
      gcp::collection_scope inner;
      EXPECT_TRUE(gcp::in_collection());
    }
    EXPECT_TRUE(gcp::in_collection()) << "the inner scope ended the outer one";
    bool other = true;
    std::thread([&] { other = gcp::in_collection(); }).join();
    EXPECT_FALSE(other) << "another thread sees this thread's scope";
    gcp::enter_collection();  // the two-event form, inside a scope
    EXPECT_TRUE(gcp::leave_collection());
    EXPECT_TRUE(gcp::in_collection());
  }
  EXPECT_FALSE(gcp::in_collection());
}

// Inside the scope the allocator calls no hook: neither before_allocate nor
// the ladder's collector steps; the cheap steps still run, and the failure
// says the collector steps were skipped.
TEST(CollectionScope, AllocationInsideIsServedWithoutTheHook) {
  gcp::device_allocator a(gcp_test::host_opts(16 * MiB));
  counting_hook hook;
  a.set_hook(&hook);
  {
    gcp::collection_scope scope;
    void* p = a.allocate(4 * MiB);
    EXPECT_EQ(hook.before, 0) << "before_allocate ran inside a collection";
    try {
      (void)a.allocate(32 * MiB);
      ADD_FAILURE() << "32 MiB under a 16 MiB limit was served";
    } catch (const gcp::out_of_memory& e) {
      EXPECT_NE(std::string(e.what()).find("finish_and_drain (no collector)"), std::string::npos) << e.what();
    }
    EXPECT_EQ(hook.reclaims, 0) << "a collector step of the ladder ran inside a collection";
    a.free(p, 4 * MiB);
  }
  a.free(a.allocate(4 * MiB), 4 * MiB);
  EXPECT_EQ(hook.before, 1) << "outside the scope the hook runs again";
  a.set_hook(nullptr);
}

// The case the scope is for: the collecting thread holds the collection lock
// and waits for a helper that runs the collection's finalizers. Inside the
// scope the helper's allocations never wait for that lock: one that fits is
// served, one that cannot fit fails at once. (Outside it, the failing one
// would enter the reclaim ladder, whose collector step takes the lock: it
// would wait for the collecting thread, which waits for it — see the control.)
TEST(CollectionScope, HelperOfACollectionIsServedWithoutTheCollectionLock) {
  gcp_test::run_with_watchdog(std::chrono::seconds(120), "helper inside the collection scope", [] {
    gcp::device_allocator a(gcp_test::host_opts(16 * MiB));
    handoff_collector gc(a, true);
    auto policy = gcp::make_policy("pressure", a, gc);
    policy->collect(gcp::gc_kind::minor);
    gc.join();
    EXPECT_TRUE(gc.done_in_collection) << "the helper did not finish while the collection waited for it";
    const helper_result r = gc.result.get();
    EXPECT_TRUE(r.inside);
    EXPECT_TRUE(r.small_served);
    EXPECT_TRUE(r.big_failed);
    EXPECT_NE(r.big_message.find("finish_and_drain (no collector)"), std::string::npos) << r.big_message;
    EXPECT_EQ(gc.minors, 1) << "the helper's allocations started a collection";
    EXPECT_EQ(gc.fulls, 0) << "the helper's allocations started a collection";
    EXPECT_EQ(a.live_bytes(), 0u);
  });
}

// The control: a helper outside the scope is an ordinary thread; its failing
// allocation waits for the collection lock until the collection ends, then
// runs the ladder's collections itself (none nested: they run on its thread
// after the first collection released the lock).
TEST(CollectionScope, ControlAThreadOutsideTheScopeWaitsForTheCollection) {
  gcp_test::run_with_watchdog(std::chrono::seconds(120), "helper outside the collection scope", [] {
    gcp::device_allocator a(gcp_test::host_opts(16 * MiB));
    handoff_collector gc(a, false);
    gc.wait = 300ms;
    auto policy = gcp::make_policy("pressure", a, gc);
    policy->collect(gcp::gc_kind::minor);
    EXPECT_FALSE(gc.done_in_collection) << "the helper's failing allocation did not wait for the collection lock";
    gc.join();
    const helper_result r = gc.result.get();
    EXPECT_FALSE(r.inside);
    EXPECT_TRUE(r.small_served);
    EXPECT_TRUE(r.big_failed);
    EXPECT_GE(gc.minors + gc.fulls, 2) << "the ladder ran no collection after the first one ended";
  });
}
