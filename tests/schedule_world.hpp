// The fake world the pressure policy's schedule tests run in (shared by
// test_schedule.cpp and test_lag_schedule.cpp): a fake clock, a fake device
// whose streams finish work at fake-clock times, a fake generational
// collector whose collections advance the clock by their cost (Note [Timing
// is injected]), and a GPU-bound loop driving them.
#pragma once

#include <algorithm>
#include <deque>
#include <memory>
#include <string>
#include <utility>

#include "fake_runtime.hpp"
#include "gcpressure/allocator.hpp"
#include "gcpressure/policy.hpp"
#include "gcpressure/stats.hpp"
#include "test_support.hpp"

namespace gcp_test {

namespace gcp = gcpressure;

inline constexpr double ms = 1e-3;

// One process: clock, device, collector, allocator, policy.
struct world {
  fake_clock clock;
  fake_device dev{clock, std::size_t{4} << 30};
  fake_collector gc;
  gcp::device_allocator alloc;
  std::unique_ptr<gcp::gc_policy> policy;
  std::size_t peak_live = 0;
  std::size_t steady_peak = 0;  // from loop_shape::steady_from on
  std::size_t early_peak = 0;   // before it

  world(const std::string& name, std::size_t hard, std::size_t soft, gcp::policy_options po = {})
      : alloc(dev, host_limits(hard, soft)) {
    gc.bind(alloc);
    gc.clock = &clock;
    po.clock = &clock;
    policy = gcp::make_policy(name, alloc, gc, po);
  }
  ~world() {
    policy.reset();
    gc.release_all();
  }
  int make(std::size_t bytes) {
    const int id = gc.track(alloc.allocate(bytes), bytes);
    peak_live = std::max(peak_live, alloc.live_bytes());
    return id;
  }
  gcp::collection_stats stats() const { return alloc.stats().gc; }
};

// A GPU-bound loop: per iteration `arrays` arrays of `bytes`, each launching
// `device_s` of device work after `host_s` of host work; arrays live
// `lifetime` iterations (0: dropped at once); then the iteration hint and a
// synchronize (sync = false: a CPU-bound loop that never waits).
struct loop_shape {
  int iterations = 200, arrays = 8;
  std::size_t bytes = 4 * MiB;
  double host_s = 0.05 * ms, device_s = 0.6 * ms;
  int lifetime = 0;
  bool sync = true;
  bool host_computes = false;  // with sync: the host runs the device work itself, syncs find it idle
  int sync_every = 1;  // synchronize every K iterations (forward_loop --sync-every)
  int steady_from = 0;  // world::steady_peak counts from this iteration on
};

inline void run_loop(world& w, const loop_shape& s) {
  std::deque<std::pair<int, int>> alive;  // (iteration it dies at, id)
  for (int it = 0; it < s.iterations; ++it) {
    for (int k = 0; k < s.arrays; ++k) {
      w.clock.advance(s.host_s);
      const int id = w.make(s.bytes);
      std::size_t& peak = it >= s.steady_from ? w.steady_peak : w.early_peak;
      peak = std::max(peak, w.alloc.live_bytes());
      if (s.sync && !s.host_computes) w.dev.launch(s.device_s);
      else w.clock.advance(s.device_s);  // the host computes itself
      if (s.lifetime == 0) w.gc.drop(id);
      else alive.emplace_back(it + s.lifetime, id);
    }
    while (!alive.empty() && alive.front().first <= it) {
      w.gc.drop(alive.front().second);
      alive.pop_front();
    }
    w.policy->iteration();
    if (s.sync && ((it + 1) % s.sync_every == 0 || it + 1 == s.iterations)) w.policy->synchronize(nullptr);
  }
  for (auto& [_, id] : alive) w.gc.drop(id);
}

inline std::uint64_t minors(const gcp::collection_stats& g) { return g.by_kind[static_cast<int>(gcp::gc_kind::minor)]; }

// A model of 64 MiB built before the loop (kept): its minors teach the
// policy the collector's cost, as a model's construction does.
inline void build_model(world& w) {
  for (int m = 0; m < 16; ++m) {
    w.clock.advance(1 * ms);
    w.make(4 * MiB);
  }
}
inline std::uint64_t cycles(const gcp::collection_stats& g) {
  return g.by_kind[static_cast<int>(gcp::gc_kind::incremental_full)];
}

// A collector whose minors take `minor` seconds and whose whole-heap cycles
// take `slices` slices of `slice` seconds, under a loop whose arrays live
// `lifetime` iterations (promoted garbage for the cycles to find).
inline loop_shape promoting(world& w, double minor, double slice, int slices, int iterations, int lifetime) {
  w.gc.minor_seconds = minor;
  w.gc.slice_seconds = slice;
  w.gc.slices_per_full = slices;
  loop_shape s;
  s.iterations = iterations;
  s.lifetime = lifetime;
  return s;
}

// The H100's forward loop in miniature: 5.5 ms of device work an iteration
// queued in 0.5 ms of host work, a sync every `sync_every` iterations.
inline loop_shape h100_loop(int iterations, int sync_every) {
  loop_shape s;
  s.iterations = iterations;
  s.sync_every = sync_every;
  s.host_s = 0.0625 * ms;
  s.device_s = 0.6875 * ms;
  return s;
}

}  // namespace gcp_test
