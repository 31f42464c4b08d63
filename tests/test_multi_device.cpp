// One policy over several devices (Note [One policy, N devices] in
// policy.hpp), driven by a fake clock, fake devices and the fake
// generational collector: decisions come from the most-pressed device, never
// the sum; an idle device forces nothing; one collection frees garbage on
// every device and each device's statistics show its own share.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fake_runtime.hpp"
#include "gcpressure/allocator.hpp"
#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"
#include "gcpressure/stats.hpp"
#include "test_support.hpp"

namespace gcp = gcpressure;
using gcp_test::fake_clock;
using gcp_test::fake_collector;
using gcp_test::fake_device;
using gcp_test::host_limits;

namespace {

// Two devices, one collector, one policy (or, with `one_device`, the same
// first device alone: the control run). An empty name: start() makes the
// policy later.
struct two_devices {
  fake_clock clock;
  fake_device dev0{clock, std::size_t{4} << 30}, dev1{clock, std::size_t{4} << 30};
  fake_collector gc;
  gcp::device_allocator a0, a1;
  std::unique_ptr<gcp::gc_policy> policy;

  two_devices(const std::string& name, gcp::allocator_options o0, gcp::allocator_options o1,
              bool one_device = false, gcp::policy_options po = {})
      : a0(dev0, o0), a1(dev1, o1) {
    gc.bind(a0);
    gc.clock = &clock;
    gc.minor_seconds = 1e-3;
    if (!name.empty()) start(name, one_device, po);
  }
  void start(const std::string& name, bool one_device = false, gcp::policy_options po = {}) {
    po.clock = &clock;
    if (one_device) policy = gcp::make_policy(name, a0, gc, po);
    else policy = gcp::make_policy(name, std::vector<gcp::device_allocator*>{&a0, &a1}, gc, po);
  }
  ~two_devices() {
    policy.reset();
    gc.release_all();
  }
  gcp::device_allocator& on(int d) { return d == 0 ? a0 : a1; }
  int make(int d, std::size_t bytes) {
    gcp::device_allocator& a = on(d);
    const int id = gc.track(a.allocate(bytes), bytes, &a);
    clock.advance(1e-4);
    return id;
  }
};

// A steady GPU-bound loop on device 0: per iteration 8 arrays of 4 MiB,
// each with 0.5 ms of device work, dropped at the end of the iteration, then
// a synchronize (collections in the device's time are affordable).
void steady_on_device0(two_devices& w, int iterations) {
  for (int it = 0; it < iterations; ++it) {
    std::vector<int> ids;
    for (int i = 0; i < 8; ++i) {
      ids.push_back(w.make(0, 4 * MiB));
      w.dev0.launch(5e-4);
    }
    for (int id : ids) w.gc.drop(id);
    w.policy->iteration();
    w.policy->synchronize(nullptr, &w.a0);
  }
}

}  // namespace

// Each device's young bytes are held against that device's own budget: two
// devices each under theirs do not add up to a collection.
TEST(MultiDevice, DecidesFromTheMostPressedDeviceNotTheSum) {
  gcp::policy_options po;
  po.min_young_bytes = 1 * MiB;  // the first budget of every device (no floor, no rate yet)
  two_devices w("pressure", host_limits(1u << 30, 768 * MiB), host_limits(1u << 30, 768 * MiB), false, po);
  w.make(0, 384 * KiB);
  w.make(0, 384 * KiB);
  w.make(1, 384 * KiB);
  w.make(1, 384 * KiB);
  EXPECT_EQ(w.gc.collections(), 0) << "768 KiB young on each device, 1.5 MiB together: no device is at its 1 MiB";
  w.make(1, 512 * KiB);  // device 1: 1.25 MiB young
  EXPECT_EQ(w.gc.collections(), 1) << "device 1 reached its own budget";
  EXPECT_EQ(w.a0.since_mark(), 0u) << "a collection starts every device's young bytes afresh";
  EXPECT_EQ(w.a1.since_mark(), 512 * KiB);
}

// A second device that holds a live set but allocates nothing changes no
// decision: the collections of a loop on device 0 are the same with it as
// without it (the control run has device 0 alone).
TEST(MultiDevice, IdleDeviceNeverForcesCollections) {
  const auto run = [](bool with_idle_device) {
    two_devices w("", host_limits(1u << 30, 768 * MiB), host_limits(1u << 30, 768 * MiB));
    if (with_idle_device) {
      // 200 MiB kept, allocated before the loop (like a model's weights).
      for (int i = 0; i < 50; ++i) w.gc.track(w.a1.allocate(4 * MiB), 4 * MiB, &w.a1);
    }
    w.start("pressure", !with_idle_device);
    steady_on_device0(w, 60);
    const gcp::collection_stats s = w.a0.stats().gc;
    return std::vector<std::uint64_t>{s.by_kind[0], s.by_kind[1], s.by_kind[2], s.by_reason[0], s.by_reason[1],
                                      s.by_reason[2], s.by_reason[3], s.by_reason[4], s.incremental_slices};
  };
  const auto alone = run(false), with_idle = run(true);
  ASSERT_GT(alone[0] + alone[1] + alone[2], 0u) << "the loop must need collections for this to mean anything";
  EXPECT_EQ(with_idle, alone) << "collections by kind, by reason and slices";
}

// A small device filling up is not starved by a large idle-ish one: its own
// headroom triggers collections before an allocation fails there.
TEST(MultiDevice, SmallDeviceIsNotStarvedByALargeOne) {
  two_devices w("pressure", host_limits(std::size_t{3} << 30, std::size_t{2} << 30), host_limits(256 * MiB, 192 * MiB));
  std::vector<std::vector<int>> window;  // device 1 keeps two iterations live (128 MiB)
  std::size_t peak1 = 0;
  for (int it = 0; it < 80; ++it) {
    std::vector<int> ids;
    for (int i = 0; i < 8; ++i) ids.push_back(w.make(1, 8 * MiB));
    w.make(0, 1 * MiB);  // device 0: a trickle, kept
    window.push_back(ids);
    if (window.size() > 2) {
      for (int id : window.front()) w.gc.drop(id);
      window.erase(window.begin());
    }
    peak1 = std::max(peak1, w.a1.live_bytes());
    w.policy->iteration();
  }
  const gcp::allocator_stats s1 = w.a1.stats();
  EXPECT_EQ(s1.ooms, 0u);
  EXPECT_EQ(s1.gc.by_reason[static_cast<int>(gcp::gc_reason::ladder)], 0u)
      << "device 1's pressure is seen before an allocation fails there";
  EXPECT_LE(peak1, 256 * MiB);
  EXPECT_GT(w.gc.collections(), 10);
}

// One collection frees garbage on every device; each device's statistics
// show what it reclaimed there, the shared counts are the same.
TEST(MultiDevice, OneCollectionFreesEveryDeviceAndAccountsPerDevice) {
  // at_limit: no collection but the one asked for (the base class accounts).
  two_devices w("at_limit", host_limits(1u << 30, 768 * MiB), host_limits(1u << 30, 768 * MiB));
  const int d1 = w.make(1, 6 * MiB);
  const int d0 = w.make(0, 2 * MiB);
  w.make(1, 1 * MiB);  // kept
  w.gc.drop(d1);
  w.gc.drop(d0);
  w.policy->collect(gcp::gc_kind::minor);
  EXPECT_EQ(w.a1.live_bytes(), 1 * MiB);
  EXPECT_EQ(w.a0.live_bytes(), 0u);
  const gcp::allocator_stats s0 = w.a0.stats(), s1 = w.a1.stats();
  EXPECT_EQ(s1.gc.reclaimed_bytes, 6 * MiB);
  EXPECT_EQ(s0.gc.reclaimed_bytes, 2 * MiB);
  EXPECT_EQ(s1.gc.finalized, 1u);
  EXPECT_EQ(s0.gc.finalized, 1u);
  EXPECT_EQ(s0.gc.by_kind, s1.gc.by_kind);
  EXPECT_EQ(s0.gc.policy_devices, 2u);
  EXPECT_NE(gcp::to_json(s1).find("\"policy_devices\":2"), std::string::npos);
}

// The synchronize hint polls the stream of the device it is given.
TEST(MultiDevice, SynchronizeUsesTheGivenDevicesStreams) {
  two_devices w("pressure", host_limits(1u << 30, 768 * MiB), host_limits(1u << 30, 768 * MiB));
  w.dev1.launch(2e-3);
  const int r0 = w.dev0.records, r1 = w.dev1.records;
  w.policy->synchronize(nullptr, &w.a1);
  EXPECT_EQ(w.dev0.records, r0);
  EXPECT_GT(w.dev1.records, r1);
  EXPECT_GE(w.clock.now(), w.dev1.busy_until()) << "it waited for device 1's work";
  fake_device other(w.clock, 64 * MiB);
  gcp::device_allocator stranger(other, host_limits(64 * MiB, 48 * MiB));
  EXPECT_THROW(w.policy->synchronize(nullptr, &stranger), gcp::logic_error);
}

TEST(MultiDevice, BadDeviceSetsAreLogicErrors) {
  fake_clock clock;
  fake_device dev{clock, 64 * MiB};
  fake_collector gc;
  gcp::device_allocator a(dev, host_limits(64 * MiB, 48 * MiB));
  EXPECT_THROW(gcp::make_policy("pressure", std::vector<gcp::device_allocator*>{}, gc), gcp::logic_error);
  EXPECT_THROW(gcp::make_policy("pressure", std::vector<gcp::device_allocator*>{&a, nullptr}, gc), gcp::logic_error);
  EXPECT_THROW(gcp::make_policy("cudajl", std::vector<gcp::device_allocator*>{&a, &a}, gc), gcp::logic_error);
  EXPECT_EQ(a.hook(), nullptr) << "a rejected policy leaves no hook behind";
}

// Every policy serves several devices; the hook is on each and goes with it.
TEST(MultiDevice, EveryPolicyHooksEveryDevice) {
  for (const char* const* n = gcp::policy_names(); *n; ++n) {
    two_devices w(*n, host_limits(1u << 30, 768 * MiB), host_limits(1u << 30, 768 * MiB));
    EXPECT_EQ(w.a0.hook(), w.policy.get()) << *n;
    EXPECT_EQ(w.a1.hook(), w.policy.get()) << *n;
    w.make(1, 1 * MiB);
    EXPECT_EQ(w.a1.stats().gc.policy, *n);
    w.policy.reset();
    EXPECT_EQ(w.a0.hook(), nullptr) << *n;
    EXPECT_EQ(w.a1.hook(), nullptr) << *n;
  }
}

// CUDA.jl keeps its MemoryStats per device (memory_stats(dev=device())):
// the device allocating decides, with its own pressure.
TEST(MultiDevice, CudajlDecidesPerDevice) {
  gcp::allocator_options small = host_limits(200 * MiB, 150 * MiB);
  small.pool = false;  // no segment rounding near the hard limit
  two_devices w("cudajl", host_limits(1u << 30, 768 * MiB), small);
  for (int i = 0; i < 19; ++i) w.make(1, 8 * MiB);  // the 19th sees 144 of 200 MiB live: 0.72 < 0.75
  EXPECT_EQ(w.gc.collections(), 0);
  w.make(0, 8 * MiB);  // device 0: 0 of 1 GiB
  EXPECT_EQ(w.gc.collections(), 0) << "device 1's pressure is not device 0's";
  w.make(1, 8 * MiB);  // sees 152 of 200 MiB
  EXPECT_EQ(w.gc.collections(), 1) << "device 1 at 0.76 >= 0.75";
}

TEST(MultiDevice, DeviceListsParseStrictly) {
  EXPECT_EQ(gcp::parse_device_list("0,1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(gcp::parse_device_list(" 3 , 2 "), (std::vector<int>{3, 2}));
  for (const char* bad : {"", ",", "0,", "0,,1", "a", "-1", "1,1", "0;1", "2000"}) {
    try {
      gcp::parse_device_list(bad, "GCPRESSURE_DEVICES");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const gcp::logic_error& e) {
      EXPECT_NE(std::string(e.what()).find("GCPRESSURE_DEVICES"), std::string::npos) << e.what();
    }
  }
  gcp::config c;
  c.device = 4;
  EXPECT_EQ(c.device_list(), std::vector<int>{4});
  c.devices = {0, 1};
  EXPECT_EQ(c.device_list(), (std::vector<int>{0, 1}));
  EXPECT_EQ(gcp::allocator_options::per_device(c).size(), 2u);
  EXPECT_EQ(gcp::allocator_options::per_device(c)[1].device, 1);
}

// Devices met one by one (PyTorch's allocator is called per device, lazily)
// join the policy with add_device(): then they are served like the others.
TEST(MultiDevice, AddDeviceLaterJoinsThePolicy) {
  two_devices w("", host_limits(1u << 30, 768 * MiB), host_limits(1u << 30, 768 * MiB));
  w.start("pressure", /*one_device=*/true);
  EXPECT_EQ(w.policy->device_count(), 1u);
  EXPECT_EQ(w.a1.hook(), nullptr);
  w.policy->add_device(w.a1);
  EXPECT_EQ(w.policy->device_count(), 2u);
  EXPECT_EQ(w.a1.hook(), w.policy.get());
  EXPECT_EQ(w.policy->device_index(w.a1), 1u);
  EXPECT_THROW(w.policy->add_device(w.a1), gcp::logic_error);
  EXPECT_THROW(w.policy->add_device(w.a0), gcp::logic_error);
  const int d = w.make(1, 3 * MiB);  // over device 1's first 1 MiB budget: a collection
  EXPECT_EQ(w.gc.collections(), 1);
  w.gc.drop(d);
  w.policy->collect(gcp::gc_kind::blocking_full);
  EXPECT_EQ(w.a1.live_bytes(), 0u);
  EXPECT_EQ(w.a1.stats().gc.reclaimed_bytes, 3 * MiB);
  EXPECT_EQ(w.a0.stats().gc.policy_devices, 2u);
  w.policy.reset();
  EXPECT_EQ(w.a1.hook(), nullptr);
}
