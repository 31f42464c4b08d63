// Baseline policies, selectable like "pressure" so that one benchmark run
// compares them. Each one follows a published heuristic; comments cite it.
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>

#include "gcpressure/error.hpp"
#include "gcpressure/policy.hpp"

namespace gcpressure {

std::unique_ptr<gc_policy> make_pressure_policy(device_allocator& a, collector& c, policy_options o);

namespace {

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

// Collect only when an allocation fails: the reclaim ladder does it all.
// (CUDA.jl with early collection off; Java's direct byte buffers.)
class at_limit_policy final : public gc_policy {
 public:
  using gc_policy::gc_policy;
  const char* name() const noexcept override { return "at_limit"; }
  void before_allocate(device_allocator&, std::size_t, stream_ref) override {}
};

// The usual user workaround: a blocking full collection every N iterations
// (or every N allocations).
class every_iteration_policy final : public gc_policy {
 public:
  using gc_policy::gc_policy;
  const char* name() const noexcept override { return "every_iteration"; }
  void before_allocate(device_allocator&, std::size_t, stream_ref) override {
    if (!opts_.every_n_allocations) return;
    if (++count_ % static_cast<std::uint64_t>(opts_.every_n) == 0) run_collection(gc_kind::blocking_full, gc_reason::baseline);
  }
  void iteration() override {
    if (opts_.every_n_allocations) return;
    if (++count_ % static_cast<std::uint64_t>(opts_.every_n) == 0) run_collection(gc_kind::blocking_full, gc_reason::baseline);
  }
  void quiet_moment(bool) override {}

 private:
  std::atomic<std::uint64_t> count_{0};
};

// CUDA.jl's maybe_collect (lib/cudadrv/memory.jl / src/pool.jl): pressure =
// live / limit; collect with a minor GC at >= 0.75 (0.5 when about to block,
// i.e. at a synchronize); only if GC time over time since the last GC stays
// within 5%, a budget doubled when the last collection freed > 10% of live
// memory, doubled when pressure > 0.90 and again > 0.95; the GC time is an
// EMA (0.75 old, 0.25 new).
class cudajl_policy final : public gc_policy {
 public:
  cudajl_policy(device_allocator& a, collector& c, policy_options o) : gc_policy(a, c, o) { last_ = clock_type::now(); }
  const char* name() const noexcept override { return "cudajl"; }
  void before_allocate(device_allocator& a, std::size_t bytes, stream_ref) override { maybe_collect(a, bytes, false); }
  void quiet_moment(bool) override { maybe_collect(alloc_, 0, true); }

 private:
  void maybe_collect(device_allocator& a, std::size_t bytes, bool will_block) {
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;
    const double limit = static_cast<double>(a.hard_limit());
    const double live = static_cast<double>(a.live_bytes() + bytes);
    const double pressure = live / limit;
    if (pressure < (will_block ? 0.5 : 0.75)) return;
    const double gc_rate = ema_gc_time_ / std::max(1e-9, seconds_since(last_));
    double max_rate = opts_.gc_budget;
    if (last_freed_ > 0.1 * live) max_rate *= 2;
    if (pressure > 0.90) max_rate *= 2;
    if (pressure > 0.95) max_rate *= 2;
    if (gc_rate > max_rate) return;
    const auto o = run_collection(gc_kind::minor, will_block ? gc_reason::quiet_moment : gc_reason::early);
    last_freed_ = static_cast<double>(o.reclaimed);
    ema_gc_time_ = 0.75 * ema_gc_time_ + 0.25 * o.seconds;
    last_ = clock_type::now();
  }
  double ema_gc_time_ = 0, last_freed_ = 0;
  clock_type::time_point last_;
};

// .NET's GC.AddMemoryPressure (gc/gcinterface, GCInterface::AddMemoryPressure):
// pressure added on allocation and removed on free, tallied per gen-2 period
// over the last 4 periods; the budget starts at 4 MB, is scaled by the
// add/remove ratio (capped at x10), is at least a third of the managed heap,
// and an induced gen-2 (here: blocking full) collection happens at most once
// per 5x the last induced collection's duration.
class dotnet_policy final : public gc_policy {
 public:
  dotnet_policy(device_allocator& a, collector& c, policy_options o) : gc_policy(a, c, o) { last_gc_ = clock_type::now(); }
  const char* name() const noexcept override { return "dotnet"; }

  void before_allocate(device_allocator& a, std::size_t bytes, stream_ref) override {
    std::unique_lock<std::recursive_timed_mutex> lk(collect_mu_, std::try_to_lock);
    if (!lk.owns_lock()) return;
    // Removals: frees since the last call (the allocator's live bytes fell).
    const std::size_t live = a.live_bytes();
    if (live < last_live_) rem_[period_ % 4] += last_live_ - live;
    const std::uint64_t gen2 = gc_.counters().full_collections;
    if (gen2 != iteration_) {
      iteration_ = gen2;
      period_ = gen2;
      add_[period_ % 4] = 0;
      rem_[period_ % 4] = 0;
    }
    add_[period_ % 4] += bytes;
    const double pressure = static_cast<double>(live + bytes);
    double budget = 4.0 * 1024 * 1024;
    if (iteration_ >= 4) {
      double add = 0, rem = 0;
      for (int i = 0; i < 4; ++i)
        if (static_cast<std::uint64_t>(i) != period_ % 4) {
          add += static_cast<double>(add_[i]);
          rem += static_cast<double>(rem_[i]);
        }
      if (add >= rem * 10) budget *= 10;
      else if (add > rem && rem > 0) budget = budget * add / rem;
    }
    last_live_ = live + bytes;
    if (pressure < budget) return;
    budget = std::max(budget, static_cast<double>(gc_.counters().heap_bytes) / 3);
    if (pressure < budget) return;
    if (seconds_since(last_gc_) <= 5 * last_duration_) return;
    const auto o = run_collection(gc_kind::blocking_full, gc_reason::baseline);
    last_duration_ = o.seconds;
    last_gc_ = clock_type::now();
    last_live_ = a.live_bytes();
  }

 private:
  std::array<std::size_t, 4> add_{}, rem_{};
  std::uint64_t iteration_ = 0, period_ = 0;
  std::size_t last_live_ = 0;
  double last_duration_ = 0;
  clock_type::time_point last_gc_;
};

// The oracle: the caller frees every block itself; no collection ever runs.
class explicit_free_policy final : public gc_policy {
 public:
  using gc_policy::gc_policy;
  const char* name() const noexcept override { return "explicit_free"; }
  void before_allocate(device_allocator&, std::size_t, stream_ref) override {}
  bool reclaim(device_allocator&, ladder_step) override { return false; }
};

const char* const k_names[] = {"pressure", "at_limit", "every_iteration", "cudajl", "dotnet", "explicit_free", nullptr};

}  // namespace

const char* const* policy_names() noexcept { return k_names; }

std::unique_ptr<gc_policy> make_policy(const std::string& name, device_allocator& a, collector& c, policy_options o) {
  if (name == "pressure") return make_pressure_policy(a, c, o);
  if (name == "at_limit") return std::make_unique<at_limit_policy>(a, c, o);
  if (name == "every_iteration") return std::make_unique<every_iteration_policy>(a, c, o);
  if (name == "cudajl") return std::make_unique<cudajl_policy>(a, c, o);
  if (name == "dotnet") return std::make_unique<dotnet_policy>(a, c, o);
  if (name == "explicit_free") return std::make_unique<explicit_free_policy>(a, c, o);
  GCPRESSURE_FAIL("unknown policy '" + name +
                  "' (expected pressure, at_limit, every_iteration, cudajl, dotnet or explicit_free)");
}

}  // namespace gcpressure
